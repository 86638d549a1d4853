"""Shows that check.py accepts a correct dump and rejects slightly wrong ones.

Writes dumps with make_fake_dump.py (correctly rounded float64 results, so a
perfect float32 implementation) into a temporary directory, requires check.py
to pass them, then perturbs one value at a time and requires the matching
check to fail:
  - one gradient element (the largest of h.0.mlp.w1) by 1e-3 relative,
  - one gradient element of a bias (the largest of h.1.attn.bv) by 1e-5 relative,
    caught by the flash criterion alone,
  - the loss by 1e-4 relative (and its hex twin),
  - one logit by 1e-3 relative (logits check and its hash),
  - the loss of trajectory step 2 by 1e-3 relative,
  - one weight (the dump would no longer be the documented initialisation).
The same for the LLaMA variant (grouped-query attention, dropout 0.1; and tied with
one key/value head): a gradient element of h.0.mlp.w3 by 1e-3, one of an RMSNorm
weight (h.1.rms2.w) by 1e-5 (the flash criterion alone), the loss, a logit, a
trajectory step and a weight (h.0.attn.wk); and dumps computed by plausible wrong
LLaMAs must fail: RoPE on the pairs (i, i + dh/2) instead of (2i, 2i+1), query head h
reading key/value head h mod Hkv instead of h // G, and RMSNorm's eps outside the
square root.
Exit 0 when every expectation holds, 1 otherwise.
"""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

import check
import model
from make_fake_dump import c_hex, make


def run(path, traj=True):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rep = check.check_dump(path, traj)
    return rep.failed, buf.getvalue()


def rewrite_st(path, name, fn):
    tensors, meta = model.read_safetensors(path)
    tensors[name] = fn(tensors[name].copy())
    model.write_safetensors(path, tensors, meta)


def bump_largest(rel):
    def fn(a):
        i = np.unravel_index(np.argmax(np.abs(a)), a.shape)
        a[i] = np.float32(a[i] * (1.0 + rel))
        return a
    return fn


def edit_result(path, fn):
    p = os.path.join(path, "result.json")
    with open(p) as f:
        r = json.load(f)
    fn(r)
    with open(p, "w") as f:
        json.dump(r, f)


def bump_loss(r):
    v = float(np.float32(float.fromhex(r["loss_hex"]) * (1.0 + 1e-4)))
    r["loss"], r["loss_hex"] = v, c_hex(v)


def bump_traj2(r):
    rec = r["trajectory"][1]
    v = float(np.float32(float.fromhex(rec["loss_hex"]) * (1.0 + 1e-3)))
    rec["loss"], rec["loss_hex"] = v, c_hex(v)


class RopeHalves(model.LLaMA):
    """Wrong: rotates the pairs (i, i + dh/2), the "rotate half" layout."""

    def _rope(self, x):
        T, half = x.shape[2], x.shape[-1] // 2
        c, s = self.cos[:T], self.sin[:T]
        x0, x1 = x[..., :half], x[..., half:]
        return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)


class KvModulo(model.LLaMA):
    """Wrong: query head hh reads key/value head hh % Hkv."""

    def _kv_heads(self, t):
        return t.repeat(1, self.s.G, 1, 1)


class RmsEpsOutside(model.LLaMA):
    """Wrong: x / (sqrt(mean x^2) + eps) * w."""

    def _rms(self, x, w):
        return x / (torch.sqrt((x * x).mean(dim=-1, keepdim=True)) + 1e-5) * w


