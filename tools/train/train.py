#!/usr/bin/python3
"""Train treespec's default KJV Llama model on CPU (resumable).

Usage (the shipped model; ~2 h on 2 cores):
    nohup nice -n 10 /usr/bin/python3 tools/train/train.py --out tools/train/run \
        --steps 2800 >> tools/train/run.log 2>&1 &
Resume after an interruption: run the same command again (it continues from
<out>/ckpt.pt).  Writes <out>/ckpt.pt (latest, every --ckpt-every steps),
<out>/best.pt (lowest validation loss), <out>/log.jsonl (losses) and
<out>/config.json.

Data: <data-dir>/train.bin and val.bin (uint16 token streams made by
train_tokenizer.py: <s> chapter </s> <s> chapter </s> ...).  Each batch row
is a random window of seq_len+1 tokens; a quarter of the rows start at a
chapter's <s> so that position 0 = <s> (as at inference) is well trained.
Batch windows are drawn from a generator seeded with (seed, step), so a
resumed run draws the same batches as an uninterrupted one.

Schedule: AdamW, linear warmup, constant lr, then linear decay to
--min-lr over the last --decay-frac of the steps ("warmup-stable-decay").
bf16 autocast on CPU (measured ~4x faster than fp32 on this machine);
master weights, optimizer and loss stay fp32.
"""
import argparse
import json
import math
import os
import sys
import time

# Sleep instead of spin in OpenMP barriers: on a shared 2-core machine the
# default spinning made training 10x slower whenever another process ran.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Llama, ModelConfig  # noqa: E402

BOS_ID = 1


def get_args():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=os.path.join(here, "data"))
    ap.add_argument("--out", default=os.path.join(here, "run"))
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=2)
    # model
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--n-layers", type=int, default=6)
    ap.add_argument("--n-heads", type=int, default=8)
    ap.add_argument("--n-kv-heads", type=int, default=4)
    ap.add_argument("--ffn-dim", type=int, default=688)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--untied", action="store_true", help="separate output matrix")
    ap.add_argument("--dropout", type=float, default=0.1, help="residual-branch dropout")
    # optimisation
    ap.add_argument("--steps", type=int, default=2800)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--decay-frac", type=float, default=0.25)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--bf16", type=int, default=1)
    # bookkeeping
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--log-every", type=int, default=25)
    return ap.parse_args()


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    decay_start = int(a.steps * (1 - a.decay_frac))
    if step < decay_start:
        return a.lr
    frac = (step - decay_start) / max(1, a.steps - decay_start)
    return a.lr + (a.min_lr - a.lr) * frac


class DropoutLlama(Llama):
    """Llama + dropout on the embedding and residual branches (training only;
    identical to Llama in eval mode and when exported)."""

    def __init__(self, cfg, p):
        super().__init__(cfg)
        self.p = p

    def forward(self, tokens):
        if not self.training or self.p == 0:
            return super().forward(tokens)
        x = F.dropout(self.tok_embeddings(tokens), self.p, True)
        for L in self.layers:
            B, T, _ = x.shape
            h = L.attn_norm(x)
            q = L.wq(h).view(B, T, L.n_heads, L.hd).transpose(1, 2)
            k = L.wk(h).view(B, T, L.n_kv, L.hd).transpose(1, 2)
            v = L.wv(h).view(B, T, L.n_kv, L.hd).transpose(1, 2)
            from model import apply_rope
            q, k = apply_rope(q, self.cos, self.sin), apply_rope(k, self.cos, self.sin)
            g = L.n_heads // L.n_kv
            if g > 1:
                k = k.repeat_interleave(g, dim=1)
                v = v.repeat_interleave(g, dim=1)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(L.hd))
            att = att.masked_fill(self.mask[:T, :T], float("-inf"))
            att = torch.softmax(att.float(), dim=-1).type_as(q)
            y = (att @ v).transpose(1, 2).reshape(B, T, -1)
            x = x + F.dropout(L.wo(y), self.p, True)
            h = L.ffn_norm(x)
            x = x + F.dropout(L.w2(F.silu(L.w1(h)) * L.w3(h)), self.p, True)
        x = self.norm(x)
        w = self.tok_embeddings.weight if self.output is None else self.output.weight
        return F.linear(x, w)


def get_batch(data, bos_pos, step, a):
    g = torch.Generator().manual_seed(a.seed * 1_000_003 + step)
    n_bos = a.batch // 4
    starts = torch.randint(0, len(data) - a.seq_len - 1, (a.batch - n_bos,), generator=g)
    bos = bos_pos[torch.randint(0, len(bos_pos), (n_bos,), generator=g)]
    bos = bos.clamp(max=len(data) - a.seq_len - 1)
    starts = torch.cat([bos, starts])
    idx = starts[:, None] + torch.arange(a.seq_len + 1)[None, :]
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


