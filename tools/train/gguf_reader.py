"""Minimal independent GGUF (v2/v3) reader, used to verify gguf_export.py and
by reference_greedy.py to load exactly the weights that were shipped.

Usage:
    /usr/bin/python3 tools/train/gguf_reader.py models/kjv-5m.gguf   # print a summary
    from gguf_reader import read_gguf; meta, tensors = read_gguf(path)

Returns metadata as {key: python value} and tensors as {name: numpy array}
in file order; an array with ggml dims ne = [ne0, ne1] is returned with
numpy shape (ne1, ne0) (ne0 is the contiguous dimension).  Only F32 (0)
and F16 (1) tensors are supported.
"""
import struct
import sys

import numpy as np


class _R:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.buf[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, t):
        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
                  10: "Q", 11: "q", 12: "d"}
        if t in scalar:
            return self.take(scalar[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError(f"bad GGUF value type {t}")


def read_gguf(path):
    with open(path, "rb") as f:
        buf = f.read()
    r = _R(buf)
    assert buf[:4] == b"GGUF", "not a GGUF file"
    r.pos = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    assert version in (2, 3), version
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("I"))
    align = meta.get("general.alignment", 32)
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        gtype, off = r.take("I"), r.take("Q")
        infos.append((name, ne, gtype, off))
    data_start = (r.pos + align - 1) // align * align
    tensors = {}
    for name, ne, gtype, off in infos:
        dt = {0: np.dtype("<f4"), 1: np.dtype("<f2")}[gtype]
        assert off % align == 0, name
        count = int(np.prod(ne))
        arr = np.frombuffer(buf, dtype=dt, count=count, offset=data_start + off)
        tensors[name] = arr.reshape(list(reversed(ne))).astype(dt.newbyteorder("="))
    return meta, tensors


if __name__ == "__main__":
    meta, tensors = read_gguf(sys.argv[1])
    for k, v in meta.items():
        if isinstance(v, list):
            print(f"{k}: [{len(v)} items] {v[:5]}...")
        else:
            print(f"{k}: {v!r}")
    for n, t in tensors.items():
        print(f"{n}: {t.dtype} {t.shape}")