def main():
    tmp = tempfile.mkdtemp(prefix="tessera-oracle-selftest-")
    bad = 0

    def expect(label, failed, want, log):
        nonlocal bad
        if want is None:
            ok = not failed
            what = "passes"
        else:
            ok = all(w in failed for w in want)
            what = "fails " + ", ".join(want)
        print(f"  {label:<44} {what:<40} {'ok' if ok else 'WRONG'}"
              + ("" if not failed else f"   (failed: {', '.join(failed)})"))
        if not ok:
            bad += 1
            sys.stdout.write(log)

    def perturbed(base, prefix, grad, small, weight):
        """Copies of the dump `base`, each with one value nudged just past check.py's
        tolerance, must fail on the named rows: a gradient element of `grad`, one of
        the small-gradient tensor small = (kind, name) at the tighter 1e-5, the loss, a
        logit, the trajectory's step 2, and an initial weight of `weight`."""
        cases = [
            ("gradient element x (1 + 1e-3)", [grad],
             lambda d: rewrite_st(os.path.join(d, "grads.safetensors"), grad,
                                  bump_largest(1e-3))),
            ("%s gradient element x (1 + 1e-5)" % small[0], [small[1]],
             lambda d: rewrite_st(os.path.join(d, "grads.safetensors"), small[1],
                                  bump_largest(1e-5))),
            ("loss x (1 + 1e-4)", ["loss"], lambda d: edit_result(d, bump_loss)),
            ("logit x (1 + 1e-3)", ["logits", "logits_fnv1a64"],
             lambda d: rewrite_st(os.path.join(d, "grads.safetensors"), "logits",
                                  bump_largest(1e-3))),
            ("trajectory step 2 loss x (1 + 1e-3)", ["traj step 2"],
             lambda d: edit_result(d, bump_traj2)),
            ("weight %s x (1 + 1e-3)" % weight, ["init (MODEL.md)"],
             lambda d: rewrite_st(os.path.join(d, "weights.safetensors"), weight,
                                  bump_largest(1e-3))),
        ]
        for i, (label, want, perturb) in enumerate(cases):
            d = os.path.join(tmp, f"{prefix}{i}")
            shutil.copytree(base, d)
            perturb(d)
            f, log = run(d)
            expect(label, f, want, log)

    try:
        print("oracle self-test (check.py against fake dumps)")
        base = os.path.join(tmp, "base")
        make(base, d=32, layers=2, heads=4, seq=32, batch=2, tied=True, dropout=0.1,
             traj_steps=3)
        untied = os.path.join(tmp, "untied")
        make(untied, d=32, layers=1, heads=2, seq=64, batch=2, tied=False, dropout=0.0,
             traj_steps=2, source="fp32")
        f, log = run(base)
        expect("tied, dropout 0.1, fp64-rounded values", f, None, log)
        f, log = run(untied)
        expect("untied, no dropout, fp32 values", f, None, log)

        perturbed(base, "case", "h.0.mlp.w1", ("bias", "h.1.attn.bv"), "h.0.attn.wq")
        print("oracle self-test, LLaMA variant")
        lbase = os.path.join(tmp, "llama")
        llama = dict(d=32, layers=2, heads=4, kv_heads=2, seq=32, batch=2, tied=False,
                     dropout=0.1, traj_steps=3, variant="llama")
        make(lbase, **llama)
        ltied = os.path.join(tmp, "llama-tied")
        make(ltied, d=32, layers=1, heads=4, kv_heads=1, seq=64, batch=2, tied=True,
             dropout=0.0, traj_steps=2, source="fp32", variant="llama")
        f, log = run(lbase)
        expect("llama H 4 Hkv 2, dropout 0.1, fp64-rounded", f, None, log)
        f, log = run(ltied)
        expect("llama tied, Hkv 1, no dropout, fp32 values", f, None, log)
        perturbed(lbase, "llama-case", "h.0.mlp.w3", ("RMSNorm", "h.1.rms2.w"), "h.0.attn.wk")
        for i, (label, cls) in enumerate((("RoPE on pairs (i, i + dh/2)", RopeHalves),
                                          ("query head h reads kv head h % Hkv", KvModulo),
                                          ("RMSNorm eps outside the sqrt", RmsEpsOutside))):
            d = os.path.join(tmp, f"llama-wrong{i}")
            make(d, model_cls=cls, **llama)
            f, log = run(d)
            # at initialisation the attention scores are nearly 0, so a wrong RoPE barely
            # moves the loss (3.5e-6 relative here); the q and k gradients show it
            expect(label, f, ["logits", "h.0.attn.wq", "h.0.attn.wk"], log)
        print("PASS" if bad == 0 else f"FAIL: {bad} expectation(s) not met")
        return 0 if bad == 0 else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
