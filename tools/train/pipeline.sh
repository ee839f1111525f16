#!/bin/sh
# Rebuild treespec's default model end to end (Debian 12: apt-get install
# bible-kjv python3-torch python3-numpy).  Run from the repository root:
#     sh tools/train/pipeline.sh
# Training takes ~35-60 min on 2 CPU cores; it is resumable: if interrupted,
# run this script again (corpus and tokenizer steps are cheap and
# deterministic, train.py continues from tools/train/run/ckpt.pt).
set -eu
PY=/usr/bin/python3
$PY tools/train/prepare_corpus.py
$PY tools/train/train_tokenizer.py --vocab-size 2048
nice -n 10 $PY tools/train/train.py --out tools/train/run --steps 2800 >> tools/train/run.log 2>&1
$PY tools/train/gguf_export.py --ckpt tools/train/run/ckpt.pt \
    --tokenizer tools/train/data/tokenizer.json --out models/kjv-5m.gguf --verify
$PY tools/train/check_forward.py models/kjv-5m.gguf
$PY tools/train/reference_greedy.py --gguf models/kjv-5m.gguf
$PY tools/train/plot_loss.py --log tools/train/run/log.jsonl --out docs/kjv_loss.svg
