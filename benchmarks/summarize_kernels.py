#!/usr/bin/env python3
"""Markdown tables from bench_kernels --benchmark_out=FILE.json (docs/kernels.md Results).

Matmul rows: type x ISA, columns M x threads, cells 'GB/s weights | GFLOP/s' (real time).
"""
import json
import sys
from collections import defaultdict


def main(path):
    data = json.load(open(path))
    mm = defaultdict(dict)
    l2 = defaultdict(dict)
    other = []
    cols = set()
    for b in data["benchmarks"]:
        name = b["name"]
        if b.get("error_occurred"):
            continue
        parts = name.split("/")
        if parts[0] in ("BM_Matmul", "BM_MatmulL2"):
            t, isa = parts[1], parts[2]
            m = [p for p in parts if p.startswith("M:")][0][2:]
            th = [p for p in parts if p.startswith("threads:")][0][8:]
            gbs = b.get("bytes_per_second", 0) / 1e9
            gf = b.get("FLOPS", 0) / 1e9
            (mm if parts[0] == "BM_Matmul" else l2)[(t, isa)][(int(m), int(th))] = (gbs, gf)
            if parts[0] == "BM_Matmul":
                cols.add((int(m), int(th)))
        else:
            other.append(b)
    cols = sorted(cols)
    print("| type | ISA | " + " | ".join(f"M={m} t={t}" for m, t in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for (t, isa), v in sorted(mm.items()):
        cells = [f"{v[c][0]:.1f} / {v[c][1]:.0f}" if c in v else "-" for c in cols]
        print(f"| {t} | {isa} | " + " | ".join(cells) + " |")
    print()
    print("In-cache (BM_MatmulL2, one thread, CPU time): GFLOP/s at M = 1 / 16 / 64")
    print()
    print("| type | ISA | M=1 | M=16 | M=64 |")
    print("|---|---|---|---|---|")
    for (t, isa), v in sorted(l2.items()):
        cells = [f"{v[(m, 1)][1]:.0f}" if (m, 1) in v else "-" for m in (1, 16, 64)]
        print(f"| {t} | {isa} | " + " | ".join(cells) + " |")
    print()
    for b in other:
        extra = {k: v for k, v in b.items() if k in ("bytes_per_second", "FLOPS", "GB_per_s")}
        ms = b["real_time"] / 1e6 if b.get("time_unit") == "ns" else b["real_time"]
        desc = ", ".join(f"{k}={v / 1e9:.2f}G" if k != "GB_per_s" else f"{k}={v:.2f}" for k, v in extra.items())
        print(f"- {b['name']}: {ms:.2f} ms, {desc}")


if __name__ == "__main__":
    main(sys.argv[1])
