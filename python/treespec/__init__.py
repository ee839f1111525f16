"""treespec: speculative decoding of GGUF models on CPUs, from Python.

A ctypes binding of the C API (include/treespec.h, libtreespec.so):

    import treespec
    m = treespec.Model("models/kjv-5m.gguf")
    print(m.generate("And it came to pass", max_tokens=64, temperature=0))
    for piece in m.generate("In the beginning", stream=True, spec="ptd"):
        print(piece, end="", flush=True)
    print(m.last_stats["mean_accepted_length"])

Where libtreespec.so is looked for, first hit wins:
  1. $TREESPEC_LIBRARY (a path to the library file; nothing else is tried when set);
  2. the package directory (libtreespec.so.0 or libtreespec.so beside this file);
  3. PREFIX/lib when the package was installed by `make install-python PREFIX=...`;
  4. the dynamic loader's search path for libtreespec.so.0 (LD_LIBRARY_PATH,
     ldconfig's cache: e.g. after `make install PREFIX=/usr/local` and `ldconfig`).
"""

import ctypes
import os
import queue
import threading

__all__ = ["Model", "Error", "library_path", "API_VERSION"]

API_VERSION = 1  # TREESPEC_API_VERSION this binding is written for

_STATUS_NAMES = {
    0: "ok", 1: "invalid_argument", 2: "io", 3: "format", 4: "unsupported",
    5: "out_of_memory", 6: "buffer_too_small", 7: "internal",
}
_FINISH_NAMES = {0: "none", 1: "eog", 2: "length", 3: "context", 4: "cancelled"}
_BUFFER_TOO_SMALL = 6


