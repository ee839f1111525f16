#!/usr/bin/env bash
# Checks that treespec reads every weight type exactly as llama.cpp writes it: expands
# stories260K to a small model whose rows fit every block size, quantises it with the
# anchor's llama-quantize to each type (and K-quant mix), dequantises each file back to
# F32 with llama-quantize (llama.cpp's own dequantiser) and compares every value with
# build/benchmarks/dequant_vs_llama. Usage: benchmarks/dequant_vs_llama.sh [WORKDIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
shared=${TREESPEC_SHARED:-$here/../shared}
work=${1:-/tmp/treespec-dequant}
B=$here/build/tools/treespec/treespec
CMP=$here/build/benchmarks/dequant_vs_llama
Q=$shared/anchors/llama.cpp/bin/llama-quantize
mkdir -p "$work"
[ -f "$work/src.gguf" ] || $B convert --llama2c "$shared/models/stories260K/stories260K.bin" \
  --tokenizer "$shared/models/stories260K/tok512.bin" -o "$work/src.gguf" > /dev/null
$B expand -m "$work/src.gguf" -o "$work/f16.gguf" --dim 512 --ffn 1536 --layers 6 --head-dim 64 --type f16 > /dev/null
status=0
for t in Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K Q3_K_S Q3_K_M Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_XS; do
  $Q "$work/f16.gguf" "$work/$t.gguf" "$t" > "$work/$t.log" 2>&1
  $Q --allow-requantize "$work/$t.gguf" "$work/$t-f32.gguf" F32 >> "$work/$t.log" 2>&1
  echo "== $t"
  "$CMP" "$work/$t.gguf" "$work/$t-f32.gguf" || status=1
done
exit $status
