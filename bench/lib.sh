# shellcheck shell=bash
# What the benchmark scripts share (bench/sp_scaling.sh, bench/pp_schedule.sh, ...): the
# binary and its private copy, the MPI launcher, the results folder and its lock, waiting
# for a quiet machine, one timed run with its .cmd/.out/.err/.meta files, and the report.
# bench/run.sh, whose files are laid out otherwise, uses only the lock, the wait and the
# timing.
#
# Source it after setting BENCH (the script's name, for messages) and ROOT (the
# repository); call bench_defaults after the script's own defaults (QUICK=1's first):
#
#   ROOT=$(cd "$(dirname "$0")/.." && pwd)
#   BENCH=bench/x.sh
#   . "$ROOT/bench/lib.sh"
#
# The variables it reads are documented in the scripts' headers: TESSERA, MPIEXEC,
# THREADS, TIMEOUT, WAIT_LOAD, WAIT_MAX, RESULTS, IMG_DIR, REPORT, REPORT_ARGS, PYTHON.
# Functions set globals: BIN, SNAP, MPIEXEC, RESULTS, MANIFEST, RUN_* (see each).

die() { echo "$BENCH: $*" >&2; exit 1; }

if [ -z "${TESSERA:-}" ]; then
  if [ -x "$ROOT/build/tessera" ]; then TESSERA=$ROOT/build/tessera; else TESSERA=$ROOT/tessera; fi
fi

# bench_defaults: the defaults every benchmark shares (after the script's QUICK=1 ones)
bench_defaults() {
  THREADS=${THREADS:-1}
  WAIT_LOAD=${WAIT_LOAD:-2.5}
  WAIT_MAX=${WAIT_MAX:-600}
  IMG_DIR=${IMG_DIR:-$ROOT/docs/img}
  REPORT=${REPORT:-1}
  REPORT_ARGS=${REPORT_ARGS:-}
  PYTHON=${PYTHON:-/usr/bin/python3}
  DATA=$ROOT/data/corpus.txt
}

# bench_snapshot PREFIX: checks TESSERA, makes its path absolute and copies it to a
# private folder ${TMPDIR:-/tmp}/PREFIX.XXXXXX (SNAP, removed on exit) as BIN, so that a
# rebuild during the benchmark cannot mix two binaries in one table (the command lines on
# record name TESSERA). Also checks DATA and STEPS (1 warm-up + 1 or more measured).
bench_snapshot() {
  [ -x "$TESSERA" ] || die "TESSERA=$TESSERA: not an executable (build first: cd build && make -j2)"
  TESSERA=$(cd "$(dirname "$TESSERA")" && pwd)/$(basename "$TESSERA")
  SNAP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  trap 'rm -rf "$SNAP"' EXIT
  cp "$TESSERA" "$SNAP/tessera"
  BIN=$SNAP/tessera
  [ -f "$DATA" ] || die "$DATA: missing"
  [ "$STEPS" -ge 2 ] 2>/dev/null || die "STEPS=$STEPS: need at least 2 (1 warm-up + 1 or more measured)"
}

# bench_mpiexec: a launcher that starts local ranks (hydra tries ssh by default on some
# machines): MPIEXEC [mpiexec], with -launcher fork when it cannot start 2 ranks alone.
mpi_ok() { timeout 60 "$@" -n 2 true > /dev/null 2>&1; }
bench_mpiexec() {
  MPIEXEC=${MPIEXEC:-mpiexec}
  command -v "${MPIEXEC%% *}" > /dev/null || die "MPIEXEC=$MPIEXEC: not found"
  # MPIEXEC is a word list on purpose
  # shellcheck disable=SC2086
  if ! mpi_ok $MPIEXEC; then
    mpi_ok $MPIEXEC -launcher fork || die "'$MPIEXEC -n 2 true' fails (also with -launcher fork)"
    MPIEXEC="$MPIEXEC -launcher fork"
  fi
}

# bench_lock: makes RESULTS and its path absolute, and takes it for this benchmark alone
# (one benchmark per results folder at a time: two would overwrite each other's logs and
# slow each other down)
bench_lock() {
  mkdir -p "$RESULTS"
  RESULTS=$(cd "$RESULTS" && pwd)
  exec 9< "$RESULTS"
  if command -v flock > /dev/null; then
    flock -n 9 || die "another $BENCH is running with RESULTS=$RESULTS"
  fi
}

# bench_results COLUMN...: bench_lock, then removes the previous files of RESULTS and
# starts MANIFEST (RESULTS/manifest.tsv) with a heading line of the COLUMNs.
bench_results() {
  bench_lock
  find "$RESULTS" -mindepth 1 -maxdepth 1 -type f -delete
  MANIFEST=$RESULTS/manifest.tsv
  bench_manifest "$@"
}

# bench_manifest FIELD...: one tab-separated line of MANIFEST
bench_manifest() { (IFS=$'\t'; printf '%s\n' "$*") >> "$MANIFEST"; }

