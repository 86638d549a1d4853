#!/bin/bash
# Partitioned model state: what each rank holds, by kind, for the serial run and the
# parallel layouts at N = 4 ranks, with and without --zero 1, 2, 3 (docs/ALGORITHMS.md §12).
# Every run is one step of one model; the run log's step record gives each rank 0's
# bytes of parameters, gradients, optimizer moments, activations and layout buffers, the
# model state (parameters + gradients + moments) summed and at most over the ranks, and
# the largest peak RSS of any rank. A layout that does not fit this machine is refused by
# tessera before it allocates (its estimate, in the .err file) and recorded as refused.
# bench/state_report.py tabulates them against the serial run's and plots them.
#
#   bench/state_memory.sh            # from the repository root, after `make`; ~40 min on 2 cores
#   QUICK=1 bench/state_memory.sh    # the tiny model: checks this script (~1 min)
#
# Memory figures do not depend on other load on the machine (the script does not wait
# for a quiet one); the times in the .meta files do.
#
# Environment (defaults in brackets):
#   TESSERA   the binary [build/tessera, else ./tessera]; this script builds nothing
#   MPIEXEC   the launcher [mpiexec; with -launcher fork when the default cannot start ranks]
#   CASES     "NAME:MODEL FLAGS:T" triples, ';'-separated
#             ["small:--model small:8192;large8:--model large --layers 8:1024"]
#   LAYOUTS   layouts run per case (serial, dp4, dp4-z1, dp4-z2, dp4-z3, lss4, lss4-z1,
#             lss4-z3, upipe4, upipe4-z1, upipe4-z3, pp4, pp2dp2, pp2dp2-z1, pp2dp2-z2,
#             pp2dp2-z3) [all of them]; one the model does not
#             divide into (pp4 of 6 layers) is recorded as n/a
#   TIMEOUT   seconds one run may take [3600]
#   RESULTS   where the logs go [bench/results/state]; its previous files are replaced
#   IMG_DIR   where the report writes its PNG [docs/img]
#   REPORT    run bench/state_report.py at the end [1]
#   QUICK=1   tiny and llama-tiny models at T 256, results under bench/results/quick/state
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/state_memory.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
if [ "${QUICK:-0}" = 1 ]; then
  : "${CASES:=tiny:--model tiny --layers 4:256}"
  : "${RESULTS:=$ROOT/bench/results/quick/state}" "${IMG_DIR:=$RESULTS/img}"
fi
CASES=${CASES:-"small:--model small:8192;large8:--model large --layers 8:1024"}
LAYOUTS=${LAYOUTS:-"serial dp4 dp4-z1 dp4-z2 dp4-z3 lss4 lss4-z1 lss4-z3 upipe4 upipe4-z1 upipe4-z3 pp4 pp2dp2 pp2dp2-z1 pp2dp2-z2 pp2dp2-z3"}
TIMEOUT=${TIMEOUT:-3600}
RESULTS=${RESULTS:-$ROOT/bench/results/state}
STEPS=2 # bench_snapshot's check; each run is one step
WAIT_LOAD=${WAIT_LOAD:-0}
bench_defaults

bench_snapshot tessera-state
bench_mpiexec
bench_results case layout ranks name status
bench_setup "cases $CASES" "layouts $LAYOUTS" "mem_total_kb $(awk '/^MemTotal:/{print $2}' /proc/meminfo)"
bench_binary
bench_start

# layout_flags LAYOUT: its rank count and flags (batch 4: one sequence per data rank or
# microbatch; the memory options on, as for long contexts)
layout_flags() {
  case $1 in
    serial) echo "1" ;;
    dp4) echo "4 --dp 4" ;;
    dp4-z1) echo "4 --dp 4 --zero 1" ;;
    dp4-z2) echo "4 --dp 4 --zero 2" ;;
    dp4-z3) echo "4 --dp 4 --zero 3" ;;
    lss4) echo "4 --sp 4 --sp-mode lss" ;;
    lss4-z1) echo "4 --sp 4 --sp-mode lss --zero 1" ;;
    lss4-z3) echo "4 --sp 4 --sp-mode lss --zero 3" ;;
    upipe4) echo "4 --sp 4 --sp-mode upipe" ;;
    upipe4-z1) echo "4 --sp 4 --sp-mode upipe --zero 1" ;;
    upipe4-z3) echo "4 --sp 4 --sp-mode upipe --zero 3" ;;
    pp4) echo "4 --pp 4 --microbatches 4" ;;
    pp2dp2) echo "4 --pp 2 --dp 2 --microbatches 2" ;;
    pp2dp2-z1) echo "4 --pp 2 --dp 2 --microbatches 2 --zero 1" ;;
    pp2dp2-z2) echo "4 --pp 2 --dp 2 --microbatches 2 --zero 2" ;;
    pp2dp2-z3) echo "4 --pp 2 --dp 2 --microbatches 2 --zero 3" ;;
    *) die "LAYOUTS: unknown layout '$1'" ;;
  esac
}

IFS=';' read -r -a cases <<< "$CASES"
for c in "${cases[@]}"; do
  cname=${c%%:*} rest=${c#*:}
  mflags=${rest%:*} T=${rest##*:}
  for lay in $LAYOUTS; do
    read -r n lflags <<< "$(layout_flags "$lay")"
    # a sequence-parallel layout holds one sequence per data rank: batch 1 then
    case $lay in lss*|upipe*) B=1 ;; *) B=4 ;; esac
    name=$cname-$lay
    # shellcheck disable=SC2086
    args=(train $mflags --seq "$T" --batch "$B" --steps 1 --warmup 1 --eval-batches 1
      --checkpoint --fused-ce --tiled-mlp --threads 1 --quiet --data "$DATA"
      --log "$RESULTS/$name.jsonl" $lflags)
    if [ "$n" = 1 ]; then
      bench_run "$name" "$BIN" "${args[@]}"
    else
      # MPIEXEC is a word list on purpose
      # shellcheck disable=SC2086
      bench_run "$name" $MPIEXEC -n "$n" "$BIN" "${args[@]}"
    fi
    status=ok
    if [ "$RUN_RC" != 0 ]; then
      # a layout that does not fit this machine is refused before it allocates: a result
      if grep -q "GiB" "$RESULTS/$name.err" 2>/dev/null; then status="refused"
      # a layout the model does not divide into (exit 2, one line): not applicable
      elif [ "$RUN_RC" = 2 ]; then status="n/a"
      else status="failed: $(bench_why "$name")"; fi
    fi
    bench_meta "$name" "$status"
    bench_manifest "$cname" "$lay" "$n" "$name" "$status"
    case $status in ok|refused|n/a) ;; *) die "$name: $status" ;; esac
  done
done
bench_done
bench_report state_report.py
