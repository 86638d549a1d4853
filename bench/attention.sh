#!/bin/sh
# Attention at long T (docs/PERFORMANCE.md, "Attention at long T"): one
# layer's attention forward + backward (bench/attention) at each T, this
# build's kernel against another build's (BEFORE=path to its bench/attention)
# in alternating rounds, then one training step of the `small` model at each
# T with the memory options on (tessera train, MFU from its run log).
#
#   bench/attention.sh                        # this build alone
#   BEFORE=/path/to/old/build/bench/attention BEFORE_TESSERA=/path/to/old/build/tessera bench/attention.sh
#   LAYOUTS="lss lss-zigzag ulysses ring" RANKS=2 SEQS= STEP_SEQS= bench/attention.sh
#                                             # the layouts' local attention alone
#
# Environment: BUILD (default: build, the folder holding bench/attention and
# tessera), RESULTS (default bench/results/attention), ROUNDS (2), SEQS
# (1024 4096 16384 32768; empty: no kernel runs, kernel.txt kept), HEADS_LONG
# (heads at T >= 16384; default 1: each head is the same independent work, so
# one head's throughput is the layer's on one thread, in an eighth of the
# time), STEP_SEQS (T of the training steps; default 4096 16384; 32768 takes
# minutes a step), STEPS (training steps at T <= 4096, default 3, reported as
# the median of steps 2..: step 1 pays the first touch of every buffer; one
# step above, where that cost is small), THREADS (1).
# LAYOUTS (default none): distributed layouts whose ranks' local attention
# `bench/attention --layout L --ranks RANKS` times, communication excluded,
# with the serial kernel beside it, at each T of LAYOUT_SEQS (default SEQS,
# or 1024 4096 16384 32768), ROUNDS rounds, into RESULTS/layouts.txt (heads
# at T >= 16384: HEADS_LONG, at least RANKS, so that ulysses has whole heads).
# RANKS (2).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$here/build}
RESULTS=${RESULTS:-$here/bench/results/attention}
ROUNDS=${ROUNDS:-2}
SEQS=${SEQS-1024 4096 16384 32768}
HEADS_LONG=${HEADS_LONG:-1}
STEP_SEQS=${STEP_SEQS-4096 16384}
THREADS=${THREADS:-1}
STEPS=${STEPS:-3}
LAYOUTS=${LAYOUTS:-}
RANKS=${RANKS:-2}
LAYOUT_SEQS=${LAYOUT_SEQS:-${SEQS:-1024 4096 16384 32768}}
DATA=$here/data/corpus.txt
mkdir -p "$RESULTS"
out=$RESULTS/kernel.txt
[ -n "$SEQS" ] && : > "$out"

kernel() { # LABEL BIN T
  heads=8
  [ "$3" -ge 16384 ] && heads=$HEADS_LONG
  printf '%s ' "$1" >> "$out"
  "$2" --seq "$3" --heads "$heads" --threads "$THREADS" --reps 3 | tail -n 1 >> "$out"
}

for r in $(seq 1 "$ROUNDS"); do
  for T in $SEQS; do
    [ -n "${BEFORE:-}" ] && kernel before "$BEFORE" "$T"
    kernel after "$BUILD/bench/attention" "$T"
  done
done
if [ -n "$SEQS" ]; then
  echo "kernel: $out"
  cat "$out"
fi

if [ -n "$LAYOUTS" ]; then
  lout=$RESULTS/layouts.txt
  : > "$lout"
  long=$HEADS_LONG
  [ "$long" -lt "$RANKS" ] && long=$RANKS
  for r in $(seq 1 "$ROUNDS"); do
    for T in $LAYOUT_SEQS; do
      heads=8
      [ "$T" -ge 16384 ] && heads=$long
      for L in $LAYOUTS; do # lines "serial ...", "rank ..." and, last, "layout ..."
        "$BUILD/bench/attention" --layout "$L" --ranks "$RANKS" --seq "$T" --heads "$heads" \
          --threads "$THREADS" --reps 3 | grep -v '^#' >> "$lout"
      done
    done
  done
  echo "layouts: $lout"
  cat "$lout"
fi

step() { # LABEL BIN T
  log=$RESULTS/step-$1-T$3.jsonl
  n=1
  [ "$3" -le 4096 ] && n=$STEPS
  "$2" train --model small --seq "$3" --batch 1 --steps "$n" --eval-every 0 --checkpoint --fused-ce --tiled-mlp \
    --threads "$THREADS" --data "$DATA" --quiet --log "$log"
  echo "step: $log"
}
for T in $STEP_SEQS; do
  [ -n "${BEFORE_TESSERA:-}" ] && step before "$BEFORE_TESSERA" "$T"
  step after "$BUILD/tessera" "$T"
done
