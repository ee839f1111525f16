#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD (default build-fuzz) for SECONDS each, starting
# from the committed seed corpus (copied: the committed corpus is never modified).
# Crashes are saved under BUILD/fuzz-artifacts/<target>/. Prints a summary line per target.
set -euo pipefail
BUILD=${1:-build-fuzz}
SECONDS_EACH=${2:-60}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
status=0
for bin in "$BUILD"/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  target=${name#fuzz_}
  work="$BUILD/fuzz-work/$target"
  art="$BUILD/fuzz-artifacts/$target"
  mkdir -p "$work" "$art"
  [ -d "$ROOT/tests/fuzz/corpus/$target" ] && cp -n "$ROOT/tests/fuzz/corpus/$target"/* "$work"/ 2>/dev/null || true
  log="$BUILD/fuzz-$target.log"
  if "$bin" "$work" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
  fi
  execs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -E "^#[0-9]+.*cov:" "$log" | tail -1 | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+).*/cov \1 ft \2/')
  echo "fuzz $target: $result, ${execs:-?} executions in ${SECONDS_EACH}s, ${cov:-no coverage line} (log $log)"
done
exit $status
