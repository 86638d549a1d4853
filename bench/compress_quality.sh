#!/bin/bash
# Boundary compression's quality (docs/ALGORITHMS.md §7): a small LLaMA trained on the
# bundled corpus with the same token budget in every mode, its validation loss and the
# gap to the uncompressed model, for none, ssn, mapl-frozen, mapl, mapl-unconstrained and mapl-vq at
# 4x and 8x (r = d/4, d/8) with the model cut into P = 4 and P = 8 stages, and the bytes
# per token that cross a boundary each way.
#
#   bench/compress_quality.sh             # from the repository root, after `make`; ~35 min on 2 cores
#   QUICK=1 bench/compress_quality.sh     # llama-tiny, 30 steps: checks this script (~1 min)
#
# Each mode trains the serial reference of the compressed model (--compress MODE --rank R
# --compress-stages P): a pipelined run of it (mpiexec -n P ... --pp P) gives the same
# bits (tests/mpi_compress.sh), so the quality of the P-stage pipeline is measured
# without its P ranks, JOBS runs at a time. Timings are not the point here; losses are,
# and they do not depend on the machine's load.
#
# Runs: the uncompressed model once, then for every P in STAGES and R in RANKS each mode
# of MODES; with VQ_FULL=1 also mapl-vq with the whole codebook streamed every step
# (--vq-sync-codes K), which separates the receiver's staleness from quantisation; each
# mapl-vq run once for every --vq-backward setting in VQ_BACKWARD (on: the gradients
# quantised too, the run's name and sync column marked "+bwd").
#
# Environment (defaults in brackets):
#   TESSERA     the binary [build/tessera, else ./tessera]; this script builds nothing
#   MODEL_FLAGS the model ["--model llama-mini --layers 8": d 128, 4 heads, 2 KV heads]
#   SEQ         sequence length T [128]
#   BATCH       sequences per step B [8]
#   STEPS       steps per run, the same token budget for every mode [600]
#   EVAL_EVERY  validation every N steps, for the curves [50]
#   EVAL_BATCHES validation batches per evaluation [8]
#   OPT_FLAGS   ["--optimizer muon-pe --muon-lr 0.02 --lr 0.01 --warmup 30"]: the MAPL
#               paper's hybrid (AdamW at 0.5x the Muon rate; projectors at 0.1x)
#   STAGES      ["4 8"]   RANKS  ["32 16"] (d/4, d/8 of d 128)
#   MODES       ["ssn mapl-frozen mapl mapl-unconstrained mapl-vq"]; ssn-confined is the
#               SSN paper's SSN (weights confined to span(U), docs/COMPRESSION.md)
#   SSN_REFRESH ssn-confined: --ssn-refresh N [tessera's default, 500]
#   VQ_FULL     also mapl-vq with full codebook sync [1]
#   VQ_BACKWARD the --vq-backward settings of the mapl-vq runs ["off"]; "off on" runs both
#   ANCHORS     the --mapl-anchor kinds of the mapl and mapl-vq runs ["factorised"]; e.g.
#               "none static factorised full" for the anchor ablation (a kind other than
#               factorised: the run's name ends -anchor-KIND, its sync column +anchor-KIND)
#   JOBS        runs at once, one thread each [2]
#   TIMEOUT     seconds one run may take before it counts as failed [3600]
#   RESULTS     where the logs go [bench/results/compress]; its previous files are replaced
#   IMG_DIR     where the report writes its PNG [docs/img]
#   REPORT      run bench/compress_report.py at the end [1]; REPORT_ARGS are passed to it
#   QUICK=1     llama-tiny with 8 layers, T 64, 30 steps, results and plot under
#               bench/results/quick/compress (plot in its img/)
#
# Every run writes RESULTS/NAME.{cmd,jsonl,err,meta}; RESULTS/manifest.tsv lists mode, P,
# r, sync and name. Any failed run stops the benchmark with exit 1 and one line saying
# which and why.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/compress_quality.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

if [ "${QUICK:-0}" = 1 ]; then
  : "${MODEL_FLAGS:=--model llama-tiny --layers 8}" "${SEQ:=64}" "${STEPS:=30}" "${EVAL_EVERY:=10}"
  : "${EVAL_BATCHES:=2}" "${RANKS:=16 8}"
  : "${RESULTS:=$ROOT/bench/results/quick/compress}" "${IMG_DIR:=$RESULTS/img}"
fi
MODEL_FLAGS=${MODEL_FLAGS:---model llama-mini --layers 8}
SEQ=${SEQ:-128}
BATCH=${BATCH:-8}
STEPS=${STEPS:-600}
EVAL_EVERY=${EVAL_EVERY:-50}
EVAL_BATCHES=${EVAL_BATCHES:-8}
OPT_FLAGS=${OPT_FLAGS:---optimizer muon-pe --muon-lr 0.02 --lr 0.01 --warmup 30}
STAGES=${STAGES:-"4 8"}
RANKS=${RANKS:-"32 16"}
MODES=${MODES:-"ssn mapl-frozen mapl mapl-unconstrained mapl-vq"}
VQ_FULL=${VQ_FULL:-1}
VQ_BACKWARD=${VQ_BACKWARD:-off}
ANCHORS=${ANCHORS:-factorised}
JOBS=${JOBS:-2}
TIMEOUT=${TIMEOUT:-3600}
RESULTS=${RESULTS:-$ROOT/bench/results/compress}
WAIT_LOAD=0 # losses do not depend on the load
bench_defaults

