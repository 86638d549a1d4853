#!/bin/sh
# Checkpoints and resume: N steps straight equal k steps + resume + N-k steps,
# bit for bit (the logs compare identical, the final parameter hashes match);
# damaged checkpoints and mismatched resumes are refused with clear errors.
. "$(dirname "$0")/lib.sh"

DATA=$TESSERA_SRCDIR/data/corpus.txt
FLAGS="--model tiny --steps 8 --dropout 0.1 --warmup 2 --data $DATA --quiet"

expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --log "$TS_TMP/straight.jsonl"

# The interrupted run: checkpoints at 3 and 6 (and 8); drop the later ones to
# resume from step 3 as if the process had died after it.
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/ck" --ckpt-every 3 \
  --log "$TS_TMP/resumed.jsonl"
[ -f "$TS_TMP/ck/step-00000003.safetensors" ] || fail "no checkpoint at step 3"
cp "$TS_TMP/ck/step-00000003.safetensors" "$TS_TMP/step3.bak"
rm -f "$TS_TMP/ck/step-00000006.safetensors" "$TS_TMP/ck/step-00000008.safetensors"
# cut the log as a killed run would have left it (steps 1..3 and maybe more)
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/ck" --ckpt-every 3 --resume \
  --log "$TS_TMP/resumed.jsonl"
expect_stdout "resumed from .*step-00000003.safetensors"
expect_exit 0 "" "$TESSERA_BIN" compare "$TS_TMP/straight.jsonl" "$TS_TMP/resumed.jsonl"
expect_stdout "^identical"
h1=$(grep '"final"' "$TS_TMP/straight.jsonl")
h2=$(grep '"final"' "$TS_TMP/resumed.jsonl")
[ -n "$h1" ] && [ "$h1" = "$h2" ] && pass "final parameter hash equal" || fail "final records differ: $h1 / $h2"

# A different resume point (step 6) gives the same result too.
rm -f "$TS_TMP/ck/step-00000008.safetensors"
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/ck" --ckpt-every 3 --resume \
  --log "$TS_TMP/resumed.jsonl"
expect_stdout "step-00000006"
expect_exit 0 "" "$TESSERA_BIN" compare "$TS_TMP/straight.jsonl" "$TS_TMP/resumed.jsonl"

# The final checkpoint evaluates.
expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$TS_TMP/ck/step-00000008.safetensors" --data "$DATA"
expect_stdout "val loss"

# tessera compare on two checkpoints: the resumed run's step 6 is the first run's (the
# step-3 file copied away above is not); the run's own settings (here --log) may differ
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/ck2" --ckpt-every 3 \
  --log "$TS_TMP/again.jsonl" --threads 1
expect_compare "same model state" "a second run's checkpoint of step 6" \
  "$TS_TMP/ck/step-00000006.safetensors" "$TS_TMP/ck2/step-00000006.safetensors"
expect_exit 1 "" "$TESSERA_BIN" compare "$TS_TMP/step3.bak" "$TS_TMP/ck2/step-00000006.safetensors"
expect_stdout "^different: tessera.step is 3 in .*, 6 in "
expect_exit 2 "cannot open" "$TESSERA_BIN" compare "$TS_TMP/step3.bak" "$TS_TMP/none.safetensors"
expect_exit 2 "--rtol: checkpoints compare bit for bit" "$TESSERA_BIN" compare --rtol 1e-5 \
  "$TS_TMP/step3.bak" "$TS_TMP/ck2/step-00000006.safetensors"

# Damage: each kind refused with exit 1 and a one-line message naming the file.
mkdir -p "$TS_TMP/bad"
ck=$TS_TMP/bad/step-00000003.safetensors
size=$(wc -c <"$TS_TMP/step3.bak")
for cut in 4 100 $((size / 2)) $((size - 1)); do
  head -c "$cut" "$TS_TMP/step3.bak" >"$ck"
  expect_exit 1 "checkpoint .*step-00000003" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/bad" --resume
done
# one flipped byte in the data section
cp "$TS_TMP/step3.bak" "$ck"
printf '\377' | dd of="$ck" bs=1 seek=$((size - 10)) conv=notrunc 2>/dev/null
expect_exit 1 "checkpoint .*(checksum|crc|CRC)" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/bad" --resume
# garbage in the header
cp "$TS_TMP/step3.bak" "$ck"
printf 'XXXX' | dd of="$ck" bs=1 seek=12 conv=notrunc 2>/dev/null
expect_exit 1 "checkpoint .*step-00000003" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/bad" --resume
# not a checkpoint at all
echo "hello" >"$ck"
expect_exit 1 "checkpoint .*step-00000003" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/bad" --resume
# a damaged checkpoint given to eval
expect_exit 1 "checkpoint .*step-00000003" "$TESSERA_BIN" eval --ckpt "$ck" --data "$DATA"
# a resume with a different configuration than the checkpoint's
cp "$TS_TMP/step3.bak" "$ck"
expect_exit 2 "--lr" "$TESSERA_BIN" train $FLAGS --lr 0.002 --ckpt-dir "$TS_TMP/bad" --resume
# nothing to resume from
mkdir -p "$TS_TMP/empty"
expect_exit 1 "no checkpoint" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/empty" --resume

