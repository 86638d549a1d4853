#!/bin/sh
# Pipeline parallelism (docs/ALGORITHMS.md §6, src/dist/pipeline.h):
# `mpiexec -n P·D tessera train --pp P --microbatches M --schedule gpipe|1f1b`
# equals the serial run of the same global batch bit for bit (tessera compare
# says identical) for the GPT (tied and untied head) and LLaMA, any M dividing a data
# rank's sequences, both schedules, dropout off and on, and with --dp; and with
# --sp (stages of sequence-parallel groups).
#
# The step record of rank 0 (stage 0) counts its boundary traffic: M
# activations sent forward and M gradients received, each mb·T·d floats
# (mb = sequences per microbatch), counted as bytes sent + received:
# 2·M·mb·T·d·4 per step whatever the schedule; and its peak number of
# microbatches in flight: M under GPipe, min(P, M) under 1F1B (stage i holds
# at most P − i). With a tied head stage 0 also sends each microbatch's
# gradient of the embedding output (mb·T·d floats) to the last stage, which
# computes the tied embedding's gradient, owns the embedding, and after the
# step sends it (V·d floats) to stage 0's copy. Each stage holds only its own
# tensors, so the gradient norm is a fold over the stages' parts in canonical
# order (src/dist/owners.h): its 32-byte state goes from stage 0 to the
# next (tied: first from the last stage, whose embedding comes first).
# A checkpoint of a pipelined run holds the serial checkpoint's tensors and
# data byte for byte, and each resumes under the other layout (also one of
# pp 2 x sp 2 lss-zigzag, resumed serially).
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
RUN_MPI="timeout -k 10 180 $MPIEXEC"
common="--batch 4 --steps 2 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"

field() { # FILE KEY: the first step record's numeric KEY
  grep '"type":"step"' "$1" | head -n 1 | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"
}

