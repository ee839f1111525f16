#!/usr/bin/python3
"""Cross-check model.py against a literal, token-by-token NumPy forward pass.

Usage:
    /usr/bin/python3 tools/train/check_forward.py models/kjv-5m.gguf

The NumPy code below is written the way a C++ engine computes it: one token
at a time with a KV cache, loops over heads, RoPE on adjacent pairs, GQA
with kv head = query head // (n_heads / n_kv_heads).  It reads the GGUF
with gguf_reader.py and compares its logits for a short prompt with the
batched PyTorch model (reference_greedy.load_model).  Prints max |diff|.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import read_gguf  # noqa: E402
from reference_greedy import load_model  # noqa: E402


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def forward_tokens(path, tokens):
    m, t = read_gguf(path)
    W = {k: v.astype(np.float64) for k, v in t.items()}
    dim = m["llama.embedding_length"]
    nh, nkv = m["llama.attention.head_count"], m["llama.attention.head_count_kv"]
    hd, eps = dim // nh, m["llama.attention.layer_norm_rms_epsilon"]
    theta, L = m["llama.rope.freq_base"], m["llama.block_count"]
    out_w = W.get("output.weight", W["token_embd.weight"])
    kcache = [[] for _ in range(L)]
    vcache = [[] for _ in range(L)]
    all_logits = []

    def rope(v, pos):  # v: [n, hd]
        v = v.copy()
        for i in range(hd // 2):
            ang = pos * theta ** (-2.0 * i / hd)
            c, s = np.cos(ang), np.sin(ang)
            a, b = v[:, 2 * i].copy(), v[:, 2 * i + 1].copy()
            v[:, 2 * i], v[:, 2 * i + 1] = a * c - b * s, a * s + b * c
        return v

    for pos, tok in enumerate(tokens):
        x = W["token_embd.weight"][tok].copy()
        for l in range(L):
            p = f"blk.{l}."
            h = rmsnorm(x, W[p + "attn_norm.weight"], eps)
            q = rope((W[p + "attn_q.weight"] @ h).reshape(nh, hd), pos)
            k = rope((W[p + "attn_k.weight"] @ h).reshape(nkv, hd), pos)
            v = (W[p + "attn_v.weight"] @ h).reshape(nkv, hd)
            kcache[l].append(k)
            vcache[l].append(v)
            att_out = np.zeros((nh, hd))
            for hh in range(nh):
                kv = hh // (nh // nkv)
                sc = np.array([q[hh] @ kk[kv] for kk in kcache[l]]) / np.sqrt(hd)
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                att_out[hh] = sum(pw * vv[kv] for pw, vv in zip(pr, vcache[l]))
            x = x + W[p + "attn_output.weight"] @ att_out.reshape(-1)
            h = rmsnorm(x, W[p + "ffn_norm.weight"], eps)
            g = W[p + "ffn_gate.weight"] @ h
            x = x + W[p + "ffn_down.weight"] @ (g / (1 + np.exp(-g)) * (W[p + "ffn_up.weight"] @ h))
        all_logits.append(out_w @ rmsnorm(x, W["output_norm.weight"], eps))
    return np.array(all_logits)


def main():
    path = sys.argv[1]
    model, tok, _ = load_model(path)
    ids = tok.encode("And it came to pass, when the LORD", bos=True)
    ref = forward_tokens(path, ids)
    with torch.no_grad():
        got = model(torch.tensor([ids]))[0].double().numpy()
    diff = np.abs(ref - got).max()
    print(f"{len(ids)} tokens, max |logit diff| numpy(f64, token-by-token) vs torch(fp32): {diff:.2e}")
    assert diff < 1e-3, diff


if __name__ == "__main__":
    main()
