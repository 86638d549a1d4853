#!/bin/sh
# Exact data parallelism: `mpiexec -n D tessera train --dp D` equals the serial
# run of the same global batch bit for bit (tessera compare says identical,
# the final parameter hashes match), with dropout off and on, for D = 2 and 4,
# for D = 2 on a file of uint16 token ids, and for D = 3 and 5 (data groups
# of any size), also under --zero 2 and with gradient accumulation.
# The step records count the collectives: per step one tree all-reduce of the
# N gradient floats, 16·N·(D-1)/D bytes on rank 0 (4N(D-1)/D sent and as many
# received in each of its two phases), and one all-gather of the ranks' loss
# sums, 8·(D-1) bytes. Gradient accumulation (--microbatches M without --pp:
# the rank's sequences M at a time, their gradients into one tree) is the
# unaccumulated run bit for bit, serially and under --dp, and holds the
# activations of one microbatch. Layouts that cannot be exact, and a world of
# the wrong size, are refused before any work; a failure on one rank ends
# every rank, and so do ranks started with different flags (any field of the
# configuration but a rank's own), within seconds and with one line naming
# the flag.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
# tiny: T 64, leaf 8, so batch 4 gives each of D = 2, 4 ranks 16 or 8 leaves.
# One thread per rank: this machine has few cores and waiting ranks busy-poll.
EVB=2
BASE="--model tiny --batch 4 --steps 3 --warmup 2 --eval-batches $EVB --data $DATA --quiet --threads 1"
# a hung rank must fail the test, not stall it
RUN_MPI="timeout -k 10 120 $MPIEXEC"

field() { # field FILE TYPE KEY: the numeric value of KEY in the first TYPE record
  grep "\"type\":\"$2\"" "$1" | head -n 1 | sed -n "s/.*\"$3\":\([0-9]*\).*/\1/p"
}

for drop in 0 0.1; do
  S=$TS_TMP/serial-$drop.jsonl
  expect_exit 0 "" "$T" train $BASE --dropout $drop --log "$S"
  for D in 2 4; do
    L=$TS_TMP/dp$D-$drop.jsonl
    expect_exit 0 "" $RUN_MPI -n $D "$T" train $BASE --dropout $drop --dp $D --log "$L" || continue
    expect_exit 0 "" "$T" compare "$S" "$L"
    expect_stdout "^identical"
    h1=$(grep '"final"' "$S")
    h2=$(grep '"final"' "$L")
    if [ -n "$h1" ] && [ "$h1" = "$h2" ]; then
      pass "dropout $drop, dp $D: final parameter hash equal ($h2)"
    else
      fail "dropout $drop, dp $D: final records differ: $h1 / $h2"
    fi
    TS_CHECKS=$((TS_CHECKS + 1))

    # the collectives of every step, and of the evaluation
    N=$(field "$L" config params)
    W=$(field "$L" config world)
    [ "$W" = "$D" ] && pass "config record: world $W" || fail "config record: world '$W', expected $D"
    grep -q "\"layout\":\"dp$D\"" "$L" && pass "config record: layout dp$D" || fail "config record: no layout dp$D"
    if [ -z "$N" ] || [ $((N % D)) -ne 0 ]; then
      fail "parameter count '$N' missing or not divisible by $D"
      continue
    fi
    AR=$((16 * N * (D - 1) / D))
    AG=$((8 * (D - 1)))
    want="\"comm\":{\"allreduce\":{\"calls\":1,\"bytes\":$AR},\"allgather\":{\"calls\":1,\"bytes\":$AG}}"
    steps=$(grep '"type":"step"' "$L" | wc -l)
    good=$(grep '"type":"step"' "$L" | grep -cF "$want")
    TS_CHECKS=$((TS_CHECKS + 2))
    if [ "$steps" -eq 3 ] && [ "$good" -eq 3 ]; then
      pass "dp $D: every step counts $want"
    else
      fail "dp $D: $good of $steps step records have $want: $(grep '"type":"step"' "$L" | head -n 1)"
    fi
    EV="\"comm\":{\"allgather\":{\"calls\":1,\"bytes\":$((8 * (D - 1) * EVB))}}"
    grep '"type":"eval"' "$L" | grep -qF "$EV" && pass "dp $D: eval counts $EV" ||
      fail "dp $D: eval record lacks $EV: $(grep '"type":"eval"' "$L")"
  done
