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
#                 ${TMPDIR:-/tmp}/tessera-pp-quick (plot in its img/): a smoke test of the
#                 scripts (~1 min)
#
# Every run writes RESULTS/NAME.{cmd,jsonl,err,meta} (NAME pp{P}-m{M}-{schedule}, or
# serial); RESULTS/manifest.tsv lists P, M, schedule, name and status. Any failed run
# stops the benchmark with exit 1 and one line saying which and why.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "bench/pp_schedule.sh: $*" >&2; exit 1; }

if [ -z "${TESSERA:-}" ]; then
  if [ -x "$ROOT/build/tessera" ]; then TESSERA=$ROOT/build/tessera; else TESSERA=$ROOT/tessera; fi
fi
if [ "${QUICK:-0}" = 1 ]; then
  : "${MODEL:=llama-tiny}" "${MODEL_FLAGS:=--layers 4}" "${SEQ:=64}" "${STEPS:=3}" "${WAIT_LOAD:=0}"
  : "${RESULTS:=${TMPDIR:-/tmp}/tessera-pp-quick}" "${IMG_DIR:=$RESULTS/img}"
fi
MODEL=${MODEL:-llama-mini}
MODEL_FLAGS=${MODEL_FLAGS---d 256 --d-ff 768 --layers 4}
SEQ=${SEQ:-256}
BATCH=${BATCH:-8}
STEPS=${STEPS:-6}
THREADS=${THREADS:-1}
PP=${PP:-"2 4"}
MICRO=${MICRO:-"1 2 4 8"}
SCHEDULES=${SCHEDULES:-"gpipe 1f1b"}
SERIAL=${SERIAL:-1}
TIMEOUT=${TIMEOUT:-600}
WAIT_LOAD=${WAIT_LOAD:-2.5}
WAIT_MAX=${WAIT_MAX:-600}
RESULTS=${RESULTS:-$ROOT/bench/results/pp}
IMG_DIR=${IMG_DIR:-$ROOT/docs/img}
REPORT=${REPORT:-1}
REPORT_ARGS=${REPORT_ARGS:-}
PYTHON=${PYTHON:-/usr/bin/python3}
DATA=$ROOT/data/corpus.txt

[ -x "$TESSERA" ] || die "TESSERA=$TESSERA: not an executable (build first: cd build && make -j2)"
TESSERA=$(cd "$(dirname "$TESSERA")" && pwd)/$(basename "$TESSERA")
# Run a private copy, so that a rebuild during the benchmark cannot mix two binaries in
# one table (the command lines on record name TESSERA).
SNAP=$(mktemp -d "${TMPDIR:-/tmp}/tessera-pp.XXXXXX")
trap 'rm -rf "$SNAP"' EXIT
cp "$TESSERA" "$SNAP/tessera"
BIN=$SNAP/tessera
[ -f "$DATA" ] || die "$DATA: missing"
[ "$STEPS" -ge 2 ] 2>/dev/null || die "STEPS=$STEPS: need at least 2 (1 warm-up + 1 or more measured)"
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

# A launcher that starts local ranks (hydra tries ssh by default on some machines).
MPIEXEC=${MPIEXEC:-mpiexec}
command -v "${MPIEXEC%% *}" > /dev/null || die "MPIEXEC=$MPIEXEC: not found"
mpi_ok() { timeout 60 "$@" -n 2 true > /dev/null 2>&1; }
# MPIEXEC and MODEL_FLAGS are word lists on purpose
# shellcheck disable=SC2086,SC2206
if ! mpi_ok $MPIEXEC; then
  mpi_ok $MPIEXEC -launcher fork || die "'$MPIEXEC -n 2 true' fails (also with -launcher fork)"
  MPIEXEC="$MPIEXEC -launcher fork"
fi

# One benchmark per results folder at a time: two would overwrite each other's logs and
# slow each other down.
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
exec 9< "$RESULTS"
if command -v flock > /dev/null; then
  flock -n 9 || die "another bench/pp_schedule.sh is running with RESULTS=$RESULTS"
fi
find "$RESULTS" -mindepth 1 -maxdepth 1 -type f -delete
MANIFEST=$RESULTS/manifest.tsv
printf 'P\tM\tschedule\tname\tstatus\n' > "$MANIFEST"
{
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "model $MODEL"
  echo "model_flags $MODEL_FLAGS"
  echo "seq $SEQ"
  echo "batch $BATCH"
  echo "steps $STEPS"
  echo "threads $THREADS"
  echo "cores $(nproc)"
  echo "mpiexec $MPIEXEC"
  echo "rev $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "binary $TESSERA"
} > "$RESULTS/setup.txt"
"$BIN" info > "$RESULTS/tessera-info.txt" 2>&1 || true
sha256sum < "$BIN" | cut -c 1-16 | sed 's/^/binary_sha256 /' >> "$RESULTS/setup.txt"

