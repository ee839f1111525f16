#!/usr/bin/env python3
"""Load-test matrix for `treespec serve`: speculative configurations x client concurrency.

Starts one server per configuration (loopback, -np = the largest concurrency), all at
once, then runs the cells interleaved (round r: every concurrency for every
configuration) for --rounds rounds, so slow drifts of a shared machine hit every
configuration alike; reports the median of each cell over the rounds as a markdown
table. Bounded: --requests per cell, --max-tokens per request, timeouts everywhere.

  tools/loadtest/matrix.py -m model.gguf --config none="--spec none" \\
      --config lookup="--spec lookup" -c 1 4 8 --rounds 3
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import loadtest  # noqa: E402


def wait_healthy(port, proc, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception:  # noqa: BLE001
            pass
        time.sleep(0.1)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--config", action="append", default=[],
                    help='NAME="serve flags" (repeatable); default: none and lookup')
    ap.add_argument("-c", "--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("-n", "--requests", type=int, default=32, help="requests per cell")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--port", type=int, default=18300, help="first port; one per configuration")
    ap.add_argument("--no-stream", action="store_true")
    ap.add_argument("--binary", default=os.path.join(HERE, "..", "..", "build", "tools", "treespec", "treespec"))
    ap.add_argument("--json", help="also write all raw cell results to this file")
    args = ap.parse_args()
    configs = args.config or ["none=--spec none", "lookup=--spec lookup"]
    configs = [c.split("=", 1) for c in configs]
    np_slots = max(args.concurrency)

    procs = []
    try:
        for i, (name, flags) in enumerate(configs):
            port = args.port + i
            cmd = [args.binary, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads),
                   "--parallel", str(np_slots), "-q"] + shlex.split(flags)
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            procs.append((name, port, p))
        for name, port, p in procs:
            if not wait_healthy(port, p):
                sys.exit(f"server '{name}' did not become healthy: {p.stderr.read().decode(errors='replace')[-2000:]}")
            # Warm-up, not measured.
            loadtest.run(argparse.Namespace(url=f"http://127.0.0.1:{port}", concurrency=np_slots, requests=np_slots,
                                            duration=60, max_tokens=16, temperature=0.0, ignore_eos=True,
                                            prompts=None, model=None, api_key=None, timeout=60, no_stream=args.no_stream))
        cells = {}
        for r in range(args.rounds):
            for c in args.concurrency:
                for name, port, _ in procs:
                    res = loadtest.run(argparse.Namespace(
                        url=f"http://127.0.0.1:{port}", concurrency=c, requests=args.requests, duration=300,
                        max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True, prompts=None, model=None,
                        api_key=None, timeout=120, no_stream=args.no_stream))
                    cells.setdefault((name, c), []).append(res)
                    print(f"round {r + 1} {name} c={c}: {res['tokens_per_s']:.0f} tok/s, {res['errors']} errors",
                          file=sys.stderr, flush=True)
    finally:
        for _, _, p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, _, p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()

    def med(rs, key):
        return statistics.median(r[key] for r in rs)

    print(f"| config | clients | req/s | tok/s | p50 latency ms | p95 latency ms | p50 TTFT ms | p95 TTFT ms | tok/step | "
          f"tok/s vs {configs[0][0]} | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in args.concurrency:
        base = med(cells[(configs[0][0], c)], "tokens_per_s")
        for name, _ in configs:
            rs = cells[(name, c)]
            print(f"| {name} | {c} | {med(rs, 'requests_per_s'):.2f} | {med(rs, 'tokens_per_s'):.0f} | "
                  f"{med(rs, 'latency_p50_ms'):.1f} | {med(rs, 'latency_p95_ms'):.1f} | {med(rs, 'ttft_p50_ms'):.1f} | "
                  f"{med(rs, 'ttft_p95_ms'):.1f} | {med(rs, 'tokens_per_step'):.2f} | "
                  f"{med(rs, 'tokens_per_s') / base:.2f} | {sum(r['errors'] for r in rs)} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{k[0]}/{k[1]}": v for k, v in cells.items()}, f, indent=1)


if __name__ == "__main__":
    main()
