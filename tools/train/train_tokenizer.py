#!/usr/bin/python3
"""Train treespec's SentencePiece-style BPE tokenizer and tokenize the corpus.

Usage:
    /usr/bin/python3 tools/train/train_tokenizer.py [--vocab-size 2048]
        [--data-dir tools/train/data]

Reads  <data-dir>/kjv_train.txt and kjv_val.txt (from prepare_corpus.py).
Writes <data-dir>/tokenizer.json           tokens, scores, token types
       <data-dir>/train.bin, val.bin       uint16 token streams
       <data-dir>/tokenizer_stats.json     bytes/token etc.

Algorithm (no sentencepiece library):
  * Every chapter line is escaped SentencePiece style ("▁" + text with
    spaces -> "▁") and cut into words that start at a '▁'.  Word counts
    are taken over the TRAIN split only.
  * Base pieces: every character that occurs in the train split.
  * Classic BPE: repeatedly merge the most frequent adjacent symbol pair
    (ties: the lexicographically largest pair, deterministic) until the
    vocabulary is full.  Merges never cross a word start, so no piece has
    a '▁' except at position 0.
  * Scores: the k-th new piece (k = 0, 1, ...) gets score -k, so earlier
    merges score higher; base characters get -(n_merges + rank) with rank
    by descending frequency, i.e. below every merged piece. <unk>, <s>,
    </s> and the 256 byte tokens score 0 (never merge candidates).
  * Id layout: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the
    base characters (by frequency), then merged pieces in merge order.

Token streams: for every chapter: <s> + encode(chapter) + </s>, chapters
concatenated in Bible order.  Encoding is the llama.cpp SPM algorithm
(see spm_tokenizer.py); the fast per-word encoder is checked against the
plain whole-line SPM algorithm on a sample of lines.
"""
import argparse
import collections
import json
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spm_tokenizer import (SPACE, BOS_ID, EOS_ID, TYPE_BYTE, TYPE_CONTROL,  # noqa: E402
                           TYPE_NORMAL, TYPE_UNKNOWN, Tokenizer, escape, _WORD_RE)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f if l.strip()]


def train_bpe(lines, vocab_size):
    word_counts = collections.Counter()
    for line in lines:
        word_counts.update(_WORD_RE.findall(escape(line)))
    char_counts = collections.Counter()
    for w, c in word_counts.items():
        for ch in w:
            char_counts[ch] += c
    chars = sorted(char_counts, key=lambda ch: (-char_counts[ch], ch))
    n_fixed = 3 + 256
    n_merges = vocab_size - n_fixed - len(chars)
    assert n_merges > 0, "vocab too small for the character set"

    words = [list(w) for w in sorted(word_counts)]
    counts = [word_counts[w] for w in sorted(word_counts)]
    pair_counts = collections.defaultdict(int)
    where = collections.defaultdict(set)
    for wi, (syms, c) in enumerate(zip(words, counts)):
        for a, b in zip(syms, syms[1:]):
            pair_counts[(a, b)] += c
            where[(a, b)].add(wi)

    vocab = set(chars)
    merged = []  # new pieces in creation order
    while len(merged) < n_merges and pair_counts:
        (a, b), cnt = max(pair_counts.items(), key=lambda kv: (kv[1], kv[0]))
        if cnt < 2:
            break
        piece = a + b
        if piece not in vocab:
            vocab.add(piece)
            merged.append(piece)
        for wi in list(where[(a, b)]):
            syms, c = words[wi], counts[wi]
            for p in zip(syms, syms[1:]):
                pair_counts[p] -= c
                if pair_counts[p] <= 0:
                    del pair_counts[p]
                where[p].discard(wi)
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(piece)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[wi] = out
            for p in zip(out, out[1:]):
                pair_counts[p] += c
                where[p].add(wi)
        where.pop((a, b), None)
    return chars, merged


def build_vocab(chars, merged):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    scores = [0.0] * len(tokens)
    types = [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL] + [TYPE_BYTE] * 256
    n_merged = len(merged)
    for rank, ch in enumerate(chars):
        tokens.append(ch)
        scores.append(float(-(n_merged + rank)))
        types.append(TYPE_NORMAL)
    for k, piece in enumerate(merged):
        tokens.append(piece)
        scores.append(float(-k))
        types.append(TYPE_NORMAL)
    return Tokenizer(tokens, scores, types)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    ap.add_argument("--check-lines", type=int, default=200,
                    help="lines on which fast encoder == plain SPM is verified")
    args = ap.parse_args()

    train_lines = read_lines(os.path.join(args.data_dir, "kjv_train.txt"))
    val_lines = read_lines(os.path.join(args.data_dir, "kjv_val.txt"))

    t0 = time.time()
    chars, merged = train_bpe(train_lines, args.vocab_size)
    tok = build_vocab(chars, merged)
    tok.check_word_split_invariant()
    print(f"BPE: {len(chars)} chars, {len(merged)} merges, vocab {len(tok)} "
          f"in {time.time() - t0:.1f}s")
    assert len(tok) == args.vocab_size, len(tok)
    tok.save(os.path.join(args.data_dir, "tokenizer.json"))

    # verify the fast encoder against the plain SPM algorithm
    rng = random.Random(1234)
    n_val = min(len(val_lines), args.check_lines // 2)
    sample = rng.sample(train_lines, args.check_lines - n_val) + rng.sample(val_lines, n_val)
    # also sentence fragments, odd spacing and non-corpus characters
    sample += ["In the beginning", "And the LORD said unto Moses,", "Blessed are the",
               "  double  spaces ", "caf\u00e9 \u00fcber \u6f22\u5b57 \U0001F600!", "tab\tand\nnewline", ""]
    t0 = time.time()
    for line in sample:
        fast = tok.encode_escaped(escape(line))
        plain = tok.encode_spm(escape(line))
        assert fast == plain, f"encoder mismatch on {line[:60]!r}"
        assert tok.decode(fast) == line, f"round trip failed on {line[:60]!r}"
    print(f"fast encoder == plain SPM on {len(sample)} lines ({time.time() - t0:.1f}s)")

    stats = {"vocab_size": len(tok), "n_chars": len(chars), "n_merges": len(merged)}
    for split, lines in (("train", train_lines), ("val", val_lines)):
        ids = []
        for line in lines:
            ids.extend(tok.encode(line, bos=True, eos=True))
        arr = np.array(ids, dtype=np.uint16)
        arr.tofile(os.path.join(args.data_dir, f"{split}.bin"))
        nbytes = sum(len(l.encode("utf-8")) for l in lines)
        ntext = len(ids) - 2 * len(lines)
        stats[split] = {"chapters": len(lines), "tokens": len(ids), "text_tokens": ntext,
                        "bytes": nbytes, "bytes_per_token": nbytes / ntext}
        print(f"{split}: {len(ids)} tokens ({ntext} text), {nbytes} bytes, "
              f"{nbytes / ntext:.3f} bytes/token")
    with open(os.path.join(args.data_dir, "tokenizer_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print("example:", [tok.tokens[i] for i in tok.encode("And it came to pass, when the LORD")])


if __name__ == "__main__":
    main()
