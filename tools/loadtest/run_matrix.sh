#!/usr/bin/env bash
# Load-test matrix for `treespec serve`: speculative methods x client concurrency, one
# server per method (loopback, -np = the largest concurrency), bounded request counts.
# Prints a markdown table. Usage:
#   tools/loadtest/run_matrix.sh MODEL.gguf [methods="none lookup"] [concurrency="1 4 8"]
# Env: N (requests per cell, default 32), MAX_TOKENS (128), THREADS (1), PORT (18080),
#      SERVE_ARGS (extra serve flags), IGNORE_EOS (1 = fixed-length outputs).
set -euo pipefail
model=${1:?usage: run_matrix.sh MODEL.gguf [methods] [concurrency]}
methods=${2:-"none lookup"}
concs=${3:-"1 4 8"}
N=${N:-32}
MAX_TOKENS=${MAX_TOKENS:-128}
THREADS=${THREADS:-1}
PORT=${PORT:-18080}
here=$(cd "$(dirname "$0")" && pwd)
bin=${TREESPEC:-$here/../../build/tools/treespec/treespec}
max_c=0
for c in $concs; do [ "$c" -gt "$max_c" ] && max_c=$c; done
eos_flag=""
[ "${IGNORE_EOS:-1}" = 1 ] && eos_flag="--ignore-eos"

echo "| spec | clients | req/s | tok/s | p50 latency ms | p95 latency ms | p50 TTFT ms | p95 TTFT ms | tok/step | errors |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for m in $methods; do
  log=$(mktemp)
  "$bin" serve -m "$model" --port "$PORT" -t "$THREADS" -np "$max_c" --spec "$m" ${SERVE_ARGS:-} -q >"$log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  # Warm-up (page in weights, size buffers), not measured.
  python3 "$here/loadtest.py" --url "http://127.0.0.1:$PORT" -c "$max_c" -n "$max_c" --max-tokens 16 --json >/dev/null || true
  for c in $concs; do
    python3 "$here/loadtest.py" --url "http://127.0.0.1:$PORT" -c "$c" -n "$N" --max-tokens "$MAX_TOKENS" $eos_flag --json |
      python3 -c "import json,sys; r=json.load(sys.stdin); print(f\"| $m | $c | {r['requests_per_s']:.2f} | {r['tokens_per_s']:.0f} | {r['latency_p50_ms']:.1f} | {r['latency_p95_ms']:.1f} | {r['ttft_p50_ms']:.1f} | {r['ttft_p95_ms']:.1f} | {r['tokens_per_step']:.2f} | {r['errors']} |\")"
  done
  kill -TERM $pid
  wait $pid || echo "server exited with $?" >&2
  trap - EXIT
  rm -f "$log"
done
