#!/bin/bash
# The GPU check: everything the CUDA backend must do on a real device, in one run of
# under 9 minutes on one H200 and 16 cores (the build included), for a machine that is lent briefly.
#
#   bash tests/gpu/run.sh          # from the repository root, on the GPU machine
#
# Steps (each prints PASS / FAIL / SKIP lines, then one summary):
#   a. build      autoreconf when ./configure is missing (or older than configure.ac),
#                 ../configure --enable-cuda in build-cuda/, make; then make and run
#                 tests/test_gpu (CMocka; exit 77 = no device)
#   b. device     `tessera info` must list a built cuda backend; `nvidia-smi -L` must
#                 list a GPU, else every GPU step says SKIP and the script exits 77
#   c. golden     `tessera dump --device cuda` of every golden/*/ configuration against
#                 the CPU golden files: fp32 (the exact tier) byte for byte (cmp);
#                 --fast (cuBLAS's products) within the oracle's bounds and bf16
#                 within loosened ones (tests/oracle/compare_dumps.py; see below)
#   d. determinism  two identical GPU runs log identical results (tessera compare)
#   e. distributed  the serial CPU run, then the one-GPU run and 2 ranks on the one
#                 GPU (--dp 2; --sp 2 --sp-mode ulysses), each identical to it (the
#                 exact tier: docs/GPU.md)
#   f. bench      bench/gpu.sh in the time that is left; its table is copied out
#
# Results go to $OUT when it is set (the device tool's folder), else tests/gpu/out/:
# run.log (everything, command outputs included), summary.txt, gpu-bench.md (the
# benchmark's report, also in bench/results/gpu/latest.md) and logs.tar.gz (run logs,
# dump results, per-command logs and bench/results/gpu/; no tensors). At most four
# files: the device tool brings back only a few.
#
# Exit status: 0 every step that ran passed; 1 something failed; 77 no CUDA device (the
# build still checked: a failed build makes it 1).
#
# Environment:
#   TOTAL_S    wall-time budget of the whole script (default 480); later steps are
#              skipped with a SKIP line when too little is left, and a watchdog ends
#              the script 40 s after it in any case (TERM: it still writes its summary;
#              KILL 30 s later)
#   CMD_S      time limit of one train/dump/compare command (default 120)
#   BUILD_DIR  build folder (default build-cuda; relative to the repository root)
#   JOBS       make -j (default 16)
#   NVCC_ARCH  nvcc -gencode flags given to configure (default sm_90 alone: the H100/H200)
#   TESSERA    use this binary instead of building (the build step then only reports)
#   REHEARSE   1: a rehearsal of this script without a GPU, on the emulated trainer of
#              a plain build (TESSERA=build/tests/tessera_emu, docs/GPU.md): no
#              nvidia-smi probe, the tiny presets in steps d and e, no benchmark
#   PYTHON     the Python for bench/gpu.sh (default python3: the device's, with PyTorch)
#   BENCH_STEPS  steps per benchmark run (default 3)
#   KIT        folder made by tests/gpu/kit.sh on a machine that has the dependencies
#              (default .gpu-kit): when this machine lacks OpenBLAS, MPICH, CMocka or
#              the autotools, their libraries and the generated ./configure are taken
#              from there
set -u

# --- the watchdog: nothing below may outlive TOTAL_S + 70 s ------------------------------
TOTAL_S=${TOTAL_S:-480}
case "$TOTAL_S" in '' | *[!0-9]*) echo "tests/gpu/run.sh: TOTAL_S=$TOTAL_S: need a whole number of seconds" >&2; exit 2 ;; esac
if [ -z "${TS_GPU_WATCHED:-}" ] && command -v timeout > /dev/null; then
  # timeout makes its own process group and signals all of it at the limit
  TS_GPU_WATCHED=1 exec timeout -k 30 $((TOTAL_S + 40)) bash "$0" "$@"
