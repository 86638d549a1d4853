"""Checks the oracle's Philox (model.py) against src/exact/rng.c itself.

Compiles rng_print.c with src/exact/rng.c (gcc, or $CC), then compares, bit for bit,
ts_rng_u32, ts_rng_uniform and ts_rng_normal over keys that exercise every
counter word (64-bit index, 40-bit step, purpose, 64-bit seed), and a few
dropout keep-masks over consecutive indices. Exit 0: equal; 1: a difference;
77: no C compiler (nothing to compare with).

usage: check_rng.py [SRCDIR]   (default $TESSERA_SRCDIR, else the tree this file is in)
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import model

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_printer(srcdir, tmp):
    cc = os.environ.get("CC") or "gcc"
    if shutil.which(cc.split()[0]) is None:
        return None
    exe = os.path.join(tmp, "rng_print")
    cmd = cc.split() + ["-std=c11", "-O1", "-ffp-contract=off", "-I", os.path.join(srcdir, "src"),
                        os.path.join(srcdir, "src", "exact", "rng.c"), os.path.join(HERE, "rng_print.c"),
                        "-lm", "-o", exe]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit(f"check_rng: compiling rng_print.c failed: {' '.join(cmd)}")
    return exe


def main():
    srcdir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "TESSERA_SRCDIR", os.path.normpath(os.path.join(HERE, "..", "..")))
    tmp = tempfile.mkdtemp(prefix="tessera-rng-")
    try:
        exe = compile_printer(srcdir, tmp)
        if exe is None:
            print("SKIP: no C compiler to build src/exact/rng.c with")
            return 77
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
        bad = 0
        n = 0
        for line in out.splitlines():
            seed, purpose, step, index, u32, uni, nor = line.split()
            seed, purpose, step, index = int(seed), int(purpose), int(step), int(index)
            idx = np.array([index], dtype=np.uint64)
            mine = (int(model.rng_u32(seed, purpose, step, idx)[0]),
                    float(model.rng_uniform(seed, purpose, step, idx)[0]),
                    float(model.rng_normal(seed, purpose, step, idx)[0]))
            theirs = (int(u32), float.fromhex(uni), float.fromhex(nor))
            n += 1
            if mine != theirs:
                bad += 1
                if bad <= 5:
                    print(f"DIFF key (seed {seed}, purpose {purpose}, step {step}, index {index}): "
                          f"C {theirs} vs oracle {mine}")
        # keep-masks over consecutive indices, as the model draws them
        masks = [(42, 2, 3, 1000, 5000, "0.1"), (7, 3, 1, 0, 3000, "0.5"),
                 (0xfedcba9876543210, 4, 9, (1 << 32) - 700, 2000, "0.25")]
        for seed, purpose, step, base, cnt, p in masks:
            r = subprocess.run([exe, str(seed), str(purpose), str(step), str(base), str(cnt), p],
                               capture_output=True, text=True, check=True).stdout.strip()
            theirs = np.frombuffer(r.encode(), dtype=np.uint8) == ord("1")
            mine = model.dropout_keep(seed, purpose, step, base, (cnt,), float(p))
            n += 1
            if not np.array_equal(mine, theirs):
                bad += 1
                print(f"DIFF dropout mask (seed {seed}, purpose {purpose}, step {step}, "
                      f"base {base}, p {p}): {int((mine != theirs).sum())} of {cnt} differ")
        print(f"rng: {n - bad}/{n} keys and masks equal to src/exact/rng.c bit for bit: "
              f"{'PASS' if bad == 0 else 'FAIL'}")
        return 0 if bad == 0 else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
