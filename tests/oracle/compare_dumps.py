#!/usr/bin/env python3
"""Compares a fresh `tessera dump` with a golden directory recorded on another
machine. Different CPUs run different BLAS kernels, so bits may differ; the
results must still agree within the oracle's fp32 tolerances (docs/GOLDEN.md):
loss relative 1e-5, every gradient and the logits max-relative 1e-4 over
elements >= 0.1 x the tensor's largest |value| (below that the absolute error
is bounded by 1e-4 x max), trajectory relative 1e-4.
Usage: compare_dumps.py GOLDEN_DIR FRESH_DIR. Exit 0 agree, 1 differ."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import read_safetensors  # noqa: E402

CUTOFF = 0.1
RTOL = 1e-4


def tensor_error(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    scale = np.max(np.abs(a)) if a.size else 0.0
    if scale == 0.0:
        return float(np.max(np.abs(b))) if b.size else 0.0
    big = np.abs(a) >= CUTOFF * scale
    rel = np.max(np.abs(a[big] - b[big]) / np.abs(a[big])) if big.any() else 0.0
    absn = np.max(np.abs(a - b)) / scale
    return max(rel, absn)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    gold, fresh = sys.argv[1:]
    bad = 0
    rg = json.load(open(os.path.join(gold, "result.json")))
    rf = json.load(open(os.path.join(fresh, "result.json")))
    e = abs(rg["loss"] - rf["loss"]) / abs(rg["loss"])
    print(f"loss          rel {e:.2e} (bound 1e-5)")
    bad += e > 1e-5
    for sg, sf in zip(rg["trajectory"], rf["trajectory"]):
        e = abs(sg["loss"] - sf["loss"]) / abs(sg["loss"])
        if e > RTOL:
            print(f"trajectory step {sg['step']}: rel {e:.2e} > {RTOL}")
            bad += 1
    if len(rg["trajectory"]) != len(rf["trajectory"]):
        print("trajectory lengths differ")
        bad += 1
    for name in ("weights.safetensors", "grads.safetensors"):
        tg, _ = read_safetensors(os.path.join(gold, name))
        tf, _ = read_safetensors(os.path.join(fresh, name))
        if list(tg) != list(tf):
            print(f"{name}: tensor names differ")
            bad += 1
            continue
        shapes = [k for k in tg if tg[k].shape != tf[k].shape]
        if shapes:  # e.g. another --kv-heads: same names, other key/value widths
            print(f"{name}: tensor shapes differ ({', '.join(shapes[:3])}: "
                  f"{list(tg[shapes[0]].shape)} vs {list(tf[shapes[0]].shape)})")
            bad += 1
            continue
        worst = max((tensor_error(tg[k], tf[k]), k) for k in tg)
        print(f"{name:20s} worst {worst[0]:.2e} ({worst[1]}) (bound {RTOL})")
        bad += worst[0] > RTOL
    print("agree within tolerance" if not bad else f"{bad} check(s) out of tolerance")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