fi

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
START=$(date +%s)
CMD_S=${CMD_S:-120}
BUILD_DIR=${BUILD_DIR:-build-cuda}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
JOBS=${JOBS:-16}
# H100/H200 only: a third of the compile time of configure's default (sm_75 + sm_90 + PTX)
NVCC_ARCH=${NVCC_ARCH:--gencode arch=compute_90,code=sm_90}
BENCH_STEPS=${BENCH_STEPS:-3}
KIT=${KIT:-$ROOT/.gpu-kit}
OUTDIR=${OUT:-$ROOT/tests/gpu/out}
mkdir -p "$OUTDIR" || { echo "tests/gpu/run.sh: cannot create $OUTDIR" >&2; exit 1; }
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG=$OUTDIR/run.log
: > "$LOG"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tessera-gpu.XXXXXX") || { echo "tests/gpu/run.sh: mktemp failed" >&2; exit 1; }
DATA=$ROOT/data/corpus.txt

NPASS=0 NFAIL=0 NSKIP=0
SUMMARY=()
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
logonly() { printf '%s\n' "$*" >> "$LOG"; }
pass() { NPASS=$((NPASS + 1)); SUMMARY+=("PASS: $*"); say "PASS: $*"; }
fail() { NFAIL=$((NFAIL + 1)); SUMMARY+=("FAIL: $*"); say "FAIL: $*"; }
skip() { NSKIP=$((NSKIP + 1)); SUMMARY+=("SKIP: $*"); say "SKIP: $*"; }
elapsed() { echo $(($(date +%s) - START)); }
left() { echo $((TOTAL_S - $(elapsed))); }
step() { say ""; say "== $* ($(elapsed)s elapsed, $(left)s left)"; }

# limit N: a command's time limit: N seconds (default CMD_S), but never past the budget
limit() {
  local want=${1:-$CMD_S} l
  l=$(($(left) - 5))
  [ "$l" -ge 5 ] || l=5
  [ "$want" -le "$l" ] && echo "$want" || echo "$l"
}

# run NAME LIMIT CMD...: runs CMD (stdin closed) under timeout, its output in
# WORK/logs/NAME.log and copied into run.log; RC is its exit status (124: timed out)
RC=0 CHILD=""
run() {
  local name=$1 lim=$2; shift 2
  mkdir -p "$WORK/logs"
  logonly "+ [limit ${lim}s] $*"
  # in the background and waited for, so that a TERM reaches the trap at once
  timeout -k 10 "$lim" "$@" < /dev/null > "$WORK/logs/$name.log" 2>&1 &
  CHILD=$!
  wait "$CHILD"
  RC=$?
  CHILD=""
  cat "$WORK/logs/$name.log" >> "$LOG"
  logonly "  -> exit $RC"
  [ "$RC" = 124 ] || [ "$RC" = 137 ] && logonly "  (killed at its ${lim}s limit)"
  return 0
}

# why NAME: the last meaningful line of NAME's output, for a FAIL line
why() {
  local w
  if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then echo "timed out"; return; fi
  w=$(grep -v '^\s*$' "$WORK/logs/$1.log" 2> /dev/null | tail -n 1 | cut -c 1-200)
  echo "exit $RC${w:+: $w}"
}

# enough N WHAT: true when at least N seconds are left, else a SKIP line for WHAT
enough() {
  if [ "$(left)" -lt "$1" ]; then
    skip "$2: out of time ($(left)s of ${TOTAL_S}s left, needs about $1s)"
    return 1
  fi
  return 0
}

finish() {
  local rc=0
  [ "$NFAIL" = 0 ] || rc=1
  [ "$rc" = 0 ] && [ "${NO_DEVICE:-0}" = 1 ] && rc=77
  say ""
  say "== summary ($(elapsed)s): $NPASS passed, $NFAIL failed, $NSKIP skipped; exit $rc"
  { printf '%s\n' "${SUMMARY[@]+"${SUMMARY[@]}"}"; echo "exit $rc"; } > "$OUTDIR/summary.txt"
  # the small files only: run logs, dump results, command logs, the benchmark's raw
  # files (tensors stay behind)
  if [ -d "$ROOT/bench/results/gpu" ]; then cp -R "$ROOT/bench/results/gpu" "$WORK/bench-results-gpu" 2> /dev/null; fi
  (cd "$WORK" && find . -type f ! -name '*.safetensors' -print0 |
    tar --null -T - -czf "$OUTDIR/logs.tar.gz") 2>> "$LOG" || true
  rm -rf "$WORK"
  exit "$rc"
}

