#!/usr/bin/env bash
# `make run`: the main job on the project's default model. Decodes one prompt with plain
# greedy decoding and with every speculative method the model has what it needs for,
# checks that each prints exactly the plain text, and says which method is fastest on
# this model and by how much (plain decoding included: a model this small fits in the
# CPU's cache, a tree of k rows costs nearly k rows, and speculation does not pay; docs/benchmarks.md has
# the memory-bound 1 B-class measurements where it does). Uses models/ (shipped with the
# repo); falls back to ../shared/models/stories260K when the shipped model is absent.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/tools/treespec/treespec"
cd "$(dirname "$0")/.."

MODEL=""
PROMPT=""
for f in models/*.gguf; do
  [ -e "$f" ] || continue
  case "$f" in *heads* | *.medusa.gguf | *.eagle.gguf) continue ;; esac
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
HEADS="${MODEL%.gguf}.medusa.gguf"
[ -f "$HEADS" ] || HEADS=""
EAGLE="${MODEL%.gguf}.eagle.gguf"
[ -f "$EAGLE" ] || EAGLE=""

exec python3 - "$BIN" "$MODEL" "$PROMPT" "${TREESPEC_DEMO_N:-200}" "$HEADS" "${TREESPEC_DEMO_SPEC:-}" "$EAGLE" <<'PY'
import json, subprocess, sys

bin_, model, prompt, n, heads, only, eagle = sys.argv[1:8]
methods = [("none", [])]
for name, args in [("lookup", []), ("lookahead", []), ("ptd", []),
                   ("medusa", ["--heads", heads]), ("propd", ["--heads", heads]),
                   ("eagle", ["--eagle", eagle]), ("auto", [])]:
    if name in ("medusa", "propd") and not heads:
        continue
    if name == "eagle" and not eagle:
        continue
    if not only or name == only:
        methods.append((name, args))

def run(name, args):
    cmd = [bin_, "run", "-m", model, "-p", prompt, "-n", n, "--temp", "0", "-t", "1", "--json", "--spec", name] + args
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("demo: `%s` failed:\n%s" % (" ".join(cmd), p.stderr))
    return json.loads(p.stdout)

print("== model: %s (%s; %s)" % (model, "with Medusa heads " + heads if heads else "no Medusa heads",
                                 "EAGLE layer " + eagle if eagle else "no EAGLE layer"))
print("== prompt: %s" % prompt)
# Interleaved rounds (every method once per round), median tokens/s of each: one run of
# a model this small takes a fraction of a second, so single runs differ by 20-30%.
ROUNDS = 3
runs = {name: [] for name, _ in methods}
for _ in range(ROUNDS):
    for name, args in methods:
        runs[name].append(run(name, args))
def median_run(rs):
    return sorted(rs, key=lambda r: r["stats"]["tokens_per_s"])[len(rs) // 2]
results = [(name, median_run(runs[name])) for name, _ in methods]
plain = results[0][1]
tps = lambda r: r["stats"]["tokens_per_s"]
print("\n== plain greedy (--spec none), %d tokens:\n%s" % (len(plain["tokens"]), plain["text"]))
print("\n%-10s %10s %12s %9s  %s" % ("method", "tokens/s", "tokens/step", "vs plain", "same text as plain"))
ok = True
for name, r in results:
    same = all(x["tokens"] == plain["tokens"] for x in runs[name])
    ok &= same
    print("%-10s %10.0f %12.2f %8.2fx  %s" % (name, tps(r), r["stats"]["mean_accepted_length"], tps(r) / tps(plain),
          "yes" if same else "NO (a bug: please report it)"))
print("(median of %d interleaved runs each, 1 thread)" % ROUNDS)
NOISE = 1.10  # closer to plain than this is within run-to-run noise here
spec = [x for x in results if x[0] != "none"]
best_name, best = max(spec, key=lambda x: tps(x[1])) if spec else ("none", plain)
ratio = tps(best) / tps(plain)
if ratio >= NOISE and best["stats"]["mean_accepted_length"] > 1.0:
    print("\n== fastest on this model: --spec %s, %.2fx plain decoding (%.2f tokens per step)." %
          (best_name, ratio, best["stats"]["mean_accepted_length"]))
else:
    if spec:
        what = "it chose plain decoding" if best["stats"]["mean_accepted_length"] <= 1.0 else "%.2f tokens per step" % best["stats"]["mean_accepted_length"]
        print("\n== fastest on this model: plain decoding. The best speculative method, --spec %s (%s here),"
              % (best_name, what))
        print("   runs at %.2fx plain, which is within run-to-run noise or below it." % ratio)
    print("   The weights of a %s model fit in the CPU's cache, so a forward pass over a tree of k rows"
          % ("4.9 M-parameter" if "kjv-5m" in model else "model this small"))
    print("   costs nearly k times one row, and verifying drafts costs more than the accepted tokens save.")
    print("   Speculation pays where a step is bound by memory bandwidth (models of 1 B parameters and up):")
    print("   docs/benchmarks.md has those measurements and the commands to repeat them.")
print("== every method printed the same text as plain greedy: %s" % ("yes" if ok else "NO"))
sys.exit(0 if ok else 1)
PY
