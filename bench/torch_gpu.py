#!/usr/bin/env python3
"""tessera's two model variants written the ordinary PyTorch way, to time a training step on a GPU.

This is the baseline of bench/gpu.sh, as bench/torch_gpt.py is that of bench/run.sh on
the CPU: what a user gets from PyTorch for the same model on the same GPU, not a
reimplementation of tessera's arithmetic (that is tests/oracle/).

- GPT (`tiny`, `mini`, `small`, `large`): learned positions, pre-LayerNorm, GeLU (tanh)
  MLP of the preset's d_ff, biases, head tied to the token embedding unless --untied.
- LLaMA (`llama-*`): RMSNorm, RoPE (pairs (2i, 2i+1), base --rope-theta), grouped-query
  attention with --kv-heads key/value heads (repeated to the query heads before the
  attention call, as in the usual LLaMA code), SwiGLU MLP, no biases, untied head
  unless --tied.

Attention is torch.nn.functional.scaled_dot_product_attention(is_causal=True), which
picks a fused kernel (flash or memory-efficient) on the GPU. A PyTorch without it (1.13,
Debian's) gets the explicit masked softmax instead, which materialises the (B, H, T, T)
scores; the JSON line says which one ran ("attention").

AdamW (beta 0.9, 0.95, eps 1e-8, weight decay on tensors of >= 2 dims), gradient
clipping, warm-up + cosine schedule: docs/MODEL.md. --precision fp32 is true fp32 (TF32
off for matrix products and cuDNN, as tessera computes in fp32); bf16 is
torch.autocast(dtype=bfloat16) around the forward pass and loss, fp32 master weights and
optimizer state.

Data are random bytes of the right shape, drawn outside the timed region. A step is
forward, backward, clipping and the update, timed with the device synchronised at both
ends. Prints one JSON line: the median step time over the steps after the first (the
first pays for allocation, kernel selection and module loading), tokens/s from it, the
peak of PyTorch's allocator (torch.cuda.max_memory_allocated) and FLOPs per token by
tessera's formula (6 x non-embedding parameters + 6 L T d, docs/PERFORMANCE.md).

Exit status: 0 done; 2 bad arguments; 3 PyTorch, or a CUDA device for it, is missing
(the JSON line is {"error": ...}); 1 the run failed (out of memory, for instance; the
JSON line is {"error": ...} too).

  python3 bench/torch_gpu.py --model small --seq 4096 --batch 1 --steps 4 --precision bf16
  /usr/bin/python3 bench/torch_gpu.py --device cpu --model tiny --seq 64 --steps 2   # smoke test
"""
import argparse
import json
import math
import statistics
import sys
import time

# name: (variant, d, layers, heads, kv_heads, d_ff, seq, batch), as src/config/config.c presets[]
# (kv_heads 0: as many as heads). Vocabulary 256 (bytes) for all.
PRESETS = {
    "tiny": ("gpt", 64, 2, 4, 0, 256, 64, 4),
    "mini": ("gpt", 128, 4, 4, 0, 512, 256, 8),
    "small": ("gpt", 512, 6, 8, 0, 2048, 1024, 4),
    "large": ("gpt", 2048, 24, 16, 0, 8192, 1024, 1),
    "llama-tiny": ("llama", 64, 2, 4, 2, 192, 64, 4),
    "llama-mini": ("llama", 128, 4, 4, 2, 384, 256, 8),
    "llama-100m": ("llama", 768, 16, 12, 4, 2048, 1024, 1),
}


def fail(code, msg, **extra):
    print(json.dumps({"impl": "pytorch", "error": msg, **extra}), flush=True)
    sys.exit(code)


try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001 - any import failure means "no PyTorch here"
    if __name__ == "__main__" and not any(h in sys.argv for h in ("-h", "--help")):
        fail(3, f"cannot import torch: {type(e).__name__}: {e}")
    raise

from torch_gpt import lr_lambda  # noqa: E402 - the CPU baseline's schedule (docs/MODEL.md)

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def causal_attention(q, k, v):
    """q, k, v: (B, H, T, dh) -> (B, H, T, dh), causal."""
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    att = att.masked_fill(future, float("-inf"))
    return F.softmax(att, dim=-1) @ v


class RMSNorm(nn.Module):
    # written out: nn.RMSNorm is recent (2.4); computed in fp32 under autocast too
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).to(x.dtype)


