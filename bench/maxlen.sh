#!/bin/bash
# Longest trainable sequence: for the serial run and each sequence-parallel strategy at
# N ranks, with the three memory options on, the peak memory per rank as T grows (the
# UPipe paper's Table 8 at the scale of this machine), the communication per layer and
# the step time; and eager PyTorch's peak memory for the same model. bench/maxlen_report.py
# fits the points and predicts the largest T whose step fits in this machine's memory.
#
#   bench/maxlen.sh                     # from the repository root, after `make`; ~20 min on 2 cores
#   QUICK=1 bench/maxlen.sh             # tiny model, short sequences: checks this script (~1 min)
#
# A step at the predicted maximum (around 10^5 tokens) would take hours here:
# attention is O(T^2) in time although tessera keeps it O(T) in memory. So the maximum
# is extrapolated from steps at a few T, not run; see the report for the fits.
#
# Runs, in this order:
#   probe    tessera's own estimate: ts_model_create refuses a model it estimates above
#            90% of the machine's memory before it allocates the activations, and prints
#            the estimate. One process at every T of PROBE_T (far above the limit, so every
#            probe is refused at once), under `ulimit -v PROBE_VMEM_KB` and a timeout all
#            the same, so that a build that did not refuse could not take the machine: it
#            fails to allocate instead. (N ranks are not probed: each would need that much
#            address space for the parameters alone, N times over.)
#   tessera  every mode of MODES at every T of TS: "serial" is one process (no mpiexec,
#            --threads SERIAL_THREADS), every other mode N ranks (--sp N --sp-mode MODE,
#            --threads THREADS each; "upipe" once per U of UPIPE_U); all with
#            --checkpoint --fused-ce --tiled-mlp, batch 1, STEPS steps. Each rank's peak
#            RSS is taken by GNU time around that rank (NAME.rankR.rss, KiB), so the sum
#            over the ranks is on record, not only the largest rank.
#   growth   GROWTH_MODES once more at one T for GROWTH_STEPS steps: the largest rank's peak
#            after every step (the run log's peak_rss_mb_max), to see whether it grows.
#   torch    bench/torch_gpt.py (eager PyTorch, explicit T x T attention) at every T of
#            TORCH_T, batch 1, STEPS steps, TORCH_THREADS threads.
#
# Environment (defaults in brackets):
#   TESSERA        the binary [build/tessera, else ./tessera]; this script builds nothing
#   MPIEXEC        the launcher [mpiexec; with -launcher fork when the default cannot start ranks]
#   PYTHON         the Python with PyTorch and matplotlib [/usr/bin/python3]
#   MODEL          preset [small: d 512, 6 layers, 8 heads, vocab 256]
#   N              ranks of the parallel modes [4]
#   TS             sequence lengths of the tessera runs ["1024 2048 4096 8192"]
#   MODES          ["serial lss ulysses upipe ring"]
#   UPIPE_U        heads per UPipe stage, one run per value [N]
#   ZERO           ZeRO stage of the parallel modes (--zero; 3: each rank holds its shard
#                  of the model state, docs/DISTRIBUTED.md) [0]
#   STEPS          steps per run; figures are medians over the steps after the first [2]
#   THREADS        OpenMP threads per rank of the parallel runs [1]
#   SERIAL_THREADS OpenMP threads of the serial run [2: the one process has both cores]
#   GROWTH_MODES   modes run once more for GROWTH_STEPS steps at T = GROWTH_T, to see whether
#                  the peak grows from step to step ["lss ulysses upipe ring"; "" = none]
#   GROWTH_T       [1024]   GROWTH_STEPS [8]
#   TORCH_T        sequence lengths of the PyTorch runs ["512 1024 2048 3072 4096"; "" = none]
#   TORCH_THREADS  PyTorch intra-op threads [2]
#   PROBE          run the refusal probes [1]
#   PROBE_T        ["1048576 2097152"]
#   PROBE_VMEM_KB  address-space limit of a probe [12000000, i.e. 12 GB]
#   TIMEOUT        seconds one run may take before it counts as failed [1200]
#   WAIT_LOAD      before the first run wait until the 1-minute load average is at most
#                  this and under half a core is busy, before every later run until under
#                  half a core is busy [2.5; 0 = never wait] ...
#   WAIT_MAX       ... for at most this many seconds in all, then run anyway [900]
#   RESULTS        where the logs go [bench/results/maxlen]; its previous files are replaced
#   IMG_DIR        where the report writes its PNG [docs/img]
#   REPORT         run bench/maxlen_report.py at the end [1]; REPORT_ARGS are passed to it
#   QUICK=1        tiny model, T 256..1024, 2 steps, results under bench/results/quick/maxlen
#
# Every run writes RESULTS/NAME.{cmd,jsonl or json,err,meta}; RESULTS/manifest.tsv lists
# kind, N, T, mode, name and status (ok; for probes refused or not-refused). Any failed
# run stops the benchmark with exit 1. Memory figures do not depend on other load on the
# machine; times do, and the meta files record how many cores other processes took.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/maxlen.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
if [ "${QUICK:-0}" = 1 ]; then
  : "${MODEL:=tiny}" "${TS:=256 512 1024}" "${TORCH_T:=256 512 1024}" "${WAIT_LOAD:=0}"
  : "${PROBE_T:=8388608 12582912}" "${GROWTH_T:=256}" "${GROWTH_STEPS:=4}"
  : "${RESULTS:=$ROOT/bench/results/quick/maxlen}" "${IMG_DIR:=$RESULTS/img}"
  TORCH_MODEL_ARGS="--d 64 --layers 2 --heads 4"
