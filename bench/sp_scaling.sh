#!/bin/bash
# Sequence-parallel benchmark: the LSS paper's weak-scaling table (its Table 3) at the
# scale of this machine, and per-rank memory as the sequence grows at a fixed rank count.
#
#   bench/sp_scaling.sh                 # from the repository root, after `make`; ~10-15 min on 2 cores
#   QUICK=1 bench/sp_scaling.sh         # tiny model, seconds: checks this script itself
#
# Sweep "weak": N ranks in WEAK_N, T = SEQ_PER_RANK x N, every mode of MODES; N = 1 is
# the serial run (no mpiexec, no --sp), shared by all modes.
# Sweep "mem": N = MEM_N ranks, T in MEM_T, modes MEM_MODES (and the serial run at each
# T when MEM_SERIAL=1): peak memory per rank as T grows.
# Sweep "base": the LSS paper's comparison with its baseline (docs/DISTRIBUTED.md,
# "megatron-2022"): N in BASE_N, T in BASE_T, modes BASE_MODES, and the serial run at each
# T (BASE_SERIAL=1) for the efficiency columns' one-rank rate. A run that runs out of
# memory (exit 1, "out of memory") is recorded as "oom", as the paper's table records
# its baseline's, and the sweep goes on.
#
# Environment (defaults in brackets):
#   TESSERA       the binary [build/tessera, else ./tessera]; this script builds nothing
#   MPIEXEC       the launcher [mpiexec; with -launcher fork when the default cannot start ranks]
#   MODEL         preset [small: d 512, 6 layers, 8 heads, the LSS paper's 20M model]
#   MODEL_FLAGS   extra model flags, e.g. "--d 256 --layers 2" []
#   STEPS         steps per run; step 1 is warm-up, figures are medians over the rest [4]
#   THREADS       OpenMP threads per rank [1]
#   SWEEPS        which sweeps ["weak mem"]
#   WEAK_N        rank counts of the weak sweep ["1 2 4"]
#   SEQ_PER_RANK  tokens per rank in the weak sweep [1024]
#   MODES         modes of the weak sweep ["lss lss-zigzag lss-fused lss-basic megatron"];
#                 ulysses, ring and ring-fast (ring with --fast) may be added
#   MEM_N         ranks of the memory sweep [2]
#   MEM_T         sequence lengths of the memory sweep ["1024 2048 4096 8192"]
#   MEM_MODES     modes of the memory sweep ["lss lss-zigzag megatron"]
#   MEM_SERIAL    also the serial run at each MEM_T, for reference [1]
#   BASE_N        ranks of the baseline sweep ["2 4"]
#   BASE_T        sequence lengths of the baseline sweep ["2048 4096 8192 16384"]
#   BASE_MODES    modes of the baseline sweep ["lss lss-zigzag megatron-2022 megatron"]
#   BASE_SERIAL   also the serial run at each BASE_T [1]
#   TIMEOUT       seconds one run may take before it counts as failed [1200]
#   WAIT_LOAD     before the first run wait until the 1-minute load average is at most
#                 this and under half a core is busy, before every later run until under
#                 half a core is busy [2.5; 0 = never wait] ...
#   WAIT_MAX      ... for at most this many seconds in all, then run anyway [600]
#   RESULTS       where the logs go [bench/results/sp]; its previous contents are replaced
#   IMG_DIR       where the report writes its PNG plots [docs/img]
#   REPORT        run bench/sp_report.py at the end [1]; REPORT_ARGS are passed to it
#   QUICK=1       tiny model, 3 steps, short sequences, results and plots under
#                 bench/results/quick/sp (plots in its img/): a smoke test of
#                 the scripts (~1 min)
#
# Every run writes RESULTS/NAME.{cmd,jsonl,out,err,meta}; RESULTS/manifest.tsv lists
# sweep, N, T, mode, run name and status (ok; na when this build refuses the mode; oom
# when a base-sweep run ran out of memory).
# A mode this build does not have (exit 2, "--sp-mode X: not available") is recorded as
# "na" and the sweep goes on; any other failure stops the benchmark with exit 1.
#
# With more ranks than cores, waiting MPI ranks busy-poll and take CPU from the ranks
# that compute: wall times there measure the scheduler. The report therefore puts
# collective counts, bytes, per-rank compute time and peak memory first.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/sp_scaling.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

if [ "${QUICK:-0}" = 1 ]; then
  : "${MODEL:=tiny}" "${STEPS:=3}" "${SEQ_PER_RANK:=256}" "${MEM_T:=256 512}" "${WAIT_LOAD:=0}"
  : "${RESULTS:=$ROOT/bench/results/quick/sp}" "${IMG_DIR:=$RESULTS/img}"
fi
MODEL=${MODEL:-small}
MODEL_FLAGS=${MODEL_FLAGS:-}
STEPS=${STEPS:-4}
SWEEPS=${SWEEPS:-"weak mem"}
WEAK_N=${WEAK_N:-"1 2 4"}
SEQ_PER_RANK=${SEQ_PER_RANK:-1024}
MODES=${MODES:-"lss lss-zigzag lss-fused lss-basic megatron"}
MEM_N=${MEM_N:-2}
MEM_T=${MEM_T:-"1024 2048 4096 8192"}
MEM_MODES=${MEM_MODES:-"lss lss-zigzag megatron"}
MEM_SERIAL=${MEM_SERIAL:-1}
BASE_N=${BASE_N:-"2 4"}
BASE_T=${BASE_T:-"2048 4096 8192 16384"}
BASE_MODES=${BASE_MODES:-"lss lss-zigzag megatron-2022 megatron"}
BASE_SERIAL=${BASE_SERIAL:-1}
TIMEOUT=${TIMEOUT:-1200}
RESULTS=${RESULTS:-$ROOT/bench/results/sp}
bench_defaults

