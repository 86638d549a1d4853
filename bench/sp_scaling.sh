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
#   MODES         modes of the weak sweep ["lss lss-fused lss-basic megatron"]
#   MEM_N         ranks of the memory sweep [2]
#   MEM_T         sequence lengths of the memory sweep ["1024 2048 4096 8192"]
#   MEM_MODES     modes of the memory sweep ["lss megatron"]
#   MEM_SERIAL    also the serial run at each MEM_T, for reference [1]
#   TIMEOUT       seconds one run may take before it counts as failed [1200]
#   WAIT_LOAD     before the first run wait until the 1-minute load average is at most
#                 this and under half a core is busy, before every later run until under
#                 half a core is busy [2.5; 0 = never wait] ...
#   WAIT_MAX      ... for at most this many seconds in all, then run anyway [600]
#   RESULTS       where the logs go [bench/results/sp]; its previous contents are replaced
#   IMG_DIR       where the report writes its PNG plots [docs/img]
#   REPORT        run bench/sp_report.py at the end [1]; REPORT_ARGS are passed to it
#   QUICK=1       tiny model, 3 steps, short sequences, results and plots under
#                 ${TMPDIR:-/tmp}/tessera-sp-quick (plots in its img/): a smoke test of
#                 the scripts (~1 min)
#
# Every run writes RESULTS/NAME.{cmd,jsonl,out,err,meta}; RESULTS/manifest.tsv lists
# sweep, N, T, mode, run name and status (ok, or na when this build refuses the mode).
# A mode this build does not have (exit 2, "--sp-mode X: not available") is recorded as
# "na" and the sweep goes on; any other failure stops the benchmark with exit 1.
#
# With more ranks than cores, waiting MPI ranks busy-poll and take CPU from the ranks
# that compute: wall times there measure the scheduler. The report therefore puts
# collective counts, bytes, per-rank compute time and peak memory first.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "bench/sp_scaling.sh: $*" >&2; exit 1; }

if [ -z "${TESSERA:-}" ]; then
  if [ -x "$ROOT/build/tessera" ]; then TESSERA=$ROOT/build/tessera; else TESSERA=$ROOT/tessera; fi
fi
if [ "${QUICK:-0}" = 1 ]; then
  : "${MODEL:=tiny}" "${STEPS:=3}" "${SEQ_PER_RANK:=256}" "${MEM_T:=256 512}" "${WAIT_LOAD:=0}"
  : "${RESULTS:=${TMPDIR:-/tmp}/tessera-sp-quick}" "${IMG_DIR:=$RESULTS/img}"
fi
MODEL=${MODEL:-small}
MODEL_FLAGS=${MODEL_FLAGS:-}
STEPS=${STEPS:-4}
THREADS=${THREADS:-1}
SWEEPS=${SWEEPS:-"weak mem"}
WEAK_N=${WEAK_N:-"1 2 4"}
SEQ_PER_RANK=${SEQ_PER_RANK:-1024}
MODES=${MODES:-"lss lss-fused lss-basic megatron"}
MEM_N=${MEM_N:-2}
MEM_T=${MEM_T:-"1024 2048 4096 8192"}
MEM_MODES=${MEM_MODES:-"lss megatron"}
MEM_SERIAL=${MEM_SERIAL:-1}
TIMEOUT=${TIMEOUT:-1200}
WAIT_LOAD=${WAIT_LOAD:-2.5}
WAIT_MAX=${WAIT_MAX:-600}
RESULTS=${RESULTS:-$ROOT/bench/results/sp}
IMG_DIR=${IMG_DIR:-$ROOT/docs/img}
REPORT=${REPORT:-1}
REPORT_ARGS=${REPORT_ARGS:-}
PYTHON=${PYTHON:-/usr/bin/python3}
DATA=$ROOT/data/corpus.txt

[ -x "$TESSERA" ] || die "TESSERA=$TESSERA: not an executable (build first: cd build && make -j2)"
TESSERA=$(cd "$(dirname "$TESSERA")" && pwd)/$(basename "$TESSERA")
# Run a private copy, so that a rebuild during the benchmark cannot mix two binaries in
# one table (the command lines on record name TESSERA).
SNAP=$(mktemp -d "${TMPDIR:-/tmp}/tessera-sp.XXXXXX")
trap 'rm -rf "$SNAP"' EXIT
cp "$TESSERA" "$SNAP/tessera"
BIN=$SNAP/tessera
[ -f "$DATA" ] || die "$DATA: missing"
[ "$STEPS" -ge 2 ] 2>/dev/null || die "STEPS=$STEPS: need at least 2 (1 warm-up + 1 or more measured)"
for s in $SWEEPS; do case $s in weak|mem) ;; *) die "SWEEPS: unknown sweep '$s' (weak, mem)" ;; esac; done
for n in $WEAK_N $MEM_N; do
  if ! [ "$n" -ge 1 ] 2>/dev/null || [ $((n & (n - 1))) != 0 ]; then die "rank count '$n': must be a power of two"; fi