def rope_table(T, dh, theta, device):
    # docs/MODEL.md: angle t * theta^(-2i/dh), cos and sin in double, rounded to float once
    i = torch.arange(dh // 2, dtype=torch.float64)
    t = torch.arange(T, dtype=torch.float64)
    ang = t[:, None] * theta ** (-2.0 * i / dh)[None, :]  # (T, dh/2)
    return torch.cos(ang).float().to(device), torch.sin(ang).float().to(device)


def apply_rope(x, cos, sin):
    """x: (B, H, T, dh); rotates the pairs (2i, 2i+1) of each head."""
    x0, x1 = x.unflatten(-1, (-1, 2)).unbind(-1)  # each (B, H, T, dh/2)
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, d, n_head, n_kv_head, llama):
        super().__init__()
        self.H, self.Hkv, self.dh, self.llama = n_head, n_kv_head, d // n_head, llama
        bias = not llama
        self.wq = nn.Linear(d, d, bias=bias)
        self.wk = nn.Linear(d, n_kv_head * self.dh, bias=bias)
        self.wv = nn.Linear(d, n_kv_head * self.dh, bias=bias)
        self.wo = nn.Linear(d, d, bias=bias)
        self.wo.residual_proj = True

    def forward(self, x, rope):
        B, T, C = x.shape
        q = self.wq(x).view(B, T, self.H, self.dh).transpose(1, 2)  # (B, H, T, dh)
        k = self.wk(x).view(B, T, self.Hkv, self.dh).transpose(1, 2)  # (B, Hkv, T, dh)
        v = self.wv(x).view(B, T, self.Hkv, self.dh).transpose(1, 2)
        if self.llama:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.Hkv != self.H:  # GQA: query head h reads key/value head h // G
            G = self.H // self.Hkv
            k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        return self.wo(y)


class MLP(nn.Module):
    def __init__(self, d, d_ff, llama):
        super().__init__()
        self.llama = llama
        self.w1 = nn.Linear(d, d_ff, bias=not llama)  # LLaMA: the gate
        if llama:
            self.w3 = nn.Linear(d, d_ff, bias=False)  # up
        self.w2 = nn.Linear(d_ff, d, bias=not llama)  # down
        self.w2.residual_proj = True

    def forward(self, x):
        if self.llama:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, n_head, n_kv_head, d_ff, llama):
        super().__init__()
        norm = (lambda: RMSNorm(d)) if llama else (lambda: nn.LayerNorm(d, eps=1e-5))
        self.n1, self.n2 = norm(), norm()
        self.attn = Attention(d, n_head, n_kv_head, llama)
        self.mlp = MLP(d, d_ff, llama)

    def forward(self, x, rope):
        x = x + self.attn(self.n1(x), rope)
        return x + self.mlp(self.n2(x))


