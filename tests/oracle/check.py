"""Checks a tessera dump (docs/GOLDEN.md) against the PyTorch oracle of model.py.

usage: check.py DIR [--traj] [--no-init]

The oracle recomputes the step-1 loss, logits and every gradient from the dumped
weights and batch, once in float32 and once in float64, for either variant of
docs/MODEL.md (config.json's "variant": "gpt" or "llama"; for LLaMA also
"n_kv_head" and "rope_theta"), and applies the same rules to both
(tess = tessera's dumped value, t32 / t64 = PyTorch float32 / float64):

  loss     |tess - t32| / |t64| <= 1e-5.
  logits,  max over the elements that are not tiny of |tess - t32| / |t64| <= 1e-4,
  each     where an element is tiny when |t64| <= 1e-1 * max|t64| over its tensor.
  gradient Why 1e-1: a float32 gradient element carries an absolute error of about
           5e-7 * max|t64| of its tensor whatever its own size (it is a sum of terms as
           large as the biggest elements), so its relative error grows as it shrinks.
           Measured for PyTorch float32 against float64 on 32..1024-token models: up to
           3.8e-4 over elements above 1e-3 * max, 5e-5 above 1e-2, 2e-5 above 3e-2,
           7e-6 above 1e-1; two independent float32 implementations differ by up to
           twice that (tessera against PyTorch float32 on the tiny models: 2.3e-4
           above 1e-3, 3e-6 above 1e-1). So 1e-3 would fail a correctly rounded implementation, and 1e-1
           leaves a margin of about 6. Smaller elements are not left unchecked: the
           flash criterion below bounds every element's error by about 1e-6 * max|t64|.
  flash    (the flash-attention criterion of docs/EXACTNESS.md) for the loss, the logits and
           each gradient: err(tess) <= 2 * err(t32) + 2^-21, where err(x) =
           max|x - t64| / max|t64| over the tensor (|x - t64| / |t64| for the loss).
           The floor 2^-21 (4 float32 ulps of a value near its tensor's maximum) is
           there because t32 is sometimes exactly right (e.g. a bias gradient that is
           a short sum), and no float32 result can then be within 0 of float64.
  zero     a gradient that is zero in exact arithmetic (max|t64| <= 1e-9 * the largest
  tensors  |t64| of any gradient; e.g. every key bias: a shift of all keys moves a row
           of scores by a constant, which softmax ignores) is float32 rounding noise
           in both implementations, so its errors are normalised by that largest
           |t64| instead of its own maximum; the bounds are the same.
  traj     (--traj) the K-step AdamW trajectory rerun in PyTorch float32 on the same
           batch: every step's |tess - t32| / |t32| <= 1e-4; and tessera's step-1
           trajectory loss equals its dumped loss bit for bit.
  dump     self-consistency of the dump: shapes, logits_fnv1a64, grad_norm (<= 1e-4
           relative to t64, against t32 like the gradients), and the weights equal the
           documented initialisation (MODEL.md) within 1e-6 relative (--no-init skips).

LLaMA's RoPE table: the float32 oracle uses cos/sin computed in float64 and rounded
once to float32, as MODEL.md prescribes for tessera; the float64 oracle keeps them in
float64 (like its other constants, 1e-5 and 1/sqrt(dh)). Both float32 implementations
then carry the same table rounding (at most 2^-24 relative on each cos and sin),
which shows in err(t32) and err(tess) alike, so the flash bound stays fair to tessera.

Exit 0 when every check passes, 1 when one fails, 2 when DIR cannot be read.
"""

import math
import sys
import time

import numpy as np
import torch

import model
from model import OracleError

LOSS_RTOL = 1e-5
ELEM_RTOL = 1e-4
TINY_FRAC = 1e-1
FLASH_FACTOR = 2.0
FLASH_FLOOR = 2.0 ** -21
ZERO_FRAC = 1e-9
TRAJ_RTOL = 1e-4
NORM_RTOL = 1e-4
INIT_RTOL = 1e-6


