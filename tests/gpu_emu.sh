#!/bin/sh
# The trainer with `--device cuda` on the emulated GPU (tests/tessera_emu: the
# real src/gpu/ kernels, allocator, backend selection and NCCL communicator,
# compiled by g++ against tests/gpu_emu/; docs/GPU.md). What tests/gpu/run.sh
# checks on a real GPU, as far as a CPU can:
#
#  - golden: every golden/*/ configuration dumped on the GPU in the exact tier
#    (fp32) is the CPU's golden files byte for byte; two of them with --fast
#    (cuBLAS's products) within the oracle's fp32 bounds
#    (tests/oracle/compare_dumps.py), and in bf16 within the bf16 bounds of
#    tests/gpu/run.sh;
#  - schedule: the emulator's reversed thread and block order
#    (TS_EMU_SCHEDULE=reversed) dumps the same bytes: no result depends on
#    the order the GPU happens to run threads in;
#  - layouts: every parallel strategy on 2 (or 4) ranks with --device cuda
#    is identical to the serial CPU run (the tolerance-tier layouts, megatron
#    and ring-zigzag, within --rtol 1e-4: docs/EXACTNESS.md), each both over
#    MPI on managed memory (one device for all ranks) and over NCCL
#    (TS_EMU_DEVICES: a device per rank), and the two communicators log
#    identical results;
#  - options: --checkpoint, --fused-ce, --tiled-mlp, Muon, evaluation and the
#    other compression modes identical to the CPU run with the same flags; a
#    run resumed from a GPU checkpoint identical to the straight run; a CPU
#    checkpoint evaluated on the GPU to the CPU's loss;
#  - memory: a model too big for the (emulated) GPU is refused up front with
#    one line, and the step record logs the device's peak.
#
# Not covered (docs/GPU.md): nvcc's code, the real cuBLAS and NCCL, managed
# memory's page migration, concurrency between warps and blocks, speed.
. "$(dirname "$0")/lib.sh"

EMU=${TESSERA_BUILDDIR:-$(dirname "$TESSERA_BIN")}/tests/tessera_emu
[ -x "$EMU" ] || skip "no tests/tessera_emu: a build with --enable-cuda tests the real backend (tests/test_gpu, tests/gpu/run.sh)"
PY=${PYTHON_ORACLE:-/usr/bin/python3}
"$PY" -c 'import numpy, torch' 2>/dev/null || skip "no Python with numpy and torch at $PY (the comparisons of dumps need them)"
. "$(dirname "$0")/mpi_lib.sh"
T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
GOLDEN=$TESSERA_SRCDIR/golden
CMP=$TESSERA_SRCDIR/tests/oracle/compare_dumps.py