load1() { cut -d' ' -f1 /proc/loadavg; }
busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# cores busy right now, averaged over 5 seconds (the load average lags by a minute)
busy_now() {
  local j0 j1; j0=$(busy_jiffies); sleep 5; j1=$(busy_jiffies)
  awk -v a="$j0" -v b="$j1" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz/5}'
}
# Quiet enough? Before the first run: 1-minute load average at most WAIT_LOAD and under
# half a core busy; before every later run only the latter (the load average still
# carries our own previous run). All waits together take at most WAIT_MAX seconds.
waited=0 first_run=1
wait_quiet() {
  [ "$WAIT_LOAD" != 0 ] || return 0
  local l b
  while :; do
    l=$(load1); b=$(busy_now)
    if [ "$first_run" = 1 ]; then
      awk -v l="$l" -v m="$WAIT_LOAD" -v b="$b" 'BEGIN{exit !(l > m || b > 0.5)}' || break
    else
      awk -v b="$b" 'BEGIN{exit !(b > 0.5)}' || break
    fi
    if [ "$waited" -ge "$WAIT_MAX" ]; then
      echo "  still busy after ${waited}s of waiting (load $l, $b cores busy); running anyway" >&2; break
    fi
    echo "  load average $l (limit $WAIT_LOAD), $b cores busy; waiting ($waited/${WAIT_MAX}s)" >&2
    sleep 10; waited=$((waited + 15))
  done
  first_run=0
}

# run_one P M SCHEDULE: one run (P = 1: the serial run); appends it to the manifest
run_one() {
  local p=$1 m=$2 sched=$3 name cmd rc=0
  if [ "$p" = 1 ]; then name=serial; else name=pp$p-m$m-$sched; fi
  # shellcheck disable=SC2206
  cmd=("$BIN" train --model "$MODEL" $MODEL_FLAGS --untied --seq "$SEQ" --batch "$BATCH"
       --steps "$STEPS" --threads "$THREADS" --eval-batches 1 --data "$DATA" --quiet
       --log "$RESULTS/$name.jsonl")
  # shellcheck disable=SC2206
  if [ "$p" != 1 ]; then
    cmd=($MPIEXEC -n "$p" "${cmd[@]}" --pp "$p" --microbatches "$m" --schedule "$sched")
  fi
  printf '%q ' "${cmd[@]}" | sed "s| \$||; s|$BIN|$TESSERA|" > "$RESULTS/$name.cmd"
  wait_quiet
  echo "+ $(cat "$RESULTS/$name.cmd")" >&2
  local l0 j0 t0 t1 j1 cu=0 cs=0 cm=0
  l0=$(cat /proc/loadavg); j0=$(busy_jiffies); t0=$(date +%s.%N)
  # GNU time: CPU seconds of all ranks together, and the largest RSS of any process
  /usr/bin/time -f '%U %S %M' -o "$RESULTS/$name.time" timeout "$TIMEOUT" "${cmd[@]}" \
    > "$RESULTS/$name.out" 2> "$RESULTS/$name.err" || rc=$?
  t1=$(date +%s.%N); j1=$(busy_jiffies)
  if [ -s "$RESULTS/$name.time" ]; then read -r cu cs cm < <(tail -n 1 "$RESULTS/$name.time") || true; fi
  rm -f "$RESULTS/$name.time"
  for f in "$RESULTS/$name.out" "$RESULTS/$name.err"; do [ -s "$f" ] || rm -f "$f"; done
  if [ "$rc" != 0 ]; then
    local why; why=$(grep -sv '^\s*$' "$RESULTS/$name.err" | tail -n 1 | cut -c 1-200)
    [ "$rc" = 124 ] && why="timed out after ${TIMEOUT}s"
    if grep -qs "pipeline parallelism is not available in this build" "$RESULTS/$name.err"; then
      why="$why (this binary predates the pipeline; rebuild: cd build && make -j2)"
    fi
    echo "bench/pp_schedule.sh: $name failed (exit $rc): ${why:-no message}; see $RESULTS/$name.err" >&2
    exit 1
  fi
  {
    echo "rc $rc"
    echo "status ok"
    echo "load_before $l0"
    echo "load_after $(cat /proc/loadavg)"
    echo "wall_s $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')"
    echo "own_cpu_s $(awk -v u="$cu" -v s="$cs" 'BEGIN{printf "%.2f", u+s}')"
    echo "max_rss_kb $cm"
    echo "machine_busy_s $(awk -v a="$j0" -v b="$j1" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}')"
  } > "$RESULTS/$name.meta"
  echo "  done: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", b-a}') s" >&2
  printf '%s\t%s\t%s\t%s\t%s\n' "$p" "$m" "$sched" "$name" ok >> "$MANIFEST"
}

cd "$ROOT"
start=$(date +%s)
echo "== pipeline schedules: $MODEL $MODEL_FLAGS, T $SEQ, B $BATCH, P in {$PP}, M in {$MICRO}," \
  "{$SCHEDULES}, $STEPS steps, --threads $THREADS" >&2
[ "$SERIAL" = 1 ] && run_one 1 1 serial
for p in $PP; do
  for m in $MICRO; do
    for s in $SCHEDULES; do run_one "$p" "$m" "$s"; done
  done
done
echo "elapsed_s $(( $(date +%s) - start ))" >> "$RESULTS/setup.txt"
echo "bench/pp_schedule.sh: all runs done in $(( $(date +%s) - start )) s; logs in $RESULTS" >&2

if [ "$REPORT" = 1 ]; then
  # shellcheck disable=SC2086
  "$PYTHON" "$ROOT/bench/pp_report.py" --results "$RESULTS" --img-dir "$IMG_DIR" $REPORT_ARGS
fi
