#!/bin/bash
# tessera beside llm.c's CPU trainer (train_gpt2.c) at GPT-2 124M's shape, on the same
# initial weights and the same batches, the runs alternating llm.c, tessera, llm.c, ...,
# on a quiet machine and, for the cases in BUSY_CASES, once more beside one busy process
# (a shell loop holding one core).
#
#   LLMC_DIR=~/src/llm.c bench/llmc.sh
#   LLMC_DIR=~/src/llm.c CASES="t64 t1024" BUSY_CASES=t64 bench/llmc.sh
#
# LLMC_DIR is a checkout of llm.c (its train_gpt2.c and llmc/ headers); nothing of it is
# copied or changed. bench/llmc_driver.c includes its train_gpt2.c under -DTESTING (so that
# the file's own main, with its fixed shape, paths, validation and sampling, drops out) and
# times a step as that main does, with its AdamW settings, on tessera's windows of the
# token file. It is built with the CPU flags of llm.c's Makefile (LLMC_CFLAGS).
# The weights: `tessera dump` writes the configuration's initial parameters and
# bench/llmc_ckpt.py turns them into llm.c's checkpoint (maxT = T, Vp = V: the same
# shapes). The two trainers' first losses agree to float rounding; after that their
# optimizers differ (tessera: warmup, clipping, weight decay 0.1, beta2 0.95).
#
# Cases (CASES, default "t64"): t64 and t1024, --seq 64 or 1024, --batch 4, GPT-2 124M
# (--d 768 --layers 12 --heads 12 --d-ff 3072 --vocab 50257 --tied), 2M random token ids
# (seed 1) in llm.c's token format, read by tessera with --data-format llmc.
# Environment: TESSERA (the binary; its build folder's libtessera is not needed), THREADS
# (each trainer's threads, default 2: OMP_NUM_THREADS for llm.c, --threads for tessera),
# STEPS (per run, default 5; the median is over steps 2..STEPS), STEPS_T1024 (default 3),
# ROUNDS (default 2), BUSY_CASES (default "t64"), WAIT_LOAD / WAIT_MAX (bench/lib.sh: wait
# for a quiet machine first; WAIT_LOAD=0 skips), WORK (the driver, checkpoints and token
# file; default $TMPDIR/tessera-llmc), RESULTS (default bench/results/llmc), CC,
# LLMC_CFLAGS (default the Makefile's: -Ofast -march=native -fopenmp -DOMP ...),
# TESSERA_LABEL / LLMC_LABEL (what the summary calls each, e.g. a commit).
# Every run's `uptime` before and after goes to RESULTS/CASE.load.log; bench/llmc_report.py
# writes RESULTS/summary.md from every case's runs in RESULTS (a case run again replaces
# its files only). llm.c keeps every layer's T x T attention and its gradient: at t1024
# that is about 20 GB of memory (tessera: about 5 GB).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/llmc.sh
. "$ROOT/bench/lib.sh"
LLMC_DIR=${LLMC_DIR:?LLMC_DIR=a checkout of llm.c}
[ -f "$LLMC_DIR/train_gpt2.c" ] || die "$LLMC_DIR/train_gpt2.c: missing"
[ -x "$TESSERA" ] || die "TESSERA=$TESSERA: not an executable"
THREADS=${THREADS:-2}
STEPS=${STEPS:-5}
STEPS_T1024=${STEPS_T1024:-3}
ROUNDS=${ROUNDS:-2}
CASES=${CASES:-t64}
BUSY_CASES=${BUSY_CASES:-t64}
WAIT_LOAD=${WAIT_LOAD:-2.5}
WAIT_MAX=${WAIT_MAX:-600}
WORK=${WORK:-${TMPDIR:-/tmp}/tessera-llmc}
RESULTS=${RESULTS:-$ROOT/bench/results/llmc}
PYTHON=${PYTHON:-/usr/bin/python3}
CC=${CC:-gcc}
LLMC_CFLAGS=${LLMC_CFLAGS:-"-Ofast -Wno-unused-result -march=native -fopenmp -DOMP"}
GPT2="--d 768 --layers 12 --heads 12 --d-ff 3072 --vocab 50257 --tied"
mkdir -p "$WORK"
bench_lock
for c in $CASES; do rm -f "$RESULTS/$c".*; done # only the cases run now: t64 and t1024 may be run apart