done
# the serial run counts nothing
grep '"type":"step"' "$TS_TMP/serial-0.jsonl" | grep -qF '"comm":{}' && pass "serial: comm {}" ||
  fail "serial step records should have \"comm\":{}"

# --fast lets MPI sum: equal within a tolerance (here often bit for bit too)
F=$TS_TMP/fast.jsonl
if expect_exit 0 "" $RUN_MPI -n 2 "$T" train $BASE --dp 2 --fast --log "$F"; then
  expect_exit 0 "" "$T" compare --rtol 1e-5 "$TS_TMP/serial-0.jsonl" "$F"
fi

# the Muon hybrid (Polar Express) is exact on any layout too: every rank runs
# the same single-threaded orthogonalisation on the same replica
M0=$TS_TMP/muon-serial.jsonl
M1=$TS_TMP/muon-dp2.jsonl
expect_exit 0 "" "$T" train $BASE --optimizer muon-pe --log "$M0"
if expect_exit 0 "" $RUN_MPI -n 2 "$T" train $BASE --optimizer muon-pe --dp 2 --log "$M1"; then
  expect_exit 0 "" "$T" compare "$M0" "$M1"
  expect_stdout "^identical"
fi

# resume under dp 2 from a checkpoint written by its rank 0, read by both ranks
CK=$TS_TMP/ck
R=$TS_TMP/resumed.jsonl
expect_exit 0 "" $RUN_MPI -n 2 "$T" train $BASE --dp 2 --ckpt-dir "$CK" --ckpt-every 2 --log "$R"
rm -f "$CK/step-00000003.safetensors"
expect_exit 0 "" $RUN_MPI -n 2 "$T" train $BASE --dp 2 --ckpt-dir "$CK" --resume --log "$R"
expect_stdout "resumed from .*step-00000002"
expect_exit 0 "" "$T" compare "$TS_TMP/serial-0.jsonl" "$R"
expect_stdout "^identical"

# --- SIGTERM reaching rank 1 alone: both ranks stop after the same step -------------
# (the flag is combined over the world every step), rank 0 writes that step's
# checkpoint and says so, and a resumed dp 2 run ends as the serial run ends.
SG=$TS_TMP/sig.jsonl SGCK=$TS_TMP/sigck SGN=200
SGFLAGS="--model tiny --batch 4 --warmup 2 --eval-batches $EVB --data $DATA --threads 1 --quiet"
# rank R of the run whose log is LOG: LOG on its command line, PMI_RANK=R in
# its environment (rank_pid LOG R)
rank_pid() {
  for _f in $(grep -lF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null); do
    _p=${_f%/cmdline}
    { tr '\0' '\n' <"$_p/environ" | grep -qx "PMI_RANK=$2"; } 2>/dev/null && { echo "${_p#/proc/}"; return; }
  done
}
# rank R's PID as the config record of the log LOG maps it (log_pid LOG R)
log_pid() {
  head -n 1 "$1" 2>/dev/null | sed -n "s/.*{\"rank\":$2,\"host\":\"[^\"]*\",\"pid\":\([0-9]*\)}.*/\1/p"
}
# waits (at most a minute) until LOG holds a step record or process PID is gone
wait_for_step() {
  _i=0
  while [ $_i -lt 1200 ] && kill -0 "$2" 2>/dev/null && ! grep -q '"type":"step"' "$1" 2>/dev/null; do
    sleep 0.05
    _i=$((_i + 1))
  done
}
# rank 1's PID is read from the log's config record (it maps every rank to its PID and
# host) as soon as the log holds a step: searching /proc is slow on a loaded machine,
# and a tiny step takes a few ms. A signal that came after the last step (the run
# ended, or was ending: any exit status) proves nothing: again, longer.
for attempt in 1 2 3 4; do
  rm -rf "$SGCK" "$SG"
  $RUN_MPI -n 2 "$T" train $SGFLAGS --steps $SGN --dp 2 --ckpt-dir "$SGCK" --log "$SG" \
    >"$TS_OUT" 2>"$TS_ERR" &
  bg=$!
  wait_for_step "$SG" $bg
  r1=$(log_pid "$SG" 1)
  [ -n "$r1" ] && kill -TERM "$r1" 2>/dev/null
  wait $bg
  rc=$?
  if [ -z "$r1" ]; then
    why="exit $rc, log: $(head -c 300 "$SG" 2>/dev/null)" rc=-1
    break
  fi
  [ "$(grep -c '"type":"step"' "$SG" 2>/dev/null)" -lt $SGN ] && break
  echo "note: SIGTERM reached rank 1 after the $SGN-step run's last step (exit $rc); again with more steps"
  SGN=$((SGN * 4))
