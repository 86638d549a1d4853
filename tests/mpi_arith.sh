#!/bin/sh
# Ranks agree on their arithmetic (src/run/fingerprint.c, src/run/agree.c).
#
# 1. Ranks that run different instruction sets (TESSERA_ISA: avx512, avx2,
#    generic, as this CPU has them) and are told to use different OpenBLAS
#    kernels (OPENBLAS_CORETYPE) train --dp 2, --sp 2 (lss) and --sp 2
#    --sp-mode ulysses, GPT and LLaMA, to the serial run's bits: every
#    product is tessera's own (src/cpu/mm.h), so neither choice enters a
#    result.
# 2. A rank whose C library is another's (every exp, log, pow, sin, cos and
#    tanh, float and double, one ulp off: tests/arith_shim.c) still trains
#    to the serial bits: the exact path calls none of them (src/exact/exactmath.h).
# 3. A rank that computes differently is refused before any step, with one
#    line naming the rank and the first part that differs, and no hang: a C
#    library whose fmaf is not fused, under the generic kernels that call it;
#    a CPU that flushes subnormals to zero. The same unfused fmaf under the
#    vector kernels, which never call it, is no difference and trains.
# Two ranks, one thread each, three steps of the tiny models: this machine
# has few cores and waiting ranks busy-poll.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
BASE="--batch 4 --steps 3 --warmup 2 --eval-batches 1 --data $DATA --quiet --threads 1"
RUN_MPI="timeout -k 10 120 $MPIEXEC"

# the instruction sets this CPU and build run, widest first
ISAS=""
for isa in avx512 avx2 neon generic; do
  TESSERA_ISA=$isa "$T" info >/dev/null 2>&1 && ISAS="$ISAS $isa"
