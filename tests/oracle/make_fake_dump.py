"""Writes a dump directory in the format of docs/GOLDEN.md from the oracle itself.

usage: make_fake_dump.py --out DIR [--variant gpt|llama] [--vocab V] [--d D]
         [--layers L] [--heads H] [--kv-heads HKV] [--rope-theta THETA] [--seq T]
         [--batch B] [--untied] [--dropout P] [--seed S] [--traj-steps K]
         [--source fp64|fp32]

It stands in for `tessera dump` when testing check.py: the weights are the
documented initialisation, the batch is random bytes, and the "tessera" values
are PyTorch's, computed in float64 and rounded to float32 (--source fp64, a
perfectly rounded implementation) or in float32 (--source fp32). check.py must
accept such a dump and reject it after a small perturbation (selftest.py).
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

import model


def c_hex(x):
    """C's printf("%a", (double)x) for a finite float32 value: no trailing zero digits."""
    x = float(x)
    if x == 0.0:
        return "-0x0p+0" if math.copysign(1.0, x) < 0 else "0x0p+0"
    mant, exp = x.hex().split("p")  # e.g. 0x1.99999a0000000p-4
    return mant.rstrip("0").rstrip(".") + "p" + exp


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def llama_d_ff(d):
    """The presets' d_ff of the LLaMA variant: 8d/3 rounded up to a multiple of 64."""
    return -(-8 * d // (3 * 64)) * 64


def make(out, vocab=256, d=32, layers=2, heads=4, seq=32, batch=2, tied=True, dropout=0.0,
         seed=1337, traj_steps=3, source="fp64", variant="gpt", kv_heads=None,
         rope_theta=10000.0, model_cls=None):
    """Writes the dump. model_cls (default: the oracle model of the variant) computes
    the "tessera" values; selftest.py passes deliberately wrong models through it."""
    os.makedirs(out, exist_ok=True)
    llama = variant == "llama"
    F = llama_d_ff(d) if llama else 4 * d
    f32 = lambda v: float(np.float32(v))
    cfg = {"preset": "fake", "variant": variant, "vocab": vocab, "d": d, "n_layer": layers,
           "n_head": heads}
    if llama:
        cfg["n_kv_head"] = heads if kv_heads is None else kv_heads
    cfg.update({"d_ff": F, "seq": seq, "tied": 1 if tied else 0})
    if llama:
        cfg["rope_theta"] = f32(rope_theta)
    cfg.update({"dropout": f32(dropout), "batch": batch, "steps": traj_steps, "seed": seed,
                "lr": f32(3e-3), "min_lr_frac": f32(0.1), "weight_decay": f32(0.1),
                "beta1": f32(0.9), "beta2": f32(0.95), "eps": f32(1e-8),
                "grad_clip": f32(1.0), "warmup": 2})
    for k in ("dropout", "lr", "min_lr_frac", "weight_decay", "beta1", "beta2", "eps",
              "grad_clip", "rope_theta"):
        if k in cfg:
            cfg[k + "_hex"] = c_hex(cfg[k])
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model": cfg}, f)
    c = model.Config({"model": cfg})

    if llama:
        specs = model.llama_param_specs(vocab, d, layers, F, cfg["n_kv_head"] * (d // heads),
                                        tied)
    else:
        specs = model.param_specs(vocab, seq, d, layers, F, tied)
    weights = model.init_params(specs, seed)
    rs = np.random.RandomState(seed)
    window = rs.randint(0, vocab, size=(batch, seq + 1))
    weights["batch.inputs"] = window[:, :-1].astype(np.float32)
    weights["batch.targets"] = window[:, 1:].astype(np.float32)
    model.write_safetensors(os.path.join(out, "weights.safetensors"), weights,
                            {"tessera.kind": "fake dump"})

    shape = model.Shape(c, weights)
    inputs = torch.from_numpy(window[:, :-1].astype(np.int64))
    targets = torch.from_numpy(window[:, 1:].astype(np.int64))
    dt = torch.float64 if source == "fp64" else torch.float32
    step = 1 if dropout > 0 else None
    build = model.build_model if model_cls is None else model_cls
    m = build(shape, weights, dt, dropout, seed)
    loss, logits, grads = m.loss_and_grads(inputs, targets, step)
    loss = f32(loss)
    out_t = {n: g.astype(np.float32) for n, g in grads.items()}
    out_t["logits"] = logits.astype(np.float32)
    model.write_safetensors(os.path.join(out, "grads.safetensors"), out_t,
                            {"tessera.kind": "fake dump"})
    gnorm = f32(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values())))

    m = build(shape, weights, dt, dropout, seed)
    traj = model.train_trajectory(m, model.TrainSettings(c), inputs, targets, traj_steps,
                                  dropout > 0)
    result = {
        "loss": loss, "loss_hex": c_hex(loss),
        "logits_fnv1a64": f"{fnv1a64(out_t['logits'].astype('<f4').tobytes()):016x}",
        "grad_norm": gnorm, "grad_norm_hex": c_hex(gnorm),
        "trajectory": [{"step": i + 1, "loss": f32(l), "loss_hex": c_hex(f32(l))}
                       for i, l in enumerate(traj)],
    }
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", choices=("gpt", "llama"), default="gpt")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=None, help="LLaMA: key/value heads (default --heads)")
    ap.add_argument("--rope-theta", type=float, default=10000.0, help="LLaMA: RoPE base")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--traj-steps", type=int, default=3)
    ap.add_argument("--source", choices=("fp64", "fp32"), default="fp64")
    a = ap.parse_args(argv)
    make(a.out, a.vocab, a.d, a.layers, a.heads, a.seq, a.batch, not a.untied, a.dropout,
         a.seed, a.traj_steps, a.source, a.variant, a.kv_heads, a.rope_theta)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
