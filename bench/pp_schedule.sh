#!/bin/bash
# Pipeline schedules measured: the bubble fraction and the peak number of microbatches in
# flight on the first stage, GPipe against 1F1B, as the number of microbatches M grows,
# against the textbook figures: bubble (P-1)/(M+P-1), in flight M (GPipe) and min(P, M)
# (1F1B; stage s holds at most P-s).
#
#   bench/pp_schedule.sh                # from the repository root, after `make`; ~5 min on 2 cores
#   QUICK=1 bench/pp_schedule.sh        # tiny model, seconds per run: checks this script itself
#
# Runs: for every P in PP, M in MICRO and schedule in SCHEDULES, one run of
#   mpiexec -n P tessera train --pp P --microbatches M --schedule S ...
# and, with SERIAL=1, the serial run of the same model (one process, no --pp) as the
# reference step time. Rank 0 (the first stage) writes the log; its step records carry
# step_ms, comm_ms (time inside send/recv and collectives, waiting included),
# compute_ms_max (the busiest rank's step_ms - comm_ms) and
# "pipeline":{"stages","microbatches","schedule","peak_inflight"} (docs/RUN-LOG.md).
#
# With more ranks than cores (P = 4 on 2 cores) ranks share cores and waiting ranks
# busy-poll: those timings measure the scheduler. The report then shows only the
# in-flight counts and bytes of such runs.
#
# Environment (defaults in brackets):
#   TESSERA       the binary [build/tessera, else ./tessera]; this script builds nothing
#   MPIEXEC       the launcher [mpiexec; with -launcher fork when the default cannot start ranks]
#   MODEL         preset, an untied one (the llama-* presets are) [llama-mini]
#   MODEL_FLAGS   extra model flags ["--d 256 --d-ff 768 --layers 4"]; the layer
#                 count must be divisible by every P
#   SEQ           sequence length T [256]
#   BATCH         sequences per step B; every M must divide it, and (T/leaf)·(B/M) must be a
#                 power of two (a microbatch is a power-of-two number of gradient leaves) [8]
#   STEPS         steps per run; step 1 is warm-up, figures are medians over the rest [6]
#   THREADS       OpenMP threads per rank [1]
#   PP            stage counts ["2 4"]
#   MICRO         microbatch counts ["1 2 4 8"]
#   SCHEDULES     ["gpipe 1f1b"]
#   SERIAL        also the serial run, for reference [1]
#   TIMEOUT       seconds one run may take before it counts as failed [600]
#   WAIT_LOAD     before the first run wait until the 1-minute load average is at most
#                 this and under half a core is busy, before every later run until under
#                 half a core is busy [2.5; 0 = never wait] ...
#   WAIT_MAX      ... for at most this many seconds in all, then run anyway [600]
#   RESULTS       where the logs go [bench/results/pp]; its previous files are replaced
#   IMG_DIR       where the report writes its PNG [docs/img]
#   REPORT        run bench/pp_report.py at the end [1]; REPORT_ARGS are passed to it
#   QUICK=1       llama-tiny with 4 layers, T 64, 3 steps, results and plot under
#                 bench/results/quick/pp (plot in its img/): a smoke test of the
#                 scripts (~1 min)
#
# Every run writes RESULTS/NAME.{cmd,jsonl,err,meta} (NAME pp{P}-m{M}-{schedule}, or
# serial); RESULTS/manifest.tsv lists P, M, schedule, name and status. Any failed run
# stops the benchmark with exit 1 and one line saying which and why.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/pp_schedule.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

if [ "${QUICK:-0}" = 1 ]; then
  : "${MODEL:=llama-tiny}" "${MODEL_FLAGS:=--layers 4}" "${SEQ:=64}" "${STEPS:=3}" "${WAIT_LOAD:=0}"
  : "${RESULTS:=$ROOT/bench/results/quick/pp}" "${IMG_DIR:=$RESULTS/img}"