# --- golden files -----------------------------------------------------------------------
# The exact tier (fp32): every file of every golden configuration, byte for byte.
# exact NAME: dumps NAME on the emulated GPU into TS_TMP/fp32-NAME and cmps it
exact() {
  name=$1 out=$TS_TMP/fp32-$1
  # shellcheck disable=SC2046  # args holds several words on purpose
  expect_exit 0 "" timeout 300 "$EMU" dump --device cuda --out "$out" --data "$DATA" \
    $(cat "$GOLDEN/$name/args") || return 1
  for f in config.json weights.safetensors grads.safetensors result.json; do
    TS_CHECKS=$((TS_CHECKS + 1))
    if cmp -s "$GOLDEN/$name/$f" "$out/$f"; then
      pass "$name/$f identical on the GPU (exact tier)"
    else
      fail "$name/$f: the GPU's differs from the golden file (exact tier): $(cmp "$GOLDEN/$name/$f" "$out/$f" 2>&1 | head -n 1)"
    fi
  done
}
# The fast tier (--fast, bf16): within the oracle's bounds.
# tolerance NAME OUT FLAGS [-- COMPARE_OPTIONS...]
tolerance() {
  name=$1 out=$TS_TMP/$2 flags=$3
  shift 3
  [ "${1:-}" = -- ] && shift
  # shellcheck disable=SC2046,SC2086  # args holds several words on purpose
  expect_exit 0 "" timeout 300 "$EMU" dump --device cuda $flags --out "$out" --data "$DATA" \
    $(cat "$GOLDEN/$name/args") || return 1
  TS_CHECKS=$((TS_CHECKS + 1))
  if r=$("$PY" -B "$CMP" "$@" "$GOLDEN/$name" "$out" 2>&1); then
    pass "$name $flags: $(echo "$r" | grep -E '^(loss|grads)' | tr -s ' ' | paste -sd';' -)"
  else
    fail "$name $flags: $(echo "$r" | paste -sd';' -)"
  fi
}
n=0
for dir in "$GOLDEN"/*/; do
  [ -f "$dir/args" ] || continue
  n=$((n + 1))
  exact "$(basename "$dir")"
done
[ $n -gt 0 ] || fail "no golden configurations under $GOLDEN"
# fp32 --fast (cuBLAS's products): the oracle's fp32 bounds
for name in gpt-tied llama-gqa; do
  tolerance $name fast-$name --fast
done
# bf16 (tests/gpu/run.sh states the bounds): products and attention read operands
# rounded to 8 significant bits
for name in gpt-tied llama-gqa; do
  tolerance $name bf16-$name "--precision bf16" -- --loss-rtol 1e-2 --rtol 5e-2 --traj-rtol 1e-2
done

# --- the order threads run in ---------------------------------------------------------------
for name in llama-mqa-dropout gpt-dropout; do
  out=$TS_TMP/reversed-$name
  # shellcheck disable=SC2046
  expect_exit 0 "" env TS_EMU_SCHEDULE=reversed timeout 300 "$EMU" dump --device cuda --out "$out" \
    --data "$DATA" $(cat "$GOLDEN/$name/args") || continue
  for f in weights.safetensors grads.safetensors result.json; do
    TS_CHECKS=$((TS_CHECKS + 1))
    if cmp -s "$TS_TMP/fp32-$name/$f" "$out/$f"; then
      pass "$name: $f identical with threads and blocks in reverse order"
    else
      fail "$name: $f differs with threads and blocks in reverse order"
    fi
  done
done

# --- options: each GPU run against the CPU run with the same flags ---------------------------
ocommon="--batch 2 --steps 3 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"
# option FLAGS
option() {
  C=$TS_TMP/opt-cpu.jsonl G=$TS_TMP/opt-gpu.jsonl
  rm -f "$C" "$G"
  # shellcheck disable=SC2086
  expect_exit 0 "" "$T" train $1 $ocommon --log "$C" || return
  # shellcheck disable=SC2086
  expect_exit 0 "" timeout 180 "$EMU" train $1 $ocommon --device cuda --log "$G" || return
  TS_CHECKS=$((TS_CHECKS + 1))
  out=$("$T" compare "$C" "$G" 2>&1)
  [ "$out" = identical ] && pass "$1: GPU against CPU: identical" ||
    fail "$1: GPU against CPU (exact tier): $out"
}
option "--model tiny --checkpoint"
option "--model tiny --fused-ce"
option "--model tiny --untied --fused-ce"
option "--model llama-tiny --tiled-mlp"
option "--model tiny --untied --tiled-mlp --fused-ce --dropout 0.1"
option "--model tiny --optimizer muon"
option "--model llama-tiny --optimizer muon-pe"
option "--model tiny --eval-every 1"
option "--model tiny --compress mapl-unconstrained --rank 16 --compress-stages 2"
option "--model tiny --compress mapl-frozen --rank 16 --compress-stages 2"
# recomputing a layer runs the same kernels: the same bits as keeping it
P1=$TS_TMP/plain.jsonl P2=$TS_TMP/recomputed.jsonl
expect_exit 0 "" "$EMU" train --model tiny $ocommon --device cuda --log "$P1" &&
  expect_exit 0 "" "$EMU" train --model tiny $ocommon --device cuda --checkpoint --log "$P2" &&
  expect_exit 0 "" "$T" compare "$P1" "$P2" && expect_stdout "^identical"
# a GPU run resumed from a checkpoint logs what the straight run logged
saved=$TESSERA_BIN
TESSERA_BIN=$EMU
expect_resume_identical 1 3 "" "" --model llama-tiny $ocommon --device cuda
TESSERA_BIN=$saved

# a CPU checkpoint evaluated on the GPU: the CPU's loss, every digit printed
CK=$TS_TMP/eval-ck
expect_exit 0 "" "$T" train --model llama-tiny $ocommon --ckpt-dir "$CK" &&
  expect_exit 0 "" "$T" eval --ckpt "$CK/step-00000003.safetensors" --data "$DATA" &&
  cpu=$(sed -n 's/.*val loss \([0-9.]*\) .*/\1/p' "$TS_OUT") &&
  expect_exit 0 "" "$EMU" eval --device cuda --ckpt "$CK/step-00000003.safetensors" --data "$DATA" &&
  gpu=$(sed -n 's/.*val loss \([0-9.]*\) .*/\1/p' "$TS_OUT") && {
  TS_CHECKS=$((TS_CHECKS + 1))
  if [ -n "$cpu" ] && [ "$gpu" = "$cpu" ]; then
    pass "eval of a CPU checkpoint: GPU $gpu, CPU $cpu"
  else
    fail "eval of a CPU checkpoint: GPU '$gpu' against CPU '$cpu' (exact tier: the same)"
  fi
}

