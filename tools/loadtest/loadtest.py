#!/usr/bin/env python3
"""Closed-loop load generator for an OpenAI-compatible server (treespec serve, llama-server, vLLM).

C clients each send (streamed, unless --no-stream) /v1/completions requests back to back until N requests are
done (or --duration seconds pass). Reports requests/s, generated tokens/s, latency and
time-to-first-token percentiles, and the server's speculative counters per request.
Standard library only; bounded in count and time.

  tools/loadtest/loadtest.py --url http://127.0.0.1:8080 -c 4 -n 32 --max-tokens 128
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

DEFAULT_PROMPTS = [
    "Once upon a time",
    "The little dog",
    "Lily and Ben went to the park.",
    "One day, a boy named Tim",
    "The sun was shining and",
    "There was a big red ball",
    "Mom said to Sue,",
    "The cat sat on the mat and",
]


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_request(host, port, body, headers, timeout):
    """Sends one request; returns dict(ok, latency, ttft, tokens, treespec) or an error.
    Streamed requests measure time to first token; plain ones report ttft = latency."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return {"ok": False, "error": f"HTTP {resp.status}: {resp.read()[:200]!r}"}
        if not body.get("stream"):
            r = json.loads(resp.read())
            latency = time.perf_counter() - t0
            return {"ok": True, "latency": latency, "ttft": latency, "tokens": r["usage"]["completion_tokens"],
                    "treespec": r.get("treespec") or {}}
        ttft = None
        usage = None
        ext = None
        done = False
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                done = True
                break
            ev = json.loads(payload)
            if "error" in ev:
                return {"ok": False, "error": str(ev["error"])}
            ch = ev.get("choices") or []
            if ch and ch[0].get("text") and ttft is None:
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                usage = ev["usage"]
            if ev.get("treespec"):
                ext = ev["treespec"]
        latency = time.perf_counter() - t0
        if not done or usage is None:
            return {"ok": False, "error": "stream ended without [DONE] or usage"}
        return {"ok": True, "latency": latency, "ttft": ttft if ttft is not None else latency,
                "tokens": usage["completion_tokens"], "treespec": ext or {}}
    except Exception as e:  # noqa: BLE001 - a load generator reports, never crashes
        return {"ok": False, "error": repr(e)}
    finally:
        conn.close()


def run(args):
    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    prompts = DEFAULT_PROMPTS
    if args.prompts:
        with open(args.prompts, encoding="utf-8") as f:
            prompts = [ln.rstrip("\n") for ln in f if ln.strip()]
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key

    lock = threading.Lock()
    next_idx = [0]
    results = []
    deadline = time.perf_counter() + args.duration

    def worker():
        while True:
            with lock:
                i = next_idx[0]
                if i >= args.requests or time.perf_counter() > deadline:
                    return
                next_idx[0] += 1
            body = {"prompt": prompts[i % len(prompts)], "max_tokens": args.max_tokens,
                    "temperature": args.temperature}
            if not args.no_stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
            if args.ignore_eos:
                body["ignore_eos"] = True
            if args.model:
                body["model"] = args.model
            r = one_request(host, port, body, headers, args.timeout)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0

    ok = [r for r in results if r["ok"]]
    errors = [r["error"] for r in results if not r["ok"]]
    lat = [r["latency"] for r in ok]
    ttft = [r["ttft"] for r in ok]
    toks = sum(r["tokens"] for r in ok)
    drafts = sum(r["treespec"].get("num_drafts", 0) for r in ok)
    accepted = sum(r["treespec"].get("num_accepted_tokens", 0) for r in ok)
    steps = sum(r["treespec"].get("steps", 0) for r in ok)
    out = {
        "concurrency": args.concurrency,
        "requests": len(results),
        "ok": len(ok),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": wall,
        "requests_per_s": len(ok) / wall if wall > 0 else 0.0,
        "tokens_per_s": toks / wall if wall > 0 else 0.0,
        "completion_tokens": toks,
        "latency_p50_ms": 1e3 * percentile(lat, 50),
        "latency_p95_ms": 1e3 * percentile(lat, 95),
        "ttft_p50_ms": 1e3 * percentile(ttft, 50),
        "ttft_p95_ms": 1e3 * percentile(ttft, 95),
        "mean_latency_ms": 1e3 * statistics.mean(lat) if lat else float("nan"),
        "num_drafts": drafts,
        "num_accepted_tokens": accepted,
        "tokens_per_step": (accepted + steps) / steps if steps else float("nan"),
    }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("-c", "--concurrency", type=int, default=1)
    ap.add_argument("-n", "--requests", type=int, default=16, help="total requests (bound)")
    ap.add_argument("--duration", type=float, default=120.0, help="stop starting requests after this many seconds")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true", help="always generate max-tokens tokens")
    ap.add_argument("--prompts", help="file with one prompt per line (default: built-in story openings)")
    ap.add_argument("--model", help="model id to send")
    ap.add_argument("--api-key")
    ap.add_argument("--timeout", type=float, default=120.0, help="per-request socket timeout (s)")
    ap.add_argument("--no-stream", action="store_true",
                    help="plain responses (less client work per token; TTFT is then the full latency)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.concurrency < 1 or args.requests < 1:
        ap.error("--concurrency and --requests must be >= 1")
    r = run(args)
    if args.json:
        print(json.dumps(r))
    else:
        for k, v in r.items():
            print(f"{k:>22}: {v:.2f}" if isinstance(v, float) else f"{k:>22}: {v}")
    return 0 if r["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
