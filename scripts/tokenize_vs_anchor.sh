#!/usr/bin/env bash
# Token ids of a set of texts from treespec and from a reference engine's llama-cli
# (--verbose-prompt), on a Gemma-style SentencePiece vocabulary written by
# tests/tiny_model_tool (byte fallback, <start_of_turn> / <end_of_turn>, no space
# prefix): the conformance check for the Gemma tokenizer, for which ../shared/data has no
# vectors (docs/tokenizer.md). Never part of `make test`.
#
#   scripts/tokenize_vs_anchor.sh [BUILD_DIR] [ANCHOR_BIN]   (scripts/anchor_env.sh)
set -euo pipefail
source "$(dirname "$0")/anchor_env.sh"
model=$work/gemma-vocab.gguf
"$tool" gemma2_softcap_swa "$model" --gemma-vocab
texts=(
  "Hello world"
  " Hello world"
  "Hello  world   again"
  "Once upon a time there was a little girl named Lily."
  $'<start_of_turn>user\nHow are you today?<end_of_turn>\n<start_of_turn>model\n'
  "the<end_of_turn>the<start_of_turn>"
  $'line one\n\nline two\tand a tab'
  "unknown words: zebra quixotic"
  "emoji 😀 and CJK 日本語 and accents café"
  "numbers 1234 5678 2024 99999"
  "   leading and trailing spaces   "
  "I'm fine, thank you!!"
)
fail=0
printf '| text | tokens | same ids |\n|---|--:|---|\n'
for t in "${texts[@]}"; do
  ours=$("$ts" tokenize -m "$model" "$t" | tr -d '[] ' | tr ',' ' ')
  # llama-cli prints "   ID -> 'piece'" per prompt token; pieces may span lines.
  ref=$(cd "$work" && "$anchor/llama-cli" -m "$model" -p "$t" -n 0 --verbose-prompt "${extra[@]}" </dev/null 2>&1 |
        grep -aoE "^ *[0-9]+ -> '" | grep -oE "[0-9]+" | tr '\n' ' ' | sed 's/ $//')
  same=yes
  if [[ $ours != "$ref" ]]; then
    same=NO; fail=1
    echo "  treespec:  $ours" >&2
    echo "  reference: $ref" >&2
  fi
  shown=${t//$'\n'/\\n}
  printf '| `%s` | %d | %s |\n' "${shown//$'\t'/\\t}" "$(wc -w <<<"$ours")" "$same"
done
exit $fail