done
[ "$MEM_N" -ge 2 ] || die "MEM_N=$MEM_N: the memory sweep needs 2 or more ranks"
for m in $MODES $MEM_MODES; do
  case $m in lss|lss-fused|lss-basic|megatron) ;; *) die "mode '$m': not one of lss, lss-fused, lss-basic, megatron" ;; esac
done

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
  flock -n 9 || die "another bench/sp_scaling.sh is running with RESULTS=$RESULTS"
fi
find "$RESULTS" -mindepth 1 -maxdepth 1 -type f -delete
MANIFEST=$RESULTS/manifest.tsv
printf 'sweep\tN\tT\tmode\tname\tstatus\n' > "$MANIFEST"
{
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "model $MODEL"
  echo "model_flags $MODEL_FLAGS"
  echo "steps $STEPS"
  echo "threads $THREADS"
  echo "cores $(nproc)"
  echo "mpiexec $MPIEXEC"
  echo "rev $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
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

# run_one N T MODE: runs the configuration once per invocation (the serial run and runs
# shared by both sweeps are not repeated); sets NAME and done_status[NAME].
declare -A done_status
run_one() {
  local n=$1 t=$2 mode=$3 name cmd rc=0
  if [ "$n" = 1 ]; then name=serial-t$t; else name=n$n-t$t-$mode; fi
  NAME=$name
  if [ -n "${done_status[$name]:-}" ]; then return; fi
  # shellcheck disable=SC2206
  cmd=("$BIN" train --model "$MODEL" $MODEL_FLAGS --seq "$t" --batch 1 --steps "$STEPS"
       --threads "$THREADS" --eval-batches 1 --data "$DATA" --quiet --log "$RESULTS/$name.jsonl")
  # shellcheck disable=SC2206
  if [ "$n" != 1 ]; then cmd=($MPIEXEC -n "$n" "${cmd[@]}" --sp "$n" --sp-mode "$mode"); fi
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
  local status=ok
  if [ "$rc" != 0 ]; then
    # a mode this build refuses: exit 2 with one line naming it
    if [ "$rc" = 2 ] && grep -qs -- "--sp-mode $mode: not available" "$RESULTS/$name.err"; then
      status=na
      echo "  $mode: not available in this build ($(head -n 1 "$RESULTS/$name.err")); skipped" >&2
    else
      local why; why=$(grep -sv '^\s*$' "$RESULTS/$name.err" | tail -n 1 | cut -c 1-200)
      [ "$rc" = 124 ] && why="timed out after ${TIMEOUT}s"
      echo "bench/sp_scaling.sh: $name failed (exit $rc): ${why:-no message}; see $RESULTS/$name.err" >&2
      exit 1
    fi
  fi
  {
    echo "rc $rc"
    echo "status $status"
    echo "load_before $l0"
    echo "load_after $(cat /proc/loadavg)"
    echo "wall_s $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')"
    echo "own_cpu_s $(awk -v u="$cu" -v s="$cs" 'BEGIN{printf "%.2f", u+s}')"
    echo "max_rss_kb $cm"
    echo "machine_busy_s $(awk -v a="$j0" -v b="$j1" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}')"
  } > "$RESULTS/$name.meta"
  if [ "$status" = ok ]; then
    echo "  done: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", b-a}') s, largest RSS of any rank $((cm / 1024)) MB" >&2
  fi
  done_status[$name]=$status
}

# record SWEEP N T MODE: runs it (if needed) and adds it to the manifest
record() {
  run_one "$2" "$3" "$4"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$NAME" "${done_status[$NAME]}" >> "$MANIFEST"
}

cd "$ROOT"
start=$(date +%s)
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
  esac
done
echo "elapsed_s $(( $(date +%s) - start ))" >> "$RESULTS/setup.txt"
echo "bench/sp_scaling.sh: all runs done in $(( $(date +%s) - start )) s; logs in $RESULTS" >&2

if [ "$REPORT" = 1 ]; then
  # shellcheck disable=SC2086
  "$PYTHON" "$ROOT/bench/sp_report.py" --results "$RESULTS" --img-dir "$IMG_DIR" $REPORT_ARGS
fi