fi
MODEL=${MODEL:-llama-mini}
MODEL_FLAGS=${MODEL_FLAGS---d 256 --d-ff 768 --layers 4}
SEQ=${SEQ:-256}
BATCH=${BATCH:-8}
STEPS=${STEPS:-6}
PP=${PP:-"2 4"}
MICRO=${MICRO:-"1 2 4 8"}
SCHEDULES=${SCHEDULES:-"gpipe 1f1b"}
SERIAL=${SERIAL:-1}
TIMEOUT=${TIMEOUT:-600}
RESULTS=${RESULTS:-$ROOT/bench/results/pp}
bench_defaults

bench_snapshot tessera-pp
[ "$BATCH" -ge 1 ] 2>/dev/null || die "BATCH=$BATCH: not a positive integer"
for p in $PP; do
  if ! [ "$p" -ge 2 ] 2>/dev/null; then die "PP: stage count '$p': must be 2 or more"; fi
done
for m in $MICRO; do
  if ! [ "$m" -ge 1 ] 2>/dev/null || [ $((BATCH % m)) != 0 ]; then
    die "MICRO: '$m' must be a positive integer dividing BATCH=$BATCH"
  fi
done
for s in $SCHEDULES; do case $s in gpipe|1f1b) ;; *) die "SCHEDULES: unknown schedule '$s' (gpipe, 1f1b)" ;; esac; done
# the rest of the layout rules (layers divisible by P, power-of-two microbatches, an
# untied head) are tessera's own: it refuses a bad layout before any work, and the
# first such run stops the benchmark with tessera's message

bench_mpiexec
bench_results P M schedule name status
bench_setup "model $MODEL" "model_flags $MODEL_FLAGS" "seq $SEQ" "batch $BATCH" "steps $STEPS" \
  "threads $THREADS"
echo "binary $TESSERA" >> "$RESULTS/setup.txt"
bench_binary

# run_one P M SCHEDULE: one run (P = 1: the serial run); appends it to the manifest
run_one() {
  local p=$1 m=$2 sched=$3 name cmd
  if [ "$p" = 1 ]; then name=serial; else name=pp$p-m$m-$sched; fi
  # shellcheck disable=SC2206
  cmd=("$BIN" train --model "$MODEL" $MODEL_FLAGS --untied --seq "$SEQ" --batch "$BATCH"
       --steps "$STEPS" --threads "$THREADS" --eval-batches 1 --data "$DATA" --quiet
       --log "$RESULTS/$name.jsonl")
  # shellcheck disable=SC2206
  if [ "$p" != 1 ]; then
    cmd=($MPIEXEC -n "$p" "${cmd[@]}" --pp "$p" --microbatches "$m" --schedule "$sched")
  fi
  bench_run "$name" "${cmd[@]}"
  if [ "$RUN_RC" != 0 ]; then
    local why; why=$(bench_why "$name")
    if grep -qs "pipeline parallelism is not available in this build" "$RESULTS/$name.err"; then
      why="$why (this binary predates the pipeline; rebuild: cd build && make -j2)"
    fi
    echo "$BENCH: $name failed (exit $RUN_RC): ${why:-no message}; see $RESULTS/$name.err" >&2
    exit 1
  fi
  bench_meta "$name" ok
  echo "  done: $(bench_wall_s %.0f) s" >&2
  bench_manifest "$p" "$m" "$sched" "$name" ok
}

cd "$ROOT"
bench_start
echo "== pipeline schedules: $MODEL $MODEL_FLAGS, T $SEQ, B $BATCH, P in {$PP}, M in {$MICRO}," \
  "{$SCHEDULES}, $STEPS steps, --threads $THREADS" >&2
[ "$SERIAL" = 1 ] && run_one 1 1 serial
for p in $PP; do
  for m in $MICRO; do
    for s in $SCHEDULES; do run_one "$p" "$m" "$s"; done
  done
done
bench_done
bench_report pp_report.py