fi
MODEL=${MODEL:-small}
N=${N:-4}
TS=${TS:-"1024 2048 4096 8192"}
MODES=${MODES:-"serial lss ulysses upipe ring"}
UPIPE_U=${UPIPE_U:-$N}
ZERO=${ZERO:-0}
STEPS=${STEPS:-2}
SERIAL_THREADS=${SERIAL_THREADS:-2}
TORCH_T=${TORCH_T-"512 1024 2048 3072 4096"}
TORCH_THREADS=${TORCH_THREADS:-2}
TORCH_MODEL_ARGS=${TORCH_MODEL_ARGS:-"--d 512 --layers 6 --heads 8"}
GROWTH_MODES=${GROWTH_MODES-"lss ulysses upipe ring"}
GROWTH_T=${GROWTH_T:-1024}
GROWTH_STEPS=${GROWTH_STEPS:-8}
PROBE=${PROBE:-1}
PROBE_T=${PROBE_T:-"1048576 2097152"}
PROBE_VMEM_KB=${PROBE_VMEM_KB:-12000000}
TIMEOUT=${TIMEOUT:-1200}
WAIT_MAX=${WAIT_MAX:-900}
RESULTS=${RESULTS:-$ROOT/bench/results/maxlen}
bench_defaults

[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is needed for each rank's peak RSS"
[ "$GROWTH_STEPS" -ge 3 ] 2>/dev/null || die "GROWTH_STEPS=$GROWTH_STEPS: need at least 3"
for m in $GROWTH_MODES; do
  case $m in lss|lss-fused|lss-basic|ulysses|upipe|ring) ;;
    *) die "GROWTH_MODES: '$m' is not one of lss, lss-fused, lss-basic, ulysses, upipe, ring" ;; esac
done
if ! [ "$N" -ge 2 ] 2>/dev/null || [ $((N & (N - 1))) != 0 ]; then die "N=$N: must be a power of two >= 2"; fi
for m in $MODES; do
  case $m in serial|lss|lss-fused|lss-basic|ulysses|upipe|ring) ;;
    *) die "MODES: '$m' is not one of serial, lss, lss-fused, lss-basic, ulysses, upipe, ring" ;; esac
done
for t in $TS $TORCH_T $PROBE_T $GROWTH_T; do
  [ "$t" -ge 8 ] 2>/dev/null || die "sequence length '$t': not a number >= 8"
done
if [ -n "$TORCH_T" ]; then "$PYTHON" -c 'import torch' 2> /dev/null || die "PYTHON=$PYTHON: cannot import torch"; fi

bench_snapshot tessera-maxlen

bench_mpiexec
bench_results kind N T mode name status
{
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "model $MODEL"
  echo "n $N"
  echo "steps $STEPS"
  echo "zero $ZERO"
  echo "threads $THREADS"
  echo "serial_threads $SERIAL_THREADS"
  echo "torch_threads $TORCH_THREADS"
  echo "torch_model_args $TORCH_MODEL_ARGS"
  echo "cores $(nproc)"
  echo "mem_total_kb $(awk '/^MemTotal:/{print $2}' /proc/meminfo)"
  echo "mem_available_kb_start $(awk '/^MemAvailable:/{print $2}' /proc/meminfo)"
  echo "mpiexec $MPIEXEC"
  echo "rev $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
} > "$RESULTS/setup.txt"
"$BIN" info > "$RESULTS/tessera-info.txt" 2>&1 || true
sha256sum < "$BIN" | cut -c 1-16 | sed 's/^/binary_sha256 /' >> "$RESULTS/setup.txt"
if [ -n "$TORCH_T" ]; then
  "$PYTHON" -c 'import torch; print("torch_version", torch.__version__)' >> "$RESULTS/setup.txt" 2> /dev/null || true
