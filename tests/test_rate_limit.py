"""A limit the client does not know: the Sandbox's max_rps, and rate_limit="auto" learning it.

Bounds here are generous (a loaded 2-core machine runs these beside other work); the goals
(at most 10% refused, within 30% of the ideal pace) are measured by benchmarks/bench_rate_limit.py.
"""

from __future__ import annotations

import time

import pytest

import defilens
from defilens.testing import Sandbox


def _fetch(max_rps: float, headers: bool, n: int, rate_limit="auto"):
    with Sandbox(now="2026-01-01T00:00:00Z", max_rps=max_rps, rate_headers=headers) as sandbox:
        client = defilens.Client(base_url=sandbox.url, rate_limit=rate_limit, max_retries=20)
        started = time.perf_counter()
        frames = client.fetch([f"coin-{i:04d}" for i in range(n)], markets=False, progress=False)
        elapsed = time.perf_counter() - started
        return frames, sandbox.requests, elapsed, client


@pytest.mark.slow
@pytest.mark.parametrize("headers", [True, False], ids=["rate headers", "no rate headers"])
@pytest.mark.parametrize(("max_rps", "n"), [(20, 80), (80, 240)])
def test_auto_learns_a_limit_it_was_not_told(max_rps: float, n: int, headers: bool) -> None:
    frames, served, elapsed, client = _fetch(max_rps, headers, n)
    assert frames.snapshot.height == n and frames.errors.height == 0
    refused = served - n
    ideal = n / max_rps
    assert refused <= 0.3 * served, f"{refused} of {served} requests refused"
    assert elapsed < 2.5 * ideal + 2, f"{elapsed:.1f} s for an ideal {ideal:.1f} s"
    learned = client.rate_limit_learned
    assert learned is not None and learned >= 0.5 * max_rps, learned
    if headers:
        assert refused == 0, "the rate headers say the limit before any 429"
        assert learned <= max_rps, learned


def test_without_a_limit_auto_never_throttles() -> None:
    frames, served, _, client = _fetch(1_000_000, False, 50)
    assert served == 50 and frames.snapshot.height == 50
    assert client.rate_limit_learned is None, "nothing to learn: it stays unthrottled"
    assert defilens.Client(base_url="http://127.0.0.1:9", rate_limit=5.0).rate_limit_learned is None


def test_the_sandbox_limit_answers_429_with_its_headers() -> None:
    import urllib.error
    import urllib.request

    with Sandbox(max_rps=5) as sandbox:
        answers = []
        for _ in range(8):
            try:
                with urllib.request.urlopen(f"{sandbox.url}/listings/bitcoin") as response:
                    answers.append((response.status, dict(response.headers)))
            except urllib.error.HTTPError as error:
                answers.append((error.code, dict(error.headers)))
    statuses = [status for status, _ in answers]
    assert statuses[:5] == [200] * 5 and 429 in statuses[5:]
    ok_headers = {k.lower(): v for k, v in answers[0][1].items()}
    assert ok_headers["x-ratelimit-limit"] == "5" and ok_headers["x-ratelimit-remaining"] == "4"
    refused = {k.lower(): v for k, v in answers[statuses.index(429)][1].items()}
    assert refused["retry-after"] == "1" and refused["x-ratelimit-remaining"] == "0"
    with (
        Sandbox(max_rps=5, rate_headers=False) as quiet,
        urllib.request.urlopen(f"{quiet.url}/listings/bitcoin") as response,
    ):
        assert "x-ratelimit-limit" not in {k.lower() for k in response.headers}


@pytest.mark.parametrize("max_rps", [0, -1, float("nan"), 1e9])
def test_a_bad_max_rps_is_refused(max_rps: float) -> None:
    with pytest.raises(ValueError, match="max_rps"):
        Sandbox(max_rps=max_rps)


@pytest.mark.parametrize("rate_limit", ["fast", "AUTO", ""])
def test_a_rate_limit_that_is_neither_a_number_nor_auto_is_refused(rate_limit: str) -> None:
    with pytest.raises(ValueError, match="rate_limit"):
        defilens.Client(base_url="http://127.0.0.1:9", rate_limit=rate_limit)