# the watchdog's TERM (or ^C): say so, and still leave the summary and logs behind
# shellcheck disable=SC2317  # called by the trap below
on_signal() {
  trap - TERM INT
  if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2> /dev/null; fi
  fail "interrupted by a signal at $(elapsed)s (the watchdog's comes at ${TOTAL_S}s + 40s)"
  finish
}
trap on_signal TERM INT

say "tessera GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n), $(nproc) cores; budget ${TOTAL_S}s"
say "repository $ROOT ($(git -C "$ROOT" describe --always --dirty 2> /dev/null || echo 'not a git checkout')); results in $OUTDIR"

# --- the tools this machine has (in run.log; the kit fills gaps) ----------------------------
have() { command -v "$1" > /dev/null 2>&1; }
# shellcheck disable=SC2086  # CC and CPPFLAGS are word lists
has_header() { printf '#include <%s>\n' "$1" | ${CC:-cc} ${CPPFLAGS:-} -E -x c - > /dev/null 2>&1; }
missing_deps() {
  local m=()
  have cc || m+=(cc)
  have make || m+=(make)
  has_header cblas.h || m+=("cblas.h (OpenBLAS)")
  { have pkg-config && pkg-config --exists mpich; } || [ -n "${MPI_LIBS:-}" ] || m+=("MPICH (pkg-config mpich)")
  have mpiexec || m+=(mpiexec)
  { have pkg-config && pkg-config --exists cmocka; } || [ -n "${CMOCKA_LIBS:-}" ] || m+=(CMocka)
  [ -f "$ROOT/configure" ] || have autoreconf || m+=("autoreconf (no ./configure)")
  printf '%s\n' "${m[@]+"${m[@]}"}"
}
{
  echo "tools:"
  for t in cc gcc nvcc make autoreconf pkg-config mpiexec mpicc nvidia-smi python3 /usr/bin/python3; do
    printf '  %-16s %s\n' "$t" "$(command -v "$t" 2> /dev/null || echo missing)"
  done
  echo "  nvcc version     $(nvcc --version 2> /dev/null | tail -n 1)"
} >> "$LOG"

MISSING=$(missing_deps)
if [ -n "$MISSING" ]; then
  logonly "missing here: $(echo "$MISSING" | paste -sd, -)"
  if [ -f "$KIT/env.sh" ]; then
    # shellcheck source=/dev/null
    . "$KIT/env.sh" "$KIT" >> "$LOG" 2>&1
    say "note: this machine lacks $(echo "$MISSING" | paste -sd, - | sed 's/,/, /g'); using the kit in $KIT"
    MISSING=$(missing_deps)
    [ -z "$MISSING" ] || logonly "still missing with the kit: $(echo "$MISSING" | paste -sd, -)"
  fi
fi