# equal MODEL_FLAGS DROPOUT RUN...: each run "P:D:M:schedule" against serial
equal() {
  flags=$1 drop=$2
  shift 2
  S=$TS_TMP/serial.jsonl
  rm -f "$S"
  expect_exit 0 "" "$T" train $flags $common --dropout $drop --log "$S" || return
  for run in "$@"; do
    P=${run%%:*} rest=${run#*:}
    D=${rest%%:*} rest=${rest#*:}
    M=${rest%%:*} sched=${rest#*:}
    L=$TS_TMP/pp-$P-$D-$M-$sched.jsonl
    rm -f "$L"
    expect_exit 0 "" $RUN_MPI -n $((P * D)) "$T" train $flags $common --dropout $drop --pp $P \
      --dp $D --microbatches $M --schedule $sched --log "$L" || continue
    TS_CHECKS=$((TS_CHECKS + 1))
    out=$("$T" compare "$S" "$L" 2>&1)
    [ "$out" = identical ] && pass "$flags | pp $P dp $D M $M $sched | dropout $drop: identical" ||
      fail "$flags | pp $P dp $D M $M $sched | dropout $drop: $out"
    # stage 0's traffic and its microbatches in flight
    nb=$((4 / D)) mb=$((4 / D / M))
    want=$((2 * M * mb * 64 * 64 * 4 + 32))
    # a tied head: stage 0 also sends each microbatch's embedding-output
    # gradient, receives the updated embedding and the norm's state first
    case " $flags " in
    *" --untied "*|*llama*) ;;
    *) want=$((want + M * mb * 64 * 64 * 4 + 256 * 64 * 4 + 32)) ;;
    esac
    got=$(grep '"type":"step"' "$L" | head -n 1 | sed -n 's/.*"sendrecv":{"calls":[0-9]*,"bytes":\([0-9]*\)}.*/\1/p')
    TS_CHECKS=$((TS_CHECKS + 1))
    [ "$got" = "$want" ] && pass "pp $P M $M $sched: stage 0 moves $got boundary bytes per step" ||
      fail "pp $P M $M $sched: stage 0 moves '$got' boundary bytes, expected $want"
    if [ "$sched" = gpipe ]; then inflight=$M; else inflight=$((P < M ? P : M)); fi
    got=$(field "$L" peak_inflight)
    TS_CHECKS=$((TS_CHECKS + 1))
    [ "$got" = "$inflight" ] && pass "pp $P M $M $sched: $got microbatches in flight on stage 0" ||
      fail "pp $P M $M $sched: '$got' microbatches in flight on stage 0, expected $inflight"
  done
}

for drop in 0 0.1; do
  equal "--model tiny --untied" $drop 2:1:1:gpipe 2:1:2:gpipe 2:1:4:gpipe 2:1:1:1f1b 2:1:2:1f1b \
    2:1:4:1f1b 2:2:2:1f1b
done
equal "--model llama-tiny --layers 4" 0.1 4:1:4:gpipe 4:1:4:1f1b 4:1:2:1f1b 4:1:1:1f1b \
  2:2:2:gpipe 2:2:1:1f1b
# the tied head (the GPT presets'): the last stage computes the embedding's gradient
equal "--model tiny" 0.1 2:1:2:1f1b 2:1:4:gpipe 2:2:2:1f1b
equal "--model tiny --layers 4 --fused-ce" 0 4:1:4:1f1b

# pipeline stages of sequence-parallel groups (--pp with --sp): a microbatch is one
# sequence, each stage's group runs its layers with the group as --sp-mode says; the
# exact modes are identical to serial, ring-zigzag within the tolerance of mpi_cp.sh
# pp_sp MODEL_FLAGS SP_MODE SCHEDULE DP: the serial run against pp 2 x sp 2 (x dp)
pp_sp() {
  flags=$1 mode=$2 sched=$3 D=$4
  S=$TS_TMP/serial-ppsp.jsonl L=$TS_TMP/ppsp.jsonl
  rm -f "$S" "$L"
  expect_exit 0 "" "$T" train $flags $common --dropout 0.1 --log "$S" || return
  expect_exit 0 "" $RUN_MPI -n $((4 * D)) "$T" train $flags $common --dropout 0.1 --pp 2 --sp 2 \
    --dp $D --sp-mode $mode --microbatches $((4 / D)) --schedule $sched --log "$L" || return
  TS_CHECKS=$((TS_CHECKS + 1))
  case $mode in
  ring-zigzag) out=$("$T" compare --rtol 1e-5 "$S" "$L" 2>&1); want="equal within rtol 1e-05|identical" ;;
  *) out=$("$T" compare "$S" "$L" 2>&1); want=identical ;;
  esac
  echo "$out" | grep -Eq "^($want)" && pass "$flags | pp 2 sp 2 dp $D $mode $sched: $out" ||
    fail "$flags | pp 2 sp 2 dp $D $mode $sched: $out"
}
pp_sp "--model tiny --untied" lss 1f1b 1
pp_sp "--model llama-tiny --layers 4" ulysses gpipe 1
pp_sp "--model llama-tiny --layers 4" upipe 1f1b 1
pp_sp "--model llama-tiny --layers 4" ring-zigzag 1f1b 1
pp_sp "--model tiny" ring gpipe 1
pp_sp "--model llama-tiny --layers 4" lss gpipe 2
pp_sp "--model tiny" ulysses 1f1b 1
# balanced LSS: each rank's second run's partials kept apart, the tied
# embedding's (summed on the last stage, outside the model's gradient) too
pp_sp "--model tiny" lss-zigzag 1f1b 1
pp_sp "--model llama-tiny --layers 4" lss-zigzag gpipe 1
pp_sp "--model tiny --untied" lss-basic-zigzag gpipe 1
pp_sp "--model tiny --fused-ce" lss-fused-zigzag 1f1b 1

# resume under pp 2 from a checkpoint of the serial run
B="--model tiny --untied $common"
expect_resume_identical 2 2 "" "--pp 2 --microbatches 2" $B

# checkpoints hold the same model state whichever layout wrote them, and
# resume under another: the serial run's and a pp 4 run's (tied head, whose
# embedding the last stage owns) of step 2, each continued under the other
C="--model tiny --layers 4 $common --steps 3 --ckpt-every 2"
rm -rf "$TS_TMP/cks" "$TS_TMP/ckp"
expect_exit 0 "" "$T" train $C --ckpt-dir "$TS_TMP/cks" --log "$TS_TMP/cks.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --pp 4 --microbatches 4 --ckpt-dir "$TS_TMP/ckp" \
  --log "$TS_TMP/ckp.jsonl"
expect_compare "same model state" "the serial and pp 4 checkpoints" \
  "$TS_TMP/cks/step-00000002.safetensors" "$TS_TMP/ckp/step-00000002.safetensors"