# the driver: llm.c's trainer and tessera's window rule (src/exact/rng.c, built as tessera builds it)
$CC -std=c11 -O2 -ffp-contract=off -fno-fast-math -I"$ROOT/src" -c "$ROOT/src/exact/rng.c" -o "$WORK/rng.o"
# shellcheck disable=SC2086
$CC $LLMC_CFLAGS -DTESTING -I"$LLMC_DIR" -I"$ROOT/src" "$ROOT/bench/llmc_driver.c" "$WORK/rng.o" \
  -lm -lgomp -o "$WORK/llmc_driver"

TOKENS=$WORK/tokens.bin # 2M random GPT-2 ids, fixed seed (bench/binaries.sh's), llm.c's format
if [ ! -s "$TOKENS" ]; then
  "$PYTHON" -c 'import random, array, struct, sys; r = random.Random(1)
ids = array.array("H", (r.randrange(50257) for _ in range(2000000)))
f = open(sys.argv[1], "wb"); f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253))); ids.tofile(f)' "$TOKENS"
fi

seq_of() { case $1 in t64) echo 64 ;; t1024) echo 1024 ;; *) die "unknown case '$1' (CASES: t64 t1024)" ;; esac; }
steps_of() { if [ "$1" = t1024 ]; then echo "$STEPS_T1024"; else echo "$STEPS"; fi; }

# checkpoint CASE: llm.c's checkpoint of tessera's initial weights at the case's T
checkpoint() {
  local t ck=$WORK/gpt2-$1.bin
  t=$(seq_of "$1")
  [ -s "$ck" ] && return 0
  # shellcheck disable=SC2086
  "$TESSERA" dump $GPT2 --seq "$t" --batch 4 --data "$TOKENS" --data-format llmc --traj-steps 1 \
    --out "$WORK/dump-$1" > /dev/null
  "$PYTHON" "$ROOT/bench/llmc_ckpt.py" "$WORK/dump-$1/weights.safetensors" "$ck"
  rm -rf "$WORK/dump-$1"
}

# run CASE WHICH ROUND LOAD
run() {
  local out=$RESULTS/$1.$2.$3.$4 spin="" t n
  t=$(seq_of "$1"); n=$(steps_of "$1")
  wait_quiet
  if [ "$4" = busy ]; then (while :; do :; done) & spin=$!; fi
  echo "$1 $2 round $3 ($4)" >&2
  echo "$1 $2 $3 $4 before: $(uptime)" >> "$RESULTS/$1.load.log"
  if [ "$2" = llmc ]; then
    OMP_NUM_THREADS=$THREADS "$WORK/llmc_driver" "$WORK/gpt2-$1.bin" "$TOKENS" 4 "$t" "$n" 1337 0.1 \
      > "$out.out" 2> "$out.err" || echo "  exit $? (see $out.err)" >&2
  else
    # shellcheck disable=SC2086
    "$TESSERA" train $GPT2 --seq "$t" --batch 4 --data "$TOKENS" --data-format llmc --threads "$THREADS" \
      --steps "$n" --eval-batches 1 --quiet --log "$out.jsonl" 2> "$out.err" ||
      echo "  exit $? (see $out.err)" >&2
  fi
  echo "$1 $2 $3 $4 after:  $(uptime)" >> "$RESULTS/$1.load.log"
  if [ -n "$spin" ]; then kill "$spin"; wait "$spin" 2> /dev/null || true; fi
  for f in "$out.err" "$out.out"; do [ -s "$f" ] || rm -f "$f"; done
}

for c in $CASES; do
  checkpoint "$c"
  loads=quiet
  case " $BUSY_CASES " in *" $c "*) loads="quiet busy" ;; esac
  for r in $(seq 1 "$ROUNDS"); do
    for l in $loads; do
      run "$c" llmc "$r" "$l"
      run "$c" tessera "$r" "$l"
    done
  done
done
# what the summary calls each trainer (no folder of this machine goes on record)
LLMC_LABEL=${LLMC_LABEL:-train_gpt2.c$(git -C "$LLMC_DIR" rev-parse --short HEAD 2> /dev/null | sed 's/^/ at /' || true)}
{ echo "tessera: ${TESSERA_LABEL:-$(basename "$TESSERA")} ($("$TESSERA" --version))"
  echo "llm.c: $LLMC_LABEL, built with $CC $LLMC_CFLAGS"
  echo "threads $THREADS, steps $STEPS (t1024: $STEPS_T1024), rounds $ROUNDS, $(nproc) cores, $(date -u +%FT%TZ)"; } > "$RESULTS/about-$(echo "$CASES" | tr " " -).txt"
"$PYTHON" "$ROOT/bench/llmc_report.py" "$RESULTS" | tee "$RESULTS/summary.md"