# configure looks for NCCL only inside the CUDA toolkit (or /usr/include). Where the
# machine has it only as a Python package (PyTorch's nvidia-nccl), a prefix of links in
# the build folder joins the two, and configure gets --with-cuda=that prefix.
WITH_CUDA="" NCCL_INC=""
cuda_prefix_for_nccl() {
  local home=${CUDA_HOME:-/usr/local/cuda} py d inc lib p f
  [ -d "$home" ] || home=$(dirname "$(dirname "$(command -v nvcc 2> /dev/null || echo /x/x/x)")")
  if [ -f "$home/include/nccl.h" ] || [ -f /usr/include/nccl.h ]; then return 0; fi
  inc="" lib=""
  for py in python3 /usr/bin/python3; do
    have "$py" || continue
    for d in $(timeout 60 "$py" -c 'import nvidia.nccl as m; print(*m.__path__)' 2> /dev/null); do
      if [ -f "$d/include/nccl.h" ] && ls "$d"/lib/libnccl.so* > /dev/null 2>&1; then inc=$d/include lib=$d/lib; break 2; fi
    done
  done
  if [ -z "$inc" ]; then
    logonly "NCCL: no nccl.h in $home/include, /usr/include or a Python nvidia-nccl package"
    return 0
  fi
  p=$BUILD_DIR/cuda-prefix
  rm -rf "$p" && mkdir -p "$p/include" "$p/lib64" || return 0
  ln -s "$home/bin" "$p/bin"
  for f in "$home"/include/* "$inc"/*; do ln -sf "$f" "$p/include/"; done
  for f in "$home"/lib64/* "$lib"/*; do ln -sf "$f" "$p/lib64/"; done
  if [ ! -e "$p/lib64/libnccl.so" ]; then
    for f in "$lib"/libnccl.so.*; do ln -s "$f" "$p/lib64/libnccl.so"; break; done
  fi
  WITH_CUDA=--with-cuda=$p NCCL_INC=$inc # nvcc may find its headers through its real path
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "note: NCCL from $(dirname "$inc") (a Python package): configure $WITH_CUDA (links to $home and it)"
}

# --- a. build ------------------------------------------------------------------------------
step "a. build (CUDA)"
BUILT=0
TS=${TESSERA:-$BUILD_DIR/tessera}
if [ -n "${TESSERA:-}" ]; then
  if [ -x "$TESSERA" ]; then
    BUILT=1
    skip "build: TESSERA=$TESSERA given, nothing built"
  else
    fail "build: TESSERA=$TESSERA is not an executable"
  fi
else
  # the generated build files: from autoreconf, or from the kit when there is no
  # ./configure (autoreconf there would need autoconf, automake, libtool and pkg.m4)
  autotools_ok=1 from_kit=0
  if [ ! -f configure ] && [ -f "$KIT/autotools/configure" ]; then
    if cp -pR "$KIT"/autotools/. "$ROOT"/; then
      from_kit=1
      say "note: ./configure and the other generated build files copied from $KIT/autotools"
    fi
  fi
  if [ "$from_kit" = 0 ] && have autoreconf &&
    { [ ! -f configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; }; then
    run autoreconf "$(limit 120)" autoreconf -fi
    [ "$RC" = 0 ] || { autotools_ok=0; fail "build: autoreconf -fi: $(why autoreconf)"; }
  elif [ ! -f configure ]; then
    autotools_ok=0
    fail "build: no ./configure and no autoreconf on this machine (run tests/gpu/kit.sh where the tools are, carry .gpu-kit)"
  elif [ "$from_kit" = 1 ] || ! have autoreconf; then
    # copied files can arrive with any times: make must not try to regenerate them
    touch aclocal.m4 && touch configure Makefile.in && touch config.h.in
  fi
  if [ "$autotools_ok" = 1 ]; then
    mkdir -p "$BUILD_DIR"
    cuda_prefix_for_nccl
    cfg_ok=1
    if [ ! -f "$BUILD_DIR/config.status" ] || [ "$ROOT/configure" -nt "$BUILD_DIR/config.status" ] ||
      ! grep -q -- '--enable-cuda' "$BUILD_DIR/config.status" || ! grep -qF -- "$NVCC_ARCH" "$BUILD_DIR/config.status" ||
      ! grep -qF -- "$WITH_CUDA" "$BUILD_DIR/config.status"; then
      # shellcheck disable=SC2016  # expanded by that sh
      run configure "$(limit 120)" sh -c 'cd "$1" && "$2/configure" --quiet --enable-cuda NVCC_ARCH="$3" $4' \
        sh "$BUILD_DIR" "$ROOT" "$NVCC_ARCH" "$WITH_CUDA${WITH_CUDA:+ NVCCFLAGS=-I$NCCL_INC}"
      if [ "$RC" != 0 ]; then
        cfg_ok=0
        fail "build: configure --enable-cuda: $(why configure)"
        if [ -n "$MISSING" ]; then say "  this machine lacks: $(echo "$MISSING" | paste -sd, - | sed 's/,/, /g')"; fi
      fi
    else
      logonly "configure: $BUILD_DIR/config.status is current (--enable-cuda), not run again"
    fi
    if [ "$cfg_ok" = 1 ]; then
      run make "$(limit 200)" make -C "$BUILD_DIR" -j"$JOBS"
      if [ "$RC" = 0 ] && [ -x "$BUILD_DIR/tessera" ]; then
        BUILT=1
        pass "build: configure --enable-cuda && make -j$JOBS ($(elapsed)s elapsed)"
      else
        fail "build: make: $(why make)"
        grep -E 'error:|\*\*\*' "$WORK/logs/make.log" | head -n 8 | cut -c 1-300 | sed 's/^/  /' | tee -a "$LOG"
      fi
    fi
  fi
fi

if [ "$BUILT" = 1 ] && [ -z "${TESSERA:-}" ] && enough 20 "tests/test_gpu"; then
  run make_test_gpu "$(limit 150)" make -C "$BUILD_DIR" -j"$JOBS" tests/test_gpu
  if [ "$RC" != 0 ]; then
    if grep -q 'No rule to make target' "$WORK/logs/make_test_gpu.log"; then
      skip "tests/test_gpu: this build has no such target yet"
    else
      fail "tests/test_gpu: make: $(why make_test_gpu)"
    fi
  else
    # the environment `make check` gives its tests
    # shellcheck disable=SC2016  # expanded by that sh
    run test_gpu "$(limit 120)" env TESSERA_SRCDIR="$ROOT" TESSERA_BIN="$BUILD_DIR/tessera" \
      TESSERA_BUILDDIR="$BUILD_DIR" sh -c 'cd "$1" && ./tests/test_gpu' sh "$BUILD_DIR"
    case "$RC" in
      0) pass "tests/test_gpu ($(grep -c '^\[       OK \]' "$WORK/logs/test_gpu.log") tests)" ;;
      77) skip "tests/test_gpu: no device ($(tail -n 1 "$WORK/logs/test_gpu.log" | cut -c 1-150))" ;;
      *) fail "tests/test_gpu: $(why test_gpu)"
         grep -E '^\[  (FAILED|ERROR) \]|^\[  FAILED  \]' "$WORK/logs/test_gpu.log" | head -n 10 | sed 's/^/  /' | tee -a "$LOG" ;;
    esac
  fi
fi

# --- b. device ------------------------------------------------------------------------------
step "b. device"
NO_DEVICE=0
GPU_STEPS="golden files (fp32, bf16), determinism, distributed, benchmark"
if [ "$BUILT" = 1 ]; then
  run info 30 "$TS" info
  cuda_line=$(grep -E '^ *cuda ' "$WORK/logs/info.log" | head -n 1 | sed 's/^ *//')
  logonly "tessera info: ${cuda_line:-no cuda line}"
fi
smi_why=""
REHEARSE=${REHEARSE:-0}
if [ "$REHEARSE" = 1 ]; then
  say "REHEARSE=1: no nvidia-smi probe; tiny presets in d and e; no benchmark"
  mkdir -p "$WORK/logs" && echo "GPU 0: the emulated device of $TS (a rehearsal)" > "$WORK/logs/nvidia-smi.log"
elif ! have nvidia-smi; then
  smi_why="nvidia-smi not found"
else
  run nvidia-smi 30 nvidia-smi -L
  if [ "$RC" != 0 ]; then
    smi_why="nvidia-smi -L: $(why nvidia-smi)"
  elif ! grep -q '^GPU ' "$WORK/logs/nvidia-smi.log"; then
    smi_why="nvidia-smi -L lists no GPU"
  fi
fi
if [ -n "$smi_why" ]; then
  NO_DEVICE=1
  for s in "device probe" golden-fp32 golden-bf16 determinism distributed benchmark; do
    skip "$s: no CUDA device ($smi_why)"
  done
  finish
fi
say "$(grep '^GPU ' "$WORK/logs/nvidia-smi.log")"
if [ "$BUILT" != 1 ]; then
  skip "$GPU_STEPS: no tessera binary (the build failed)"
  finish
fi
if [ -z "${cuda_line:-}" ] || echo "$cuda_line" | grep -q 'not built'; then
  fail "device probe: tessera info: ${cuda_line:-no cuda line} (a CUDA build must list its devices)"
  skip "$GPU_STEPS: this tessera has no CUDA backend"
  finish
fi
devices_line=$(grep -E '^ *cuda devices' "$WORK/logs/info.log" | head -n 1 | sed 's/^ *//')
if echo "$devices_line" | grep -qE '^cuda devices +no usable'; then
  fail "device probe: nvidia-smi lists a GPU but tessera does not: $devices_line"
  skip "$GPU_STEPS: tessera sees no CUDA device"
  finish
fi
pass "device probe: tessera info: $cuda_line${devices_line:+; $devices_line}"
HAVE_PREC=0
help=$(timeout 20 "$TS" train --help 2> /dev/null)
case "$help" in *--precision*) HAVE_PREC=1 ;; esac
[ "$HAVE_PREC" = 1 ] || say "note: this tessera has no --precision flag: the bf16 checks are skipped"

