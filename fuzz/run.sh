#!/usr/bin/env bash
# Runs every fuzz target for RUNS executions (default 1,000,000) on the stable toolchain, from the
# seeds in fuzz/seeds/ (the corpus grows in fuzz/corpus/, not committed). By hand or `make fuzz`;
# needs `cargo install cargo-fuzz`. Without a sanitizer (-s none): panics, aborts and failed
# assertions are what these targets look for, and it runs several times faster.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-1000000}"
mkdir -p fuzz/logs
for target in "${@:-parse_listing parse_markets retry_after_and_url}"; do
  for t in $target; do
    mkdir -p "fuzz/corpus/$t"
    echo "== $t: $RUNS executions ($(date -u +%H:%M:%S))"
    status=0
    RUSTC_BOOTSTRAP=1 cargo fuzz run -s none --release "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
      -runs="$RUNS" -max_len=65536 -print_final_stats=1 > "fuzz/logs/$t.log" 2>&1 || status=$?
    grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::average_exec_per_sec|panicked|deadly|SUMMARY" "fuzz/logs/$t.log" || true
    if [ "$status" -ne 0 ]; then
      echo "$t: cargo fuzz failed (exit $status); see fuzz/logs/$t.log and fuzz/artifacts/$t/" >&2
      exit "$status"
    fi
  done
done
