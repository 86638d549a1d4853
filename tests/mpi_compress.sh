#!/bin/sh
# Stage-boundary compression (docs/ALGORITHMS.md §7, src/boundary/boundary.h): a compressed
# model is a model. `--compress MODE --rank R --compress-stages S` trains it
# serially; `mpiexec -n P·D tessera train --pp P --compress MODE --rank R`
# must equal that serial run bit for bit (tessera compare says identical),
# with GPipe and 1F1B, any M, and with --dp; mapl-vq too, whose receiver's
# codebook copy is stale in both. `--compress none` is the plain
# model, and a compressed model is not (compare says different).
#
# Stage 0's step record counts what crosses its boundary (sendrecv bytes,
# sent + received): M microbatches of Z forward (mb·T·r floats; mapl-vq:
# mb·T·R·r/G one-byte codes) and M of dZ back (mb·T·r floats; mapl-vq
# --vq-backward on: mb·T·(R·r/G one-byte codes + a float scale)); after the step,
# for the learned projectors (not ssn, not mapl-frozen), A_0 (d·r floats) and under mapl-vq the streamed
# codes (R·sync·r floats) to stage 1, and with --vq-backward on the gradient
# codebook's streamed codes (as many) from stage 1; and the gradient norm's 32-byte state,
# folded over the stages' parts in canonical order (src/dist/owners.h),
# to stage 1. It reports the bytes per token each way. Under --vq-stream-unit
# microbatch a step's sync carries the codes of every stream event of the next
# step (EVENTS of them), and the serial run is the one with --microbatches D·M.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
RUN_MPI="timeout -k 10 180 $MPIEXEC"
common="--batch 4 --steps 3 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"
M4="--model llama-tiny --layers 4 --dropout 0.1" # d 64, T 64
R=16

sendrecv_bytes() { # FILE: the first step record's sendrecv bytes
  grep '"type":"step"' "$1" | head -n 1 |
    sed -n 's/.*"sendrecv":{"calls":[0-9]*,"bytes":\([0-9]*\)}.*/\1/p'
}

