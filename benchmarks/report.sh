#!/usr/bin/env bash
# Measures what docs/kernels.md "Results" reports, in one run so ratios are comparable:
# DRAM read bandwidth (1 and N threads), forward steps of 1/16/64 rows on the ~1 B
# Q8_0 expansion of stories260K, plain decode tokens/s on it and on stories260K.
# Usage: benchmarks/report.sh [build-dir] [work-dir]   (builds the models in work-dir)
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/treespec-bench}
SHARED=${TREESPEC_SHARED:-../shared}
B=$BUILD/tools/treespec/treespec
N=$(nproc)
mkdir -p "$WORK"
[ -f "$WORK/s260.gguf" ] || $B convert --llama2c "$SHARED/models/stories260K/stories260K.bin" \
  --tokenizer "$SHARED/models/stories260K/tok512.bin" -o "$WORK/s260.gguf"
[ -f "$WORK/s260-1b-q8.gguf" ] || $B expand -m "$WORK/s260.gguf" -o "$WORK/s260-1b-q8.gguf" \
  --dim 2048 --ffn 5632 --layers 22 --head-dim 128 --type q8_0
echo "## load"; uptime
echo "## membw"; $B membw --mib 1024
echo "## forward steps (1B Q8_0 expansion)"
TREESPEC_BENCH_MODEL="$WORK/s260-1b-q8.gguf" $BUILD/benchmarks/bench_model --benchmark_min_time=2
for t in 1 $N; do
  echo "## plain decode, 1B Q8_0, $t thread(s)"
  $B run -m "$WORK/s260-1b-q8.gguf" -p "Once upon a time" -n 64 --ignore-eos --temp 0 -t $t -c 256 --json |
    python3 -c "import json,sys; s=json.load(sys.stdin)['stats']; print('tokens_per_s', s['tokens_per_s'])"
done
echo "## plain decode, stories260K F32, 1 thread (reference llama2.c: ~4600 tok/s here)"
for i in 1 2 3; do
  $B run -m "$WORK/s260.gguf" -p "Once upon a time" -n 256 --ignore-eos --temp 0 -t 1 -c 512 --json |
    python3 -c "import json,sys; s=json.load(sys.stdin)['stats']; print('tokens_per_s', s['tokens_per_s'])"
done
echo "## load"; uptime
