"""Fetching: defilens.Client.fetch against httpx, aiohttp and requests + threads.

    python benchmarks/bench_fetch.py [--quick] [--ids 2000] [--concurrency 50] [--runs 5] [--json PATH]

The Sandbox runs in a separate process (``defilens sandbox``), once with 20 ms of latency per
answer and once with none. Every client fetches the listing of each id once, at the same
concurrency, sending ``x-partner-key``; the Python peers parse each body with orjson as it
arrives and build the indicators frame with polars at the end (defilens builds all its
frames, a superset). Reported per client: wall time, share of the ideal (requests x latency /
concurrency, meaningful only with latency) and CPU seconds of this process per 1,000 requests
(``time.process_time``: every thread of the process, the Sandbox's excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List

import aiohttp
import httpx
import requests

import defilens
from _common import cpu_seconds, emit, sandbox_process, table, target
from _python_frames import IndicatorsBuilder

KEY = "bench-key"
HEADERS = {"x-partner-key": KEY}


# --------------------------------------------------------------------------- the clients
# Each takes (url, ids, concurrency) and returns the number of indicator rows it built, which
# must be the same for all (a cheap check that everyone did the whole job).


def run_defilens(url: str, ids: List[str], concurrency: int) -> int:
    with defilens.Client(base_url=url, api_key=KEY, concurrency=concurrency, max_retries=3) as client:
        frames = client.fetch(ids, markets=False, progress=False)
    if frames.errors.height:
        raise RuntimeError(f"defilens: {frames.errors.height} failed requests: {frames.errors.head(3)}")
    return frames.indicators.height


def run_httpx(url: str, ids: List[str], concurrency: int) -> int:
    async def main() -> int:
        builder = IndicatorsBuilder()
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        # trust_env=False: never a proxy, only 127.0.0.1.
        async with httpx.AsyncClient(
            base_url=url, headers=HEADERS, limits=limits, timeout=30, trust_env=False
        ) as client:
            gate = asyncio.Semaphore(concurrency)

            async def one(token: str) -> None:
                async with gate:
                    response = await client.get(f"/listings/{token}")
                response.raise_for_status()
                builder.add(token, response.content)

            await asyncio.gather(*(one(token) for token in ids))
        return builder.frame().height

    return asyncio.run(main())


def run_aiohttp(url: str, ids: List[str], concurrency: int) -> int:
    async def main() -> int:
        builder = IndicatorsBuilder()
        connector = aiohttp.TCPConnector(limit=concurrency)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(url, headers=HEADERS, connector=connector, timeout=timeout) as session:
            gate = asyncio.Semaphore(concurrency)

            async def one(token: str) -> None:
                async with gate, session.get(f"/listings/{token}") as response:
                    response.raise_for_status()
                    body = await response.read()
                builder.add(token, body)

            await asyncio.gather(*(one(token) for token in ids))
        return builder.frame().height

    return asyncio.run(main())


def run_requests(url: str, ids: List[str], concurrency: int) -> int:
    builder, lock, local = IndicatorsBuilder(), threading.Lock(), threading.local()
    sessions: List[requests.Session] = []

    def session() -> requests.Session:
        # One Session (one keep-alive connection) per thread: Session is not thread-safe.
        if not hasattr(local, "session"):
            local.session = requests.Session()
            local.session.trust_env = False  # never a proxy, only 127.0.0.1
            local.session.headers.update(HEADERS)
            sessions.append(local.session)
        return local.session

    def one(token: str) -> None:
        response = session().get(f"{url}/listings/{token}", timeout=30)
        response.raise_for_status()
        with lock:  # the builder's lists are shared by the threads
            builder.add(token, response.content)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, ids))
    for s in sessions:
        s.close()
    return builder.frame().height


CLIENTS: Dict[str, Callable[[str, List[str], int], int]] = {
    "defilens Client.fetch": run_defilens,
    "httpx.AsyncClient": run_httpx,
    "aiohttp": run_aiohttp,
    "requests + ThreadPoolExecutor": run_requests,
}


# --------------------------------------------------------------------------- measuring


def sandbox_floor(url: str, requests_: int = 40) -> float:
    """Median time of one request at a time on a bare keep-alive socket, in seconds.

    The least any client can take per request against this Sandbox: it shows how far the
    Sandbox's own latency (timer overshoot, building the body) sits above the nominal one.
    """
    host, port = url.split("//", 1)[1].rstrip("/").split(":")
    times = []
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        for i in range(requests_):
            request = f"GET /listings/floor-{i} HTTP/1.1\r\nHost: {host}\r\nx-partner-key: {KEY}\r\n\r\n".encode()
            started = time.perf_counter()
            connection.sendall(request)
            read_response(connection)
            times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def read_response(connection: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += connection.recv(65536)
    return body


def measure(latency: float, n: int, concurrency: int, runs: int) -> Dict[str, Dict[str, float]]:
    """Best wall time and least CPU of ``runs`` rounds per client, clients interleaved."""
    best: Dict[str, Dict[str, float]] = {name: {"wall": float("inf"), "cpu": float("inf")} for name in CLIENTS}
    with sandbox_process(latency) as url:
        best["sandbox floor"] = {"request": sandbox_floor(url)}
        for client in CLIENTS.values():  # warm: imports, the Sandbox's caches, first connections
            client(url, [f"warm-{i}" for i in range(100)], concurrency)
        expected = None
        for round_ in range(runs):
            # Rounds go client by client, so that a slow spell of the machine hits all of them.
            ids = [f"bench-{round_}-{i}" for i in range(n)]
            # Untimed: the Sandbox builds each body once (a listing derives six candle series,
            # about 0.3 ms) and serves it from its cache after, so no client pays for that.
            next(iter(CLIENTS.values()))(url, ids, concurrency)
            for name, client in CLIENTS.items():
                gc.collect()
                cpu, started = cpu_seconds(), time.perf_counter()
                rows = client(url, ids, concurrency)
                wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
                expected = expected or rows
                if rows != expected:
                    raise RuntimeError(f"{name} built {rows} indicator rows, the others {expected}")
                best[name]["wall"] = min(best[name]["wall"], wall)
                best[name]["cpu"] = min(best[name]["cpu"], cpu)
    return best


def report(results: Dict[float, Dict[str, Dict[str, float]]], n: int, concurrency: int, runs: int) -> Dict[str, object]:
    rows, targets = [], []
    notes = []
    for latency, clients in results.items():
        ideal = n * latency / concurrency
        floor = clients["sandbox floor"]["request"]
        notes.append(
            f"{latency * 1000:.0f} ms: {floor * 1000:.2f} ms"
            + (f" (caps any client at {latency / floor * 100:.0f}% of the ideal)" if latency else "")
        )
        for name, figures in clients.items():
            if name == "sandbox floor":
                continue
            share = f"{ideal / figures['wall'] * 100:.0f}%" if latency else "-"
            rows.append(
                [
                    f"{latency * 1000:.0f} ms",
                    name,
                    f"{figures['wall']:.3f}",
                    f"{ideal:.2f}" if latency else "-",
                    share,
                    f"{n / figures['wall']:,.0f}",
                    f"{figures['cpu'] / n * 1000:.3f}",
                ]
            )
    ours = "defilens Client.fetch"
    for latency, clients in results.items():
        if latency:
            ideal = n * latency / concurrency
            share = ideal / clients[ours]["wall"]
            cap = latency / clients["sandbox floor"]["request"]
            targets.append(
                target(
                    f"fetch, {latency * 1000:.0f} ms latency: share of ideal ({ideal:.2f} s)",
                    f"{share * 100:.1f}% ({clients[ours]['wall']:.3f} s; the Sandbox alone caps it at "
                    f"{cap * 100:.0f}%)",
                    ">= 95%",
                    share >= 0.95,
                )
            )
        else:
            speed = clients["httpx.AsyncClient"]["wall"] / clients[ours]["wall"]
            cpu = clients[ours]["cpu"] / clients["httpx.AsyncClient"]["cpu"]
            targets.append(target("fetch, no latency: speed vs httpx", f"{speed:.2f}x as fast", ">= 3x", speed >= 3.0))
            targets.append(
                target(
                    "fetch, no latency: CPU per request vs httpx",
                    f"{cpu:.2f} of httpx's ({clients[ours]['cpu'] / n * 1000:.3f} vs "
                    f"{clients['httpx.AsyncClient']['cpu'] / n * 1000:.3f} s per 1,000)",
                    "<= 0.33",
                    cpu <= 1 / 3,
                )
            )
    body = (
        f"{n:,} listing requests per client at concurrency {concurrency}, best of {runs} rounds (wall and CPU "
        "each the least of its rounds); the Sandbox in its own process on 127.0.0.1. The peers parse with "
        "orjson and build the indicators frame with polars; defilens builds all its frames. Ideal = "
        "requests x latency / concurrency. One request at a time on a bare socket (the Sandbox's own floor, "
        f"median): {'; '.join(notes)}.\n\n"
        + table(
            ["latency", "client", "wall (s)", "ideal (s)", "share of ideal", "requests/s", "CPU s per 1,000 req"],
            rows,
            "rlrrrrr",
        )
    )
    plain = {str(k): v for k, v in results.items()}
    return {"title": "Fetching", "body": body, "targets": targets, "results": plain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="500 ids, 1 round")
    parser.add_argument("--ids", type=int)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.02, 0.0], help="seconds")
    parser.add_argument("--json", help="also write the figures to this file (for run_all.py)")
    args = parser.parse_args()
    n = args.ids or (500 if args.quick else 2000)
    runs = args.runs or (1 if args.quick else 5)
    results = {latency: measure(latency, n, args.concurrency, runs) for latency in args.latencies}
    emit(report(results, n, args.concurrency, runs), args.json)


if __name__ == "__main__":
    main()