bench_snapshot tessera-sp
for s in $SWEEPS; do case $s in weak|mem|base) ;; *) die "SWEEPS: unknown sweep '$s' (weak, mem, base)" ;; esac; done
for n in $WEAK_N $MEM_N $BASE_N; do
  if ! [ "$n" -ge 1 ] 2>/dev/null || [ $((n & (n - 1))) != 0 ]; then die "rank count '$n': must be a power of two"; fi
done
[ "$MEM_N" -ge 2 ] || die "MEM_N=$MEM_N: the memory sweep needs 2 or more ranks"
for m in $MODES $MEM_MODES $BASE_MODES; do
  case $m in lss|lss-zigzag|lss-fused|lss-basic|megatron|megatron-2022|ulysses|ring|ring-fast) ;;
    *) die "mode '$m': not one of lss, lss-zigzag, lss-fused, lss-basic, megatron, megatron-2022, ulysses, ring, ring-fast" ;; esac
done

bench_mpiexec
bench_results sweep N T mode name status
bench_setup "model $MODEL" "model_flags $MODEL_FLAGS" "steps $STEPS" "threads $THREADS"
bench_binary

# run_one N T MODE: runs the configuration once per invocation (the serial run and runs
# shared by both sweeps are not repeated); sets NAME and done_status[NAME].
declare -A done_status
run_one() {
  local n=$1 t=$2 mode=$3 name cmd
  if [ "$n" = 1 ]; then name=serial-t$t; else name=n$n-t$t-$mode; fi
  NAME=$name
  if [ -n "${done_status[$name]:-}" ]; then return; fi
  # shellcheck disable=SC2206
  cmd=("$BIN" train --model "$MODEL" $MODEL_FLAGS --seq "$t" --batch 1 --steps "$STEPS"
       --threads "$THREADS" --eval-batches 1 --data "$DATA" --quiet --log "$RESULTS/$name.jsonl")
  # shellcheck disable=SC2206
  if [ "$n" != 1 ]; then
    # ring-fast: ring attention in the tolerance tier (--fast: blocks merged by their
    # log-sum-exp, library-chosen reduction order)
    if [ "$mode" = ring-fast ]; then cmd=($MPIEXEC -n "$n" "${cmd[@]}" --sp "$n" --sp-mode ring --fast)
    else cmd=($MPIEXEC -n "$n" "${cmd[@]}" --sp "$n" --sp-mode "$mode"); fi
  fi
  bench_run "$name" "${cmd[@]}"
  local status=ok
  if [ "$RUN_RC" != 0 ]; then
    # a mode this build refuses: exit 2 with one line naming it
    if [ "$RUN_RC" = 2 ] && grep -qs -- "--sp-mode $mode: not available" "$RESULTS/$name.err"; then
      status=na
      echo "  $mode: not available in this build ($(head -n 1 "$RESULTS/$name.err")); skipped" >&2
    elif [ "$RUN_RC" = 1 ] && [ "$OOM_OK" = 1 ] && grep -qs "out of memory" "$RESULTS/$name.err"; then
      status=oom
      echo "  $mode: out of memory ($(bench_why "$name")); recorded as oom" >&2
    else
      local why; why=$(bench_why "$name")
      echo "$BENCH: $name failed (exit $RUN_RC): ${why:-no message}; see $RESULTS/$name.err" >&2
      exit 1
    fi
  fi
  bench_meta "$name" "$status"
  if [ "$status" = ok ]; then
    echo "  done: $(bench_wall_s %.0f) s, largest RSS of any rank $((RUN_RSS_KB / 1024)) MB" >&2
  fi
  done_status[$name]=$status
}

# record SWEEP N T MODE: runs it (if needed) and adds it to the manifest; in the base
# sweep running out of memory is a result (oom), elsewhere a failure
record() {
  OOM_OK=0
  [ "$1" = base ] && OOM_OK=1
  run_one "$2" "$3" "$4"
  bench_manifest "$1" "$2" "$3" "$4" "$NAME" "${done_status[$NAME]}"
}

cd "$ROOT"
bench_start
for sweep in $SWEEPS; do
  case $sweep in
    weak)
      echo "== weak scaling: $MODEL, T = $SEQ_PER_RANK x N, N in {$WEAK_N}, $STEPS steps, --threads $THREADS" >&2
      for n in $WEAK_N; do
        t=$((SEQ_PER_RANK * n))
        if [ "$n" = 1 ]; then
          record weak 1 "$t" serial
        else
          for m in $MODES; do record weak "$n" "$t" "$m"; done
        fi
      done ;;
    mem)
      echo "== memory vs T: $MODEL, N = $MEM_N, T in {$MEM_T}, modes {$MEM_MODES}" >&2
      for t in $MEM_T; do
        [ "$MEM_SERIAL" = 1 ] && record mem 1 "$t" serial
        for m in $MEM_MODES; do record mem "$MEM_N" "$t" "$m"; done
      done ;;
    base)
      echo "== the LSS paper's baseline: $MODEL, N in {$BASE_N}, T in {$BASE_T}, modes {$BASE_MODES}" >&2
      for t in $BASE_T; do
        [ "$BASE_SERIAL" = 1 ] && record base 1 "$t" serial
        for n in $BASE_N; do
          for m in $BASE_MODES; do record base "$n" "$t" "$m"; done
        done
      done ;;
  esac
done
bench_done
bench_report sp_report.py