# --- c. golden files --------------------------------------------------------------------------
step "c. golden files on the GPU"
PY=""
for p in /usr/bin/python3 python3; do
  # compare_dumps.py reads through tests/oracle/model.py, which imports torch as well
  if have "$p" && timeout 90 "$p" -c 'import numpy, torch' > /dev/null 2>&1; then PY=$p; break; fi
done
# The comparisons run in the background, all at once (each pays for importing torch),
# while the GPU goes on with the next dump; collect_compares waits for them.
CMP_KEYS=() CMP_PIDS=()
start_compare() {
  local key=$1; shift
  (timeout -k 5 120 "$PY" -B "$ROOT/tests/oracle/compare_dumps.py" "$@" < /dev/null \
    > "$WORK/logs/cmp-$key.log" 2>&1; echo $? > "$WORK/logs/cmp-$key.rc") &
  CMP_PIDS+=($!) CMP_KEYS+=("$key")
  logonly "+ [background] compare_dumps.py $* (cmp-$key)"
}
collect_compares() {
  local i key rc log
  for i in "${!CMP_PIDS[@]}"; do
    wait "${CMP_PIDS[$i]}" 2> /dev/null
    key=${CMP_KEYS[$i]} log=$WORK/logs/cmp-${CMP_KEYS[$i]}.log
    rc=$(cat "$WORK/logs/cmp-$key.rc" 2> /dev/null || echo "?")
    { echo "cmp-$key:"; cat "$log"; echo "  -> exit $rc"; } >> "$LOG"
    case "$rc" in
      0) pass "golden-${key/-//} within tolerance ($(grep -E '^(loss|grads)' "$log" | tr -s ' ' | paste -sd';' -))" ;;
      1) fail "golden-${key/-//}: $(grep -E 'rel|worst|differ' "$log" | paste -sd';' - | cut -c 1-300)" ;;
      124 | 137) fail "golden-${key/-//}: compare_dumps.py timed out" ;;
      *) fail "golden-${key/-//}: compare_dumps.py exit $rc: $(grep -v '^\s*$' "$log" | tail -n 1 | cut -c 1-200)" ;;
    esac
  done
}
# golden PREC COMPARE_OPTIONS...: dump every golden configuration on the GPU (PREC fp32:
# the exact tier, compared byte for byte here; fast: fp32 with --fast; bf16), then
# compare within the oracle's bounds in the background
golden() {
  local prec=$1 name dir out n=0 f differ pflag=()
  shift
  case "$prec" in fast) pflag=(--fast) ;; bf16) pflag=(--precision bf16) ;; esac
  for dir in "$ROOT"/golden/*/; do
    [ -f "$dir/args" ] || continue
    name=$(basename "$dir")
    n=$((n + 1))
    enough 15 "golden-$prec/$name" || continue
    out=$WORK/golden-$prec/$name
    mkdir -p "$WORK/golden-$prec"
    # shellcheck disable=SC2046  # args holds several words on purpose
    run "dump-$prec-$name" "$(limit)" "$TS" dump --device cuda ${pflag[@]+"${pflag[@]}"} --out "$out" \
      --data "$DATA" $(cat "$dir/args")
    if [ "$RC" != 0 ]; then
      fail "golden-$prec/$name: tessera dump: $(why "dump-$prec-$name")"; continue
    fi
    if [ "$prec" = fp32 ]; then
      differ=""
      for f in config.json weights.safetensors grads.safetensors result.json; do
        cmp -s "$dir/$f" "$out/$f" || differ="$differ $f"
      done
      if [ -z "$differ" ]; then
        pass "golden-fp32/$name: the CPU's bytes (exact tier)"
      else
        # how far: the oracle's measure, when there is a Python for it
        [ -n "$PY" ] && run "why-fp32-$name" 120 "$PY" -B "$ROOT/tests/oracle/compare_dumps.py" "$dir" "$out"
        fail "golden-fp32/$name: differs from the CPU's golden files:$differ${PY:+ ($(grep -E '^(loss|grads)' "$WORK/logs/why-fp32-$name.log" 2> /dev/null | tr -s ' ' | paste -sd';' - | cut -c 1-200))}"
      fi
    else
      start_compare "$prec-$name" "$@" "$dir" "$out"
    fi
  done
  [ "$n" -gt 0 ] || fail "golden-$prec: no golden/*/args found"
}
golden fp32
if [ -z "$PY" ]; then
  skip "golden-fast, golden-bf16: no Python with numpy and torch (tried /usr/bin/python3, python3)"