class Report:
    def __init__(self):
        self.failed = []

    def row(self, name, ok, text):
        print(f"  {name:<22} {text}  {'PASS' if ok else 'FAIL'}")
        if not ok:
            self.failed.append(name)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def compare_tensor(rep, name, tess, t32, t64, norm=None):
    """Element rule and flash criterion for one tensor. norm: the scale for a zero tensor."""
    tess = tess.astype(np.float64)
    t32 = t32.astype(np.float64)
    scale = float(np.abs(t64).max()) if t64.size else 0.0
    zero = norm is not None and scale <= ZERO_FRAC * norm
    if zero:
        s = norm
        rel = float(np.abs(tess - t32).max()) / s
        what = "zero|max"
    else:
        s = scale if scale > 0 else 1.0
        big = np.abs(t64) > TINY_FRAC * scale
        rel = float((np.abs(tess - t32)[big] / np.abs(t64[big])).max()) if big.any() else 0.0
        what = "elem-rel"
    abs_err = float(np.abs(tess - t32).max())
    e_tess = float(np.abs(tess - t64).max()) / s
    e_32 = float(np.abs(t32 - t64).max()) / s
    bound = FLASH_FACTOR * e_32 + FLASH_FLOOR
    ok1 = rel <= ELEM_RTOL
    ok2 = e_tess <= bound
    rep.row(name, ok1 and ok2,
            f"{scale:9.3e} {abs_err:9.2e} {what} {rel:9.2e}<={ELEM_RTOL:.0e} {'ok ' if ok1 else 'BAD'}"
            f" | {e_tess:9.2e} {e_32:9.2e} <= {bound:9.2e} {'ok ' if ok2 else 'BAD'}")


