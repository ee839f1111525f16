#!/usr/bin/python3
"""Prepare the King James Bible corpus for treespec's default model.

Usage:
    /usr/bin/python3 tools/train/prepare_corpus.py [--out-dir tools/train/data]

Source: the Debian package `bible-kjv` (public domain text), read with
    bible gen1:1-rev22:21
(or from --raw FILE holding that command's output).

Cleaning:
  * chapter headers ("Genesis 1", "1 Kings 3", "Song of Solomon 2") are dropped;
  * verse numbers are dropped, wrapped lines are joined, whitespace is
    collapsed to single spaces;
  * each chapter becomes ONE line: its verses joined with a single space.

Split (by book, so no chapter is shared between the splits):
  * train: Genesis .. Philemon
  * val:   Hebrews .. Revelation (the last 9 books: Hebrews, James, 1-2 Peter,
    1-3 John, Jude, Revelation), about 4% of the text.

Outputs (one chapter per line, UTF-8, '\n' line ends):
  <out-dir>/kjv_train.txt, <out-dir>/kjv_val.txt
"""
import argparse
import os
import re
import subprocess
import sys

VAL_FIRST_BOOK = "Hebrews"
HEADER_RE = re.compile(r"^((?:[1-3] )?[A-Z][A-Za-z ]*?) (\d+)$")
VERSE_RE = re.compile(r"^\s+(\d+) (.*)$")


def read_raw(path=None):
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read()
    return subprocess.run(["bible", "gen1:1-rev22:21"], check=True,
                          capture_output=True, text=True).stdout


def parse(raw):
    """Return a list of (book, chapter_number, [verse texts])."""
    chapters = []
    lines = raw.split("\n")
    prev_blank = True
    for i, line in enumerate(lines):
        if not line.strip():
            prev_blank = True
            continue
        m = HEADER_RE.match(line)
        if prev_blank and m and (i + 1 >= len(lines) or not lines[i + 1].strip()):
            chapters.append((m.group(1), int(m.group(2)), []))
        else:
            v = VERSE_RE.match(line)
            if v:
                verses = chapters[-1][2]
                if int(v.group(1)) != len(verses) + 1:
                    sys.exit(f"verse numbering broken at line {i + 1}: {line!r}")
                verses.append(v.group(2))
            else:  # continuation of a wrapped verse
                chapters[-1][2][-1] += " " + line
        prev_blank = False
    return chapters


def clean(text):
    return re.sub(r"\s+", " ", text).strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", help="file with the output of `bible gen1:1-rev22:21`")
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    args = ap.parse_args()

    chapters = parse(read_raw(args.raw))
    books = []
    for book, _, _ in chapters:
        if not books or books[-1] != book:
            books.append(book)
    assert len(books) == 66 and len(chapters) == 1189, (len(books), len(chapters))
    nverses = sum(len(v) for _, _, v in chapters)
    assert nverses == 31102, nverses

    val_start = books.index(VAL_FIRST_BOOK)
    os.makedirs(args.out_dir, exist_ok=True)
    out = {"train": [], "val": []}
    for book, _, verses in chapters:
        split = "val" if books.index(book) >= val_start else "train"
        out[split].append(" ".join(clean(v) for v in verses))
    for split, paras in out.items():
        path = os.path.join(args.out_dir, f"kjv_{split}.txt")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for p in paras:
                f.write(p + "\n")
        nbytes = sum(len(p.encode()) for p in paras)
        print(f"{split}: {len(paras)} chapters, {nbytes} bytes -> {path}")


if __name__ == "__main__":
    main()
