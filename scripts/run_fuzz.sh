#!/usr/bin/env bash
# Runs libFuzzer targets in BUILD (default build-fuzz) for SECONDS each (default 60),
# FUZZ_JOBS at a time (default: the number of cores; each target is one thread),
# starting from a copy of the committed seed corpus (the committed corpus is never
# modified; new inputs accumulate in BUILD/fuzz-work/<target>/).
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
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$JOBS" -ge 1 ] 2>/dev/null || { echo "run_fuzz: FUZZ_JOBS must be a positive number, got '$JOBS'" >&2; exit 1; }
# One target: its summary line into $BUILD/fuzz-<target>.summary, its exit status.
run_one() {
  local bin=$1 name target work art log t0 t1 runs result execs cov
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
  local rc=0
  if "$bin" "$work" "${runs[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log and $art/)"
    rc=1
  fi
  t1=$(date +%s)
  execs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -E "^#[0-9]+.*cov:" "$log" | tail -1 | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+).*/cov \1 ft \2/')
  echo "fuzz $target: $result, ${execs:-?} executions in $((t1 - t0))s, ${cov:-no coverage line}, corpus $(ls "$work" | wc -l) files (log $log)" \
    >"$BUILD/fuzz-$target.summary"
  return $rc
}
pids=()
for bin in "${bins[@]}"; do
  [ -x "$bin" ] || { echo "run_fuzz: $bin not built" >&2; status=1; continue; }
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  name=$(basename "$bin")
  summary="$BUILD/fuzz-${name#fuzz_}.summary"  # as run_one names it
  rm -f "$summary"
  run_one "$bin" &
  pids+=("$!:$summary")
done
for p in "${pids[@]}"; do
  summary=${p#*:}
  wait "${p%%:*}" || status=1
  cat "$summary" 2>/dev/null || { echo "run_fuzz: no summary $summary" >&2; status=1; }
done
exit $status