else
  logonly "python for the comparisons: $PY"
  # fast fp32: the oracle's own bounds (compare_dumps.py's defaults: loss 1e-5, tensors 1e-4)
  golden fast
  if [ "$HAVE_PREC" = 1 ]; then
    # bf16: operands of products rounded to 8 significant bits, unit roundoff
    # 2^-8 ~ 3.9e-3 per rounding; a few roundings per result and accumulation in fp32
    # give errors of a few 1e-3 in the loss (bound 1e-2) and up to a few 1e-2 in
    # single gradient elements (bound 5e-2). The trajectory's losses after 10 steps
    # carry the same per-step error (bound 1e-2, as the loss).
    golden bf16 --loss-rtol 1e-2 --rtol 5e-2 --traj-rtol 1e-2
  else
    skip "golden-bf16: this tessera has no --precision flag"
  fi
  collect_compares
fi

# --- d. determinism ---------------------------------------------------------------------------
step "d. determinism: two identical GPU runs"
# twice LABEL FLAGS...: two identical runs must log identical results
twice() {
  local label=$1 i; shift
  enough 30 "determinism/$label" || return
  for i in a b; do
    run "det-$label-$i" "$(limit)" "$TS" train --device cuda "$@" --data "$DATA" \
      --log "$WORK/det-$label-$i.jsonl"
    if [ "$RC" != 0 ]; then fail "determinism/$label: run $i: $(why "det-$label-$i")"; return; fi
  done
  run "det-$label-cmp" 30 "$TS" compare "$WORK/det-$label-a.jsonl" "$WORK/det-$label-b.jsonl"
  if [ "$RC" = 0 ]; then
    pass "determinism/$label: $(head -n 1 "$WORK/logs/det-$label-cmp.log")"
  else
    fail "determinism/$label: $(head -n 3 "$WORK/logs/det-$label-cmp.log" | paste -sd' ' - | cut -c 1-300)"
  fi
}
if [ "$REHEARSE" = 1 ]; then
  twice tiny-fp32 --model tiny --batch 2 --steps 2