class Model(nn.Module):
    def __init__(self, variant, vocab, seq, d, n_layer, n_head, n_kv_head, d_ff, tied, rope_theta):
        super().__init__()
        self.llama = variant == "llama"
        self.n_layer = n_layer
        self.wte = nn.Embedding(vocab, d)
        self.wpe = None if self.llama else nn.Embedding(seq, d)
        self.h = nn.ModuleList([Block(d, n_head, n_kv_head, d_ff, self.llama) for _ in range(n_layer)])
        self.nf = RMSNorm(d) if self.llama else nn.LayerNorm(d, eps=1e-5)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.apply(self._init)
        if tied:
            self.lm_head.weight = self.wte.weight
        self.dh, self.rope_theta = d // n_head, rope_theta

    def _init(self, mod):
        # docs/MODEL.md: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), zero biases
        if isinstance(mod, nn.Linear):
            std = 0.02 / math.sqrt(2 * self.n_layer) if getattr(mod, "residual_proj", False) else 0.02
            nn.init.normal_(mod.weight, 0.0, std)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, nn.Embedding):
            nn.init.normal_(mod.weight, 0.0, 0.02)

    def forward(self, idx, targets, rope):
        B, T = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x, rope)
        logits = self.lm_head(self.nf(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="small", choices=sorted(PRESETS), help="preset (default small)")
    ap.add_argument("--seq", type=int, default=0, help="T (default: the preset's)")
    ap.add_argument("--batch", type=int, default=0, help="B (default: the preset's)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cuda (default); cpu only to check this script on a machine without a GPU")
    ap.add_argument("--d", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--heads", type=int, default=0)
    ap.add_argument("--kv-heads", type=int, default=-1, help="0 = --heads (default: the preset's)")
    ap.add_argument("--d-ff", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=256)
    tie = ap.add_mutually_exclusive_group()
    tie.add_argument("--tied", dest="tied", action="store_true", default=None)
    tie.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads with --device cpu (0 = PyTorch's default)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    a = ap.parse_args()
    variant, d, L, H, Hkv, dff, T, B = PRESETS[a.model]
    a.variant = variant
    a.d, a.layers, a.heads = a.d or d, a.layers or L, a.heads or H
    a.d_ff, a.seq, a.batch = a.d_ff or dff, a.seq or T, a.batch or B
    if a.kv_heads < 0:
        a.kv_heads = Hkv if (a.heads, a.d) == (H, d) else 0
    a.kv_heads = a.kv_heads or a.heads
    if a.tied is None:
        a.tied = variant == "gpt"
    if a.steps < 2:
        ap.error(f"--steps {a.steps}: must be at least 2 (the first step is warm-up)")
    for name in ("seq", "batch", "d", "layers", "heads", "d_ff", "vocab"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(a, name)}: must be >= 1")
    if a.d % a.heads:
        ap.error(f"--heads {a.heads}: must divide --d {a.d}")
    if a.heads % a.kv_heads:
        ap.error(f"--kv-heads {a.kv_heads}: must divide --heads {a.heads}")
    if variant == "llama" and (a.d // a.heads) % 2:
        ap.error(f"--d {a.d} / --heads {a.heads}: RoPE needs an even head width")
    return a


def main():
    a = parse()
    if a.device == "cuda":
        if not torch.cuda.is_available():
            fail(3, f"torch {torch.__version__}: torch.cuda.is_available() is false "
                    f"(built with CUDA {torch.version.cuda}; no usable device or driver)")
        dev = torch.device("cuda")
        # true fp32, as tessera: no TF32 in matrix products or cuDNN (the flags, and the
        # setting that newer PyTorch reads first)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        device_name = torch.cuda.get_device_name(0)
    else:
        dev = torch.device("cpu")
        if a.threads > 0:
            torch.set_num_threads(a.threads)
        device_name = "cpu"
    if a.precision == "bf16" and a.device == "cpu" and not hasattr(torch, "autocast"):
        fail(3, f"torch {torch.__version__}: no torch.autocast for bf16")

    torch.manual_seed(a.seed)
    model = Model(a.variant, a.vocab, a.seq, a.d, a.layers, a.heads, a.kv_heads, a.d_ff,
                  a.tied, a.rope_theta).to(dev)
    model.train()
    rope = rope_table(a.seq, a.d // a.heads, a.rope_theta, dev) if a.variant == "llama" else None

    params = list(model.parameters())  # a tied head counts once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(a.warmup, a.steps, a.min_lr_frac))

    nparams = sum(p.numel() for p in params)
    # tessera's formula (src/model/params.c ts_model_flops_per_token): everything but wte and
    # wpe is non-embedding; an untied head counts
    nonemb = nparams - a.vocab * a.d - (0 if a.variant == "llama" else a.seq * a.d)
    flops_per_token = 6 * nonemb + 6 * a.layers * a.seq * a.d

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    if a.precision == "bf16":
        autocast = lambda: torch.autocast(device_type=a.device, dtype=torch.bfloat16)  # noqa: E731
    else:
        import contextlib
        autocast = contextlib.nullcontext

    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    times, losses = [], []
    try:
        for _ in range(a.steps):
            # random bytes, drawn outside the timed region
            buf = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen, device=dev)
            x, y = buf[:, :-1].contiguous(), buf[:, 1:].contiguous()
            sync()
            t0 = time.perf_counter()
            with autocast():
                loss = model(x, y, rope)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
            opt.step()
            sched.step()
            sync()
            dt = time.perf_counter() - t0
            times.append(dt)
            losses.append(loss.item())
            print(f"pytorch step {len(times)}/{a.steps}: {dt * 1e3:.1f} ms, loss {losses[-1]:.4f}",
                  file=sys.stderr, flush=True)
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
        msg = str(e).split("\n")[0]
        oom = "out of memory" in msg.lower()
        fail(1, ("out of memory: " if oom else "run failed: ") + msg[:300],
             oom=oom, seq=a.seq, batch=a.batch, steps_done=len(times))

    med = statistics.median(times[1:])
    tokens = a.batch * a.seq
    out = {
        "impl": "pytorch",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device_name,
        "precision": a.precision,
        "attention": ("scaled_dot_product_attention(is_causal=True)" if HAVE_SDPA else
                      "explicit masked softmax: this torch has no scaled_dot_product_attention"),
        "tf32": (torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest")
        if a.device == "cuda" else None,
        "model": a.model, "variant": a.variant,
        "seq": a.seq, "batch": a.batch, "steps": a.steps,
        "d": a.d, "layers": a.layers, "heads": a.heads, "kv_heads": a.kv_heads,
        "d_ff": a.d_ff, "vocab": a.vocab, "tied": a.tied,
        "params": nparams,
        "flops_per_token": flops_per_token,
        "step_ms": [round(t * 1e3, 3) for t in times],
        "median_step_ms": round(med * 1e3, 3),
        "tokens_per_s": round(tokens / med, 1),
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    if a.device == "cuda":
        # MiB, as tessera's log
        out["peak_mem_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        out["peak_reserved_mb"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
    else:
        import resource
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
