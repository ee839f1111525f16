#!/usr/bin/python3
"""Plot training / validation loss from a train.py log as a standalone SVG.

Usage:
    /usr/bin/python3 tools/train/plot_loss.py [--log tools/train/run/log.jsonl] \
        [--out docs/kjv_loss.svg]

No plotting library needed: the SVG is written by hand.  Plotted: the
running train loss (mean of each --log-every window, with dropout), the
evaluation loss on a fixed train slice and the validation loss (both
without dropout), against optimizer steps; y axis is cross-entropy in nats
per token.
"""
import argparse
import json
import math
import os
from xml.sax.saxutils import escape

W, H = 760, 440
ML, MR, MT, MB = 70, 20, 40, 55


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", default=os.path.join(here, "run", "log.jsonl"))
    ap.add_argument("--out", default=os.path.join(root, "docs", "kjv_loss.svg"))
    ap.add_argument("--title", default="treespec KJV model: loss (nats/token)")
    a = ap.parse_args()

    # a resumed run re-logs the steps after its checkpoint: keep the last record
    last = {}
    for l in open(a.log):
        if l.strip():
            r = json.loads(l)
            last[(r["step"], "val_loss" in r)] = r
    recs = sorted(last.values(), key=lambda r: r["step"])
    series = {
        "train (running, dropout)": ([(r["step"], r["train_loss"]) for r in recs if "train_loss" in r], "#9db7d5", 1.2),
        "train slice (eval)": ([(r["step"], r["eval_train_loss"]) for r in recs if "eval_train_loss" in r], "#1f5fa8", 2.0),
        "validation (Hebrews-Revelation)": ([(r["step"], r["val_loss"]) for r in recs if "val_loss" in r], "#d0542c", 2.0),
    }
    pts = [p for s, _, _ in series.values() for p in s]
    xmax = max(x for x, _ in pts)
    ymin = math.floor(min(y for _, y in pts) * 2) / 2
    ymax = min(8.0, math.ceil(max(y for _, y in pts) * 2) / 2)

    def X(x):
        return ML + (W - ML - MR) * x / xmax

    def Y(y):
        y = min(max(y, ymin), ymax)
        return MT + (H - MT - MB) * (ymax - y) / (ymax - ymin)

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{escape(a.title)}</text>']
    step = 0.5 if ymax - ymin <= 4 else 1.0
    y = ymin
    while y <= ymax + 1e-9:
        o.append(f'<line x1="{ML}" x2="{W - MR}" y1="{Y(y):.1f}" y2="{Y(y):.1f}" stroke="#e4e4e4"/>')
        o.append(f'<text x="{ML - 8}" y="{Y(y) + 4:.1f}" text-anchor="end">{y:.1f}</text>')
        y += step
    xt = 10 ** math.floor(math.log10(xmax))
    if xmax / xt < 4:
        xt /= 2
    x = 0
    while x <= xmax + 1e-9:
        o.append(f'<line x1="{X(x):.1f}" x2="{X(x):.1f}" y1="{MT}" y2="{H - MB}" stroke="#eeeeee"/>')
        o.append(f'<text x="{X(x):.1f}" y="{H - MB + 18}" text-anchor="middle">{int(x)}</text>')
        x += xt
    o.append(f'<rect x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="none" stroke="#333"/>')
    o.append(f'<text x="{(ML + W - MR) / 2}" y="{H - 15}" text-anchor="middle">optimizer step '
             f'(4096 tokens each)</text>')
    o.append(f'<text x="18" y="{(MT + H - MB) / 2}" text-anchor="middle" '
             f'transform="rotate(-90 18 {(MT + H - MB) / 2})">cross-entropy (nats/token)</text>')
    for i, (label, (s, color, width)) in enumerate(series.items()):
        d = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s)
        o.append(f'<polyline fill="none" stroke="{color}" stroke-width="{width}" points="{d}"/>')
        ly = MT + 18 + 18 * i
        o.append(f'<line x1="{W - MR - 230}" x2="{W - MR - 205}" y1="{ly - 4}" y2="{ly - 4}" '
                 f'stroke="{color}" stroke-width="3"/>')
        o.append(f'<text x="{W - MR - 198}" y="{ly}">{escape(label)}</text>')
    last_val = series["validation (Hebrews-Revelation)"][0]
    if last_val:
        sx, sy = last_val[-1]
        o.append(f'<text x="{X(sx) - 4:.1f}" y="{Y(sy) - 8:.1f}" text-anchor="end" fill="#d0542c">'
                 f'val {sy:.3f} (ppl {math.exp(sy):.1f})</text>')
    o.append("</svg>")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(o) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
