#!/usr/bin/env python3
"""Plain decoding and prompt processing, treespec against the anchors, interleaved on the
same GGUF files.

For each model, test and round: llama.cpp's `llama-bench -p P -n G -t T -r 1`,
ik_llama.cpp's the same with `-rtr 1` (run-time repacking, its fastest CPU mode), then
treespec's `bench --pp P` / `--tg G -r 1 -o json` (the same tests: ppP prefills P tokens
in chunks of 512, tgG decodes G one-row steps from an empty context). Rounds alternate
A B C A B C so slow drifts of a shared machine hit every engine alike; the table gives
medians, min-max and the ratios of medians.

  benchmarks/vs_llama.py [-t 2] [-n 64] [-p 512] [-r 5] MODEL.gguf [MODEL.gguf ...]

-n 0 or -p 0 leaves that test out (default: tg64 only, as llama-bench -p 0 -n 64).
Run it on a quiet machine (load average below ~1.3, nothing else running). The anchors
are read from $TREESPEC_SHARED/anchors (default ../shared beside the checkout); an anchor
that is missing is left out. They are never a build or test dependency.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("TREESPEC_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))


def llama_bench(binary, model, test, n, threads, extra):
    p, g = (n, 0) if test == "pp" else (0, n)
    cmd = [binary, "-m", model, "-p", str(p), "-n", str(g), "-t", str(threads), "-r", "1", "-o", "json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    return float(rows[0]["avg_ts"])


def treespec(binary, model, test, n, threads):
    cmd = [binary, "bench", "-m", model, f"--{test}", str(n), "-r", "1", "-t", str(threads), "-o", "json",
           "--no-progress"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)["results"][0]["median_ts"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("-p", "--n-prompt", type=int, default=0)
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("--treespec", default=os.path.join(ROOT, "build", "tools", "treespec", "treespec"))
    args = ap.parse_args()
    engines = [("treespec", lambda m, t, n: treespec(args.treespec, m, t, n, args.threads))]
    lc = os.path.join(SHARED, "anchors", "llama.cpp", "bin", "llama-bench")
    ik = os.path.join(SHARED, "anchors", "ik_llama.cpp", "bin", "llama-bench")
    if os.path.exists(lc):
        engines.append(("llama.cpp", lambda m, t, n: llama_bench(lc, m, t, n, args.threads, [])))
    if os.path.exists(ik):
        engines.append(("ik_llama.cpp -rtr", lambda m, t, n: llama_bench(ik, m, t, n, args.threads, ["-rtr", "1"])))
    tests = [(t, n) for t, n in (("pp", args.n_prompt), ("tg", args.n_gen)) if n > 0]
    if not tests:
        ap.error("nothing to measure: -p and -n are both 0")
    try:
        load = os.getloadavg()[0]
        print(f"load average {load:.2f}{'  (NOT QUIET: figures unreliable)' if load > 1.3 else ''}", file=sys.stderr)
    except OSError:
        pass
    print("| model | test | engine | tok/s median | min-max | treespec / engine |")
    print("|---|---|---|--:|---|--:|")
    for model in args.models:
        for test, n in tests:
            runs = {name: [] for name, _ in engines}
            refused = set()  # an anchor that cannot load the file (an architecture newer than it)
            for r in range(args.rounds):
                for name, fn in engines:
                    if name in refused:
                        continue
                    try:
                        runs[name].append(fn(model, test, n))
                    except subprocess.CalledProcessError:
                        if name == "treespec":
                            raise
                        refused.add(name)
                        print(f"| {os.path.basename(model)} | {test}{n} | {name} | refuses the file | - | - |")
                        continue
                    print(f"  round {r + 1}: {test}{n} {name} {runs[name][-1]:.2f} tok/s", file=sys.stderr)
            ours = statistics.median(runs["treespec"])
            for name, _ in engines:
                if name in refused:
                    continue
                med = statistics.median(runs[name])
                ratio = "-" if name == "treespec" else f"{ours / med:.2f}x"
                print(f"| {os.path.basename(model)} | {test}{n} | {name} | {med:.2f} | "
                      f"{min(runs[name]):.2f}-{max(runs[name]):.2f} | {ratio} |")


if __name__ == "__main__":
    main()