bench_snapshot tessera-compress
[ "$JOBS" -ge 1 ] 2>/dev/null || die "JOBS=$JOBS: not a positive integer"
[ "$EVAL_EVERY" -ge 1 ] 2>/dev/null || die "EVAL_EVERY=$EVAL_EVERY: not a positive integer"
for m in $MODES; do
  case $m in ssn|ssn-confined|mapl|mapl-unconstrained|mapl-vq|mapl-frozen) ;; *) die "MODES: unknown mode '$m'" ;; esac
done
for b in $VQ_BACKWARD; do
  case $b in on|off) ;; *) die "VQ_BACKWARD: '$b' is not on or off" ;; esac
done
for a in $ANCHORS; do
  case $a in none|static|factorised|full) ;; *) die "ANCHORS: '$a' is not none, static, factorised or full" ;; esac
done
# layers divisible by every P, R <= d, groups dividing R: tessera refuses a bad model
# before any work, and the first such run stops the benchmark with tessera's message

bench_results mode P r sync name
bench_setup "model_flags $MODEL_FLAGS" "seq $SEQ" "batch $BATCH" "steps $STEPS" \
  "eval_every $EVAL_EVERY" "eval_batches $EVAL_BATCHES" "opt_flags $OPT_FLAGS" "jobs $JOBS" \
  "ssn_refresh ${SSN_REFRESH:-default}" "anchors $ANCHORS"
echo "binary $TESSERA" >> "$RESULTS/setup.txt"
bench_binary

# start MODE P R SYNC: one run in the background (at most JOBS at once); SYNC stream or
# full, with "+bwd" for --vq-backward on and "+anchor-KIND" for --mapl-anchor KIND
start() {
  local mode=$1 p=$2 r=$3 sync=$4 name cmd anchor=${4#*+anchor-}
  [ "$anchor" = "$sync" ] && anchor=
  sync=${sync%+anchor-*}
  name=$mode; [ "$mode" = none ] || name=$mode-p$p-r$r
  [ "${sync%+bwd}" = full ] && name=$name-fullsync
  [ "${sync%+bwd}" != "$sync" ] && name=$name-vqbwd
  [ -n "$anchor" ] && name=$name-anchor-$anchor
  # shellcheck disable=SC2206
  cmd=("$BIN" train $MODEL_FLAGS --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" $OPT_FLAGS
       --eval-every "$EVAL_EVERY" --eval-batches "$EVAL_BATCHES" --threads 1 --data "$DATA"
       --quiet --log "$RESULTS/$name.jsonl")
  [ "$mode" = none ] || cmd+=(--compress "$mode" --rank "$r" --compress-stages "$p")
  [ "${sync%+bwd}" = full ] && cmd+=(--vq-sync-codes 256)
  [ "${sync%+bwd}" != "$sync" ] && cmd+=(--vq-backward on)
  [ "$mode" = ssn-confined ] && [ -n "${SSN_REFRESH:-}" ] && cmd+=(--ssn-refresh "$SSN_REFRESH")
  [ -n "$anchor" ] && cmd+=(--mapl-anchor "$anchor")
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  (
    bench_run "$name" "${cmd[@]}"
    if [ "$RUN_RC" != 0 ]; then
      echo "$BENCH: $name failed (exit $RUN_RC): $(bench_why "$name"); see $RESULTS/$name.err" >&2
      bench_meta "$name" failed
      exit 1
    fi
    bench_meta "$name" ok
    echo "  $name done: $(bench_wall_s %.0f) s" >&2
  ) &
  bench_manifest "$mode" "$p" "$r" "$sync${anchor:++anchor-$anchor}" "$name"
}

cd "$ROOT"
bench_start
echo "== compression quality: $MODEL_FLAGS, T $SEQ, B $BATCH, $STEPS steps, P in {$STAGES}," \
  "r in {$RANKS}, {$MODES}, $JOBS at once" >&2
start none 1 0 -
for p in $STAGES; do
  for r in $RANKS; do
    for m in $MODES; do
      kinds=factorised
      case $m in mapl|mapl-vq) kinds=$ANCHORS ;; esac
      for a in $kinds; do
        y=; [ "$a" = factorised ] || y=+anchor-$a
        if [ "$m" != mapl-vq ]; then start "$m" "$p" "$r" "stream$y"; continue; fi
        for b in $VQ_BACKWARD; do
          x=; [ "$b" = on ] && x=+bwd
          start mapl-vq "$p" "$r" "stream$x$y"
          if [ "$VQ_FULL" = 1 ]; then start mapl-vq "$p" "$r" "full$x$y"; fi
        done
      done
    done
  done
done
failed=0
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
for f in "$RESULTS"/*.meta; do grep -q '^status ok' "$f" || failed=1; done
[ "$failed" = 0 ] || die "a run failed (above); no report"
bench_done
bench_report compress_report.py
