#!/usr/bin/env python3
"""Compares a fresh `tessera dump` with a golden directory recorded on another
machine. Different CPUs run different BLAS kernels, so bits may differ; the
results must still agree within the oracle's fp32 tolerances (docs/GOLDEN.md):
loss relative 1e-5, every gradient and the logits max-relative 1e-4 over
elements >= 0.1 x the tensor's largest |value| (below that the absolute error
is bounded by 1e-4 x max), trajectory relative 1e-4. A tensor's max is taken
as at least 1e-6 x the largest |value| of its file (FLOOR): a gradient that is
zero in exact arithmetic (the key bias: softmax ignores a shift shared by a
query's scores) holds only rounding noise, whose values depend on the order of
the sums, and must not count as a relative error of order one.
Usage: compare_dumps.py [--loss-rtol R] [--rtol R] [--traj-rtol R] GOLDEN_DIR FRESH_DIR.
The options loosen (or tighten) the three bounds, e.g. for a GPU run in bf16
(tests/gpu/run.sh); their defaults are the fp32 bounds above.
Exit 0 agree, 1 differ, 2 usage."""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import read_safetensors  # noqa: E402

CUTOFF = 0.1
# In the golden files every real gradient tensor reaches above 5e-5 of the
# largest value, and the noise of the analytically zero ones stays below 1e-10.
FLOOR = 1e-6
LOSS_RTOL = 1e-5  # the step-1 loss
RTOL = 1e-4  # every tensor (weights, gradients, logits)
TRAJ_RTOL = 1e-4  # each loss of the trajectory


def tensor_error(a, b, floor=0.0):
    """Max-relative error of b against a over a's large elements, and the
    absolute error against a's scale, max(max |a|, floor), everywhere."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    scale = max(float(np.max(np.abs(a))) if a.size else 0.0, floor)
    if scale == 0.0:
        return float(np.max(np.abs(b))) if b.size else 0.0
    big = np.abs(a) >= CUTOFF * scale
    rel = np.max(np.abs(a[big] - b[big]) / np.abs(a[big])) if big.any() else 0.0
    absn = np.max(np.abs(a - b)) / scale
    return max(rel, absn)


def bound(text):
    v = float(text)
    if not v >= 0.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text}: must be a number >= 0")
    return v


def main():
    ap = argparse.ArgumentParser(
        description="Compares a fresh `tessera dump` with a golden directory within tolerances.")
    ap.add_argument("golden", metavar="GOLDEN_DIR")
    ap.add_argument("fresh", metavar="FRESH_DIR")
    ap.add_argument("--loss-rtol", type=bound, default=LOSS_RTOL,
                    help=f"relative bound on the step-1 loss (default {LOSS_RTOL:g})")
    ap.add_argument("--rtol", type=bound, default=RTOL,
                    help=f"bound on every weight, gradient and the logits (default {RTOL:g})")
    ap.add_argument("--traj-rtol", type=bound, default=TRAJ_RTOL,
                    help=f"relative bound on each trajectory loss (default {TRAJ_RTOL:g})")
    a = ap.parse_args()
    gold, fresh = a.golden, a.fresh
    bad = 0
    rg = json.load(open(os.path.join(gold, "result.json")))
    rf = json.load(open(os.path.join(fresh, "result.json")))
    e = abs(rg["loss"] - rf["loss"]) / abs(rg["loss"])
    print(f"loss          rel {e:.2e} (bound {a.loss_rtol:g})")
    bad += e > a.loss_rtol
    for sg, sf in zip(rg["trajectory"], rf["trajectory"]):
        e = abs(sg["loss"] - sf["loss"]) / abs(sg["loss"])
        if e > a.traj_rtol:
            print(f"trajectory step {sg['step']}: rel {e:.2e} > {a.traj_rtol:g}")
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
        floor = FLOOR * max((float(np.max(np.abs(t))) for t in tg.values() if t.size), default=0.0)
        worst = max((tensor_error(tg[k], tf[k], floor), k) for k in tg)
        print(f"{name:20s} worst {worst[0]:.2e} ({worst[1]}) (bound {a.rtol:g})")
        bad += worst[0] > a.rtol
    print("agree within tolerance" if not bad else f"{bad} check(s) out of tolerance")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
