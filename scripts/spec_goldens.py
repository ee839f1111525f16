#!/usr/bin/env python3
# Usage: scripts/spec_goldens.py TREESPEC MODEL GOLDEN_JSONL REPS "name:flags" ...
# Runs every golden prompt with every method (interleaved, REPS times), greedy, 1 thread,
# and prints per method: tokens, steps, mean accepted length (tokens/step incl. bonus),
# vLLM mean acceptance length, rows/step, decode tokens/s (median over reps of the
# aggregate), and ratios to the first method. Also checks every method emits the same tokens.
import json, subprocess, sys, statistics
exe, model, golden, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
methods = [a.split(":", 1) for a in sys.argv[5:]]
gold = [json.loads(l) for l in open(golden) if l.strip()]
agg = {m: [] for m, _ in methods}
ref_tokens = {}
for rep in range(reps):
    per = {m: dict(gen=0, steps=0, acc=0, drafts=0, rows=0, t=0.0) for m, _ in methods}
    for gi, g in enumerate(gold):
        n = g["steps"] - len(g["prompt_tokens"]) + 1
        for m, flags in methods:
            cmd = [exe, "run", "-m", model, "-p", g["prompt"], "-n", str(n), "--temp", "0", "-t", "1", "-s", "1", "--json"] + flags.split()
            j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            s = j["stats"]
            if j["tokens"] != g["generated_tokens"]:
                sys.exit(f"{m}: tokens differ from the golden on prompt {gi}")
            p = per[m]
            p["gen"] += s["n_generated_tokens"]; p["steps"] += s["steps"]; p["acc"] += s["num_accepted_tokens"]
            p["drafts"] += s["num_drafts"]; p["rows"] += s["rows_per_step"] * s["steps"]; p["t"] += s["generation_s"]
    for m, _ in methods:
        agg[m].append(per[m])
base = None
print(f"{'method':<28}{'tokens':>7}{'steps':>7}{'tok/step':>9}{'vLLM MAL':>9}{'rows/step':>10}{'tok/s':>9}{'x steps':>8}{'x tok/s':>8}")
for m, _ in methods:
    r = agg[m]
    p = r[0]
    tps = statistics.median(x["gen"] / x["t"] for x in r)
    mal = (p["acc"] + p["steps"]) / p["steps"]
    vmal = 1 + p["acc"] / p["drafts"] if p["drafts"] else 1.0
    if base is None: base = (p["steps"], tps)
    print(f"{m:<28}{p['gen']:>7}{p['steps']:>7}{mal:>9.3f}{vmal:>9.3f}{p['rows']/p['steps']:>10.1f}{tps:>9.1f}{base[0]/p['steps']:>8.3f}{tps/base[1]:>8.3f}")
