#!/usr/bin/python3
"""Export a trained checkpoint + tokenizer to a GGUF v3 file (llama arch).

Usage:
    /usr/bin/python3 tools/train/gguf_export.py --ckpt tools/train/run/best.pt \
        --tokenizer tools/train/data/tokenizer.json --out models/kjv-5m.gguf [--verify]

Layout (GGUF v3, little endian): header (magic "GGUF", version 3, tensor
count u64, kv count u64), metadata key/values, tensor infos, padding to
32 bytes, tensor data (each tensor 32-byte aligned).  Dimensions are in
ggml order (ne[0] innermost), so a PyTorch Linear weight [out, in] is
written with dims [in, out] and the embedding [vocab, dim] with dims
[dim, vocab]; the bytes are simply the row-major PyTorch tensor.  2-D
weights are F16 (ggml type 1), norm weights F32 (type 0).  Q/K are NOT
permuted: the model uses the adjacent-pair ("normal") RoPE natively.
With --verify the file is read back with gguf_reader.py (an independent
parser) and every tensor and key is compared.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ALIGN = 32
# GGUF metadata value types
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
# ggml tensor types
GGML_F32, GGML_F16 = 0, 1


def s_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def s_val(vtype, v):
    if vtype == T_STR:
        return s_str(v)
    fmt = {T_U8: "B", T_I8: "b", T_U16: "H", T_I16: "h", T_U32: "I", T_I32: "i", T_F32: "f",
           T_BOOL: "?", T_U64: "Q", T_I64: "q", T_F64: "d"}[vtype]
    return struct.pack("<" + fmt, v)


def s_kv(key, vtype, value, elem_type=None):
    out = s_str(key) + struct.pack("<I", vtype)
    if vtype == T_ARR:
        out += struct.pack("<IQ", elem_type, len(value))
        if elem_type in (T_F32, T_I32):
            out += np.asarray(value, dtype="<f4" if elem_type == T_F32 else "<i4").tobytes()
        else:
            out += b"".join(s_val(elem_type, v) for v in value)
    else:
        out += s_val(vtype, value)
    return out


def gguf_tensors(state, cfg):
    """(name, numpy array) in llama.cpp naming; arrays keep PyTorch layout."""
    t = {k: v.detach().float().cpu().numpy() for k, v in state.items()}
    out = [("token_embd.weight", t["tok_embeddings.weight"])]
    for i in range(cfg["n_layers"]):
        p = f"layers.{i}."
        for gname, tname in (("attn_norm", "attn_norm"), ("attn_q", "wq"), ("attn_k", "wk"),
                             ("attn_v", "wv"), ("attn_output", "wo"), ("ffn_norm", "ffn_norm"),
                             ("ffn_gate", "w1"), ("ffn_up", "w3"), ("ffn_down", "w2")):
            out.append((f"blk.{i}.{gname}.weight", t[p + tname + ".weight"]))
    out.append(("output_norm.weight", t["norm.weight"]))
    if not cfg["tie_embeddings"]:
        out.append(("output.weight", t["output.weight"]))
    return out


def metadata(cfg, tok, name):
    hd = cfg["dim"] // cfg["n_heads"]
    return [
        ("general.architecture", T_STR, "llama"),
        ("general.name", T_STR, name),
        ("general.license", T_STR, "MIT"),
        ("general.description", T_STR, "treespec demo model trained on the King James Bible "
                                         "(public domain, Debian package bible-kjv)"),
        ("general.file_type", T_U32, 1),  # mostly F16
        ("general.alignment", T_U32, ALIGN),
        ("llama.context_length", T_U32, cfg["max_seq_len"]),
        ("llama.embedding_length", T_U32, cfg["dim"]),
        ("llama.block_count", T_U32, cfg["n_layers"]),
        ("llama.feed_forward_length", T_U32, cfg["ffn_dim"]),
        ("llama.attention.head_count", T_U32, cfg["n_heads"]),
        ("llama.attention.head_count_kv", T_U32, cfg["n_kv_heads"]),
        ("llama.rope.freq_base", T_F32, float(cfg["rope_theta"])),
        ("llama.attention.layer_norm_rms_epsilon", T_F32, float(cfg["norm_eps"])),
        ("llama.rope.dimension_count", T_U32, hd),
        ("llama.vocab_size", T_U32, len(tok["tokens"])),
        ("tokenizer.ggml.model", T_STR, "llama"),
        ("tokenizer.ggml.tokens", T_ARR, tok["tokens"], T_STR),
        ("tokenizer.ggml.scores", T_ARR, tok["scores"], T_F32),
        ("tokenizer.ggml.token_type", T_ARR, tok["types"], T_I32),
        ("tokenizer.ggml.bos_token_id", T_U32, 1),
        ("tokenizer.ggml.eos_token_id", T_U32, 2),
        ("tokenizer.ggml.unknown_token_id", T_U32, 0),
        ("tokenizer.ggml.add_bos_token", T_BOOL, True),
        ("tokenizer.ggml.add_eos_token", T_BOOL, False),
    ]


def write_gguf(path, kvs, tensors):
    blobs, infos, offset = [], b"", 0
    for name, arr in tensors:
        if arr.ndim == 1:
            data, gtype = np.ascontiguousarray(arr, dtype="<f4").tobytes(), GGML_F32
        else:
            data, gtype = np.ascontiguousarray(arr.astype("<f2")).tobytes(), GGML_F16
        ne = list(reversed(arr.shape))  # ggml order: innermost first
        infos += s_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        infos += struct.pack("<IQ", gtype, offset)
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(s_kv(*kv) for kv in kvs) + infos
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", default=os.path.join(here, "run", "best.pt"))
    ap.add_argument("--tokenizer", default=os.path.join(here, "data", "tokenizer.json"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="treespec-kjv")
    ap.add_argument("--verify", action="store_true")
    a = ap.parse_args()

    ck = torch.load(a.ckpt, map_location="cpu")
    cfg = ck["config"]
    with open(a.tokenizer, encoding="utf-8") as f:
        tok = json.load(f)
    assert len(tok["tokens"]) == cfg["vocab_size"]
    tensors = gguf_tensors(ck["model"], cfg)
    kvs = metadata(cfg, tok, a.name)
    write_gguf(a.out, kvs, tensors)
    print(f"wrote {a.out}: {os.path.getsize(a.out):,} bytes, {len(tensors)} tensors, "
          f"step {ck['step']}")

    if a.verify:
        from gguf_reader import read_gguf
        meta, rt = read_gguf(a.out)
        for kv in kvs:
            key, vtype, value = kv[0], kv[1], kv[2]
            got = meta[key]
            if vtype == T_F32:
                assert got == np.float32(value), key
            elif vtype == T_ARR and kv[3] == T_F32:
                assert np.array_equal(np.asarray(got, np.float32), np.asarray(value, np.float32)), key
            else:
                assert list(got) == list(value) if vtype == T_ARR else got == value, key
        assert [n for n, _ in tensors] == list(rt), "tensor names/order differ"
        for name, arr in tensors:
            want = arr.astype(np.float32) if arr.ndim == 1 else arr.astype(np.float16)
            assert rt[name].dtype == want.dtype and rt[name].shape == want.shape, name
            assert np.array_equal(rt[name], want), name
        print(f"verified: {len(kvs)} keys and {len(tensors)} tensors read back identically")


if __name__ == "__main__":
    main()