def check_dump(path, traj, check_init=True):
    t0 = time.time()
    dump = model.Dump(path)
    s = dump.shape
    B, T = dump.inputs.shape
    print(f"oracle: {path}")
    if s.variant == "gpt":
        print(f"  B {B} T {T} V {s.V} d {s.d} L {s.L} H {s.H} d_ff {s.F} "
              f"{'tied' if s.tied else 'untied'} dropout {dump.dropout:g}")
    else:
        print(f"  {s.variant}: B {B} T {T} V {s.V} d {s.d} L {s.L} H {s.H} Hkv {s.Hkv} "
              f"d_ff {s.F} rope_theta {s.rope_theta:g} {'tied' if s.tied else 'untied'} "
              f"dropout {dump.dropout:g}")
    rep = Report()
    step = 1 if dump.dropout > 0 else None

    # --- the dump's own consistency ------------------------------------------------
    print("  -- dump")
    missing = [n for n, _, _ in s.specs if n not in dump.grads]
    bad_shape = [n for n, _, _ in s.specs
                 if n in dump.grads and dump.grads[n].shape != dump.weights[n].shape]
    rep.row("grads present", not missing and not bad_shape,
            f"missing {missing[:3]} wrong shape {bad_shape[:3]}" if missing or bad_shape
            else f"{len(s.specs)} gradients, shapes as the weights")
    if missing or bad_shape or "logits" not in dump.grads:
        if "logits" not in dump.grads:
            rep.row("logits present", False, "grads.safetensors has no logits")
        return rep
    logits_t = dump.grads["logits"]
    rep.row("logits shape", logits_t.shape == (B, T, s.V), f"{list(logits_t.shape)} vs {[B, T, s.V]}")
    if logits_t.shape != (B, T, s.V):
        return rep
    h = dump.result.get("logits_fnv1a64")
    if h is not None:
        want = int(h, 16) if isinstance(h, str) else int(h)
        got = fnv1a64(np.ascontiguousarray(logits_t, dtype="<f4").tobytes())
        rep.row("logits_fnv1a64", got == want, f"{got:016x} vs result.json {want:016x}")
    if check_init and dump.cfg.has("seed"):
        init = model.init_params(s.specs, int(dump.cfg.get("seed")))
        worst, where = 0.0, ""
        for n, ref in init.items():
            w = dump.weights[n].astype(np.float64)
            den = np.maximum(np.abs(ref.astype(np.float64)), 1e-30)
            e = float((np.abs(w - ref) / den).max())
            if e > worst:
                worst, where = e, n
        rep.row("init (MODEL.md)", worst <= INIT_RTOL,
                f"max rel {worst:9.2e} <= {INIT_RTOL:.0e}" + (f" (worst {where})" if where else ""))

    # --- the oracle, float32 and float64 -----------------------------------------------
    loss = {}
    logits = {}
    grads = {}
    for name, dt in (("32", torch.float32), ("64", torch.float64)):
        m = model.build_model(s, dump.weights, dt, dump.dropout, dump.seed)
        loss[name], logits[name], grads[name] = m.loss_and_grads(dump.inputs, dump.targets, step)
        del m
    tess_loss = dump.hexfloat(dump.result, "loss")
    t32, t64 = loss["32"], loss["64"]

    print("  -- step 1 (scale = max|t64|; abs = max|tess - t32|; the element rule; the flash rule)")
    print(f"  {'quantity':<22} {'scale':>9} {'abs':>9} {'rule':<8} {'tess-t32':>9}"
          f"       | {'err(tess)':>9} {'err(t32)':>9}    {'2e32+2^-21':>9}")
    rel = abs(tess_loss - t32) / abs(t64)
    e_tess = abs(tess_loss - t64) / abs(t64)
    e_32 = abs(t32 - t64) / abs(t64)
    bound = FLASH_FACTOR * e_32 + FLASH_FLOOR
    rep.row("loss", rel <= LOSS_RTOL and e_tess <= bound,
            f"{t64:9.6f} {abs(tess_loss - t32):9.2e} rel      {rel:9.2e}<={LOSS_RTOL:.0e} "
            f"{'ok ' if rel <= LOSS_RTOL else 'BAD'} | {e_tess:9.2e} {e_32:9.2e} <= {bound:9.2e} "
            f"{'ok ' if e_tess <= bound else 'BAD'}")
    compare_tensor(rep, "logits", logits_t, logits["32"], logits["64"])
    G = max(float(np.abs(g).max()) for g in grads["64"].values())
    for n, _, _ in s.specs:
        compare_tensor(rep, n, dump.grads[n], grads["32"][n], grads["64"][n], norm=G)
    if "grad_norm_hex" in dump.result or "grad_norm" in dump.result:
        tn = dump.hexfloat(dump.result, "grad_norm")
        n32 = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads["32"].values()))
        n64 = math.sqrt(sum(float((g ** 2).sum()) for g in grads["64"].values()))
        r = abs(tn - n32) / n64
        rep.row("grad_norm", r <= NORM_RTOL, f"{n64:9.3e} rel {r:9.2e} <= {NORM_RTOL:.0e}")

    # --- the trajectory -------------------------------------------------------------
    if traj:
        tr = dump.result.get("trajectory")
        if not tr:
            rep.row("trajectory", False, "--traj given but result.json has no trajectory")
        else:
            K = len(tr)
            settings = model.TrainSettings(dump.cfg)
            cfg_steps = dump.cfg.get("steps", required=False)
            note = "" if cfg_steps in (None, K) else f" (config says steps {cfg_steps}; K is used)"
            opt = ["AdamW", "AdamW + Muon (Newton-Schulz)", "AdamW + Muon (Polar Express)"][settings.optimizer]
            print(f"  -- trajectory: {K} steps, {opt} lr {settings.lr:g} wd {settings.weight_decay:g} "
                  f"betas ({settings.beta1:g}, {settings.beta2:g}) eps {settings.eps:g} clip "
                  f"{settings.grad_clip:g} warmup {settings.warmup}, schedule over {K} steps{note}")
            m = model.build_model(s, dump.weights, torch.float32, dump.dropout, dump.seed)
            mine = model.train_trajectory(m, settings, dump.inputs, dump.targets, K,
                                          dump.dropout > 0)
            first = dump.hexfloat(tr[0], "loss")
            rep.row("traj step 1 = loss", first == tess_loss,
                    f"{first.hex()} vs {tess_loss.hex()} (bitwise)")
            for i, rec in enumerate(tr):
                st = rec.get("step", i + 1)
                tl = dump.hexfloat(rec, "loss")
                r = abs(tl - mine[i]) / abs(mine[i])
                rep.row(f"traj step {st}", st == i + 1 and r <= TRAJ_RTOL,
                        f"tessera {tl:.7f} torch32 {mine[i]:.7f} rel {r:9.2e} <= {TRAJ_RTOL:.0e}")
    print(f"  {'PASS' if not rep.failed else 'FAIL: ' + ', '.join(rep.failed)}"
          f"  ({time.time() - t0:.1f} s)")
    return rep


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    unknown = [f for f in flags if f not in ("--traj", "--no-init")]
    if len(args) != 1 or unknown:
        sys.stderr.write("usage: check.py DIR [--traj] [--no-init]\n")
        return 2
    try:
        rep = check_dump(args[0], "--traj" in flags, "--no-init" not in flags)
    except OracleError as e:
        print(f"oracle: {e}")
        return 2
    return 0 if not rep.failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
