#!/bin/sh
# The mutation fuzzer of tessera's readers (tests/fuzz/fuzz.c, docs/FUZZING.md):
#   tests/fuzz/run.sh [N [SEED]]
# makes its seed files with tessera itself (two checkpoints of small runs, a
# dump's format-1 weights, two run logs), then runs N cases (default
# $FUZZ_CASES, else 1000) from SEED (default 1): mutated checkpoints,
# configurations and logs, each read by the library in a child process and
# a sample by the binary. `make check` runs the defaults; run it by hand for
# as long as you like, e.g.
#   TESSERA_BIN=build/tessera tests/fuzz/run.sh 20000 7
# (from the build directory, or with TESSERA_BIN and TESSERA_BUILDDIR set).
# A failing case is kept in $FUZZ_KEEP (default ./fuzz-failures) and replayed
# by the fuzz program with --seed SEED --first K --cases 1 --verbose.
TESSERA_SRCDIR=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$(dirname "$0")/../lib.sh"

N=${1:-${FUZZ_CASES:-1000}}
SEED=${2:-1}
FUZZ=${TESSERA_BUILDDIR:-$(dirname "$TESSERA_BIN")}/tests/fuzz/fuzz
[ -x "$FUZZ" ] || { echo "ERROR: no fuzz program at $FUZZ (make check builds it)" >&2; exit 99; }
DATA=$TESSERA_SRCDIR/data/corpus.txt
T=$TESSERA_BIN
# small models: a case reads and evaluates one in milliseconds
GPT="--model tiny --layers 1 --d 32 --heads 2 --d-ff 64 --seq 32 --batch 2 --data $DATA"
LLAMA="--model llama-tiny --layers 1 --d 32 --heads 4 --kv-heads 2 --d-ff 64 --seq 32 --batch 2 --data $DATA"
S=$TS_TMP/seeds
mkdir -p "$S"
# step 2 of 3: the step's neighbours are in range or just out of it
"$T" train $GPT --steps 3 --dropout 0.1 --eval-every 2 --eval-batches 1 --quiet \
  --ckpt-dir "$TS_TMP/ck1" --ckpt-every 2 --log "$S/a.jsonl" &&
  cp "$TS_TMP/ck1/step-00000002.safetensors" "$S/gpt.safetensors" &&
  "$T" train $LLAMA --steps 3 --optimizer muon --eval-batches 1 --quiet \
    --ckpt-dir "$TS_TMP/ck2" --ckpt-every 2 --log "$S/b.jsonl" &&
  cp "$TS_TMP/ck2/step-00000002.safetensors" "$S/llama.safetensors" &&
  "$T" dump $GPT --out "$TS_TMP/dump" --traj-steps 1 >/dev/null &&
  cp "$TS_TMP/dump/weights.safetensors" "$S/f1.safetensors" ||
  { echo "ERROR: could not make the seed files" >&2; exit 99; }

# evaluations on a small corpus: a configuration edited to a long --seq that is
# still valid (a LLaMA's) is then refused for the corpus, not evaluated for minutes
EVAL_DATA=$TS_TMP/eval-corpus.txt
head -c 20000 "$DATA" >"$EVAL_DATA"
mkdir -p "$TS_TMP/work"
timeout 3000 "$FUZZ" --seeds "$S" --tessera "$T" --data "$EVAL_DATA" --work "$TS_TMP/work" \
  --cases "$N" --seed "$SEED" --keep "${FUZZ_KEEP:-$(pwd)/fuzz-failures}"
rc=$?
case $rc in
  0) echo "PASS: $N cases from seed $SEED" ;;
  1) echo "FAIL: see the cases above (replay one: $FUZZ --seeds DIR --tessera $T --data CORPUS --work DIR --seed $SEED --first K --cases 1 --verbose, with the seed files and corpus this script makes)" ;;
  124) echo "FAIL: the fuzzer itself ran past 3000 s"; rc=1 ;;
  *) echo "ERROR: the fuzzer could not run (exit $rc)"; rc=99 ;;
esac
exit $rc