done
TS_CHECKS=$((TS_CHECKS + 1))
k=$(sed -n "s/^tessera: stopped by SIGTERM after step \([0-9]*\) of $SGN: checkpoint .*sigck\/step-0*\([0-9]*\)\.safetensors written; .*--resume.*/\1 \2/p" "$TS_ERR")
if [ $rc -eq -1 ]; then
  fail "signal to one rank: rank 1's PID not in the dp 2 run's log ($why; stderr: $(head -c 300 "$TS_ERR"))"
elif [ $rc -eq 143 ] && [ -n "$k" ] && [ "${k% *}" = "${k#* }" ] && [ "$(grep -c . "$TS_ERR")" -eq 1 ]; then
  k=${k% *}
  pass "SIGTERM to rank 1 alone: both ranks stopped after step $k, exit 143: $(cat "$TS_ERR")"
  expect_exit 0 "" $RUN_MPI -n 2 "$T" train $SGFLAGS --steps $SGN --dp 2 --ckpt-dir "$SGCK" \
    --resume --log "$SG"
  expect_stdout "resumed from .*step-$(printf %08d "$k")"
  expect_exit 0 "" "$T" train $SGFLAGS --steps $SGN --log "$TS_TMP/sig-serial.jsonl"
  expect_exit 0 "" "$T" compare "$TS_TMP/sig-serial.jsonl" "$SG"
  expect_stdout "^identical"
else
  fail "SIGTERM to rank 1 alone: exit $rc (expected 143), stderr: $(head -c 500 "$TS_ERR")"
fi

# --- a rank killed (kill -9): the launcher names the lost process's PID and host --------
# alone (it ends the other ranks at once, docs/DISTRIBUTED.md "When a rank dies");
# the start-up output and the log's config record map that PID to its rank.
KL=$TS_TMP/killed.jsonl
$RUN_MPI -n 2 "$T" train --model tiny --batch 4 --data "$DATA" --threads 1 --steps 100000 \
  --dp 2 --log "$KL" >"$TS_OUT" 2>"$TS_ERR" &
bg=$!
wait_for_step "$KL" $bg
# (from /proc, not the log: the log's mapping is one of the things checked)
victim=$(rank_pid "$KL" 1)
[ -n "$victim" ] && kill -KILL "$victim"
_t0=$(date +%s)
wait $bg
rc=$?
_dt=$(($(date +%s) - _t0))
TS_CHECKS=$((TS_CHECKS + 1))
host=$(uname -n)
banner=$(cat "$TS_OUT" "$TS_ERR" | sed -n 's/.*PID \([0-9][0-9]*\) RUNNING AT.*/\1/p' | head -n 1)
if [ -z "$victim" ]; then
  kill $bg 2>/dev/null
  fail "a rank killed: rank 1 of the running dp 2 run not found"
elif [ "$rc" -eq 0 ] || [ "$_dt" -gt 20 ]; then
  fail "a rank killed: exit $rc after ${_dt}s (expected a quick non-zero exit)"
elif ! head -n 1 "$KL" | grep -q "\"ranks\":\[{\"rank\":0,\"host\":\"[^\"]*\",\"pid\":[0-9]*},{\"rank\":1,\"host\":\"$host\",\"pid\":$victim}\]"; then
  fail "a rank killed: the log's config record does not map pid $victim to rank 1: $(head -c 400 "$KL")"
elif ! grep -q "^ranks: 0 = pid [0-9]* on [^,]*, 1 = pid $victim on $host\$" "$TS_OUT"; then
  fail "a rank killed: no start-up line mapping pid $victim to rank 1: $(head -c 400 "$TS_OUT")"
