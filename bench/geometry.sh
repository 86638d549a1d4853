#!/bin/bash
# The geometry of the stream at stage boundaries (docs/COMPRESSION.md, "Geometry"): a small
# LLaMA trained uncompressed and with MAPL (P stages, rank R), each run's validation
# windows' residual stream written by `tessera eval --activations-out`, and
# bench/geometry.py's energy, stable-rank and projector measures of it, with the energy
# curves drawn.
#
#   bench/geometry.sh          # from the repository root, after `make`; ~15 min on 2 cores
#   QUICK=1 bench/geometry.sh  # llama-tiny, 20 steps: checks this script (~1 min)
#
# Environment (defaults in brackets):
#   TESSERA      the binary [build/tessera, else ./tessera]
#   MODEL_FLAGS  ["--model llama-mini --layers 8"]   SEQ [128]   BATCH [8]   STEPS [600]
#   OPT_FLAGS    ["--optimizer muon-pe --muon-lr 0.02 --lr 0.01 --warmup 30"]
#   STAGES [4]   RANK [32]   EVAL_BATCHES [8]
#   RESULTS      where the logs, checkpoints' reports and PNGs go [bench/results/geometry]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${QUICK:-0}" = 1 ]; then
  : "${MODEL_FLAGS:=--model llama-tiny --layers 4}" "${SEQ:=64}" "${STEPS:=20}" "${RANK:=16}"
  : "${STAGES:=2}" "${EVAL_BATCHES:=2}" "${RESULTS:=$ROOT/bench/results/quick/geometry}"
fi
MODEL_FLAGS=${MODEL_FLAGS:---model llama-mini --layers 8}
SEQ=${SEQ:-128}
BATCH=${BATCH:-8}
STEPS=${STEPS:-600}
OPT_FLAGS=${OPT_FLAGS:---optimizer muon-pe --muon-lr 0.02 --lr 0.01 --warmup 30}
STAGES=${STAGES:-4}
RANK=${RANK:-32}
EVAL_BATCHES=${EVAL_BATCHES:-8}
RESULTS=${RESULTS:-$ROOT/bench/results/geometry}
PY=${PY:-/usr/bin/python3}
if [ -z "${TESSERA:-}" ]; then
  if [ -x "$ROOT/build/tessera" ]; then TESSERA=$ROOT/build/tessera; else TESSERA=./tessera; fi
fi
[ -x "$TESSERA" ] || { echo "bench/geometry.sh: no tessera binary at $TESSERA (set TESSERA)" >&2; exit 2; }
mkdir -p "$RESULTS"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/geometry.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# run NAME FLAGS...: train, evaluate with the stream written, measure it
run() {
  local name=$1
  shift
  local ck=$WORK/$name/step-$(printf %08d "$STEPS").safetensors
  # shellcheck disable=SC2086
  echo "$TESSERA train $MODEL_FLAGS --seq $SEQ --batch $BATCH --steps $STEPS $OPT_FLAGS $* --data $ROOT/data/corpus.txt" >"$RESULTS/$name.cmd"
  echo "[$(date +%H:%M:%S)] $name: training $STEPS steps"
  # shellcheck disable=SC2086
  "$TESSERA" train $MODEL_FLAGS --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" $OPT_FLAGS "$@" \
    --data "$ROOT/data/corpus.txt" --ckpt-dir "$WORK/$name" --log "$RESULTS/$name.jsonl" --quiet
  "$TESSERA" eval --ckpt "$ck" --eval-batches "$EVAL_BATCHES" --activations-out "$WORK/$name.act" \
    | tee "$RESULTS/$name.eval"
  "$PY" -B "$ROOT/bench/geometry.py" --activations "$WORK/$name.act" --ckpt "$ck" \
    --json "$RESULTS/$name.json" --plot "$RESULTS/$name.png" | tee "$RESULTS/$name.md"
}

run none
run "mapl-p$STAGES-r$RANK" --compress mapl --rank "$RANK" --compress-stages "$STAGES"
echo "[$(date +%H:%M:%S)] done: $RESULTS/*.md, *.png"
