"""SentencePiece-style tokenizer (encode/decode) for treespec's KJV model.

The vocabulary layout follows llama / SentencePiece:
    id 0          <unk>          type 2 (unknown)   score 0
    id 1          <s>   (BOS)    type 3 (control)   score 0
    id 2          </s>  (EOS)    type 3 (control)   score 0
    ids 3..258    <0x00>..<0xFF> type 6 (byte)      score 0
    ids 259..     normal pieces  type 1 (normal)    score <= 0
Spaces are written as U+2581 ('▁') and every text gets a leading dummy
space, as SentencePiece does: "In the" -> "▁In▁the".

Encoding is llama.cpp's SPM algorithm (`encode_spm`):
  1. split the escaped text into UTF-8 characters (one symbol each);
  2. repeatedly merge the adjacent pair of symbols whose concatenation is a
     vocabulary piece with the HIGHEST score (ties: the leftmost pair);
  3. emit the id of every final symbol; a symbol that is not in the
     vocabulary (only possible for single characters) is emitted as its
     UTF-8 bytes, one <0xXX> byte token per byte.

`Tokenizer.encode` is a fast, equivalent version: no vocabulary piece has a
'▁' anywhere but at its start, so no merge can ever cross the start of a
word ('▁' + following non-'▁' chars); the text is split into such words,
each word is encoded with the same algorithm, and the results are cached.
`Tokenizer.check_word_split_invariant` asserts the vocabulary property and
train_tokenizer.py verifies encode == encode_spm on sample lines.

Usage as a module:
    from spm_tokenizer import Tokenizer
    tok = Tokenizer.load("tools/train/data/tokenizer.json")
    ids = tok.encode("In the beginning", bos=True)
    text = tok.decode(ids)
"""
import heapq
import json
import re

SPACE = "\u2581"
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_BASE = 3  # id of <0x00>
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6

_WORD_RE = re.compile(SPACE + "[^" + SPACE + "]*|[^" + SPACE + "]+")


def escape(text):
    """SentencePiece normalisation used here: dummy prefix, spaces -> '▁'."""
    return SPACE + text.replace(" ", SPACE)


class Tokenizer:
    def __init__(self, tokens, scores, types):
        assert len(tokens) == len(scores) == len(types)
        self.tokens = list(tokens)
        self.scores = [float(s) for s in scores]
        self.types = [int(t) for t in types]
        # Like llama.cpp, look pieces up by text (byte tokens are "<0xAB>").
        self.piece_to_id = {}
        for i, t in enumerate(self.tokens):
            self.piece_to_id.setdefault(t, i)
        self._cache = {}

    # ----------------------------------------------------------------- io
    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return cls(d["tokens"], d["scores"], d["types"])

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"tokens": self.tokens, "scores": self.scores,
                       "types": self.types}, f, ensure_ascii=False, indent=0)

    def __len__(self):
        return len(self.tokens)

    # ----------------------------------------------------- SPM algorithm
    def encode_spm(self, s):
        """llama.cpp SPM encoding of an already escaped string `s`."""
        chars = list(s)  # one symbol per Unicode code point = UTF-8 char
        n = len(chars)
        if n == 0:
            return []
        text = chars[:]                 # current text of symbol i
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        alive = [True] * n
        heap = []
        p2i, scores = self.piece_to_id, self.scores

        def add(left, right):
            if left < 0 or right < 0:
                return
            t = text[left] + text[right]
            tid = p2i.get(t)
            if tid is None:
                return
            # heap order: highest score first, then leftmost position
            heapq.heappush(heap, (-scores[tid], left, right, len(t)))

        for i in range(n - 1):
            add(i, i + 1)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            # skip stale entries (a side was merged away or grew)
            if not (alive[left] and alive[right]) or nxt[left] != right \
                    or len(text[left]) + len(text[right]) != size:
                continue
            text[left] += text[right]
            alive[right] = False
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            add(prev[left], left)
            add(left, nxt[left])

        out = []
        i = 0
        while i >= 0:
            tid = p2i.get(text[i])
            if tid is not None:
                out.append(tid)
            else:  # byte fallback
                out.extend(BYTE_BASE + b for b in text[i].encode("utf-8"))
            i = nxt[i]
        return out

    # ------------------------------------------------------ fast encoder
    def check_word_split_invariant(self):
        for t, ty in zip(self.tokens, self.types):
            if ty == TYPE_NORMAL:
                assert SPACE not in t[1:], f"piece {t!r} has an inner '▁'"

    def encode_escaped(self, s):
        out = []
        cache = self._cache
        for w in _WORD_RE.findall(s):
            ids = cache.get(w)
            if ids is None:
                ids = cache[w] = self.encode_spm(w)
            out.extend(ids)
        return out

    def encode(self, text, bos=False, eos=False):
        ids = self.encode_escaped(escape(text)) if text else []
        return ([BOS_ID] if bos else []) + ids + ([EOS_ID] if eos else [])

    # ------------------------------------------------------------ decode
    def decode(self, ids, strip_dummy_prefix=True):
        buf = bytearray()
        for i in ids:
            ty = self.types[i]
            if ty == TYPE_BYTE:
                buf.append(i - BYTE_BASE)
            elif ty == TYPE_NORMAL:
                buf.extend(self.tokens[i].replace(SPACE, " ").encode("utf-8"))
            elif ty == TYPE_UNKNOWN:
                buf.extend(" \u2047 ".encode("utf-8"))
            # control tokens (<s>, </s>) decode to nothing
        text = buf.decode("utf-8", errors="replace")
        if strip_dummy_prefix and text.startswith(" "):
            text = text[1:]
        return text