elif [ -n "$banner" ] && [ "$banner" != "$victim" ] &&
     [ "$banner" != "$(log_pid "$KL" 0)" ]; then
  # which process the launcher reports is a race: rank 0 may end on the broken
  # connection before the launcher reaps the killed rank; a PID of neither is wrong.
  # (Rank 0's PID from the log's config record: its process is gone by now.)
  fail "a rank killed: the launcher reports PID $banner, neither rank's (rank 1, killed, was $victim)"
else
  pass "a rank killed: exit $rc after ${_dt}s; pid $victim (${banner:+PID $banner named by the launcher, }rank 1 in the log and the start-up line)"
fi

# --- a file of token ids (u16, vocabulary 300): the ranks read the same windows ---------
write_ids "$TS_TMP/ids16.bin" 2 0 2000
TOK="--model tiny --batch 4 --steps 2 --warmup 1 --eval-batches 1 --quiet --threads 1 --data $TS_TMP/ids16.bin --data-format u16 --vocab 300"
if expect_exit 0 "" "$T" train $TOK --log "$TS_TMP/tok-serial.jsonl" &&
   expect_exit 0 "" $RUN_MPI -n 2 "$T" train $TOK --dp 2 --log "$TS_TMP/tok-dp2.jsonl"; then
  expect_exit 0 "" "$T" compare "$TS_TMP/tok-serial.jsonl" "$TS_TMP/tok-dp2.jsonl"
  expect_stdout "^identical"
fi

