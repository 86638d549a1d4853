#!/bin/bash
# UPipe's head-chunk ablation (docs/DISTRIBUTED.md, "Context parallelism"): the attention
# block's tracked peaks against the UPipe paper's formulas for ν = 1, 2, 4, 8 stages, and
# the U sweep of memory and step time.
#
#  - Sweep "nu": LLaMA shapes of H = 16 and 32 heads (dh 16), without and with key/value
#    groups (G = 1 and 4), on N = 2 and 4 ranks: `ulysses`, and `upipe` (exact backward) and
#    `upipe-dx` (the paper's backward) at U = H/8, H/4, H/2, H in natural order (the
#    formulas assume whole groups per rank); a U the layout rules refuse is recorded n/a.
#    One step each: the step record's attn_fwd and attn_bwd peaks (rank 0) are counts of
#    bytes, the same on any machine and under any load.
#  - Sweep "u": one larger case (UTIME_CASE) timed over STEPS steps at every U, all three
#    modes: memory and the median step time (the paper's Fig 6 trade-off). Times on a
#    machine with fewer cores than ranks measure the scheduler as much as the code.
#
# bench/upipe_report.py turns the logs into the tables in docs/PERFORMANCE.md and the plot
# docs/img/upipe_nu.png.
#
#   bench/upipe_nu.sh             # from the repository root, after `make`; ~10 min on 2 cores
#   QUICK=1 bench/upipe_nu.sh     # H 16 and N 2 only, a short timed case (~2 min)
#
# Environment (defaults in brackets):
#   TESSERA   the binary [build/tessera, else ./tessera]; this script builds nothing
#   MPIEXEC   the launcher [mpiexec; with -launcher fork when the default cannot start ranks]
#   HEADS     query heads of the memory sweep ["16 32"]
#   GROUPS_G  key/value group sizes G (Hkv = H/G) ["1 4"]
#   RANKS     N ["2 4"]
#   SEQ       T of the memory sweep [256]
#   UTIME_CASE  "H G N T" of the timed sweep ["16 4 2 4096"]
#   STEPS     steps of a timed run (the first is warm-up) [3]
#   SWEEPS    which sweeps run ["nu u"]; "u" alone reruns the timed sweep (e.g. on a quiet
#             machine) without the memory sweep's 72 runs
#   TIMEOUT   seconds one run may take [1800]
#   RESULTS   where the logs go [bench/results/upipe]; its previous files are replaced
#   IMG_DIR   where the report writes its PNG [docs/img]
#   REPORT    run bench/upipe_report.py at the end [1]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/upipe_nu.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
if [ "${QUICK:-0}" = 1 ]; then
  : "${HEADS:=16}" "${RANKS:=2}" "${UTIME_CASE:=16 4 2 512}"
  : "${RESULTS:=$ROOT/bench/results/quick/upipe}" "${IMG_DIR:=$RESULTS/img}"
fi
HEADS=${HEADS:-"16 32"}
GROUPS_G=${GROUPS_G:-"1 4"}
RANKS=${RANKS:-"2 4"}
SEQ=${SEQ:-256}
UTIME_CASE=${UTIME_CASE:-"16 4 2 4096"}
STEPS=${STEPS:-3}
SWEEPS=${SWEEPS:-"nu u"}
for s in $SWEEPS; do
  case $s in nu | u) ;; *) die "SWEEPS: unknown sweep '$s' (nu, u)" ;; esac
done
TIMEOUT=${TIMEOUT:-1800}
RESULTS=${RESULTS:-$ROOT/bench/results/upipe}
WAIT_LOAD=${WAIT_LOAD:-0} # the memory figures do not depend on load; the times are marked
bench_defaults

bench_snapshot tessera-upipe
bench_mpiexec
bench_results sweep H G N T mode U name status
bench_setup "heads $HEADS" "groups $GROUPS_G" "ranks $RANKS" "seq $SEQ" "utime_case $UTIME_CASE" \
  "steps $STEPS"
bench_binary
bench_start

# one_run SWEEP H G N T MODE U STEPS: a LLaMA of H heads of 16 (Hkv = H/G), one layer
# (the peaks are a layer's) for the memory sweep, two for the timed one
one_run() {
  local sweep=$1 H=$2 G=$3 N=$4 T=$5 mode=$6 U=$7 steps=$8 layers=1 extra=()
  [ "$sweep" = u ] && layers=2
  local name=$sweep-h$H-g$G-n$N-t$T-$mode-u$U
  [ "$mode" = ulysses ] || extra=(--upipe-u "$U" --upipe-schedule natural)
  # MPIEXEC is a word list on purpose
  # shellcheck disable=SC2086
  bench_run "$name" $MPIEXEC -n "$N" "$BIN" train --model llama-tiny --d $((16 * H)) \
    --heads "$H" --kv-heads $((H / G)) --d-ff $((32 * H)) --layers "$layers" --seq "$T" \
    --batch 1 --steps "$steps" --warmup 1 --eval-batches 1 --threads 1 --quiet \
    --data "$DATA" --sp "$N" --sp-mode "$mode" "${extra[@]}" --log "$RESULTS/$name.jsonl"
  local status=ok
  if [ "$RUN_RC" = 2 ]; then status="n/a"   # a U the layout rules refuse (one line)
  elif [ "$RUN_RC" != 0 ]; then status="failed: $(bench_why "$name")"; fi
  bench_meta "$name" "$status"
  bench_manifest "$sweep" "$H" "$G" "$N" "$T" "$mode" "$U" "$name" "$status"
  case $status in ok|n/a) ;; *) die "$name: $status" ;; esac
}

# the memory sweep: ν = 1, 2, 4, 8 forward stages
case " $SWEEPS " in *" nu "*) ;; *) HEADS= ;; esac
for H in $HEADS; do
  for G in $GROUPS_G; do
    for N in $RANKS; do
      one_run nu "$H" "$G" "$N" "$SEQ" ulysses "$H" 2
      for nu in 1 2 4 8; do
        for mode in upipe upipe-dx; do one_run nu "$H" "$G" "$N" "$SEQ" $mode $((H / nu)) 2; done
      done
    done
  done
done

# the timed U sweep
case " $SWEEPS " in
*" u "*)
  read -r H G N T <<< "$UTIME_CASE"
  one_run u "$H" "$G" "$N" "$T" ulysses "$H" "$STEPS"
  for U in $(seq "$N" "$N" "$H"); do
    [ $((H % U)) = 0 ] || continue
    for mode in upipe upipe-dx; do one_run u "$H" "$G" "$N" "$T" $mode "$U" "$STEPS"; done
  done
  ;;
esac
bench_done
bench_report upipe_report.py
