#!/bin/sh
# tessera eval --activations-out and bench/geometry.py (docs/COMPRESSION.md, "Geometry").
#
# 1. A 3-layer GPT trained a few steps: the file's residual.<l> is the stream entering layer
#    l of the PyTorch model (python/tessera_torch.py) on the same validation windows, within
#    the bound tests/geometry/check.py states, and is not the next layer's (a negative
#    control that must fail the same bound).
# 2. A MAPL model of 2 stages: bench/geometry.py marks its boundary and measures its
#    projector (angles, captured energy, cos r within their ranges); its --self-test checks
#    every measure on matrices whose answers are known.
# 3. Refusals: the file may not be the checkpoint it reads (2), a directory that cannot
#    take it is found before the batches run (1, nothing written), and only eval takes it.
#
# Skips (77) when $PYTHON_ORACLE (default /usr/bin/python3) cannot import PyTorch.

python=${PYTHON_ORACLE:-/usr/bin/python3}
if ! "$python" -c 'import torch' >/dev/null 2>&1; then
  echo "SKIP: $python cannot import torch (set PYTHON_ORACLE to a Python with PyTorch)"
  exit 77
fi

. "$(dirname "$0")/lib.sh"

T=$TESSERA_BIN
corpus=$TESSERA_SRCDIR/data/corpus.txt
export OMP_NUM_THREADS=1 # torch too: the machine is shared, the models are tiny
py() { "$python" -B "$@"; }

# 1. the stream against PyTorch's
ck=$TS_TMP/gpt/step-00000004.safetensors
expect_exit 0 "" "$T" train --model tiny --layers 3 --steps 4 --data "$corpus" \
  --ckpt-dir "$TS_TMP/gpt" --log "$TS_TMP/gpt.jsonl" --quiet
expect_exit 0 "" "$T" eval --ckpt "$ck" --eval-batches 2 --activations-out "$TS_TMP/gpt.act"
expect_stdout "^activations: 2 layer inputs x 512 rows x 64 -> "
TS_CHECKS=$((TS_CHECKS + 1))
if py "$TS_TESTS_DIR/geometry/check.py" residual "$ck" "$TS_TMP/gpt.act" "$corpus" \
  "$TESSERA_SRCDIR/python"; then
  pass "residual.<l> is PyTorch's stream entering layer l"
else
  fail "residual.<l> against PyTorch's stream (check.py above)"
fi

# 2. a compressed model's boundary and projector
ck2=$TS_TMP/mapl/step-00000004.safetensors
expect_exit 0 "" "$T" train --model tiny --layers 2 --steps 4 --data "$corpus" \
  --compress mapl --rank 16 --compress-stages 2 --ckpt-dir "$TS_TMP/mapl" \
  --log "$TS_TMP/mapl.jsonl" --quiet
expect_exit 0 "" "$T" eval --ckpt "$ck2" --eval-batches 1 --activations-out "$TS_TMP/mapl.act"
expect_exit 0 "" py "$TESSERA_SRCDIR/bench/geometry.py" --activations "$TS_TMP/mapl.act" \
  --ckpt "$ck2" --json "$TS_TMP/geo.json" --pairs 500
expect_stdout "^\| 1 \| 0 \| "
TS_CHECKS=$((TS_CHECKS + 1))
if py "$TS_TESTS_DIR/geometry/check.py" report "$TS_TMP/geo.json" 1 0 "$TESSERA_SRCDIR/python"; then
  pass "bench/geometry.py's report of the boundary"
else
  fail "bench/geometry.py's report (check.py above)"
fi
expect_exit 0 "" py "$TESSERA_SRCDIR/bench/geometry.py" --self-test
expect_stdout "^geometry self-test: ok$"
expect_exit 1 "no residual" py "$TESSERA_SRCDIR/bench/geometry.py" --activations "$ck2"

# 3. refusals
expect_exit 2 "^tessera eval: --activations-out .*: the --ckpt file \(it would be overwritten\)$" \
  "$T" eval --ckpt "$ck2" --activations-out "$ck2"
expect_exit 1 "^tessera: --activations-out $TS_TMP/none/x: cannot write into $TS_TMP/none " \
  "$T" eval --ckpt "$ck2" --activations-out "$TS_TMP/none/x"
[ ! -e "$TS_TMP/none" ] || fail "a refused --activations-out left $TS_TMP/none"
expect_exit 2 "^tessera train: --activations-out: not a flag of 'tessera train'" \
  "$T" train --activations-out "$TS_TMP/x.act" --steps 1

done_testing
