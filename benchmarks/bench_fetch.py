"""Fetching benchmark: defilens against httpx, aiohttp and requests+threads, same Sandbox.

Run by hand:  python benchmarks/bench_fetch.py [--ids 2000] [--concurrency 50]

The Sandbox runs in another process; each client fetches the listing of every id at the same
concurrency and builds the indicators frame. Reported: wall time, share of the ideal
(requests x latency / concurrency) and CPU seconds of the client process per 1,000 requests.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List

import defilens

from _common import cpu_seconds, indicators_frame, sandbox_process

HEADERS = {"x-partner-key": "bench", "accept": "*/*"}


def run_defilens(url: str, ids: List[str], concurrency: int) -> int:
    client = defilens.Client(base_url=url, api_key="bench", concurrency=concurrency)
    frames = client.fetch(ids, markets=False, progress=False)
    return frames.indicators.height


def run_httpx(url: str, ids: List[str], concurrency: int) -> int:
    import httpx

    async def main() -> List[bytes]:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=url, headers=HEADERS, limits=limits, timeout=30) as client:
            gate = asyncio.Semaphore(concurrency)

            async def one(token: str) -> bytes:
                async with gate:
                    response = await client.get(f"/listings/{token}")
                    response.raise_for_status()
                    return response.content

            return await asyncio.gather(*(one(t) for t in ids))

    return indicators_frame(asyncio.run(main())).height


def run_aiohttp(url: str, ids: List[str], concurrency: int) -> int:
    import aiohttp

    async def main() -> List[bytes]:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(url, headers=HEADERS, connector=connector) as session:
            async def one(token: str) -> bytes:
                async with session.get(f"/listings/{token}") as response:
                    response.raise_for_status()
                    return await response.read()

            return await asyncio.gather(*(one(t) for t in ids))

    return indicators_frame(asyncio.run(main())).height


def run_requests(url: str, ids: List[str], concurrency: int) -> int:
    import requests

    local = threading.local()

    def one(token: str) -> bytes:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        response = session.get(f"{url}/listings/{token}", headers=HEADERS, timeout=30)
        response.raise_for_status()
        return response.content

    with ThreadPoolExecutor(concurrency) as pool:
        bodies = list(pool.map(one, ids))
    return indicators_frame(bodies).height


CLIENTS: Dict[str, Callable[[str, List[str], int], int]] = {
    "defilens": run_defilens,
    "httpx.AsyncClient": run_httpx,
    "aiohttp": run_aiohttp,
    "requests + 50 threads": run_requests,
}


def run(n: int, concurrency: int, latencies: List[float]) -> List[dict]:
    results = []
    for latency in latencies:
        with sandbox_process(latency) as url:
            ids = [f"bench-{i}" for i in range(n)]
            run_defilens(url, ids[:100], concurrency)  # warm the connection pool and the page cache
            rows = None
            for name, client in CLIENTS.items():
                cpu, started = cpu_seconds(), time.perf_counter()
                height = client(url, ids, concurrency)
                wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
                rows = rows or height
                assert height == rows, f"{name} built {height} rows, expected {rows}"
                ideal = n * latency / concurrency
                results.append(
                    {"latency_ms": latency * 1000, "client": name, "wall_s": wall,
                     "ideal_share": ideal / wall if latency else None, "cpu_per_1000": cpu / n * 1000}
                )
    return results


def markdown(results: List[dict], n: int, concurrency: int) -> str:
    lines = [
        f"{n:,} listing requests at concurrency {concurrency}; the Sandbox in its own process.",
        "",
        "| latency | client | wall (s) | share of ideal | CPU s per 1,000 requests |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in results:
        share = "-" if r["ideal_share"] is None else f"{r['ideal_share'] * 100:.0f}%"
        lines.append(f"| {r['latency_ms']:.0f} ms | {r['client']} | {r['wall_s']:.2f} | {share} | {r['cpu_per_1000']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ids", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.02, 0.0])
    args = parser.parse_args()
    print(markdown(run(args.ids, args.concurrency, args.latencies), args.ids, args.concurrency))


if __name__ == "__main__":
    main()