else
  twice small-fp32 --model small --seq 1024 --batch 4 --steps 5
fi
if [ "$HAVE_PREC" = 1 ] && [ "$REHEARSE" = 1 ]; then
  twice llama-tiny-bf16 --model llama-tiny --batch 2 --steps 2 --precision bf16
elif [ "$HAVE_PREC" = 1 ]; then
  twice llama-100m-bf16 --model llama-100m --seq 1024 --batch 1 --steps 3 --precision bf16
else
  skip "determinism/llama-100m-bf16: this tessera has no --precision flag"
fi

# --- e. distributed on one GPU -------------------------------------------------------------------
step "e. distributed: the CPU, one GPU and 2 ranks sharing it"
MPIEXEC=${MPIEXEC:-mpiexec}
mpi_ok() { timeout 60 "$@" -n 2 true < /dev/null > /dev/null 2>&1; }
DIST=(--model small --seq 1024 --batch 4 --steps 3 --data "$DATA")
[ "$REHEARSE" = 1 ] && DIST=(--model tiny --batch 4 --steps 2 --data "$DATA")
# same LABEL LOG: the run LOG against the serial CPU run: identical (the exact tier)
same() {
  run "dist-$1-cmp" 30 "$TS" compare "$WORK/dist-cpu.jsonl" "$2"
  if [ "$RC" = 0 ] && [ "$(head -n 1 "$WORK/logs/dist-$1-cmp.log")" = identical ]; then
    pass "distributed/$1: identical to the serial CPU run"
  else
    fail "distributed/$1 vs the serial CPU run: $(head -n 3 "$WORK/logs/dist-$1-cmp.log" | paste -sd' ' - | cut -c 1-300)"
  fi
}
if ! have "${MPIEXEC%% *}"; then
  skip "distributed: no mpiexec ($MPIEXEC)"