fi

# measure NAME CMD...: runs CMD (stdout to NAME.out, stderr to NAME.err) under GNU time
# and writes NAME.meta (bench_meta: exit status, ok or failed, load, wall time, own CPU
# seconds, largest RSS of any process, and the CPU seconds the whole machine was busy:
# others = busy - own). Sets RC.
measure() {
  local name=$1; shift
  bench_timed "$RESULTS/$name" /usr/bin/time -f "$GNU_TIME_FORMAT" -o "$RESULTS/$name.time" \
    timeout "$TIMEOUT" "$@"
  RC=$RUN_RC
  bench_time_read "$RESULTS/$name.time"
  RUN_CPU_S=${RUN_CPU_S:-0.00} RUN_RSS_KB=${RUN_RSS_KB:-0}
  rm -f "$RESULTS/$name.time"
  if [ "$RC" = 0 ]; then bench_meta "$name" ok; else bench_meta "$name" failed; fi
}

failed() {  # failed NAME: the last message of a failed run, and stop
  local why; why=$(grep -sv '^\s*$' "$RESULTS/$1.err" | tail -n 1 | cut -c 1-200)
  [ "$RC" = 124 ] && why="timed out after ${TIMEOUT}s"
  die "$1 failed (exit $RC): ${why:-no message}; see $RESULTS/$1.err"
}

# record KIND N T MODE NAME STATUS
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$MANIFEST"; }

# GNU time around each rank: its own peak RSS (KiB) in NAME.rankR.rss; hydra sets PMI_RANK.
# shellcheck disable=SC2016
PER_RANK=(bash -c 'exec /usr/bin/time -f %M -o "$0.rank${PMI_RANK:-0}.rss" "$@"')

# run_tessera KIND STEPS MODE T [U]: KIND tessera (the sweep) or growth
run_tessera() {
  local kind=$1 steps=$2 mode=$3 t=$4 u=${5:-} name n cmd pre=
  [ "$kind" = tessera ] || pre=$kind-
  if [ "$mode" = serial ]; then n=1 name=${pre}serial-t$t; else n=$N name=${pre}n$N-t$t-$mode${u:+-u$u}; fi
  # shellcheck disable=SC2206
  cmd=("$BIN" train --model "$MODEL" --seq "$t" --batch 1 --steps "$steps"
       --checkpoint --fused-ce --tiled-mlp --eval-batches 1 --data "$DATA" --quiet
       --log "$RESULTS/$name.jsonl")
  if [ "$mode" = serial ]; then
    cmd+=(--threads "$SERIAL_THREADS")
  else
    cmd+=(--threads "$THREADS" --sp "$N" --sp-mode "$mode")
    [ -z "$u" ] || cmd+=(--upipe-u "$u")
    [ "$ZERO" = 0 ] || cmd+=(--zero "$ZERO")
  fi
  printf '%q ' "${cmd[@]}" | sed "s| \$||; s|$BIN|$TESSERA|; s|$ROOT/||g" \
    | { if [ "$mode" = serial ]; then cat; else sed "s|^|$MPIEXEC -n $N |"; fi; } > "$RESULTS/$name.cmd"
  wait_quiet
  echo "+ $(cat "$RESULTS/$name.cmd")" >&2
  # shellcheck disable=SC2086
  if [ "$mode" = serial ]; then
    measure "$name" "${PER_RANK[@]}" "$RESULTS/$name" "${cmd[@]}"
  else
    measure "$name" $MPIEXEC -n "$N" "${PER_RANK[@]}" "$RESULTS/$name" "${cmd[@]}"
  fi
  [ "$RC" = 0 ] || failed "$name"
  for f in "$RESULTS/$name.out" "$RESULTS/$name.err"; do [ -s "$f" ] || rm -f "$f"; done
  local sum_kb; sum_kb=$(cat "$RESULTS/$name".rank*.rss | awk '{s+=$1} END{print s+0}')
  echo "  done: $(awk '/^wall_s/{printf "%.0f", $2}' "$RESULTS/$name.meta") s, peak RSS of the $n process(es) together $((sum_kb / 1024)) MB" >&2
  record "$kind" "$n" "$t" "$mode${u:+-u$u}" "$name" ok
}

