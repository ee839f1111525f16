#!/usr/bin/env bash
# Runs libFuzzer targets in BUILD (default build-fuzz) for SECONDS each (default 60), one
# after another, starting from a copy of the committed seed corpus (the committed corpus
# is never modified; new inputs accumulate in BUILD/fuzz-work/<target>/).
# Optional further arguments name the targets to run (gguf llama2c ...); default: all.
# FUZZ_RUNS=N in the environment also stops each target after N executions (campaigns:
# FUZZ_RUNS=10000000 with a generous SECONDS).
# Crashes, leaks and timeouts are saved under BUILD/fuzz-artifacts/<target>/. Prints a
# summary line per target (executions, seconds, coverage, corpus size) and exits non-zero
# if any target found something.
set -euo pipefail
BUILD=${1:-build-fuzz}
SECONDS_EACH=${2:-60}
shift $(( $# > 2 ? 2 : $# ))
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
status=0
bins=()
if [ $# -gt 0 ]; then
  for t in "$@"; do bins+=("$BUILD/tests/fuzz/fuzz_$t"); done
else
  for bin in "$BUILD"/tests/fuzz/fuzz_*; do [ -f "$bin" ] && [ -x "$bin" ] && bins+=("$bin"); done
fi
[ ${#bins[@]} -gt 0 ] || { echo "run_fuzz: no fuzz targets in $BUILD/tests/fuzz (make fuzz builds them)" >&2; exit 1; }
for bin in "${bins[@]}"; do
  [ -x "$bin" ] || { echo "run_fuzz: $bin not built" >&2; status=1; continue; }
  name=$(basename "$bin")
  target=${name#fuzz_}
  work="$BUILD/fuzz-work/$target"
  art="$BUILD/fuzz-artifacts/$target"
  mkdir -p "$work" "$art"
  [ -d "$ROOT/tests/fuzz/corpus/$target" ] && cp -n "$ROOT/tests/fuzz/corpus/$target"/* "$work"/ 2>/dev/null || true
  log="$BUILD/fuzz-$target.log"
  t0=$(date +%s)
  runs=()
  [ -n "${FUZZ_RUNS:-}" ] && runs=(-runs="$FUZZ_RUNS")
  if "$bin" "$work" "${runs[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log and $art/)"
    status=1
  fi
  t1=$(date +%s)
  execs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -E "^#[0-9]+.*cov:" "$log" | tail -1 | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+).*/cov \1 ft \2/')
  echo "fuzz $target: $result, ${execs:-?} executions in $((t1 - t0))s, ${cov:-no coverage line}, corpus $(ls "$work" | wc -l) files (log $log)"
done
exit $status