@torch.no_grad()
def evaluate(model, data, a, max_windows=None):
    """Mean loss over non-overlapping seq_len windows (each from position 0)."""
    model.eval()
    n = (len(data) - 1) // a.seq_len
    if max_windows:
        n = min(n, max_windows)
    tot, cnt = 0.0, 0
    for i in range(0, n, 16):
        rows = range(i, min(n, i + 16))
        x = torch.stack([data[r * a.seq_len: r * a.seq_len + a.seq_len] for r in rows])
        y = torch.stack([data[r * a.seq_len + 1: r * a.seq_len + a.seq_len + 1] for r in rows])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.bf16)):
            logits = model(x)
        tot += F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1),
                               reduction="sum").item()
        cnt += y.numel()
    model.train()
    return tot / cnt


def main():
    a = get_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)

    train = torch.from_numpy(np.fromfile(os.path.join(a.data_dir, "train.bin"), dtype=np.uint16).astype(np.int64))
    val = torch.from_numpy(np.fromfile(os.path.join(a.data_dir, "val.bin"), dtype=np.uint16).astype(np.int64))
    with open(os.path.join(a.data_dir, "tokenizer.json"), encoding="utf-8") as f:
        vocab_size = len(json.load(f)["tokens"])
    bos_pos = (train == BOS_ID).nonzero().flatten()
    # a fixed slice of training data for a comparable "train loss" estimate
    train_eval = train[: 160 * a.seq_len + 1]

    cfg = ModelConfig(vocab_size=vocab_size, dim=a.dim, n_layers=a.n_layers, n_heads=a.n_heads,
                      n_kv_heads=a.n_kv_heads, ffn_dim=a.ffn_dim, max_seq_len=a.seq_len,
                      tie_embeddings=not a.untied)
    model = DropoutLlama(cfg, a.dropout)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    ckpt_path = os.path.join(a.out, "ckpt.pt")
    step, best_val, elapsed = 0, float("inf"), 0.0
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["rng"])
        step, best_val, elapsed = ck["step"], ck["best_val"], ck["elapsed"]
        print(f"resumed from step {step} with args {vars(a)}", flush=True)
    else:
        with open(os.path.join(a.out, "config.json"), "w") as f:
            json.dump({"model": cfg.to_dict(), "args": vars(a),
                       "n_params": model.n_params()}, f, indent=1)
    print(f"params {model.n_params():,} | train tokens {len(train):,} | val tokens {len(val):,} | "
          f"tokens/step {a.batch * a.seq_len}", flush=True)
    logf = open(os.path.join(a.out, "log.jsonl"), "a")

    def save(path):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(),
                    "step": step, "best_val": best_val, "elapsed": elapsed,
                    "config": cfg.to_dict(), "args": vars(a)}, path + ".tmp")
        os.replace(path + ".tmp", path)

    model.train()
    t_last, tok_last, loss_acc, n_acc = time.time(), 0, 0.0, 0
    while step < a.steps:
        t0 = time.time()
        lr = lr_at(step, a)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = get_batch(train, bos_pos, step, a)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.bf16)):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        step += 1
        elapsed += time.time() - t0
        loss_acc += loss.item()
        n_acc += 1
        tok_last += x.numel()
        if step % a.log_every == 0:
            now = time.time()
            rec = {"step": step, "train_loss": loss_acc / n_acc, "lr": lr,
                   "tok_per_s": tok_last / (now - t_last), "elapsed_s": elapsed}
            print(json.dumps(rec), flush=True)
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            t_last, tok_last, loss_acc, n_acc = now, 0, 0.0, 0
        if step % a.eval_every == 0 or step == a.steps:
            te = time.time()
            vl = evaluate(model, val, a)
            tl = evaluate(model, train_eval, a)
            rec = {"step": step, "eval_train_loss": tl, "val_loss": vl,
                   "val_ppl": math.exp(vl), "elapsed_s": elapsed, "eval_s": time.time() - te}
            print(json.dumps(rec), flush=True)
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            if vl < best_val:
                best_val = vl
                save(os.path.join(a.out, "best.pt"))
            t_last = time.time()
        if step % a.ckpt_every == 0 or step == a.steps:
            save(ckpt_path)
    print("done", flush=True)


if __name__ == "__main__":
    main()