# --- memory: the fit check against the GPU's, and its peak in the log -----------------------
# (TS_EMU_DEVICE_MIB sets what the emulated device reports)
expect_exit 1 "but this rank's share of its GPU is 0\.2 GiB.*fewer ranks on this GPU" \
  env TS_EMU_DEVICE_MIB=256 "$EMU" train --device cuda --model small --steps 1 --data "$DATA"
L=$TS_TMP/peak.jsonl
expect_exit 0 "" "$EMU" train --device cuda --model tiny --batch 2 --steps 1 --eval-batches 1 \
  --data "$DATA" --log "$L" && expect_stdout "MB GPU"
TS_CHECKS=$((TS_CHECKS + 1))
peak=$(grep '"type":"step"' "$L" | sed -n 's/.*"device_peak_mb":\([0-9.]*\).*/\1/p')
# the parameters alone: 4 bytes each, and as much again for gradients and each AdamW moment
np=$(sed -n 's/.*"params":\([0-9]*\).*/\1/p' "$L")
if [ -n "$peak" ] && [ -n "$np" ] && awk -v p="$peak" -v n="$np" 'BEGIN { exit !(p * 1048576 >= 16 * n && p < 1024) }'; then
  pass "device_peak_mb $peak for $np parameters"
else
  fail "device_peak_mb '$peak' for '$np' parameters: expected at least 16 bytes a parameter"
fi