elif enough 60 "distributed"; then
  # shellcheck disable=SC2086  # MPIEXEC is a word list on purpose
  if ! mpi_ok $MPIEXEC; then
    if mpi_ok $MPIEXEC -launcher fork; then MPIEXEC="$MPIEXEC -launcher fork"; else MPIEXEC=""; fi
  fi
  if [ -z "$MPIEXEC" ]; then
    fail "distributed: '${MPIEXEC:-mpiexec} -n 2 true' fails (also with -launcher fork)"
  else
    run dist-cpu "$(limit)" "$TS" train "${DIST[@]}" --log "$WORK/dist-cpu.jsonl"
    if [ "$RC" != 0 ]; then
      fail "distributed: the serial CPU run: $(why dist-cpu)"
    else
      run dist-gpu "$(limit)" "$TS" train --device cuda "${DIST[@]}" --log "$WORK/dist-gpu.jsonl"
      if [ "$RC" != 0 ]; then fail "distributed/one-gpu: $(why dist-gpu)"; else same one-gpu "$WORK/dist-gpu.jsonl"; fi
      for layout in "dp2:--dp 2" "sp2-ulysses:--sp 2 --sp-mode ulysses"; do
        label=${layout%%:*}
        enough 20 "distributed/$label" || continue
        # shellcheck disable=SC2086  # the layout flags and MPIEXEC are word lists
        run "dist-$label" "$(limit)" $MPIEXEC -n 2 "$TS" train --device cuda "${DIST[@]}" ${layout#*:} \
          --log "$WORK/dist-$label.jsonl"
        if [ "$RC" != 0 ]; then fail "distributed/$label: $(why "dist-$label")"; continue; fi
        same "$label" "$WORK/dist-$label.jsonl"
      done
    fi
  fi
fi

# --- f. benchmark ------------------------------------------------------------------------------
step "f. benchmark: bench/gpu.sh"
if [ "$REHEARSE" = 1 ]; then
  skip "benchmark: a rehearsal (REHEARSE=1) measures nothing"
elif enough 45 "benchmark"; then
  budget=$(($(left) - 25))
  run bench $((budget + 20)) env TESSERA="$TS" PYTHON="${PYTHON:-python3}" STEPS="$BENCH_STEPS" \
    BUDGET_S="$budget" bash "$ROOT/bench/gpu.sh"
  table=$ROOT/bench/results/gpu/latest.md
  if [ -f "$table" ] && [ "$table" -nt "$WORK/logs/nvidia-smi.log" ]; then
    cp "$table" "$OUTDIR/gpu-bench.md"
    say ""
    sed -n '/^| model/,/^$/p' "$table" | tee -a "$LOG" > /dev/null
    sed -n '/^| model/,/^$/p' "$table" | cut -c 1-400
  fi
  if [ "$RC" = 0 ]; then
    pass "benchmark: bench/gpu.sh (budget ${budget}s): table in gpu-bench.md"
  else
    fail "benchmark: bench/gpu.sh: $(why bench)"
  fi
fi

finish
