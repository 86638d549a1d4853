#!/bin/sh
# Partitioned model state under --zero 1 (docs/ALGORITHMS.md §12,
# src/parallel/shard.h): the replica group (the dp·sp ranks of a stage, which
# hold the same parameters) shards the stage's AdamW moments; each rank
# updates its shard and broadcasts it after the step. Every run must equal
# the serial run bit for bit (tessera compare says identical) over the data
# group, the sequence group, both, pipeline stages of them, with Muon
# (whole matrices to one shard), dropout and the LLaMA variant.
#
# Memory: rank 0 holds the moments of its shard only, 8·⌊n/Z⌋ bytes for n
# parameters and Z replicas (AdamW: the cut falls anywhere), and the model
# state summed over the ranks is Z·8·n (parameters and gradients on every
# replica) + 8·n (the moments once), against 16·n·Z without --zero.
#
# Checkpoints: written under --dp 2 --sp 2 --zero 1 and under --pp 2 --dp 2
# --zero 1, each holds the serial checkpoint's model state (tessera compare),
# and each resumes under another layout to end where the straight run does;
# --init-from one of them under --pp 2 --dp 2 --zero 1 equals the serial run.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
RUN_MPI="timeout 180 $MPIEXEC"
common="--batch 4 --steps 3 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"

# equal NAME SERIAL_FLAGS NRANKS LAYOUT_FLAGS
equal() {
  name=$1 flags=$2 n=$3 lay=$4
  S=$TS_TMP/$name-serial.jsonl L=$TS_TMP/$name.jsonl
  rm -f "$S" "$L"
  expect_exit 0 "" "$T" train $flags $common --log "$S" || return
  expect_exit 0 "" $RUN_MPI -n "$n" "$T" train $flags $common $lay --log "$L" || return
  expect_compare identical "$flags | $lay, against serial" "$S" "$L"
}

state() { # FILE KEY: the first step record's state_bytes KEY
  grep '"type":"step"' "$1" | head -n 1 | sed -n "s/.*\"state_bytes\":{[^}]*\"$2\":\([0-9]*\).*/\1/p"
}

equal dp2 "--model tiny" 2 "--dp 2 --zero 1"
equal dp4 "--model tiny" 4 "--dp 4 --zero 1"
equal sp2 "--model tiny" 2 "--sp 2 --sp-mode lss --zero 1"
equal muon "--model tiny --optimizer muon" 2 "--dp 2 --zero 1"
equal pp-dp "--model tiny --layers 4" 4 "--pp 2 --dp 2 --microbatches 2 --zero 1"
equal llama "--model llama-tiny --layers 4 --dropout 0.1" 4 \
  "--dp 2 --sp 2 --sp-mode ulysses --zero 1"
equal pp-sp "--model llama-tiny --layers 4 --dropout 0.1" 4 \
  "--pp 2 --sp 2 --sp-mode upipe --microbatches 4 --zero 1"

# the bytes: n parameters from the serial record, Z = 4 replicas
n=$(($(state "$TS_TMP/dp4-serial.jsonl" grads) / 4))
for key in optimizer model_sum; do
  got=$(state "$TS_TMP/dp4.jsonl" $key)
  case $key in optimizer) want=$((8 * (n / 4))) ;; model_sum) want=$((4 * 8 * n + 8 * n)) ;; esac
  TS_CHECKS=$((TS_CHECKS + 1))
  [ "$got" = "$want" ] && pass "dp 4 --zero 1: $key $got bytes (n = $n parameters)" ||
    fail "dp 4 --zero 1: $key '$got' bytes, expected $want (n = $n parameters)"
done

# checkpoints of sharded state: the serial checkpoint's model state, and each
# resumed under another layout
C="--model tiny --layers 4 $common --ckpt-every 2"
rm -rf "$TS_TMP/k0" "$TS_TMP/k1" "$TS_TMP/k2"
expect_exit 0 "" "$T" train $C --ckpt-dir "$TS_TMP/k0" --log "$TS_TMP/k0.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --dp 2 --sp 2 --zero 1 --ckpt-dir "$TS_TMP/k1" \
  --log "$TS_TMP/k1.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --pp 2 --dp 2 --microbatches 2 --zero 1 \
  --ckpt-dir "$TS_TMP/k2" --log "$TS_TMP/k2.jsonl"
for k in k1 k2; do
  expect_compare "same model state" "$k's checkpoint against the serial run's" \
    "$TS_TMP/k0/step-00000002.safetensors" "$TS_TMP/$k/step-00000002.safetensors"
  rm -f "$TS_TMP/$k/step-00000003.safetensors"
done
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --pp 2 --dp 2 --microbatches 2 --zero 1 \
  --ckpt-dir "$TS_TMP/k1" --log "$TS_TMP/k1.jsonl" --resume
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --dp 4 --zero 1 --ckpt-dir "$TS_TMP/k2" \
  --log "$TS_TMP/k2.jsonl" --resume
for k in k1 k2; do
  expect_compare identical "$k resumed under another layout, against the straight run" \
    "$TS_TMP/k0.jsonl" "$TS_TMP/$k.jsonl"
done

# --init-from under partitioned layouts: each rank reads the byte ranges of
# what it holds (a stage's tensors and the copies it keeps), its moments
# start at zero; the runs equal the serial run from the same weights
I="--model tiny --layers 4 $common --init-from $TS_TMP/k0/step-00000003.safetensors --lr-schedule wsd"
expect_exit 0 "" "$T" train $I --log "$TS_TMP/init-serial.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $I --pp 2 --dp 2 --microbatches 2 --zero 1 \
  --log "$TS_TMP/init-pp-dp.jsonl"
expect_stdout "^initialised from .*k0/step-00000003.safetensors \(its step 3\)"
expect_compare identical "--init-from under --pp 2 --dp 2 --zero 1, against serial" \
  "$TS_TMP/init-serial.jsonl" "$TS_TMP/init-pp-dp.jsonl"
# and it did start from those weights: step 1's loss is not the fresh model's
expect_exit 1 "" "$T" compare "$TS_TMP/k0.jsonl" "$TS_TMP/init-serial.jsonl"
expect_stdout "^first divergence: step 1, loss:"

# --- refused before any work ----------------------------------------------------------
B="--model tiny $common"
NOLOG=$TS_TMP/never.jsonl
expect_exit 2 "--zero 2: not in this build" $RUN_MPI -n 2 "$T" train $B --dp 2 --zero 2 --log "$NOLOG"
expect_exit 2 "--zero 4: must be 0, 1, 2 or 3" "$T" train $B --zero 4 --log "$NOLOG"
expect_exit 2 "--zero 1: needs ranks that hold the same parameters" "$T" train $B --zero 1 --log "$NOLOG"
expect_exit 2 "--zero 1 with --compress mapl: not built" $RUN_MPI -n 2 "$T" train \
  --model llama-tiny --layers 4 $common --compress mapl --rank 16 --compress-stages 2 --dp 2 \
  --zero 1 --log "$NOLOG"
TS_CHECKS=$((TS_CHECKS + 1))
[ ! -e "$NOLOG" ] && pass "refused runs wrote no log" || fail "a refused run wrote $NOLOG"
done_testing