# --- layouts, over MPI and over NCCL -------------------------------------------------------------
common="--batch 2 --steps 2 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"
# layout RANKS MODEL_FLAGS LAYOUT_FLAGS [tolerance]: the layout on emulated GPUs, over MPI
# on managed memory (one device) and over NCCL (a device per rank), against the serial
# CPU run: identical in the exact tier, within --rtol 1e-4 for a tolerance-tier layout
# (docs/EXACTNESS.md); the one-GPU run is identical to the CPU's as well
layout() {
  n=$1 flags=$2 lay=$3 tier=${4:-exact}
  X=$TS_TMP/cpu.jsonl S=$TS_TMP/serial.jsonl M=$TS_TMP/mpi.jsonl N=$TS_TMP/nccl.jsonl
  rm -f "$X" "$S" "$M" "$N"
  # shellcheck disable=SC2086
  expect_exit 0 "" timeout 180 "$T" train $flags $common --log "$X" || return
  # shellcheck disable=SC2086
  expect_exit 0 "" timeout 180 "$EMU" train $flags $common --device cuda --log "$S" || return
  # shellcheck disable=SC2086
  expect_exit 0 "" env TS_EMU_DEVICES=1 timeout -k 10 180 $MPIEXEC -n "$n" "$EMU" train $flags $common \
    --device cuda $lay --log "$M" || return
  # shellcheck disable=SC2086
  expect_exit 0 "" env TS_EMU_DEVICES="$n" timeout -k 10 180 $MPIEXEC -n "$n" "$EMU" train $flags $common \
    --device cuda $lay --log "$N" || return
  for f in "$M:mpi" "$N:nccl"; do
    TS_CHECKS=$((TS_CHECKS + 1))
    grep -q "\"comm\":\"${f#*:}\"" "${f%:*}" && pass "$flags | $lay: the run log names ${f#*:}" ||
      fail "$flags | $lay: expected \"comm\":\"${f#*:}\" in the config record: $(head -c 300 "${f%:*}")"
  done
  TS_CHECKS=$((TS_CHECKS + 1))
  out=$("$T" compare "$X" "$S" 2>&1)
  [ "$out" = identical ] && pass "$flags: one GPU identical to the CPU" ||
    fail "$flags: one GPU against the CPU: $out"
  for f in "$M:mpi" "$N:nccl"; do
    TS_CHECKS=$((TS_CHECKS + 1))
    if [ "$tier" = exact ]; then
      out=$("$T" compare "$X" "${f%:*}" 2>&1)
      [ "$out" = identical ] && pass "$flags | $lay (${f#*:}): identical to the serial CPU run" ||
        fail "$flags | $lay (${f#*:}) against the serial CPU run: $out"
    else
      out=$("$T" compare --rtol 1e-4 "$X" "${f%:*}" 2>&1) &&
        pass "$flags | $lay (${f#*:}, tolerance tier): $out" ||
        fail "$flags | $lay (${f#*:}) against the serial CPU run: $out"
    fi
  done
  TS_CHECKS=$((TS_CHECKS + 1))
  out=$("$T" compare "$M" "$N" 2>&1)
  [ "$out" = identical ] && pass "$flags | $lay: nccl and mpi identical" ||
    fail "$flags | $lay: nccl against mpi: $out"
}
layout 2 "--model tiny" "--dp 2"
layout 2 "--model tiny --dropout 0.1" "--sp 2 --sp-mode lss"
layout 2 "--model tiny" "--sp 2 --sp-mode lss-basic"
layout 2 "--model tiny" "--sp 2 --sp-mode megatron" tolerance
layout 2 "--model tiny" "--sp 2 --sp-mode ring-zigzag" tolerance
layout 2 "--model llama-tiny --dropout 0.1" "--sp 2 --sp-mode ulysses"
layout 2 "--model llama-tiny" "--sp 2 --sp-mode upipe --upipe-u 2"
layout 2 "--model llama-tiny" "--sp 2 --sp-mode ring"
layout 4 "--model tiny --dropout 0.1" "--sp 4 --sp-mode usp --ulysses-degree 2"
layout 2 "--model tiny" "--pp 2 --microbatches 2"
layout 2 "--model llama-tiny" "--pp 2 --microbatches 2 --schedule gpipe"
layout 2 "--model tiny --fused-ce" "--pp 2 --microbatches 2"
layout 2 "--model tiny --compress mapl --rank 16 --compress-stages 2" "--pp 2"
layout 2 "--model tiny --compress mapl-vq --rank 16 --compress-stages 2" "--pp 2"
layout 4 "--model llama-tiny" "--dp 2 --sp 2 --sp-mode ulysses"
layout 4 "--model tiny" "--pp 2 --sp 2 --microbatches 2"

# --zero 2 and 3 give a layer's host pages back between uses: not on a GPU
expect_exit 2 "--zero 3 with --device cuda: not built" timeout -k 10 180 $MPIEXEC -n 2 "$EMU" train \
  --model tiny --steps 1 --data "$DATA" --dp 2 --device cuda --zero 3 --log "$TS_TMP/never.jsonl"
done_testing