done
set -- $ISAS
WIDE=$1
shift $(($# - 1))
NARROW=$1 # generic: there is always one
MID=$WIDE
[ "$(echo $ISAS | wc -w)" -ge 3 ] && MID=$(echo $ISAS | cut -d' ' -f2)
echo "instruction sets here:$ISAS"
# OpenBLAS's widest kernel this CPU runs (OpenBLAS still measures the roof:
# a kernel the CPU cannot run dies of SIGILL there): SkylakeX needs AVX-512
BLAS_WIDE=SkylakeX
grep -qw avx512f /proc/cpuinfo 2>/dev/null || BLAS_WIDE=Haswell

# mixed LABEL MODEL LAYOUT ISA0 CORE0 ISA1 CORE1: rank 0 and rank 1 on their
# own instruction set and OpenBLAS kernel; the log must be the serial one's.
mixed() {
  label=$1 model=$2 lay=$3
  L=$TS_TMP/$label.jsonl
  # shellcheck disable=SC2086
  expect_exit 0 "" $RUN_MPI -n 1 env TESSERA_ISA=$4 OPENBLAS_CORETYPE=$5 "$T" train --model $model \
    $BASE $lay --log "$L" : -n 1 env TESSERA_ISA=$6 OPENBLAS_CORETYPE=$7 "$T" train --model $model \
    $BASE $lay --log "$L" || return
  expect_compare identical "$label: rank 0 $4 ($5), rank 1 $6 ($7), against the serial run" \
    "$TS_TMP/serial-$model.jsonl" "$L"
}

for model in tiny llama-tiny; do
  # shellcheck disable=SC2086
  expect_exit 0 "" "$T" train --model $model $BASE --log "$TS_TMP/serial-$model.jsonl"
  # the serial run on the narrowest path too
  # shellcheck disable=SC2086
  expect_exit 0 "" env TESSERA_ISA=$NARROW "$T" train --model $model $BASE \
    --log "$TS_TMP/serial-$model-$NARROW.jsonl"
  expect_compare identical "$model: serial on $NARROW, against serial on $WIDE" \
    "$TS_TMP/serial-$model.jsonl" "$TS_TMP/serial-$model-$NARROW.jsonl"
done
mixed dp-tiny tiny "--dp 2" "$WIDE" $BLAS_WIDE "$NARROW" Sandybridge
mixed lss-tiny tiny "--sp 2" "$NARROW" Haswell "$MID" $BLAS_WIDE
mixed ulysses-tiny tiny "--sp 2 --sp-mode ulysses" "$MID" Sandybridge "$WIDE" Haswell
mixed dp-llama llama-tiny "--dp 2" "$NARROW" Haswell "$WIDE" $BLAS_WIDE
mixed ulysses-llama llama-tiny "--sp 2 --sp-mode ulysses" "$WIDE" Sandybridge "$NARROW" Haswell

# --- the shims: a rank whose library or CPU computes differently -----------------------
CC=${CC:-cc}
if ! command -v "${CC%% *}" >/dev/null 2>&1 || [ "$(uname -s)" != Linux ]; then
  echo "note: no C compiler ($CC) or not Linux: the preloaded libraries are not tried"
  done_testing
fi
for kind in FMAF LIBM FTZ; do
  if ! $CC -shared -fPIC -O2 -ffp-contract=off -DSHIM_$kind -o "$TS_TMP/shim-$kind.so" \
    "$TESSERA_SRCDIR/tests/arith_shim.c" -ldl -lm 2>"$TS_TMP/cc.err"; then
    fail "building tests/arith_shim.c (SHIM_$kind): $(head -c 300 "$TS_TMP/cc.err")"
    done_testing
  fi
done

# 2. another C library's transcendental functions: the same bits
for model in tiny llama-tiny; do
  L=$TS_TMP/libm-$model.jsonl
  # shellcheck disable=SC2086
  expect_exit 0 "" $RUN_MPI -n 1 "$T" train --model $model $BASE --dp 2 --log "$L" \
    : -n 1 env LD_PRELOAD="$TS_TMP/shim-LIBM.so" "$T" train --model $model $BASE --dp 2 --log "$L" &&
    expect_compare identical "$model --dp 2, rank 1's exp, log, pow, sin, cos, tanh one ulp off" \
      "$TS_TMP/serial-$model.jsonl" "$L"
done

# 3. refused: one line, every rank ends at once, nothing trained
refused() { # LABEL PART RANK1_ENV...
  label=$1 part=$2
  shift 2
  L=$TS_TMP/refused.jsonl
  rm -f "$L"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  expect_exit 1 "^tessera train: rank 1's arithmetic differs from rank 0's: fingerprint 0x[0-9a-f]{16} vs 0x[0-9a-f]{16}, first in its $part \(a different build, compiler flags, libm, or CPU mode\); see docs/PORTABILITY\.md$" \
    $RUN_MPI -n 1 "$T" train --model tiny $BASE --dp 2 --log "$L" \
    : -n 1 env "$@" "$T" train --model tiny $BASE --dp 2 --log "$L" || return
  dt=$(($(date +%s) - t0))
  TS_CHECKS=$((TS_CHECKS + 1))
  if [ -f "$L" ] && grep -q '"type":"step"' "$L"; then
    fail "$label: refused, but a step was logged"
  elif [ "$dt" -gt 30 ]; then
    fail "$label: took ${dt}s to refuse"
  else
    pass "$label: refused before any step, in ${dt}s"
  fi
}
refused "an unfused fmaf under the generic kernels" "matrix products" \
  TESSERA_ISA=generic LD_PRELOAD="$TS_TMP/shim-FMAF.so"
if [ "$(uname -m)" = x86_64 ]; then
  refused "subnormals flushed to zero" "[a-z ]+" LD_PRELOAD="$TS_TMP/shim-FTZ.so"
fi
# the vector kernels never call fmaf: the same library is no difference there
if [ "$WIDE" != generic ]; then
  L=$TS_TMP/fmaf-vector.jsonl
  # shellcheck disable=SC2086
  expect_exit 0 "" $RUN_MPI -n 1 "$T" train --model tiny $BASE --dp 2 --log "$L" \
    : -n 1 env TESSERA_ISA=$WIDE LD_PRELOAD="$TS_TMP/shim-FMAF.so" "$T" train --model tiny $BASE \
    --dp 2 --log "$L" &&
    expect_compare identical "an unfused fmaf under $WIDE's kernels, which do not call it" \
      "$TS_TMP/serial-tiny.jsonl" "$L"
fi

done_testing
