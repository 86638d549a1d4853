#!/bin/sh
# tessera against the independent PyTorch oracle (tests/oracle/, docs/GOLDEN.md).
#
# 1. The oracle's own checks: its Philox equals src/exact/rng.c bit for bit, and
#    check.py accepts a correct dump and rejects slightly perturbed ones.
# 2. Every golden/<name>/ directory: step-1 loss, logits and gradients and the
#    K-step trajectory, within the tolerances stated in tests/oracle/check.py.
# 3. Fresh dumps with dropout 0.1 (tiny, and llama-tiny with one key/value
#    head), so the dropout masks (purposes 2, 3, 4 of docs/MODEL.md) are
#    checked against the oracle too.
#
# Skips (77) when $PYTHON_ORACLE (default /usr/bin/python3) cannot import
# PyTorch; also when there is no golden directory, after parts 1 and 3 have
# run (a failure there still fails the test).

python=${PYTHON_ORACLE:-/usr/bin/python3}
if ! "$python" -c 'import torch, numpy' >/dev/null 2>&1; then
  echo "SKIP: $python cannot import torch and numpy (set PYTHON_ORACLE to a Python with PyTorch)"
  exit 77
fi

. "$(dirname "$0")/lib.sh"

oracle=$TESSERA_SRCDIR/tests/oracle

# check LABEL SCRIPT ARGS...: one oracle script; -B keeps bytecode out of the
# (possibly read-only) source tree.
check() {
  local label=$1
  shift
  TS_CHECKS=$((TS_CHECKS + 1))
  if "$python" -B "$@"; then
    pass "$label"
  else
    fail "$label"
  fi
}

# --- 1. the oracle itself ----------------------------------------------------------
TS_CHECKS=$((TS_CHECKS + 1))
"$python" -B "$oracle/check_rng.py" "$TESSERA_SRCDIR"
case $? in
0) pass "the oracle's Philox equals src/exact/rng.c" ;;
77) echo "note: no C compiler, so the oracle's Philox was not compared with src/exact/rng.c" ;;
*) fail "the oracle's Philox differs from src/exact/rng.c" ;;
esac
check "check.py accepts correct dumps and rejects perturbed ones" "$oracle/selftest.py"

# --- 2. the golden files -------------------------------------------------------------
n_golden=0
for dir in "$TESSERA_SRCDIR"/golden/*/; do
  [ -f "$dir/result.json" ] || continue
  n_golden=$((n_golden + 1))
  check "golden/$(basename "$dir") matches the oracle" "$oracle/check.py" "$dir" --traj
done

# --- 3. a fresh dump with dropout ----------------------------------------------------
set -- dump --out "$TS_TMP/dropout" --model tiny --dropout 0.1 --traj-steps 3
if [ -f "$TESSERA_SRCDIR/data/corpus.txt" ]; then
  set -- "$@" --data "$TESSERA_SRCDIR/data/corpus.txt" # wherever make runs from
fi
if expect_exit 0 "" "$TESSERA_BIN" "$@"; then
  check "fresh dump (tiny, dropout 0.1) matches the oracle" "$oracle/check.py" \
    "$TS_TMP/dropout" --traj
fi

# and of the LLaMA variant: one key/value head for every query head, dropout
set -- dump --out "$TS_TMP/llama" --model llama-tiny --kv-heads 1 --dropout 0.1 --traj-steps 3
if [ -f "$TESSERA_SRCDIR/data/corpus.txt" ]; then
  set -- "$@" --data "$TESSERA_SRCDIR/data/corpus.txt"
fi
if expect_exit 0 "" "$TESSERA_BIN" "$@"; then
  check "fresh dump (llama-tiny, 1 kv head, dropout 0.1) matches the oracle" "$oracle/check.py" \
    "$TS_TMP/llama" --traj
fi

# and the Muon hybrid (Newton-Schulz; Polar Express on the LLaMA) against the oracle's
# own Muon in torch: the trajectory's losses within the stated tolerance
set -- dump --out "$TS_TMP/muon" --model tiny --optimizer muon --traj-steps 4
set -- "$@" --data "$TESSERA_SRCDIR/data/corpus.txt"
if expect_exit 0 "" "$TESSERA_BIN" "$@"; then
  check "fresh dump (tiny, --optimizer muon) matches the oracle's Muon" "$oracle/check.py" \
    "$TS_TMP/muon" --traj
fi
set -- dump --out "$TS_TMP/muon-pe" --model llama-tiny --optimizer muon-pe --traj-steps 4
set -- "$@" --data "$TESSERA_SRCDIR/data/corpus.txt"
if expect_exit 0 "" "$TESSERA_BIN" "$@"; then
  check "fresh dump (llama-tiny, --optimizer muon-pe) matches the oracle's Muon" \
    "$oracle/check.py" "$TS_TMP/muon-pe" --traj
fi

if [ "$TS_FAILS" -eq 0 ] && [ "$n_golden" -eq 0 ]; then
  skip "no golden directory under $TESSERA_SRCDIR/golden/ (the other $TS_CHECKS checks passed)"
fi
done_testing