# --- the header is checksummed (format 2): edits that parse are refused too ---
# one bit of tessera.step ("3" -> "2": a resume that would redo a step)
cp "$TS_TMP/step3.bak" "$ck"
at=$(grep -abo '"tessera.step":"3"' "$ck" | head -n 1 | cut -d: -f1)
if [ -n "$at" ]; then
  printf '2' | dd of="$ck" bs=1 seek=$((at + 16)) conv=notrunc 2>/dev/null
  expect_exit 1 "checkpoint .*step-00000003.*header checksum mismatch" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/bad" --resume
  expect_exit 1 "checkpoint .*step-00000003.*header checksum mismatch" "$TESSERA_BIN" eval --ckpt "$ck" --data "$DATA"
else
  fail "no \"tessera.step\":\"3\" in the checkpoint header"
fi
# a digit of the configuration (n_layer 2 -> 3)
cp "$TS_TMP/step3.bak" "$ck"
at=$(grep -abo 'n_layer\\":2' "$ck" | head -n 1 | cut -d: -f1)
if [ -n "$at" ]; then
  printf '3' | dd of="$ck" bs=1 seek=$((at + 10)) conv=notrunc 2>/dev/null
  expect_exit 1 "checkpoint .*header checksum mismatch" "$TESSERA_BIN" eval --ckpt "$ck" --data "$DATA"
else
  fail "no n_layer in the checkpoint header"
fi
# a checkpoint renamed to another step
cp "$TS_TMP/step3.bak" "$TS_TMP/bad/step-00000004.safetensors"
expect_exit 1 "step-00000004.*tessera.step is 3 but the file is named for step 4" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/bad" --resume
rm -f "$TS_TMP/bad/step-00000004.safetensors"
# format 1 (tessera dump's, no header checksum) is not a run's checkpoint
if expect_exit 0 "" "$TESSERA_BIN" dump --data "$DATA" --out "$TS_TMP/dump" --traj-steps 1; then
  cp "$TS_TMP/dump/weights.safetensors" "$ck"
  expect_exit 1 "checkpoint .*tessera.format 1 has no header checksum" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/bad" --resume
  expect_exit 1 "checkpoint .*tessera.format 1 has no header checksum" "$TESSERA_BIN" eval --ckpt "$ck" --data "$DATA"
fi

# --- a torn last log line (a run killed while writing it) is dropped on resume ---
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/torn" --ckpt-every 3 --log "$TS_TMP/torn.jsonl"
rm -f "$TS_TMP/torn/step-00000006.safetensors" "$TS_TMP/torn/step-00000008.safetensors"
# config and steps 1..4 whole, then the start of step 5's record, before its "step" key
{ head -n 5 "$TS_TMP/torn.jsonl"; sed -n 6p "$TS_TMP/torn.jsonl" | head -c 12; } >"$TS_TMP/torn.cut"
mv "$TS_TMP/torn.cut" "$TS_TMP/torn.jsonl"
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/torn" --ckpt-every 3 --resume --log "$TS_TMP/torn.jsonl"
expect_exit 0 "" "$TESSERA_BIN" compare "$TS_TMP/straight.jsonl" "$TS_TMP/torn.jsonl"
expect_stdout "^identical"

# --- leftover temporary files: ours removed when their writer is gone ---
sh -c 'exit 0' &
dead=$!
wait $dead
mkdir -p "$TS_TMP/tmps"
for f in step-00000003.safetensors.tmp.$dead step-00000003.safetensors.tmp.$$ other.tmp.$dead; do
  : >"$TS_TMP/tmps/$f"
done
: >"$TS_TMP/tl.jsonl.tmp.$dead"
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --steps 1 --ckpt-dir "$TS_TMP/tmps" --log "$TS_TMP/tl.jsonl"
[ ! -e "$TS_TMP/tmps/step-00000003.safetensors.tmp.$dead" ] && pass "a dead run's checkpoint temp removed" || fail "a dead run's checkpoint temp is still there"
[ ! -e "$TS_TMP/tl.jsonl.tmp.$dead" ] && pass "a dead run's log temp removed" || fail "a dead run's log temp is still there"
[ -e "$TS_TMP/tmps/step-00000003.safetensors.tmp.$$" ] && pass "a live writer's temp kept" || fail "a live writer's temp was removed"
[ -e "$TS_TMP/tmps/other.tmp.$dead" ] && pass "a file of another pattern kept" || fail "a file of another pattern was removed"

# --- a diverged run stops at that step (exit 1); what it kept is whole and loads ---
expect_exit 1 "step [0-9]+: .*diverged" "$TESSERA_BIN" train $FLAGS --steps 30 --lr 1000 --grad-clip 0 --warmup 0 \
  --ckpt-dir "$TS_TMP/div" --ckpt-every 1 --log "$TS_TMP/div.jsonl"
n=0
for f in "$TS_TMP"/div/step-*.safetensors; do
  [ -e "$f" ] || continue
  n=$((n + 1))
  expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$f" --data "$DATA"
done
[ $n -gt 0 ] && pass "$n checkpoints kept" || fail "the diverged run kept no checkpoint"
expect_exit 0 "" "$TESSERA_BIN" compare "$TS_TMP/div.jsonl" "$TS_TMP/div.jsonl" # every line whole
# the log ends at the last checkpoint, or the step after it whose update overflowed
last=$(grep -c '"type":"step"' "$TS_TMP/div.jsonl")
[ "$last" -ge "$n" ] && [ "$last" -le $((n + 1)) ] && pass "the log ends where the run stopped" ||
  fail "log has $last steps, $n checkpoints"
grep -q '"type":"final"' "$TS_TMP/div.jsonl" && fail "a diverged run's log has a final record"

done_testing
