#!/usr/bin/env bash
# `make run`: the main job on the project's default model. Generates a continuation with
# plain greedy decoding and with speculative decoding, prints both texts (identical under
# greedy), tokens/s and the speedup. Uses models/ (shipped with the repo); falls back to
# ../shared/models/stories260K when the shipped model is absent.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/tools/treespec/treespec"
cd "$(dirname "$0")/.."

MODEL=""
PROMPT=""
for f in models/*.gguf; do
  [ -e "$f" ] || continue
  case "$f" in *heads*) continue ;; esac
  MODEL="$f"
  PROMPT="And it came to pass, when the king"
  break
done
if [ -z "$MODEL" ]; then
  SHARED="${TREESPEC_SHARED:-../shared}"
  if [ -f "$SHARED/models/stories260K/stories260K.bin" ]; then
    MODEL="$BUILD/stories260K.gguf"
    [ -f "$MODEL" ] || "$BIN" convert --llama2c "$SHARED/models/stories260K/stories260K.bin" \
      --tokenizer "$SHARED/models/stories260K/tok512.bin" -o "$MODEL" >/dev/null
    PROMPT="Once upon a time"
  else
    echo "No model found. Pass one: $BIN run -m MODEL.gguf -p \"your prompt\" -n 128"
    exit 0
  fi
fi

SPEC=${TREESPEC_DEMO_SPEC:-lookup}
SPEC_ARGS=""
if [ -z "${TREESPEC_DEMO_SPEC:-}" ] && [ -f "${MODEL%.gguf}.medusa.gguf" ]; then
  SPEC=medusa
  SPEC_ARGS="--heads ${MODEL%.gguf}.medusa.gguf --tree auto:4"
fi
N=${TREESPEC_DEMO_N:-200}
echo "== model: $MODEL"
echo "== prompt: $PROMPT"
plain=$("$BIN" run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 -t 1 --json --spec none)
spec=$("$BIN" run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 -t 1 --json --spec "$SPEC" $SPEC_ARGS)
python3 - "$plain" "$spec" "$SPEC" <<'PY'
import json, sys
a, b, name = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
print("\n== plain greedy:\n" + a["text"])
print("\n== speculative (--spec %s):\n" % name + b["text"])
same = a["tokens"] == b["tokens"]
sa, sb = a["stats"], b["stats"]
print("\n== identical output: %s" % ("yes" if same else "NO (bug!)"))
print("== plain: %.1f tok/s | %s: %.1f tok/s, %.2f tokens/step | speedup %.2fx" % (
    sa["tokens_per_s"], name, sb["tokens_per_s"], sb["mean_accepted_length"], sb["tokens_per_s"] / max(sa["tokens_per_s"], 1e-9)))
sys.exit(0 if same else 1)
PY
