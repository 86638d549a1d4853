#!/bin/sh
# tessera against the independent PyTorch oracle (tests/oracle/, docs/GOLDEN.md).
#
# 1. The oracle's own checks: its Philox equals src/rng.c bit for bit, and
#    check.py accepts a correct dump and rejects slightly perturbed ones.
# 2. Every golden/<name>/ directory: step-1 loss, logits and gradients and the
#    K-step trajectory, within the tolerances stated in tests/oracle/check.py.
# 3. A fresh dump of the tiny model with dropout 0.1 from $TESSERA_BIN, so the
#    dropout masks (purposes 2, 3, 4) are checked against the oracle too.
#
# Exit 77 (skip) when PyTorch cannot be imported; also when there is no golden
# directory, after the other parts have run (any failure still fails).

srcdir=${TESSERA_SRCDIR:-.}
python=${PYTHON_ORACLE:-/usr/bin/python3}
[ -n "$python" ] || python=/usr/bin/python3
oracle="$srcdir/tests/oracle"

if [ -f "$srcdir/tests/lib.sh" ]; then
  . "$srcdir/tests/lib.sh"
fi

if ! "$python" -c 'import torch, numpy' >/dev/null 2>&1; then
  echo "SKIP: $python cannot import torch and numpy (set PYTHON_ORACLE to a Python with PyTorch)"
  exit 77
fi

# -B: write no bytecode into the (possibly read-only) source tree.
py() { "$python" -B "$@"; }

failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}

# --- 1. the oracle itself ----------------------------------------------------------
py "$oracle/check_rng.py" "$srcdir"
rc=$?
case $rc in
0) ;;
77) echo "note: Philox not compared with src/rng.c (no C compiler)" ;;
*) fail "the oracle's Philox differs from src/rng.c" ;;
esac
py "$oracle/selftest.py" || fail "check.py self-test"

# --- 2. the golden files -------------------------------------------------------------
n_golden=0
for dir in "$srcdir"/golden/*/; do
  [ -f "$dir/result.json" ] || continue
  n_golden=$((n_golden + 1))
  py "$oracle/check.py" "$dir" --traj || fail "golden $(basename "$dir")"
done

# --- 3. a fresh dump with dropout -------------------------------------------------------
if [ -n "$TESSERA_BIN" ] && [ -x "$TESSERA_BIN" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessera-oracle.XXXXXX") || exit 99
  trap 'rm -rf "$tmp"' EXIT INT TERM
  # the bundled corpus, wherever the build runs from
  set -- --out "$tmp/dropout" --model tiny --dropout 0.1 --traj-steps 3
  if [ -f "$srcdir/data/corpus.txt" ]; then
    set -- "$@" --data "$srcdir/data/corpus.txt"
  fi
  if "$TESSERA_BIN" dump "$@" >"$tmp/dump.out" 2>&1; then
    py "$oracle/check.py" "$tmp/dropout" --traj || fail "fresh dump, tiny, dropout 0.1"
  else
    cat "$tmp/dump.out"
    fail "$TESSERA_BIN dump --model tiny --dropout 0.1 did not run"
  fi
else
  echo "note: TESSERA_BIN (${TESSERA_BIN:-unset}) is not an executable; no fresh dropout dump checked"
fi

if [ $failed -ne 0 ]; then
  exit 1
fi
if [ $n_golden -eq 0 ]; then
  echo "SKIP: no golden directory under $srcdir/golden/ (the rest passed)"
  exit 77
fi
echo "PASS: $n_golden golden director$( [ $n_golden -eq 1 ] && echo y || echo ies) match the oracle"
exit 0