class Error(Exception):
    """A failed treespec call: `status` is the C API's status name, str(e) its message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class _ModelParams(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int32), ("n_ctx", ctypes.c_int32), ("n_batch", ctypes.c_int32)]


class _GenParams(ctypes.Structure):
    _fields_ = [
        ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float), ("seed", ctypes.c_int64), ("max_tokens", ctypes.c_int32),
        ("ignore_eos", ctypes.c_int), ("spec", ctypes.c_char_p), ("verify", ctypes.c_char_p),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "n_prompt_tokens", "n_generated", "n_steps", "n_drafts", "n_draft_tokens", "n_accepted")] + \
        [(n, ctypes.c_double) for n in (
            "mean_accepted_length", "mean_acceptance_length", "acceptance_rate", "rows_per_step",
            "tokens_per_s", "prompt_s", "decode_s")] + [("finish_reason", ctypes.c_int), ("seed", ctypes.c_uint64)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_char),
                             ctypes.c_size_t)

_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("TREESPEC_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "libtreespec.so.0"), os.path.join(here, "libtreespec.so")]
    try:
        from . import _install  # written by `make install-python`
        out.append(os.path.join(_install.LIBDIR, "libtreespec.so.0"))
    except ImportError:
        pass
    out.append("libtreespec.so.0")
    return out


def _declare(lib):
    P, c = ctypes.POINTER, ctypes
    sigs = {
        "treespec_api_version": (c.c_int, []),
        "treespec_last_error": (c.c_char_p, []),
        "treespec_status_name": (c.c_char_p, [c.c_int]),
        "treespec_model_default_params": (_ModelParams, []),
        "treespec_model_load": (c.c_int, [c.c_char_p, P(_ModelParams), P(c.c_void_p)]),
        "treespec_model_load_with_cache_types": (c.c_int, [c.c_char_p, P(_ModelParams), c.c_char_p, c.c_char_p,
                                                           P(c.c_void_p)]),
        "treespec_model_cache_type_k": (c.c_char_p, [c.c_void_p]),
        "treespec_model_cache_type_v": (c.c_char_p, [c.c_void_p]),
        "treespec_model_free": (None, [c.c_void_p]),
        "treespec_model_n_vocab": (c.c_int32, [c.c_void_p]),
        "treespec_model_n_ctx": (c.c_int32, [c.c_void_p]),
        "treespec_tokenize": (c.c_int, [c.c_void_p, c.c_char_p, c.c_size_t, c.c_int, c.c_int, P(c.c_int32),
                                        c.c_size_t, P(c.c_size_t)]),
        "treespec_detokenize": (c.c_int, [c.c_void_p, P(c.c_int32), c.c_size_t, c.c_char_p, c.c_size_t,
                                          P(c.c_size_t)]),
        "treespec_generation_default_params": (_GenParams, []),
        "treespec_generation_create": (c.c_int, [c.c_void_p, P(_GenParams), P(c.c_void_p)]),
        "treespec_generation_free": (None, [c.c_void_p]),
        "treespec_generate": (c.c_int, [c.c_void_p, c.c_char_p, c.c_size_t, _CALLBACK, c.c_void_p]),
        "treespec_generation_text": (P(c.c_char), [c.c_void_p, P(c.c_size_t)]),
        "treespec_generation_stats": (c.c_int, [c.c_void_p, P(_Stats)]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args


def _library():
    global _lib, _lib_path
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path} (absent)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            _declare(lib)
            got = lib.treespec_api_version()
            if got != API_VERSION:
                raise Error("unsupported", f"{path} implements treespec C API version {got}, this module needs {API_VERSION}")
            _lib, _lib_path = lib, path
            return lib
        raise Error("io", "cannot load libtreespec: tried " + "; ".join(tried) +
                    " (set TREESPEC_LIBRARY to the library's path)")


def library_path():
    """The libtreespec actually loaded (loading it if needed)."""
    _library()
    return _lib_path


def _check(lib, status):
    if status != 0:
        raise Error(_STATUS_NAMES.get(status, str(status)), lib.treespec_last_error().decode("utf-8", "replace"))


def _spec_string(spec, heads):
    spec = spec or "none"
    if heads is None:
        return spec
    name = spec.split(":", 1)[0].strip()
    if name == "none":  # like `treespec run --heads FILE` without --spec
        spec = "medusa"
    elif name not in ("medusa", "propd", "auto"):
        raise Error("invalid_argument", f"heads= applies to spec 'medusa', 'propd' or 'auto', not '{name}'")
    return f"{spec}:heads={os.fspath(heads)}"  # --medusa-heads / --propd-heads / --auto-heads


class Model:
    """A loaded GGUF model (weights and tokenizer). n_threads / n_ctx: None = all cores /
    the model's context (at most 4096), as `treespec run`; cache_type_k / cache_type_v: the
    KV cache's element types as run's -ctk / -ctv ("f16" default, "q8_0", "bf16", "f32")."""

    def __init__(self, path, n_threads=None, n_ctx=None, cache_type_k=None, cache_type_v=None):
        self._lib = _library()
        p = self._lib.treespec_model_default_params()
        if n_threads is not None:
            p.n_threads = int(n_threads)
        if n_ctx is not None:
            p.n_ctx = int(n_ctx)
        h = ctypes.c_void_p()
        k = cache_type_k.encode() if cache_type_k is not None else None
        v = cache_type_v.encode() if cache_type_v is not None else None
        _check(self._lib, self._lib.treespec_model_load_with_cache_types(os.fsencode(path), ctypes.byref(p), k, v,
                                                                           ctypes.byref(h)))
        self._h = h
        self.path = os.fspath(path)
        self.last_stats = None

    def close(self):
        """Frees the model now (also done when it is garbage-collected)."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.treespec_model_free(h)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise Error("invalid_argument", "the model is closed")
        return self._h

    @property
    def n_vocab(self):
        return self._lib.treespec_model_n_vocab(self._handle())

    @property
    def n_ctx(self):
        return self._lib.treespec_model_n_ctx(self._handle())

    @property
    def cache_types(self):
        """The KV cache's (K, V) element types, e.g. ("f16", "f16")."""
        h = self._handle()
        return (self._lib.treespec_model_cache_type_k(h).decode(), self._lib.treespec_model_cache_type_v(h).decode())

    def tokenize(self, text, add_bos=True, parse_special=True):
        """Token ids of `text` (str or bytes), encoded as `treespec run` encodes a prompt."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        n = ctypes.c_size_t()
        st = self._lib.treespec_tokenize(self._handle(), data, len(data), int(add_bos), int(parse_special), None, 0,
                                         ctypes.byref(n))
        if st != _BUFFER_TOO_SMALL:
            _check(self._lib, st)
        buf = (ctypes.c_int32 * max(n.value, 1))()
        _check(self._lib, self._lib.treespec_tokenize(self._handle(), data, len(data), int(add_bos),
                                                      int(parse_special), buf, n.value, ctypes.byref(n)))
        return list(buf[:n.value])

    def detokenize(self, ids):
        """The text of a list of token ids."""
        ids = list(ids)
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        n = ctypes.c_size_t()
        st = self._lib.treespec_detokenize(self._handle(), arr, len(ids), None, 0, ctypes.byref(n))
        if st != _BUFFER_TOO_SMALL:
            _check(self._lib, st)
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(self._lib, self._lib.treespec_detokenize(self._handle(), arr, len(ids), buf, n.value + 1,
                                                        ctypes.byref(n)))
        return buf.raw[:n.value].decode("utf-8", "replace")

    def generate(self, prompt, max_tokens=128, temperature=0.8, top_k=40, top_p=0.95, seed=None, spec="none",
                 heads=None, stream=False, min_p=0.05, ignore_eos=False):
        """The continuation of `prompt` (str). spec: a `treespec run --spec` method string
        ("none", "auto", "lookup", "ptd", "medusa:heads=FILE", "eagle:layer=FILE", ...); heads: a
        heads file for medusa, propd or auto (selects medusa when spec is "none"). temperature 0 is
        greedy. With stream=True, returns an iterator of text pieces (closing it early cancels
        the generation). Either way self.last_stats holds the statistics afterwards."""
        p = self._lib.treespec_generation_default_params()
        p.temperature, p.top_k, p.top_p, p.min_p = float(temperature), int(top_k), float(top_p), float(min_p)
        p.seed = -1 if seed is None else int(seed)
        p.max_tokens = -1 if max_tokens is None else int(max_tokens)
        p.ignore_eos = int(bool(ignore_eos))
        spec_bytes = _spec_string(spec, heads).encode("utf-8")
        p.spec = spec_bytes
        data = prompt.encode("utf-8") if isinstance(prompt, str) else bytes(prompt)
        gen = ctypes.c_void_p()
        _check(self._lib, self._lib.treespec_generation_create(self._handle(), ctypes.byref(p), ctypes.byref(gen)))
        if stream:
            return self._stream(gen, data)
        try:
            self._run(gen, data, _CALLBACK())  # NULL: no callback
            n = ctypes.c_size_t()
            ptr = self._lib.treespec_generation_text(gen, ctypes.byref(n))
            return ctypes.string_at(ptr, n.value).decode("utf-8", "replace")
        finally:
            self._lib.treespec_generation_free(gen)

    def _run(self, gen, data, callback):
        _check(self._lib, self._lib.treespec_generate(gen, data, len(data), callback, None))
        s = _Stats()
        _check(self._lib, self._lib.treespec_generation_stats(gen, ctypes.byref(s)))
        stats = {name: getattr(s, name) for name, _ in _Stats._fields_}
        stats["finish_reason"] = _FINISH_NAMES.get(s.finish_reason, str(s.finish_reason))
        self.last_stats = stats

    def _stream(self, gen, data):
        return _Stream(self, gen, data)


class _Stream:
    """The iterator generate(stream=True) returns. The C API streams through a callback,
    so a worker thread runs the generation and hands each piece over; close() (or
    dropping the iterator) makes the callback return 1, which cancels the generation."""

    _DONE = object()

    def __init__(self, model, gen, data):
        self._model, self._gen, self._data = model, gen, data
        self._pieces = queue.Queue(maxsize=64)
        self._stop = threading.Event()
        self._callback = _CALLBACK(self._on_token)
        self._thread = None
        self._finished = False

    def _on_token(self, _ud, _tok, piece, n):
        if n:
            text = ctypes.string_at(piece, n).decode("utf-8", "replace")
            while not self._stop.is_set():
                try:
                    self._pieces.put(text, timeout=0.1)
                    break
                except queue.Full:
                    continue
        return 1 if self._stop.is_set() else 0

    def _work(self):
        try:
            self._model._run(self._gen, self._data, self._callback)
            self._pieces.put(self._DONE)
        except BaseException as e:  # raised in the consumer
            self._pieces.put(e)

    def __iter__(self):
        return self

    def __next__(self):
        if self._finished:
            raise StopIteration
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, daemon=True)
            self._thread.start()
        item = self._pieces.get()
        if item is self._DONE or isinstance(item, BaseException):
            self.close()
            if item is self._DONE:
                raise StopIteration
            raise item
        return item

    def close(self):
        """Stops the generation (if still running) and frees it."""
        self._finished = True
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._pieces.get(timeout=0.1)
                except queue.Empty:
                    pass
            self._thread.join()
        if self._gen:
            self._model._lib.treespec_generation_free(self._gen)
            self._gen = None

    def __del__(self):
        self.close()