# equal MODE S RUN...: the serial run of the model compressed at S stages
# against each pipelined run "P:D:M:schedule"; ANCHOR=KIND adds --mapl-anchor KIND,
# VQB=on adds --vq-backward on; STREAM="FLAGS" adds mapl-vq's stream flags
# to both, SM=M gives the serial run --microbatches M, EVENTS=E (1) stream
# events a step.
# ssn-confined runs without dropout (it refuses a mask, which takes the
# stream out of the subspace) and refreshes its basis at step 2, which sums
# the stages' gradients over the pipeline.
equal() {
  mode=$1 stages=$2
  shift 2
  m4=$M4
  [ "$mode" = ssn-confined ] && m4="--model llama-tiny --layers 4 --ssn-refresh 2"
  x= tag=$mode
  [ -n "${ANCHOR:-}" ] && x="--mapl-anchor $ANCHOR" tag=$mode-$ANCHOR
  [ -n "${VQB:-}" ] && x="$x --vq-backward $VQB" tag=$tag-vqb-$VQB
  [ -n "${STREAM:-}" ] && x="$x $STREAM" tag=$tag-stream-$(echo $STREAM | tr -dc 'a-z0-9')
  S=$TS_TMP/serial-$tag-$stages.jsonl
  rm -f "$S"
  expect_exit 0 "" "$T" train $m4 $common --compress $mode --rank $R --compress-stages $stages \
    $x ${SM:+--microbatches $SM} --log "$S" || return
  for run in "$@"; do
    P=${run%%:*} rest=${run#*:}
    D=${rest%%:*} rest=${rest#*:}
    M=${rest%%:*} sched=${rest#*:}
    L=$TS_TMP/pp-$tag-$P-$D-$M-$sched.jsonl
    rm -f "$L"
    expect_exit 0 "" $RUN_MPI -n $((P * D)) "$T" train $m4 $common --compress $mode --rank $R \
      --pp $P --dp $D --microbatches $M --schedule $sched $x --log "$L" || continue
    TS_CHECKS=$((TS_CHECKS + 1))
    out=$("$T" compare "$S" "$L" 2>&1)
    [ "$out" = identical ] && pass "$tag | pp $P dp $D M $M $sched: identical to serial" ||
      fail "$tag | pp $P dp $D M $M $sched: $out"
    mb=$((4 / D / M))
    sync=0 fwd=$((R * 4)) bwd=$((R * 4))
    case $mode in ssn|ssn-confined|mapl-frozen) ;; *) sync=$((64 * R * 4)) ;; esac
    # G = 2, R = 2 rounds, one streamed code per codebook
    ev=${EVENTS:-1}
    [ "$mode" = mapl-vq ] && fwd=$((2 * R / 2)) sync=$((sync + ev * 2 * 1 * R * 4))
    # and the gradient's codes and scale back, its codebook's stream up
    [ "${VQB:-}" = on ] && bwd=$((2 * R / 2 + 4)) sync=$((sync + ev * 2 * 1 * R * 4))
    want=$((M * mb * 64 * (fwd + bwd) + sync + 32))
    got=$(sendrecv_bytes "$L")
    TS_CHECKS=$((TS_CHECKS + 1))
    [ "$got" = "$want" ] && pass "$mode pp $P M $M: stage 0 moves $got bytes per step" ||
      fail "$mode pp $P M $M: stage 0 moves '$got' bytes per step, expected $want"
    TS_CHECKS=$((TS_CHECKS + 1))
    grep -q "\"boundary_bytes_per_token\":{\"forward\":$fwd,\"backward\":$bwd}" "$L" &&
      pass "$mode: $fwd bytes per token forward, $bwd back" ||
      fail "$mode: the step record does not say $fwd bytes per token forward, $bwd back"
  done
}

equal ssn 4 4:1:4:gpipe 4:1:2:1f1b
equal mapl 4 4:1:4:gpipe 4:1:4:1f1b 4:1:1:1f1b 4:1:2:gpipe
equal mapl 2 2:2:2:1f1b 2:1:4:gpipe
equal mapl-unconstrained 4 4:1:2:1f1b
equal mapl-frozen 4 4:1:2:1f1b 4:1:4:gpipe
equal mapl-vq 4 4:1:4:gpipe 4:1:2:1f1b
equal mapl-vq 2 2:2:2:1f1b
equal ssn-confined 4 4:1:2:1f1b
equal ssn-confined 2 2:2:1:gpipe
# MAPL's anchors (--mapl-anchor, docs/COMPRESSION.md): each kind's model, pipelined, is its
# serial run; the wire and the sync are the same bytes whichever the anchor
for ANCHOR in factorised none static full; do equal mapl 2 2:1:2:1f1b; done
ANCHOR=full equal mapl 4 4:1:2:gpipe
ANCHOR=static equal mapl-vq 2 2:1:2:gpipe
ANCHOR=none equal mapl-vq 2 2:1:2:1f1b
unset ANCHOR
# the gradients quantised too (--vq-backward on): the gradient codebooks are
# stage s + 1's, stage s decodes with its copy, the stream goes up the pipe
VQB=on equal mapl-vq 4 4:1:2:1f1b 4:1:4:gpipe
VQB=on equal mapl-vq 2 2:2:2:1f1b
VQB=off equal mapl-vq 2
# with a tied head the first stage's copies are the embedding and the gradient
# codebooks' (once a one-tensor read of that table overran the stack; the bytes
# of a tied head's traffic are tests/plan.sh's)
TIED="--model llama-tiny --layers 4 --tied $common --compress mapl-vq --rank $R --vq-backward on"
if expect_exit 0 "" "$T" train $TIED --compress-stages 2 --microbatches 2 --log "$TS_TMP/tied-s.jsonl" &&
  expect_exit 0 "" $RUN_MPI -n 2 "$T" train $TIED --pp 2 --microbatches 2 --log "$TS_TMP/tied-p.jsonl"; then
  expect_compare identical "mapl-vq --vq-backward on, tied head, pp 2: identical to serial" \
    "$TS_TMP/tied-s.jsonl" "$TS_TMP/tied-p.jsonl"
fi
unset VQB
# the stream by microbatch (--vq-stream-unit microbatch): the step's D·M
# microbatches are part of the model, whose serial run has --microbatches D·M;
# every layout of D·M, in either schedule, with the backward's books and
# recomputed activations, is that run. Every 2 of 4 microbatches: events at
# microbatches 4 and 6 of step 2, which step 1's sync sends (2 events)
STREAM="--vq-stream-unit microbatch --vq-stream-every 2" SM=4 EVENTS=2 \
  equal mapl-vq 4 4:1:4:1f1b 4:1:4:gpipe
STREAM="--vq-stream-unit microbatch --vq-stream-every 2 --checkpoint" SM=4 EVENTS=2 VQB=on \
  equal mapl-vq 2 2:1:4:1f1b 2:2:2:gpipe
# the paper's interval, 5 microbatches of 4: step 1's sync sends the event of
# microbatch 5 (step 2's second), the shared copy moving inside a step
STREAM="--vq-stream-unit microbatch --vq-stream-every 5" SM=4 equal mapl-vq 2 2:1:4:1f1b
unset STREAM SM EVENTS VQB
# every M microbatches is the step's stream, bit for bit; every 3 of 4 is
# another model; and every 2 steps leaves step 1's sync without codes (its
# bytes: A_0, the norm's state, the wire)
VS=$TS_TMP/vq-step.jsonl VM=$TS_TMP/vq-mb4.jsonl V3=$TS_TMP/vq-mb3.jsonl V2=$TS_TMP/vq-every2.jsonl
rm -f "$VS" "$VM" "$V3" "$V2"
VQ="$M4 $common --compress mapl-vq --rank $R --compress-stages 2"
expect_exit 0 "" "$T" train $VQ --log "$VS"
expect_exit 0 "" "$T" train $VQ --microbatches 4 --vq-stream-unit microbatch --vq-stream-every 4 \
  --log "$VM"
expect_exit 0 "" "$T" compare "$VS" "$VM"
expect_stdout "^identical"
expect_exit 0 "" "$T" train $VQ --microbatches 4 --vq-stream-unit microbatch --vq-stream-every 3 \
  --log "$V3"
expect_exit 1 "" "$T" compare "$VS" "$V3"
expect_stdout "^first divergence"
expect_exit 0 "" $RUN_MPI -n 2 "$T" train $M4 $common --compress mapl-vq --rank $R --pp 2 \
  --microbatches 2 --vq-stream-every 2 --log "$V2"
got=$(sendrecv_bytes "$V2") want=$((2 * 2 * 64 * (R + 4 * R) + 64 * R * 4 + 32))
TS_CHECKS=$((TS_CHECKS + 1))
[ "$got" = "$want" ] && pass "--vq-stream-every 2 (steps): step 1 moves $got bytes, no codes" ||
  fail "--vq-stream-every 2 (steps): step 1 moves '$got' bytes, expected $want"
# off is the default, bit for bit; on is another model
expect_exit 0 "" "$T" compare "$TS_TMP/serial-mapl-vq-2.jsonl" "$TS_TMP/serial-mapl-vq-vqb-off-2.jsonl"
expect_stdout "^identical"
expect_exit 1 "" "$T" compare "$TS_TMP/serial-mapl-vq-2.jsonl" "$TS_TMP/serial-mapl-vq-vqb-on-2.jsonl"
expect_stdout "^first divergence"
# factorised is the default, bit for bit; each other kind is another model
expect_exit 0 "" "$T" compare "$TS_TMP/serial-mapl-2.jsonl" "$TS_TMP/serial-mapl-factorised-2.jsonl"
expect_stdout "^identical"
for a in none static full; do
  expect_exit 1 "" "$T" compare "$TS_TMP/serial-mapl-2.jsonl" "$TS_TMP/serial-mapl-$a-2.jsonl"
  expect_stdout "^first divergence"
done

# --compress none is the plain model; a compressed one is another model
P0=$TS_TMP/plain.jsonl N0=$TS_TMP/none.jsonl
expect_exit 0 "" "$T" train $M4 $common --log "$P0"
expect_exit 0 "" "$T" train $M4 $common --compress none --log "$N0"
expect_exit 0 "" "$T" compare "$P0" "$N0"
expect_stdout "^identical"
expect_exit 1 "" "$T" compare "$P0" "$TS_TMP/serial-mapl-4.jsonl"
expect_stdout "^first divergence"

# resume a pipelined compressed run from the serial run's checkpoint
B="$M4 $common --compress mapl --rank $R"
expect_resume_identical 2 3 "--compress-stages 2" "--pp 2 --microbatches 2" $B
# and not as another model
CK=$TS_TMP/resume-ck
expect_exit 2 "was written with --rank 16, this run has 8" \
  "$T" train $M4 $common --compress mapl --rank 8 --compress-stages 2 --ckpt-dir "$CK" --resume
expect_exit 2 "was written with --compress mapl, this run has none" \
  "$T" train $M4 $common --ckpt-dir "$CK" --resume
expect_exit 2 "was written with --mapl-anchor factorised, this run has full" \
  "$T" train $M4 $common --compress mapl --rank $R --compress-stages 2 --mapl-anchor full \
  --ckpt-dir "$CK" --resume
# ssn-confined's basis and its gathered refresh gradient are in the checkpoint:
# resumed after step 2, the refresh at step 3 is the straight run's
expect_resume_identical 2 3 "--compress-stages 2" "--pp 2 --microbatches 2" \
  --model llama-tiny --layers 4 $common --compress ssn-confined --rank $R --ssn-refresh 3
# a kind other than the default is recorded in the checkpoint and resumes as itself
expect_resume_identical 2 3 "--compress-stages 2" "--pp 2 --microbatches 2" $B --mapl-anchor static
expect_exit 2 "was written with --mapl-anchor static, this run has factorised" \
  "$T" train $B --compress-stages 2 --ckpt-dir "$CK" --resume
# the gradient codebooks are checkpointed: the gradient's receiver resumes with its copy
BV="$M4 $common --compress mapl-vq --rank $R --vq-backward on"
expect_resume_identical 2 3 "--compress-stages 2" "--pp 2 --microbatches 2" $BV
expect_exit 2 "was written with --vq-backward on, this run has off" \
  "$T" train $M4 $common --compress mapl-vq --rank $R --compress-stages 2 --ckpt-dir "$CK" --resume
# the stream by microbatch resumes inside its interval (5 of 4 microbatches:
# step 3's shared copy moves at its second microbatch), and only with the
# checkpoint's microbatches a step, unit and interval
BM="$M4 $common --compress mapl-vq --rank $R --vq-stream-unit microbatch --vq-stream-every 5"
expect_resume_identical 2 3 "--compress-stages 2 --microbatches 4" "--pp 2 --microbatches 4" $BM
expect_exit 2 "was written with --vq-stream-unit microbatch \\(4 a step\\), this run has microbatch \\(2 a step\\)" \
  "$T" train $BM --compress-stages 2 --microbatches 2 --ckpt-dir "$CK" --resume
expect_exit 2 "was written with --vq-stream-unit microbatch \\(4 a step\\), this run has step" \
  "$T" train $M4 $common --compress mapl-vq --rank $R --vq-stream-every 5 --compress-stages 2 \
  --microbatches 4 --ckpt-dir "$CK" --resume
expect_exit 2 "was written with --vq-stream-every 5, this run has 4" \
  "$T" train $BM --vq-stream-every 4 --compress-stages 2 --microbatches 4 --ckpt-dir "$CK" --resume

# --- refused before any work ----------------------------------------------------------
NOLOG=$TS_TMP/never.jsonl
expect_exit 2 "--rank 65: larger than the model width d = 64" \
  "$T" train $B --rank 65 --compress-stages 2 --log "$NOLOG"
expect_exit 2 "--compress mapl: needs stage boundaries: --pp P or --compress-stages S >= 2" \
  "$T" train $B --log "$NOLOG"
expect_exit 2 "--compress-stages 3: the 4 layers must divide into 3 stages" \
  "$T" train $B --compress-stages 3 --log "$NOLOG"
expect_exit 2 "--compress mapl: needs --rank R" \
  "$T" train $M4 $common --compress mapl --compress-stages 2 --log "$NOLOG"
expect_exit 2 "--rank 8: only with --compress" "$T" train $M4 $common --rank 8 --log "$NOLOG"
expect_exit 2 "--compress zip: must be none, ssn, mapl, mapl-unconstrained, mapl-vq, mapl-frozen or ssn-confined" \
  "$T" train $M4 $common --compress zip --log "$NOLOG"
expect_exit 2 "--pp 2 with --compress-stages 4: a pipeline's stages are the compressed model's" \
  "$T" train $B --pp 2 --compress-stages 4 --log "$NOLOG"
expect_exit 2 "--compress mapl with --sp 2: compression runs on the serial" \
  "$T" train $B --compress-stages 2 --sp 2 --log "$NOLOG"
expect_exit 2 "--vq-group 3: must divide --rank 16" \
  "$T" train $M4 $common --compress mapl-vq --rank 16 --vq-group 3 --compress-stages 2 --log "$NOLOG"
expect_exit 2 "--vq-codes 512: must be in \[2, 256\]" \
  "$T" train $M4 $common --compress mapl-vq --rank 16 --vq-codes 512 --compress-stages 2 --log "$NOLOG"
expect_exit 2 "--vq-backward on: only with --compress mapl-vq" \
  "$T" train $B --compress-stages 2 --vq-backward on --log "$NOLOG"
expect_exit 2 "--vq-backward yes: must be on or off" \
  "$T" train $M4 $common --compress mapl-vq --rank $R --compress-stages 2 --vq-backward yes --log "$NOLOG"
expect_exit 2 "--vq-stream-unit microbatch: only with --compress mapl-vq" \
  "$T" train $B --compress-stages 2 --vq-stream-unit microbatch --log "$NOLOG"
expect_exit 2 "--vq-stream-every: only with --compress mapl-vq" \
  "$T" train $B --compress-stages 2 --vq-stream-every 5 --log "$NOLOG"
# the written defaults too: the codec cannot tell them from "not given", the flag parser can
expect_exit 2 "--vq-stream-unit step: only with --compress mapl-vq" \
  "$T" train $B --compress-stages 2 --vq-stream-unit step --log "$NOLOG"
expect_exit 2 "--vq-backward off: only with --compress mapl-vq" \
  "$T" train $B --compress-stages 2 --vq-backward off --log "$NOLOG"
expect_exit 2 "--vq-stream-every 0: must be above 0" \
  "$T" train $M4 $common --compress mapl-vq --rank $R --compress-stages 2 --vq-stream-every 0 --log "$NOLOG"
expect_exit 2 "--vq-stream-unit token: must be step or microbatch" \
  "$T" train $M4 $common --compress mapl-vq --rank $R --compress-stages 2 --vq-stream-unit token --log "$NOLOG"
expect_exit 2 "--vq-stream-every -1: must be >= 1" \
  "$T" train $M4 $common --compress mapl-vq --rank $R --compress-stages 2 --vq-stream-every -1 --log "$NOLOG"
expect_exit 2 "--mapl-anchor shared: must be factorised, none, static or full" \
  "$T" train $B --compress-stages 2 --mapl-anchor shared --log "$NOLOG"
expect_exit 2 "--mapl-anchor full: only with --compress mapl or mapl-vq" \
  "$T" train $M4 $common --compress ssn --rank $R --compress-stages 2 --mapl-anchor full --log "$NOLOG"
expect_exit 2 "--mapl-anchor none: only with --compress mapl or mapl-vq" \
  "$T" train $M4 $common --compress mapl-frozen --rank $R --compress-stages 2 --mapl-anchor none --log "$NOLOG"
expect_exit 2 "--dropout 0.1: not with --compress ssn-confined" \
  "$T" train $M4 $common --compress ssn-confined --rank $R --compress-stages 2 --log "$NOLOG"
expect_exit 2 "--ssn-refresh: only with --compress ssn-confined" \
  "$T" train $M4 $common --compress ssn --rank $R --compress-stages 2 --ssn-refresh 10 --log "$NOLOG"
expect_exit 2 "--ssn-refresh-step 2: must be in \\(0, 1\\]" \
  "$T" train --model llama-tiny --layers 4 $common --compress ssn-confined --rank $R \
  --compress-stages 2 --ssn-refresh-step 2 --log "$NOLOG"
expect_exit 2 "--microbatches 0: must be >= 1" "$T" train $B --pp 2 --microbatches 0 --log "$NOLOG"
TS_CHECKS=$((TS_CHECKS + 1))
[ ! -e "$NOLOG" ] && pass "refused runs wrote no log" || fail "a refused run wrote $NOLOG"

# --- a failure on one stage ends every stage, with its message ------------------------
expect_fault_ends_all "pp 2 mapl" 2 train $B --pp 2
done_testing
