#!/usr/bin/python3
"""The GPT of docs/MODEL.md written the ordinary PyTorch way, to time a training step.

This is the baseline of bench/run.sh: what a user gets from eager PyTorch on the same
CPU, not a reimplementation of tessera's arithmetic (that is tests/oracle/). fp32,
2 intra-op threads, explicit causal attention (PyTorch 1.13 has no
scaled_dot_product_attention, so the (B, H, T, T) score matrix is materialised, as in
any eager GPT of that version).

Data are random bytes of the right shape: data loading is not what is measured.

Prints one JSON line: the median step time over the steps after the first (the first
one pays for allocation and page faults), tokens/s from it, and peak RSS.
"""
import argparse
import json
import math
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, n_layer, seq):
        super().__init__()
        self.n_head = n_head
        # True above the diagonal: the future keys a query may not see
        self.register_buffer("future", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)
        self.wq = nn.Linear(d, d)
        self.wk = nn.Linear(d, d)
        self.wv = nn.Linear(d, d)
        self.wo = nn.Linear(d, d)
        self.wo.residual_proj = True  # scaled init, see GPT._init

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        # (B, T, C) -> (B, H, T, dh)
        q = self.wq(x).view(B, T, H, C // H).transpose(1, 2)
        k = self.wk(x).view(B, T, H, C // H).transpose(1, 2)
        v = self.wv(x).view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))  # (B, H, T, T)
        att = att.masked_fill(self.future[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v  # (B, H, T, dh)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.wo(y)


class MLP(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d, d_ff)
        self.w2 = nn.Linear(d_ff, d)
        self.w2.residual_proj = True

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, n_head, d_ff, n_layer, seq):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = CausalSelfAttention(d, n_head, n_layer, seq)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d, d_ff)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, n_layer, n_head, d_ff):
        super().__init__()
        self.n_layer = n_layer
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList([Block(d, n_head, d_ff, n_layer, seq) for _ in range(n_layer)])
        self.lnf = nn.LayerNorm(d, eps=1e-5)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied head
        self.apply(self._init)

    def _init(self, mod):
        # docs/MODEL.md: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), zero biases
        if isinstance(mod, nn.Linear):
            std = 0.02 / math.sqrt(2 * self.n_layer) if getattr(mod, "residual_proj", False) else 0.02
            nn.init.normal_(mod.weight, 0.0, std)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, nn.Embedding):
            nn.init.normal_(mod.weight, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.lnf(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def lr_lambda(warmup, steps, min_lr_frac):
    # docs/MODEL.md schedule as a multiplier of the peak lr, for 0-based step s
    def f(s):
        if s < warmup:
            return (s + 1) / warmup
        prog = (s - warmup) / max(1, steps - warmup)
        return min_lr_frac + 0.5 * (1 - min_lr_frac) * (1 + math.cos(math.pi * prog))
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-ff", type=int, default=0, help="MLP width (default 4*d)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be at least 2 (the first step is warm-up)")
    if a.d % a.heads:
        ap.error("--heads must divide --d")
    d_ff = a.d_ff or 4 * a.d

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a.vocab, a.seq, a.d, a.layers, a.heads, d_ff)
    model.train()

    # weight decay on matrices and embeddings only (>= 2 dims), as in docs/MODEL.md
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(a.warmup, a.steps, a.min_lr_frac))

    nparams = sum(p.numel() for p in model.parameters())  # the tied head counts once
    nonemb = nparams - a.vocab * a.d - a.seq * a.d
    flops_per_token = 6 * nonemb + 6 * a.layers * a.seq * a.d

    gen = torch.Generator().manual_seed(a.seed)
    times, losses = [], []
    for _ in range(a.steps):
        # random bytes, drawn outside the timed region
        buf = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
        x, y = buf[:, :-1].contiguous(), buf[:, 1:].contiguous()
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        sched.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        losses.append(loss.item())
        print(f"pytorch step {len(times)}/{a.steps}: {dt * 1e3:.0f} ms, loss {losses[-1]:.4f}",
              file=sys.stderr, flush=True)

    med = statistics.median(times[1:])
    tokens = a.batch * a.seq
    out = {
        "impl": "pytorch",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "seq": a.seq, "batch": a.batch, "steps": a.steps,
        "d": a.d, "layers": a.layers, "heads": a.heads, "d_ff": d_ff, "vocab": a.vocab,
        "params": nparams,
        "flops_per_token": flops_per_token,
        "step_ms": [round(t * 1e3, 3) for t in times],
        "median_step_ms": round(med * 1e3, 3),
        "tokens_per_s": round(tokens / med, 1),
        # Linux reports ru_maxrss in KiB; MB here is MiB, as in tessera's log
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