# bench_setup LINE...: RESULTS/setup.txt: the date, the LINEs ("key value"), cores, the
# launcher and the source revision
bench_setup() {
  {
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '%s\n' "$@"
    echo "cores $(nproc)"
    echo "mpiexec ${MPIEXEC:-none}"
    echo "rev $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  } > "$RESULTS/setup.txt"
}

# bench_binary: `tessera info` into RESULTS/tessera-info.txt, the binary's hash into setup.txt
bench_binary() {
  "$BIN" info > "$RESULTS/tessera-info.txt" 2>&1 || true
  sha256sum < "$BIN" | cut -c 1-16 | sed 's/^/binary_sha256 /' >> "$RESULTS/setup.txt"
}

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

# bench_timed BASE COMMAND...: runs COMMAND with its output in BASE.out and BASE.err.
# Sets RUN_RC (its exit status) and, for the meta file, the load before it (RUN_LOAD0),
# the time (RUN_T0, RUN_T1) and the whole machine's busy jiffies (RUN_J0, RUN_J1) around it.
bench_timed() {
  local base=$1; shift
  RUN_RC=0
  RUN_LOAD0=$(cat /proc/loadavg); RUN_J0=$(busy_jiffies); RUN_T0=$(date +%s.%N)
  "$@" > "$base.out" 2> "$base.err" || RUN_RC=$?
  RUN_T1=$(date +%s.%N); RUN_J1=$(busy_jiffies)
}

# GNU time's format for bench_time_read: user and system CPU seconds of all the
# processes (all ranks together), and the largest RSS of any of them
GNU_TIME_FORMAT='%U %S %M'
# bench_time_read FILE: what `/usr/bin/time -f "$GNU_TIME_FORMAT" -o FILE` wrote (its last
# line: a failed command's status comes first): RUN_CPU_S (user + system) and RUN_RSS_KB,
# both empty when FILE is missing or empty
bench_time_read() {
  local cu="" cs="" cm=""
  if [ -s "$1" ]; then read -r cu cs cm < <(tail -n 1 "$1") || true; fi
  RUN_CPU_S="" RUN_RSS_KB=$cm
  [ -z "$cs" ] || RUN_CPU_S=$(awk -v u="$cu" -v s="$cs" 'BEGIN{printf "%.2f", u+s}')
}

# bench_run NAME COMMAND...: records the command in RESULTS/NAME.cmd (BIN shown as
# TESSERA), waits for a quiet machine, runs it under GNU time and `timeout TIMEOUT` with
# its output in RESULTS/NAME.{out,err} (removed when empty). Sets RUN_RC (its exit
# status), RUN_RSS_KB (the largest RSS of any of its processes) and what bench_meta writes.
# The command runs in ROOT with the paths inside ROOT made relative to it, so neither
# NAME.cmd nor the run log (its config line names the data) holds this machine's folders;
# TESSERA is shown relative to ROOT, or as tessera when it lies elsewhere.
bench_run() {
  local name=$1 a shown_bin=${TESSERA#"$ROOT"/} args=() here=$PWD; shift
  [ "$shown_bin" = "$TESSERA" ] && shown_bin=tessera
  for a in "$@"; do args+=("${a//"$ROOT"\//}"); done
  printf '%q ' "${args[@]}" | sed "s| \$||; s|$BIN|$shown_bin|" > "$RESULTS/$name.cmd"
  wait_quiet
  echo "+ $(cat "$RESULTS/$name.cmd")" >&2
  cd "$ROOT" || die "cannot enter $ROOT"
  bench_timed "$RESULTS/$name" /usr/bin/time -f "$GNU_TIME_FORMAT" -o "$RESULTS/$name.time" \
    timeout "$TIMEOUT" "${args[@]}"
  cd "$here" || die "cannot return to $here"
  bench_time_read "$RESULTS/$name.time"
  # a run GNU time could not measure still gets numbers in its meta file
  RUN_CPU_S=${RUN_CPU_S:-0.00} RUN_RSS_KB=${RUN_RSS_KB:-0}
  rm -f "$RESULTS/$name.time"
  local f
  for f in "$RESULTS/$name.out" "$RESULTS/$name.err"; do [ -s "$f" ] || rm -f "$f"; done
}

# bench_why NAME: why the last run failed, in one line: the last line of its stderr, or
# the timeout
bench_why() {
  local why; why=$(grep -sv '^\s*$' "$RESULTS/$1.err" | tail -n 1 | cut -c 1-200)
  [ "$RUN_RC" = 124 ] && why="timed out after ${TIMEOUT}s"
  printf '%s\n' "$why"
}

# bench_wall_s FORMAT: the last run's wall time in seconds, as awk's printf FORMAT
bench_wall_s() { awk -v a="$RUN_T0" -v b="$RUN_T1" -v f="$1" 'BEGIN{printf f, b-a}'; }
# bench_busy_s: CPU seconds the whole machine was busy during the last run
bench_busy_s() { awk -v a="$RUN_J0" -v b="$RUN_J1" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}'; }

# bench_meta NAME STATUS: RESULTS/NAME.meta of the last run: exit status, STATUS, the
# load before and after, wall and CPU seconds, largest RSS, and the CPU seconds the whole
# machine was busy (bench/*_report.py subtract the run's own to flag a loaded machine)
bench_meta() {
  {
    echo "rc $RUN_RC"
    echo "status $2"
    echo "load_before $RUN_LOAD0"
    echo "load_after $(cat /proc/loadavg)"
    echo "wall_s $(bench_wall_s %.2f)"
    echo "own_cpu_s $RUN_CPU_S"
    echo "max_rss_kb $RUN_RSS_KB"
    echo "machine_busy_s $(bench_busy_s)"
  } > "$RESULTS/$1.meta"
}

# bench_start / bench_done: the elapsed time, into setup.txt and on stderr
bench_start() { BENCH_START=$(date +%s); }
bench_done() {
  echo "elapsed_s $(( $(date +%s) - BENCH_START ))" >> "$RESULTS/setup.txt"
  echo "$BENCH: all runs done in $(( $(date +%s) - BENCH_START )) s; logs in $RESULTS" >&2
}

# bench_report SCRIPT: with REPORT=1, bench/SCRIPT on RESULTS, plots into IMG_DIR
bench_report() {
  if [ "$REPORT" = 1 ]; then
    # REPORT_ARGS is a word list on purpose
    # shellcheck disable=SC2086
    "$PYTHON" "$ROOT/bench/$1" --results "$RESULTS" --img-dir "$IMG_DIR" $REPORT_ARGS
  fi
}
