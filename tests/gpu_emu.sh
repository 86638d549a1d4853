#!/bin/sh
# The trainer with `--device cuda` on the emulated GPU (tests/tessera_emu: the
# real src/gpu/ kernels, allocator, backend selection and NCCL communicator,
# compiled by g++ against tests/gpu_emu/; docs/GPU.md). What tests/gpu/run.sh
# checks on a real GPU, as far as a CPU can:
#
#  - golden: every golden/*/ configuration dumped on the GPU agrees with the
#    CPU's golden files within the oracle's fp32 bounds
#    (tests/oracle/compare_dumps.py), and two of them in bf16 within the bf16
#    bounds of tests/gpu/run.sh;
#  - schedule: the emulator's reversed thread and block order
#    (TS_EMU_SCHEDULE=reversed) dumps the same bytes: no result depends on
#    the order the GPU happens to run threads in;
#  - layouts: every parallel strategy on 2 (or 4) ranks with --device cuda
#    equals the 1-rank GPU run within --rtol 1e-4 (on the GPU layouts are the
#    tolerance tier: DESIGN.md), each both over MPI on managed memory (one
#    device for all ranks) and over NCCL (TS_EMU_DEVICES: a device per
#    rank), and the two communicators log identical results: comm_nccl.cu's
#    tree reductions, staging and host-buffer paths give comm_mpi.c's bits;
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
# golden NAME OUT [--precision bf16 COMPARE_OPTIONS...]
golden() {
  name=$1 out=$TS_TMP/$2
  shift 2
  prec="" opts=""
  if [ "${1:-}" = --precision ]; then prec="--precision $2" && shift 2 && opts="$*"; fi
  # shellcheck disable=SC2046,SC2086  # args holds several words on purpose
  expect_exit 0 "" timeout 300 "$EMU" dump --device cuda $prec --out "$out" --data "$DATA" \
    $(cat "$GOLDEN/$name/args") || return 1
  TS_CHECKS=$((TS_CHECKS + 1))
  # shellcheck disable=SC2086
  if r=$("$PY" -B "$CMP" $opts "$GOLDEN/$name" "$out" 2>&1); then
    pass "$name ${prec:-fp32}: $(echo "$r" | grep -E '^(loss|grads)' | tr -s ' ' | paste -sd';' -)"
  else
    fail "$name ${prec:-fp32}: $(echo "$r" | paste -sd';' -)"
  fi
}
n=0
for dir in "$GOLDEN"/*/; do
  [ -f "$dir/args" ] || continue
  n=$((n + 1))
  golden "$(basename "$dir")" "fp32-$(basename "$dir")"
done
[ $n -gt 0 ] || fail "no golden configurations under $GOLDEN"
# bf16 (tests/gpu/run.sh states the bounds): products and attention read operands
# rounded to 8 significant bits
for name in gpt-tied llama-gqa; do
  golden $name bf16-$name --precision bf16 --loss-rtol 1e-2 --rtol 5e-2 --traj-rtol 1e-2
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
common="--batch 2 --steps 2 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1 --device cuda"
# layout RANKS MODEL_FLAGS LAYOUT_FLAGS
layout() {
  n=$1 flags=$2 lay=$3
  S=$TS_TMP/serial.jsonl M=$TS_TMP/mpi.jsonl N=$TS_TMP/nccl.jsonl
  rm -f "$S" "$M" "$N"
  # shellcheck disable=SC2086
  expect_exit 0 "" timeout 180 "$EMU" train $flags $common --log "$S" || return
  # shellcheck disable=SC2086
  expect_exit 0 "" env TS_EMU_DEVICES=1 timeout 180 $MPIEXEC -n "$n" "$EMU" train $flags $common $lay \
    --log "$M" || return
  # shellcheck disable=SC2086
  expect_exit 0 "" env TS_EMU_DEVICES="$n" timeout 180 $MPIEXEC -n "$n" "$EMU" train $flags $common $lay \
    --log "$N" || return
  for f in "$M:mpi" "$N:nccl"; do
    TS_CHECKS=$((TS_CHECKS + 1))
    grep -q "\"comm\":\"${f#*:}\"" "${f%:*}" && pass "$flags | $lay: the run log names ${f#*:}" ||
      fail "$flags | $lay: expected \"comm\":\"${f#*:}\" in the config record: $(head -c 300 "${f%:*}")"
  done
  TS_CHECKS=$((TS_CHECKS + 1))
  out=$("$T" compare --rtol 1e-4 "$S" "$M" 2>&1) && pass "$flags | $lay: $out" ||
    fail "$flags | $lay against 1 rank: $out"
  TS_CHECKS=$((TS_CHECKS + 1))
  out=$("$T" compare "$M" "$N" 2>&1)
  [ "$out" = identical ] && pass "$flags | $lay: nccl and mpi identical" ||
    fail "$flags | $lay: nccl against mpi: $out"
}
layout 2 "--model tiny" "--dp 2"
layout 2 "--model tiny --dropout 0.1" "--sp 2 --sp-mode lss"
layout 2 "--model tiny" "--sp 2 --sp-mode lss-basic"
layout 2 "--model tiny" "--sp 2 --sp-mode megatron"
layout 2 "--model tiny" "--sp 2 --sp-mode ring-zigzag"
layout 2 "--model llama-tiny --dropout 0.1" "--sp 2 --sp-mode ulysses"
layout 2 "--model llama-tiny" "--sp 2 --sp-mode upipe --upipe-u 2"
layout 2 "--model llama-tiny" "--sp 2 --sp-mode ring"
layout 2 "--model tiny" "--pp 2 --microbatches 2"
layout 2 "--model llama-tiny" "--pp 2 --microbatches 2 --schedule gpipe"
layout 2 "--model tiny --compress mapl --rank 16 --compress-stages 2" "--pp 2"
layout 2 "--model tiny --compress mapl-vq --rank 16 --compress-stages 2" "--pp 2"
layout 4 "--model llama-tiny" "--dp 2 --sp 2 --sp-mode ulysses"
layout 4 "--model tiny" "--pp 2 --sp 2 --microbatches 2"

done_testing