# --- data groups that are not a power of two: the tree over ranks has empty
# positions past the last rank, as the serial tree has empty leaves past the
# batch's last (comm_tree.h), so D = 3, 5 and 6 give the serial bits too. The
# step's all-reduce bytes over the ranks are a power of two's, 16·N·(D-1)/D
# each on average; rank 0 plays its own position alone.
for spec in "3 6" "5 10" "6 12"; do
  D=${spec% *} B=${spec#* }
  S=$TS_TMP/serial-b$B.jsonl L=$TS_TMP/dp$D-b$B.jsonl
  expect_exit 0 "" "$T" train $BASE --batch $B --dropout 0.1 --log "$S" || continue
  expect_exit 0 "" $RUN_MPI -n $D "$T" train $BASE --batch $B --dropout 0.1 --dp $D --log "$L" || continue
  expect_exit 0 "" "$T" compare "$S" "$L"
  expect_stdout "^identical"
done
# with --zero 2 (the gradients reduce-scattered over the 3 ranks) and with
# gradient accumulation
S=$TS_TMP/serial-b12.jsonl
expect_exit 0 "" "$T" train $BASE --batch 12 --log "$S"
for extra in "--zero 2" "--microbatches 2"; do
  L=$TS_TMP/dp3-b12.jsonl
  if expect_exit 0 "" $RUN_MPI -n 3 "$T" train $BASE --batch 12 --dp 3 $extra --log "$L"; then
    expect_exit 0 "" "$T" compare "$S" "$L"
    expect_stdout "^identical"
  fi
done

# --- refused before any work: one line, exit 2, no log written ------------------------
NOLOG=$TS_TMP/never.jsonl
# batch 9 over 3 ranks: 3 sequences x 8 leaves = 24 leaves per rank
expect_exit 2 "--batch 9 with --dp 3: .*24 gradient leaves, not a power of two" \
  "$T" train $BASE --batch 9 --dp 3 --log "$NOLOG"
expect_exit 2 "--batch 2: must be divisible by --dp 4" "$T" train $BASE --batch 2 --dp 4 --log "$NOLOG"
# batch 6 over 2 ranks: 3 sequences x 8 leaves = 24 leaves per rank
expect_exit 2 "--batch 6 with --dp 2: .*24 gradient leaves, not a power of two" \
  "$T" train $BASE --batch 6 --dp 2 --log "$NOLOG"
# seq 48: leaf 4, 12 leaves per sequence, 24 per rank
expect_exit 2 "--batch 4 with --dp 2: .*not a power of two" "$T" train $BASE --seq 48 --dp 2 --log "$NOLOG"
expect_exit 2 "--dp 2: needs 2 ranks but the MPI world size is 1" "$T" train $BASE --dp 2 --log "$NOLOG"
expect_exit 2 "--dp 4: needs 4 ranks but the MPI world size is 2" \
  $RUN_MPI -n 2 "$T" train $BASE --dp 4 --log "$NOLOG"
expect_exit 2 "--dp 2: needs 2 ranks but the MPI world size is 4" \
  $RUN_MPI -n 4 "$T" train $BASE --dp 2 --log "$NOLOG"
TS_CHECKS=$((TS_CHECKS + 1))
[ ! -e "$NOLOG" ] && pass "refused runs wrote no log" || fail "a refused run wrote $NOLOG"

# --- a failure on one rank ends every rank, at once, with the rank's message ----------
expect_fault_ends_all "dp 2" 2 train $BASE --dp 2

# gradient accumulation
ACC="--model tiny --batch 8 --steps 3 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1 --dropout 0.1"
expect_exit 0 "" "$T" train $ACC --log "$TS_TMP/acc-1.jsonl"
for M in 2 8; do
  expect_exit 0 "" "$T" train $ACC --microbatches $M --log "$TS_TMP/acc-$M.jsonl"
  expect_compare identical "--microbatches $M, against the unaccumulated run" \
    "$TS_TMP/acc-1.jsonl" "$TS_TMP/acc-$M.jsonl"
done
expect_exit 0 "" $RUN_MPI -n 2 "$T" train $ACC --dp 2 --microbatches 2 --log "$TS_TMP/acc-dp.jsonl"
expect_compare identical "--dp 2 --microbatches 2, against the unaccumulated serial run" \
  "$TS_TMP/acc-1.jsonl" "$TS_TMP/acc-dp.jsonl"
a1=$(sed -n 's/.*"state_bytes":{[^}]*"activations":\([0-9]*\).*/\1/p' "$TS_TMP/acc-1.jsonl" | head -n 1)
a8=$(sed -n 's/.*"state_bytes":{[^}]*"activations":\([0-9]*\).*/\1/p' "$TS_TMP/acc-8.jsonl" | head -n 1)
TS_CHECKS=$((TS_CHECKS + 1))
[ -n "$a1" ] && [ -n "$a8" ] && [ $((a8 * 4)) -lt "$a1" ] &&
  pass "--microbatches 8 holds $a8 bytes of activations, against $a1 in one pass" ||
  fail "--microbatches 8: activations '$a8' bytes, not under a quarter of one pass's '$a1'"
expect_exit 2 "--microbatches 3: must divide the 8 sequences of each data rank" \
  "$T" train $ACC --microbatches 3 --log "$TS_TMP/never.jsonl"
expect_exit 2 "--microbatches 2 with --sp 2: a microbatch is one sequence" \
  "$T" train $ACC --sp 2 --microbatches 2 --log "$TS_TMP/never.jsonl"

# Ranks agree before they work: ranks started with different flags, data, a
# usage error or different checkpoints all stop at once (exit 2), the message
# naming the rank and what differs, once; none hangs, none trains. A hang
# (ranks in collectives that do not match: one evaluates, the other steps)
# is killed after 60 s and fails, and so does an end later than 20 s.
AG="--model tiny --batch 4 --warmup 1 --eval-batches 1 --quiet --threads 1 --dp 2 --steps 3"
head -c 30000 "$DATA" > "$TS_TMP/short.txt"
promptly() { # LABEL T0: the check that the run ended within 20 s of T0
  TS_CHECKS=$((TS_CHECKS + 1))
  _dt=$(($(date +%s) - $2))
  if [ "$_dt" -le 20 ]; then
    pass "$1: every rank stopped with one line after ${_dt}s"
  else
    fail "$1: took ${_dt}s to stop"
  fi
}
disagree() { # LABEL PATTERN RANK0_FLAGS -- RANK1_FLAGS
  label=$1 pattern=$2 f0=$3 f1=$4 t0=$(date +%s)
  # word lists on purpose
  # shellcheck disable=SC2086
  expect_exit 2 "$pattern" timeout -k 5 60 $MPIEXEC -n 1 "$T" train $AG $f0 : -n 1 "$T" train $AG $f1 &&
    promptly "$label" "$t0"
}
SAME=": every rank must be started with the same flags\$"
disagree "different --steps" "^tessera train: rank 1 differs from rank 0 in --steps \\(rank 0: 3, rank 1: 4\\)$SAME" \
  "--data $DATA" "--data $DATA --steps 4"
disagree "different --seed" "^tessera train: rank 1 differs from rank 0 in --seed \\(rank 0: 1, rank 1: 2\\)$SAME" \
  "--data $DATA --seed 1" "--data $DATA --seed 2"
disagree "different data" "rank 1 disagrees with rank 0 on the data: rank 0 read [0-9]+\\+[0-9]+ tokens, digest [0-9a-f]{16}, rank 1 [0-9]+\\+[0-9]+ tokens, digest [0-9a-f]{16}" \
  "--data $DATA" "--data $TS_TMP/short.txt"
# the AdamW constants and the schedule are the computation's: derived, not listed
disagree "different --beta2" "rank 1 differs from rank 0 in --beta2 \\(rank 0: 0\\.9[0-9]*, rank 1: 0\\.99[0-9]*\\)$SAME" \
  "--data $DATA" "--data $DATA --beta2 0.99"
disagree "different --lr-schedule" "rank 1 differs from rank 0 in --lr-schedule \\(rank 0: cosine, rank 1: linear\\)$SAME" \
  "--data $DATA" "--data $DATA --lr-schedule linear"
disagree "different --sp-mode" "rank 1 differs from rank 0 in --sp-mode \\(rank 0: lss, rank 1: ulysses\\)$SAME" \
  "--data $DATA --dp 1 --sp 2" "--data $DATA --dp 1 --sp 2 --sp-mode ulysses"
# what changes when a rank evaluates, checkpoints or talks is compared too:
# rank 0 evaluating after step 1 while rank 1 goes on to step 2 hung in the
# gradients' all-reduce, or ended in an MPI stack
disagree "different --eval-every" "^tessera train: rank 1 differs from rank 0 in --eval-every \\(rank 0: 1, rank 1: 0\\)$SAME" \
  "--data $DATA --eval-every 1" "--data $DATA"
disagree "different --eval-batches" "^tessera train: rank 1 differs from rank 0 in --eval-batches \\(rank 0: 1, rank 1: 2\\)$SAME" \
  "--data $DATA" "--data $DATA --eval-batches 2"
# flags the JSON form of logs and checkpoints leaves out
disagree "different --log-every" "^tessera train: rank 1 differs from rank 0 in --log-every \\(rank 0: 0, rank 1: 2\\)$SAME" \
  "--data $DATA" "--data $DATA --log-every 2"
# a rank's own: its threads (the bits do not depend on them), its quiet (only
# rank 0 talks), and where it finds the data (its digest is compared)
cp "$DATA" "$TS_TMP/corpus-copy.txt"
# shellcheck disable=SC2086
expect_exit 0 "" $RUN_MPI -n 1 "$T" train $AG --data "$DATA" --log "$TS_TMP/own.jsonl" : \
  -n 1 "$T" train $AG --threads 2 --data "$TS_TMP/corpus-copy.txt" --log "$TS_TMP/own.jsonl"
# a usage error on one rank: that rank says it, rank 0 says that it did
TS_CHECKS=$((TS_CHECKS + 1))
$RUN_MPI -n 1 "$T" train $AG --data "$DATA" : -n 1 "$T" train $AG --data "$DATA" --steps -1 \
  >"$TS_OUT" 2>"$TS_ERR"
rc=$?
if [ "$rc" = 2 ] && grep -q "^tessera train: rank 1: --steps -1: must be >= 1" "$TS_ERR" &&
  grep -q "^tessera train: rank 1 refused its command line" "$TS_ERR"; then
  pass "a usage error on rank 1 alone: exit 2, both lines"
else
  fail "a usage error on rank 1 alone: exit $rc: $(head -c 400 "$TS_ERR")"
fi
# checkpoints: the directory a run writes is one (ranks that name different
# ones are refused), but node-local copies of it may hold different steps:
# each rank's --ckpt-dir ck in its own working directory
rm -rf "$TS_TMP/ra" "$TS_TMP/rb"
mkdir -p "$TS_TMP/ra" "$TS_TMP/rb"
expect_exit 0 "" "$T" train $AG --dp 1 --data "$DATA" --ckpt-dir "$TS_TMP/ra/ck" --ckpt-every 1
cp -r "$TS_TMP/ra/ck" "$TS_TMP/rb/ck"
rm -f "$TS_TMP"/ra/ck/step-00000003.safetensors "$TS_TMP"/rb/ck/step-0000000[23].safetensors
disagree "different --ckpt-dir" \
  "^tessera train: rank 1 differs from rank 0 in --ckpt-dir \\(rank 0: \".*/ra/ck\", rank 1: \".*/rb/ck\"\\)$SAME" \
  "--data $DATA --ckpt-dir $TS_TMP/ra/ck --resume" "--data $DATA --ckpt-dir $TS_TMP/rb/ck --resume"
TA=$(cd "$(dirname "$T")" && pwd)/$(basename "$T") # the ranks start elsewhere
t0=$(date +%s)
# shellcheck disable=SC2086
expect_exit 2 \
  "rank 1 disagrees with rank 0 on the checkpoint it starts from: rank 0 found step 2 .*, rank 1 step 1" \
  timeout -k 5 60 $MPIEXEC -n 1 -wdir "$TS_TMP/ra" "$TA" train $AG --data "$DATA" --ckpt-dir ck --resume : \
  -n 1 -wdir "$TS_TMP/rb" "$TA" train $AG --data "$DATA" --ckpt-dir ck --resume &&
  promptly "different checkpoints in node-local directories" "$t0"
# --init-from: a copy elsewhere is the same checkpoint; another step is not
cp "$TS_TMP/ra/ck/step-00000002.safetensors" "$TS_TMP/init-copy.safetensors"
disagree "different --init-from checkpoints" \
  "rank 1 disagrees with rank 0 on the checkpoint it starts from: rank 0 found step 2 .*, rank 1 step 1" \
  "--data $DATA --init-from $TS_TMP/init-copy.safetensors" \
  "--data $DATA --init-from $TS_TMP/rb/ck/step-00000001.safetensors"
disagree "--init-from on one rank" \
  "^tessera train: rank 1 differs from rank 0 in --init-from \\(rank 0: given, rank 1: not given\\)$SAME" \
  "--data $DATA --init-from $TS_TMP/init-copy.safetensors" "--data $DATA"

# --- the checkpoint directory's claim is rank 0's, its refusal every rank's ----------
# (a fresh run on a directory holding checkpoints: one line, exit 2, at once)
expect_exit 2 "^tessera train: --ckpt-dir .* holds checkpoints up to step [0-9]*: --resume continues that run" \
  $RUN_MPI -n 2 "$T" train $BASE --dp 2 --ckpt-dir "$CK"

# --- SIGTERM to mpiexec itself: the launcher passes it to every rank, which stop
# after a whole step with a checkpoint (docs/CHECKPOINTS.md; SIGHUP it does not pass)
MT=$TS_TMP/launcher-term.jsonl
MTCK=$TS_TMP/launcher-term
$RUN_MPI -n 2 "$T" train $SGFLAGS --steps 100000 --dp 2 --ckpt-dir "$MTCK" --log "$MT" \
  >"$TS_OUT" 2>"$TS_ERR" &
bg=$!
wait_for_step "$MT" $bg
launcher=$(pgrep -P $bg | head -n 1)
[ -n "$launcher" ] && kill -TERM "$launcher"
wait $bg
TS_CHECKS=$((TS_CHECKS + 1))
if grep -q "^tessera: stopped by SIGTERM after step [0-9]* of 100000: checkpoint .*launcher-term/step-[0-9]*\.safetensors written" "$TS_ERR" &&
   ls "$MTCK"/step-*.safetensors >/dev/null 2>&1; then
  pass "SIGTERM to mpiexec: every rank stopped with a checkpoint: $(grep stopped "$TS_ERR")"
else
  fail "SIGTERM to mpiexec (pid ${launcher:-not found}): stderr $(head -c 400 "$TS_ERR"), checkpoints: $(ls "$MTCK" 2>&1 | tr '\n' ' ')"
fi
done_testing
