#!/usr/bin/env bash
# Greedy text of every architecture family (tests/common/arch_families.h, tiny random
# weights, byte-level BPE vocabulary) from treespec and from a reference engine's
# llama-cli, side by side: the check of docs/models.md's "against a reference engine".
# Reference binaries are read from ../shared/anchors; never part of `make test`.
#
#   scripts/arch_vs_anchor.sh [BUILD_DIR] [ANCHOR_BIN]   (scripts/anchor_env.sh)
set -euo pipefail
source "$(dirname "$0")/anchor_env.sh"
prompts=("Once upon a time" "The numbers 1234 and 5678 were")
fail=0
# One row of the table: family, arch, scale, prompt, context ("default" or a -c value).
compare() {
  local name=$1 arch=$2 scale=$3 p=$4 ctx=$5 model=$work/$1.gguf cargs=() same=yes why
  [[ $ctx == default ]] || cargs=(-c "$ctx")
  "$ts" run -m "$model" -p "$p" -n 32 --temp 0 -t 1 "${cargs[@]}" >"$work/ours" 2>"$work/ours.err" || { cat "$work/ours.err" >&2; exit 1; }
  # (in $work: llama-cli writes main.log into its working directory)
  if ! (cd "$work" && "$anchor/llama-cli" -m "$model" -p "$p" -n 32 --temp 0 -t 1 "${cargs[@]}" "${extra[@]}" </dev/null >"$work/ref" 2>"$work/ref.err"); then
    why=$(grep -m1 -o 'error loading model: .*' "$work/ref.err" || tail -1 "$work/ref.err")
    printf '| %s | %s | %s | %s | %s | reference refuses the file: %s |\n' "$name" "$arch" "$scale" "$p" "$ctx" "$why"
    return
  fi
  # treespec prints U+FFFD for bytes that are not valid UTF-8 and llama-cli the raw
  # bytes: compare with invalid bytes and replacement characters dropped, newlines too
  # (llama-cli may end with one of its own).
  python3 - "$work/ours" "$work/ref" <<'PY' || { same=NO; fail=1; }
import sys
norm = lambda p: open(p, 'rb').read().decode('utf-8', 'ignore').replace('\ufffd', '').replace('\n', '')
a, b = norm(sys.argv[1]), norm(sys.argv[2])
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
if a != b:
    print(f'  first difference after {n} characters: treespec {a[n:n+24]!r}, reference {b[n:n+24]!r}', file=sys.stderr)
sys.exit(0 if a == b else 1)
PY
  printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$arch" "$scale" "$p" "$ctx" "$same"
}

printf '| family | arch | scale | prompt | -c | same 32 tokens |\n|---|---|--:|---|--:|---|\n'
while read -r name arch; do
  for scale in 0.6 1.0; do
    "$tool" "$name" "$work/$name.gguf" --bpe --scale "$scale"
    for p in "${prompts[@]}"; do
      # -c 256: the LongRoPE fixture's original context (its short factors); the default
      # context, its training context 1024, takes the long ones.
      for ctx in default 256; do compare "$name" "$arch" "$scale" "$p" "$ctx"; done
    done
  done
done < <("$tool" --list)
exit $fail