expect_same_bytes "the serial and pp 4 checkpoints" \
  "$TS_TMP/cks/step-00000002.safetensors" "$TS_TMP/ckp/step-00000002.safetensors"
for d in cks ckp; do rm -f "$TS_TMP/$d/step-00000003.safetensors"; done
# each continues under the other layout and ends where the straight runs did
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --pp 4 --microbatches 4 --ckpt-dir "$TS_TMP/cks" \
  --log "$TS_TMP/cks.jsonl" --resume
expect_exit 0 "" "$T" train $C --ckpt-dir "$TS_TMP/ckp" --log "$TS_TMP/ckp.jsonl" --resume
expect_exit 0 "" "$T" train $C --ckpt-dir "$TS_TMP/cko" --log "$TS_TMP/straight.jsonl"
for d in cks ckp; do
  expect_compare identical "$d resumed under the other layout, against the straight run" \
    "$TS_TMP/straight.jsonl" "$TS_TMP/$d.jsonl"
done
# and under pp 2 x sp 2 lss-zigzag: the same state at step 2, continued serially
Z="--pp 2 --sp 2 --sp-mode lss-zigzag --microbatches 4"
rm -rf "$TS_TMP/ckz"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C $Z --ckpt-dir "$TS_TMP/ckz" --log "$TS_TMP/ckz.jsonl"
expect_compare identical "pp 2 x sp 2 lss-zigzag, against serial" "$TS_TMP/straight.jsonl" \
  "$TS_TMP/ckz.jsonl"
expect_compare "same model state" "the serial and pp 2 x sp 2 lss-zigzag checkpoints" \
  "$TS_TMP/cko/step-00000002.safetensors" "$TS_TMP/ckz/step-00000002.safetensors"
rm -f "$TS_TMP/ckz/step-00000003.safetensors"
expect_exit 0 "" "$T" train $C --ckpt-dir "$TS_TMP/ckz" --log "$TS_TMP/ckz.jsonl" --resume
expect_stdout "resumed from .*step-00000002"
expect_compare identical "pp 2 x sp 2 lss-zigzag resumed serially, against the straight run" \
  "$TS_TMP/straight.jsonl" "$TS_TMP/ckz.jsonl"

# --- refused before any work ----------------------------------------------------------
NOLOG=$TS_TMP/never.jsonl
expect_exit 2 "--pp 3: the 2 layers must divide into 3 stages" "$T" train $B --pp 3 --log "$NOLOG"
expect_exit 2 "--microbatches 3: must divide the 4 sequences of each data rank" \
  "$T" train $B --pp 2 --microbatches 3 --log "$NOLOG"
expect_exit 2 "--microbatches 2 with --sp 2: a microbatch is one sequence .*, so --microbatches must be the 4 sequences" \
  "$T" train $B --pp 2 --sp 2 --microbatches 2 --log "$NOLOG"
expect_exit 2 "--pp 2 with --sp-mode megatron: the tensor-split baseline does not run in pipeline stages" \
  "$T" train $B --pp 2 --sp 2 --microbatches 4 --sp-mode megatron --log "$NOLOG"
expect_exit 2 "--schedule zigzag: must be gpipe or 1f1b" "$T" train $B --pp 2 --schedule zigzag --log "$NOLOG"
expect_exit 2 "--dp 1 --sp 1 --pp 2: needs dp x sp x pp = 2 ranks but the MPI world size is 1" \
  "$T" train $B --pp 2 --log "$NOLOG"
# the fit check before allocation sizes one stage: half the layers' matrices each here
# (every rank finds it and says so)
if expect_exit 1 "" $RUN_MPI -n 2 "$T" train $B --layers 10000000 --pp 2 --log "$NOLOG"; then
  TS_CHECKS=$((TS_CHECKS + 1))
  grep -q "weight matrices alone need .*parameters (the largest of --pp 2 stages).*(--pp)" "$TS_ERR" &&
    pass "the fit check sizes a stage and names --pp" ||
    fail "the fit check's message: $(head -c 400 "$TS_ERR")"
fi
TS_CHECKS=$((TS_CHECKS + 1))
[ ! -e "$NOLOG" ] && pass "refused runs wrote no log" || fail "a refused run wrote $NOLOG"

# --- a failure on one stage ends every stage, with its message ------------------------
expect_fault_ends_all "pp 2" 2 train $B --pp 2
done_testing