# probe T: the model's own estimate for one process, from its refusal message
probe() {
  local t=$1 name=probe-t$1 cmd
  cmd=("$BIN" train --model "$MODEL" --seq "$t" --batch 1 --steps 1 --threads "$SERIAL_THREADS"
       --checkpoint --fused-ce --tiled-mlp --data "$SNAP/random.bin" --data-format bytes --val-frac 0.5 --quiet)
  printf '%q ' "${cmd[@]}" | sed "s| \$||; s|$BIN|$TESSERA|; s|$SNAP/random.bin|RANDOM_FILE|; s|$ROOT/||g" \
    > "$RESULTS/$name.cmd"
  echo "+ $(cat "$RESULTS/$name.cmd")" >&2
  # refused before the activations are allocated; the address-space limit and the
  # short timeout only guard against a build that would not refuse
  # shellcheck disable=SC2016
  measure "$name" bash -c 'ulimit -v "$0"; exec timeout 60 "$@"' "$PROBE_VMEM_KB" "${cmd[@]}"
  local status=not-refused
  if [ "$RC" != 0 ] && grep -q "needs about" "$RESULTS/$name.err"; then status=refused; fi
  echo "  $status: $(grep -m 1 -o 'needs about [0-9.]* GiB' "$RESULTS/$name.err" || head -c 200 "$RESULTS/$name.err")" >&2
  rm -f "$RESULTS/$name.out"
  record probe 1 "$t" serial "$name" "$status"
}

# run_torch T
run_torch() {
  local t=$1 name=torch-t$1 cmd
  # shellcheck disable=SC2206
  cmd=("$PYTHON" "$ROOT/bench/torch_gpt.py" --seq "$t" --batch 1 --steps "$STEPS"
       --threads "$TORCH_THREADS" $TORCH_MODEL_ARGS)
  printf '%q ' "${cmd[@]}" | sed "s| \$||; s|$ROOT/||g" > "$RESULTS/$name.cmd"
  wait_quiet
  echo "+ $(cat "$RESULTS/$name.cmd")" >&2
  measure "$name" "${cmd[@]}"
  [ "$RC" = 0 ] || failed "$name"
  mv "$RESULTS/$name.out" "$RESULTS/$name.json"
  echo "  done: $(awk '/^wall_s/{printf "%.0f", $2}' "$RESULTS/$name.meta") s, peak RSS $(( $(awk '/^max_rss_kb/{print $2}' "$RESULTS/$name.meta") / 1024 )) MB" >&2
  record torch 1 "$t" pytorch "$name" ok
}

cd "$ROOT"
start=$(date +%s)
if [ "$PROBE" = 1 ] && [ -n "$PROBE_T" ]; then
  echo "== tessera's own memory estimate (refusal probes, one process)" >&2
  # random bytes: long enough for both halves of --val-frac 0.5 at the longest probe
  maxp=0; for t in $PROBE_T; do [ "$t" -le "$maxp" ] || maxp=$t; done
  head -c $((2 * maxp + 1024)) /dev/urandom > "$SNAP/random.bin"
  for t in $PROBE_T; do probe "$t"; done
  rm -f "$SNAP/random.bin"
fi
echo "== tessera: $MODEL, T in {$TS}, modes {$MODES}, N = $N, $STEPS steps, memory options on" >&2
# run_modes KIND STEPS T MODE...: run_tessera for each mode, UPipe once per U of UPIPE_U
run_modes() {
  local kind=$1 steps=$2 t=$3 m u; shift 3
  for m in "$@"; do
    if [ "$m" = upipe ]; then
      for u in $UPIPE_U; do run_tessera "$kind" "$steps" upipe "$t" "$u"; done
    else
      run_tessera "$kind" "$steps" "$m" "$t"
    fi
  done
}
# MODES and GROWTH_MODES are word lists on purpose
# shellcheck disable=SC2086
for t in $TS; do run_modes tessera "$STEPS" "$t" $MODES; done
if [ -n "$GROWTH_MODES" ]; then
  echo "== memory growth from step to step: T = $GROWTH_T, $GROWTH_STEPS steps, modes {$GROWTH_MODES}" >&2
  # shellcheck disable=SC2086
  run_modes growth "$GROWTH_STEPS" "$GROWTH_T" $GROWTH_MODES
fi
if [ -n "$TORCH_T" ]; then
  echo "== PyTorch: T in {$TORCH_T}, batch 1, $STEPS steps" >&2
  for t in $TORCH_T; do run_torch "$t"; done
fi
echo "mem_available_kb_end $(awk '/^MemAvailable:/{print $2}' /proc/meminfo)" >> "$RESULTS/setup.txt"
echo "elapsed_s $(( $(date +%s) - start ))" >> "$RESULTS/setup.txt"
echo "bench/maxlen.sh: all runs done in $(( $(date +%s) - start )) s; logs in $RESULTS" >&2

if [ "$REPORT" = 1 ]; then
  # shellcheck disable=SC2086
  "$PYTHON" "$ROOT/bench/maxlen_report.py" --results "$RESULTS" --img-dir "$IMG_DIR" $REPORT_ARGS
fi
