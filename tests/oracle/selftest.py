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

        cases = [
            ("gradient element x (1 + 1e-3)", ["h.0.mlp.w1"],
             lambda d: rewrite_st(os.path.join(d, "grads.safetensors"), "h.0.mlp.w1",
                                  bump_largest(1e-3))),
            ("bias gradient element x (1 + 1e-5)", ["h.1.attn.bv"],
             lambda d: rewrite_st(os.path.join(d, "grads.safetensors"), "h.1.attn.bv",
                                  bump_largest(1e-5))),
            ("loss x (1 + 1e-4)", ["loss"], lambda d: edit_result(d, bump_loss)),
            ("logit x (1 + 1e-3)", ["logits", "logits_fnv1a64"],
             lambda d: rewrite_st(os.path.join(d, "grads.safetensors"), "logits",
                                  bump_largest(1e-3))),
            ("trajectory step 2 loss x (1 + 1e-3)", ["traj step 2"],
             lambda d: edit_result(d, bump_traj2)),
            ("weight h.0.attn.wq x (1 + 1e-3)", ["init (MODEL.md)"],
             lambda d: rewrite_st(os.path.join(d, "weights.safetensors"), "h.0.attn.wq",
                                  bump_largest(1e-3))),
        ]
        for i, (label, want, perturb) in enumerate(cases):
            d = os.path.join(tmp, f"case{i}")
            shutil.copytree(base, d)
            perturb(d)
            f, log = run(d)
            expect(label, f, want, log)
        print("PASS" if bad == 0 else f"FAIL: {bad} expectation(s) not met")
        return 0 if bad == 0 else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
