"""Runs every benchmark and writes benchmarks/RESULTS.md (by hand; not part of the tests).

    python benchmarks/run_all.py [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from _common import machine

HERE = Path(__file__).parent


def section(title: str, script: str, *args: str) -> str:
    out = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True, check=True, cwd=HERE)
    return f"### {title}\n\n{out.stdout.strip()}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    parse_sizes = ["2000"] if args.quick else ["2000", "20000"]
    ids = "500" if args.quick else "2000"
    memory_ids = "2000" if args.quick else "20000"
    report = "\n".join(
        [
            "# Benchmark results",
            "",
            f"Machine: {machine()}.",
            "",
            section("Parsing", "bench_parse.py", "--sizes", *parse_sizes),
            section("Fetching", "bench_fetch.py", "--ids", ids),
            "### Memory and import\n\n| what | measured | against | result |\n|---|---|---|---|",
            subprocess.run([sys.executable, str(HERE / "bench_memory_import.py"), "--ids", memory_ids],
                           capture_output=True, text=True, check=True, cwd=HERE).stdout.strip(),
            "",
        ]
    )
    (HERE / "RESULTS.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
