"""The disk cache: reused by another process and after a restart, expiry, several writers at
once, junk in the folder, the bound, and the folder served by Sandbox.replay."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import defilens
from defilens.testing import Sandbox

NOW = "2026-01-01T00:00:00Z"


def _fetch_in_a_process(url: str, cache: Path, ttl: float, ids: "list[str]") -> str:
    code = (
        "import sys, defilens\n"
        f"c = defilens.Client(base_url={url!r}, cache_dir={str(cache)!r}, cache_ttl={ttl})\n"
        f"f = c.fetch({ids!r}, progress=False)\n"
        "print(f.log['cached'].sum(), f.log.height, f.log['fetched_at'].dt.epoch('ms').sort().to_list())\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_a_second_process_reuses_the_responses_and_keeps_their_time(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Sandbox(now=NOW) as sandbox:
        cached, height, times = _fetch_in_a_process(sandbox.url, cache, 3600, ["bitcoin", "ethereum"]).split(" ", 2)
        assert (cached, height) == ("0", "4")
        served = sandbox.requests
        first = defilens.Client(base_url=sandbox.url, cache_dir=cache, cache_ttl=3600).fetch(
            ["bitcoin"], progress=False
        )
        assert sandbox.requests == served, "a restarted kernel fetched again"
    log = first.log
    assert log["cached"].all() and log["attempts"].to_list() == [0, 0]
    # The original responses' time, not now: cached data never passes for fresh.
    assert set(log["fetched_at"].dt.epoch("ms").to_list()) <= set(eval(times))
    assert first.snapshot.height == 1 and first.markets.height > 0


def test_an_offline_session_is_served_from_the_folder_and_expiry_refetches(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Sandbox(now=NOW) as sandbox:
        defilens.Client(base_url=sandbox.url, cache_dir=cache, cache_ttl=3600).fetch(["solana"], progress=False)
        url = sandbox.url
    # The Sandbox is gone: nothing answers at its address any more.
    offline = defilens.Client(base_url=url, cache_dir=cache, cache_ttl=3600, max_retries=0)
    frames = offline.fetch(["solana"], progress=False)
    assert frames.snapshot.height == 1 and frames.log["cached"].all()
    with Sandbox(now=NOW) as sandbox:
        short = defilens.Client(base_url=sandbox.url, cache_dir=tmp_path / "short", cache_ttl=0.3)
        short.fetch(["solana"], progress=False)
        time.sleep(0.5)
        again = short.fetch(["solana"], progress=False)
    assert not again.log["cached"].any(), "an expired entry was reused"


def test_concurrent_writers_never_leave_a_torn_entry(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    ids = [f"coin-{i:03d}" for i in range(40)]
    with Sandbox(now=NOW) as sandbox:
        writers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import defilens\n"
                    f"for _ in range(3): defilens.Client(base_url={sandbox.url!r}, cache_dir={str(cache)!r}, "
                    f"cache_ttl=0.001).fetch({ids!r}, progress=False)\n",
                ],
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        for writer in writers:
            _, err = writer.communicate(timeout=120)
            assert writer.returncode == 0, err
    # Every entry reads whole (a torn one would be skipped by the reader).
    _, tokens, _, bodies, _ = defilens._core.read_cache_folder(cache)
    assert sorted(set(tokens)) == sorted(ids) and len(tokens) == 2 * len(ids)
    assert all(body.startswith(b"{") and body.rstrip().endswith(b"}") for body in bodies)
    assert not list(cache.rglob("*.tmp"))


def test_junk_in_the_folder_is_ignored_with_a_warning(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Sandbox(now=NOW) as sandbox:
        client = defilens.Client(base_url=sandbox.url, cache_dir=cache, cache_ttl=3600)
        client.fetch(["bitcoin"], markets=False, progress=False)
        entry = next(cache.rglob("bitcoin.dlc"))
        entry.write_bytes(b"not a cache entry")
        (entry.parent / "notes.txt").write_text("mine")
        with pytest.warns(defilens.DefiLensWarning, match="ignored the cache entry"):
            frames = client.fetch(["bitcoin"], markets=False, progress=False)
    assert frames.snapshot.height == 1 and not frames.log["cached"].any()
    assert (entry.parent / "notes.txt").read_text() == "mine"


def test_the_bound_and_the_settings(tmp_path: Path) -> None:
    with Sandbox(now=NOW) as sandbox:
        small = defilens.Client(
            base_url=sandbox.url, cache_dir=tmp_path / "small", cache_ttl=3600, cache_max_bytes=50_000
        )
        small.fetch([f"coin-{i:03d}" for i in range(80)], progress=False)
        kept = sum(p.stat().st_size for p in (tmp_path / "small").rglob("*.dlc"))
        assert 0 < kept <= 50_000, kept
        with pytest.raises(ValueError, match="cache_ttl"):
            defilens.Client(base_url=sandbox.url, cache_dir=tmp_path / "x")
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "thesis.tex").write_text("x")
        with pytest.raises(ValueError, match="holds other files"):
            defilens.Client(base_url=sandbox.url, cache_dir=tmp_path / "mine", cache_ttl=60)
        (tmp_path / "file").write_text("x")
        with pytest.raises(ValueError, match="is a file"):
            defilens.Client(base_url=sandbox.url, cache_dir=tmp_path / "file", cache_ttl=60)


def test_the_sandbox_replays_a_cache_folder(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Sandbox(now=NOW, seed=9) as sandbox:
        original = defilens.Client(base_url=sandbox.url, cache_dir=cache, cache_ttl=3600).fetch(
            ["bitcoin", "ethereum"], progress=False
        )
    with Sandbox.replay(cache) as replay:
        replayed = defilens.Client(base_url=replay.url).fetch(["bitcoin", "ethereum", "solana"], progress=False)
    assert (
        replayed.bodies().filter(pl.col("token") != "solana")["body"].to_list() == original.bodies()["body"].to_list()
    )
    assert replayed.errors["token"].unique().to_list() == ["solana"]
    run = subprocess.run(
        [sys.executable, "-m", "defilens", "fetch", "bitcoin", "--sandbox", "--cache-dir", str(tmp_path / "c")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "cache_dir needs cache_ttl" in run.stderr, run.stderr
