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

# ssn-confined (docs/COMPRESSION.md): its basis and the refresh's gathered gradient
# are model tensors, so a run resumed after step 3 refreshes at step 4 as the
# straight one does; and its checkpoint evaluates with the basis as the identity
# (the probe), which a model trained without --compress refuses
SC="--model llama-tiny --layers 4 --steps 5 --warmup 2 --data $DATA --quiet --compress ssn-confined --rank 16 --compress-stages 2 --ssn-refresh 4"
expect_exit 0 "" "$TESSERA_BIN" train $SC --ckpt-dir "$TS_TMP/cks" --ckpt-every 3 \
  --log "$TS_TMP/ssn-resumed.jsonl"
cp "$TS_TMP/ssn-resumed.jsonl" "$TS_TMP/ssn-straight.jsonl"
rm -f "$TS_TMP/cks/step-00000005.safetensors"
expect_exit 0 "" "$TESSERA_BIN" train $SC --ckpt-dir "$TS_TMP/cks" --ckpt-every 3 --resume \
  --log "$TS_TMP/ssn-resumed.jsonl"
expect_stdout "resumed from .*step-00000003.safetensors"
expect_exit 0 "" "$TESSERA_BIN" compare "$TS_TMP/ssn-straight.jsonl" "$TS_TMP/ssn-resumed.jsonl"
expect_stdout "^identical"
expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$TS_TMP/cks/step-00000005.safetensors" --data "$DATA" \
  --identity-boundaries
expect_stdout "identity boundaries: val loss .*change [+-]0.0000"

# The final checkpoint evaluates.
expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$TS_TMP/ck/step-00000008.safetensors" --data "$DATA"
expect_stdout "val loss"
expect_exit 2 "--identity-boundaries: checkpoint .* has no compressed boundaries" \
  "$TESSERA_BIN" eval --ckpt "$TS_TMP/ck/step-00000008.safetensors" --data "$DATA" --identity-boundaries

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
# what no tensor shows: the LLaMA rotary base, the variant (a silently other
# run before: the resume was accepted and continued with the flag's value)
expect_exit 0 "" "$TESSERA_BIN" train --model llama-tiny --steps 2 --data "$DATA" --quiet \
  --ckpt-dir "$TS_TMP/llck" --ckpt-every 1
rm -f "$TS_TMP/llck/step-00000002.safetensors"
expect_exit 2 "--resume: checkpoint .*step-00000001.safetensors was written with --rope-theta 10000, this run has 500000" \
  "$TESSERA_BIN" train --model llama-tiny --steps 2 --data "$DATA" --quiet --rope-theta 500000 \
  --ckpt-dir "$TS_TMP/llck" --resume
expect_exit 2 "--resume: checkpoint .* was written by a LLaMA model, this run's --model tiny is GPT" \
  "$TESSERA_BIN" train --model tiny --steps 2 --data "$DATA" --quiet --ckpt-dir "$TS_TMP/llck" --resume
# what no list names is refused too (derived from the configuration: --fast
# changes the sums), and other data under the same or another path
expect_exit 2 "--resume: checkpoint .*step-00000001.safetensors was written with another \"fast\"" \
  "$TESSERA_BIN" train --model llama-tiny --steps 2 --data "$DATA" --quiet --fast \
  --ckpt-dir "$TS_TMP/llck" --resume
head -c 40000 "$DATA" > "$TS_TMP/other.txt"
expect_exit 2 "--resume: checkpoint .*step-00000001.safetensors was written from other data \([0-9]+\+[0-9]+ tokens, digest [0-9a-f]+\); this run's --data holds [0-9]+\+[0-9]+ tokens" \
  "$TESSERA_BIN" train --model llama-tiny --steps 2 --data "$TS_TMP/other.txt" --quiet \
  --ckpt-dir "$TS_TMP/llck" --resume
# nothing to resume from (an empty directory, or none yet): the run starts at
# step 0 and says so in one line, so that a job script can always pass
# --resume; it is the run done straight, and the next --resume continues it
mkdir -p "$TS_TMP/empty"
for dir in "$TS_TMP/empty" "$TS_TMP/not-yet"; do
  expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$dir" --resume --log "$TS_TMP/fresh.jsonl"
  TS_CHECKS=$((TS_CHECKS + 1))
  n=$(grep -c "^--resume: no checkpoint in $dir yet: starting at step 0$" "$TS_OUT")
  [ "$n" = 1 ] && pass "--resume on $dir: one line, a fresh start" || fail "--resume on $dir: stdout $(head -c 300 "$TS_OUT")"
  expect_compare identical "--resume with nothing to resume, against the run done straight" \
    "$TS_TMP/straight.jsonl" "$TS_TMP/fresh.jsonl"
done
[ -f "$TS_TMP/not-yet/step-00000008.safetensors" ] && pass "the fresh start made its --ckpt-dir" || fail "no $TS_TMP/not-yet/step-00000008.safetensors"
# a --ckpt-dir that is a file is still an error
: >"$TS_TMP/a-file"
expect_exit 1 "--resume: cannot open checkpoint directory .*a-file" "$TESSERA_BIN" train $FLAGS \
  --ckpt-dir "$TS_TMP/a-file" --resume

# --- extending a finished run: --steps may change on --resume ---
# The steps done stay as they were and the steps left follow the schedule of
# the new total, which the run says. A constant schedule does not depend on
# the total, so there the extended run is the longer run done straight.
EXT="--model tiny --warmup 2 --dropout 0.1 --data $DATA --quiet --lr-schedule constant --eval-every 3 --eval-batches 1"
expect_exit 0 "" "$TESSERA_BIN" train $EXT --steps 9 --log "$TS_TMP/ext-straight.jsonl"
expect_exit 0 "" "$TESSERA_BIN" train $EXT --steps 6 --ckpt-dir "$TS_TMP/ext" --log "$TS_TMP/ext.jsonl"
expect_exit 0 "" "$TESSERA_BIN" train $EXT --steps 9 --ckpt-dir "$TS_TMP/ext" --resume --log "$TS_TMP/ext.jsonl"
expect_stdout "^--resume: --steps 9, the checkpoint's run had 6: the learning rate of steps 7\.\.9 follows the schedule of a 9-step run$"
expect_stdout "resumed from .*step-00000006.safetensors"
expect_compare identical "6 steps extended to 9 (constant schedule), against 9 straight" \
  "$TS_TMP/ext-straight.jsonl" "$TS_TMP/ext.jsonl"
# cosine: steps 1..8 of the 8-step run, then step 9 at the rate of a 10-step
# run's step 9 (its lr_hex), from the 8-step run's weights
rm -rf "$TS_TMP/ext2"
mkdir -p "$TS_TMP/ext2"
cp "$TS_TMP/ck/step-00000008.safetensors" "$TS_TMP/ext2/"
cp "$TS_TMP/straight.jsonl" "$TS_TMP/ext2.jsonl"
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --steps 10 --ckpt-dir "$TS_TMP/ext2" --resume --log "$TS_TMP/ext2.jsonl"
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --steps 10 --log "$TS_TMP/ten.jsonl"
lr_of() { grep "\"type\":\"step\",\"step\":$2," "$1" | sed -n 's/.*"lr_hex":"\([^"]*\)".*/\1/p'; }
TS_CHECKS=$((TS_CHECKS + 1))
a=$(lr_of "$TS_TMP/ext2.jsonl" 9) b=$(lr_of "$TS_TMP/ten.jsonl" 9) c=$(lr_of "$TS_TMP/straight.jsonl" 8)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "step 9 of the extended run at the 10-step schedule's rate ($a)" ||
  fail "extended run's step 9 lr '$a', a 10-step run's '$b'"
TS_CHECKS=$((TS_CHECKS + 1))
[ "$(grep -c '"type":"step"' "$TS_TMP/ext2.jsonl")" = 10 ] && [ "$(lr_of "$TS_TMP/ext2.jsonl" 8)" = "$c" ] &&
  pass "the extended log keeps the 8 steps done and adds 2" || fail "extended log: $(grep -c '"type":"step"' "$TS_TMP/ext2.jsonl") steps"
TS_CHECKS=$((TS_CHECKS + 1))
grep -q '"type":"final","step":10,' "$TS_TMP/ext2.jsonl" && pass "its final record is step 10's" ||
  fail "no final record of step 10 in the extended log"
# fewer steps than the checkpoint has done: refused
expect_exit 2 "^tessera train: --resume: --steps 5: checkpoint .*step-00000010.safetensors is of step 10 already$" \
  "$TESSERA_BIN" train $FLAGS --steps 5 --ckpt-dir "$TS_TMP/ext2" --resume

# --- --keep-last N: the N latest checkpoints stay, nothing else is touched ---
rm -rf "$TS_TMP/keep"
mkdir -p "$TS_TMP/keep"
: >"$TS_TMP/keep/notes.txt"
: >"$TS_TMP/keep/step-3.safetensors"             # not tessera's name for step 3
: >"$TS_TMP/keep/step-00000001.safetensors.bak"
: >"$TS_TMP/target"
ln -s "$TS_TMP/target" "$TS_TMP/keep/step-00000003.safetensors" # a link, not a file it wrote
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/keep" --ckpt-every 2 --keep-last 2 \
  --log "$TS_TMP/keep.jsonl"
TS_CHECKS=$((TS_CHECKS + 1))
got=$(cd "$TS_TMP/keep" && LC_ALL=C ls | tr '\n' ' ')
want="notes.txt step-00000001.safetensors.bak step-00000003.safetensors step-00000006.safetensors step-00000008.safetensors step-3.safetensors tessera.identity tessera.lock "
[ "$got" = "$want" ] && [ -e "$TS_TMP/target" ] && pass "--keep-last 2: $got" || fail "--keep-last 2 left '$got'"
expect_compare identical "--keep-last changes no result" "$TS_TMP/straight.jsonl" "$TS_TMP/keep.jsonl"
expect_compare "same model state" "--keep-last's step 8, against the run's without it" \
  "$TS_TMP/ck/step-00000008.safetensors" "$TS_TMP/keep/step-00000008.safetensors"

# --- --resume --log OTHER: another run's log is refused by its configuration
# record, whatever its length, and left as it was
rm -rf "$TS_TMP/spl"
if expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --steps 3 --ckpt-dir "$TS_TMP/spl/a" --log "$TS_TMP/spl-a.jsonl" &&
   expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --steps 3 --seed 7 --ckpt-dir "$TS_TMP/spl/b" --log "$TS_TMP/spl-b.jsonl"; then
  cp "$TS_TMP/spl-a.jsonl" "$TS_TMP/spl-a.orig"
  expect_exit 2 "^tessera train: --log .*spl-a.jsonl: another run's log \(checkpoint .* was written with --seed 7, the log has 1337\); name a new --log to start one$" \
    "$TESSERA_BIN" train $FLAGS --steps 4 --seed 7 --ckpt-dir "$TS_TMP/spl/b" --resume --log "$TS_TMP/spl-a.jsonl"
  cmp -s "$TS_TMP/spl-a.jsonl" "$TS_TMP/spl-a.orig" && pass "the other run's log is untouched" ||
    fail "the other run's log was changed"
  expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --steps 4 --seed 7 --ckpt-dir "$TS_TMP/spl/b" --resume --log "$TS_TMP/spl-b.jsonl"
fi

# --- a checkpoint directory has an owner --------------------------------------
# a fresh run (no --resume) refuses a directory that holds another run's
# checkpoints, touching nothing; --restart removes them (and only them)
rm -rf "$TS_TMP/owner" && mkdir -p "$TS_TMP/owner"
cp "$TS_TMP/ck/step-00000008.safetensors" "$TS_TMP/owner/step-00000099.safetensors"
: >"$TS_TMP/owner/notes.txt"
expect_exit 2 "^tessera train: --ckpt-dir .*owner holds checkpoints up to step 99: --resume continues that run, --restart removes them" \
  "$TESSERA_BIN" train $FLAGS --steps 2 --ckpt-dir "$TS_TMP/owner"
TS_CHECKS=$((TS_CHECKS + 1))
cmp -s "$TS_TMP/ck/step-00000008.safetensors" "$TS_TMP/owner/step-00000099.safetensors" &&
  pass "the refused run left the other run's checkpoint as it was" || fail "the other run's checkpoint changed"
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --steps 2 --ckpt-dir "$TS_TMP/owner" --restart
got=$(cd "$TS_TMP/owner" && LC_ALL=C ls | tr '\n' ' ')
TS_CHECKS=$((TS_CHECKS + 1))
[ "$got" = "notes.txt step-00000002.safetensors tessera.identity tessera.lock " ] && pass "--restart: $got" ||
  fail "--restart left '$got'"
# one directory, one run: a second run on it while the first runs is refused
# at once, naming the holder, and the first run's checkpoints are its own
rm -rf "$TS_TMP/busy"
"$TESSERA_BIN" train $FLAGS --steps 400 --ckpt-dir "$TS_TMP/busy" --ckpt-every 100 >/dev/null 2>&1 &
first=$!
for _ in $(seq 1 100); do [ -s "$TS_TMP/busy/tessera.lock" ] && break; sleep 0.1; done
expect_exit 1 "^tessera: --ckpt-dir .*busy is in use by another run \(host .*, pid $first\)" \
  timeout 60 "$TESSERA_BIN" train $FLAGS --steps 2 --ckpt-dir "$TS_TMP/busy" --resume
kill $first 2>/dev/null
wait $first 2>/dev/null

# --- a checkpoint directory's run lineage (its tessera.identity) ---------------
# A run id: the directory's (its identity's), a checkpoint's (its tessera.run member's).
dir_run_id() { sed -n 's/^{"run_id":"\([0-9a-f]\{16\}\)".*/\1/p' "$1/tessera.identity" 2>/dev/null; }
ckpt_run_id() { LC_ALL=C grep -ao 'run_id\\":\\"[0-9a-f]\{16\}' "$1" | head -n 1 | sed 's/.*"//'; }
LIN="$FLAGS --ckpt-every 2"
rm -rf "$TS_TMP/lin" "$TS_TMP/lin2"
expect_exit 0 "" "$TESSERA_BIN" train $LIN --steps 4 --ckpt-dir "$TS_TMP/lin"
expect_exit 0 "" "$TESSERA_BIN" train $LIN --steps 4 --seed 7 --ckpt-dir "$TS_TMP/lin2"
id1=$(dir_run_id "$TS_TMP/lin") id2=$(dir_run_id "$TS_TMP/lin2")
TS_CHECKS=$((TS_CHECKS + 1))
[ -n "$id1" ] && [ -n "$id2" ] && [ "$id1" != "$id2" ] &&
  [ "$(ckpt_run_id "$TS_TMP/lin/step-00000004.safetensors")" = "$id1" ] &&
  pass "a fresh run starts a lineage ($id1): its identity and its checkpoints say so" ||
  fail "run ids: directories '$id1' and '$id2', checkpoint '$(ckpt_run_id "$TS_TMP/lin/step-00000004.safetensors")'"
# a resumed run keeps the lineage: the identity untouched, its run id in the new checkpoints
cp "$TS_TMP/lin/tessera.identity" "$TS_TMP/lin.identity"
expect_exit 0 "" "$TESSERA_BIN" train $LIN --steps 6 --ckpt-dir "$TS_TMP/lin" --resume
TS_CHECKS=$((TS_CHECKS + 1))
cmp -s "$TS_TMP/lin/tessera.identity" "$TS_TMP/lin.identity" &&
  [ "$(ckpt_run_id "$TS_TMP/lin/step-00000006.safetensors")" = "$id1" ] &&
  pass "a resumed run keeps its directory's run id" ||
  fail "the resumed run's identity or checkpoint changed its run id: $(head -c 60 "$TS_TMP/lin/tessera.identity")"
# --keep-last removes the lineage's own checkpoints alone: one of another run
# copied in, and a file of a checkpoint's name that is none, stay byte for byte
cp "$TS_TMP/lin2/step-00000002.safetensors" "$TS_TMP/lin/step-00000001.safetensors"
echo "not a checkpoint" >"$TS_TMP/lin/step-00000005.safetensors"
cp "$TS_TMP/lin/step-00000001.safetensors" "$TS_TMP/foreign.bak"
expect_exit 0 "" "$TESSERA_BIN" train $LIN --steps 8 --ckpt-dir "$TS_TMP/lin" --resume --keep-last 1
got=$(cd "$TS_TMP/lin" && LC_ALL=C ls | tr '\n' ' ')
expect_equal "--keep-last 1 with another run's checkpoint in the directory" "$got" \
  "step-00000001.safetensors step-00000005.safetensors step-00000008.safetensors tessera.identity tessera.lock "
TS_CHECKS=$((TS_CHECKS + 1))
cmp -s "$TS_TMP/lin/step-00000001.safetensors" "$TS_TMP/foreign.bak" &&
  [ "$(cat "$TS_TMP/lin/step-00000005.safetensors")" = "not a checkpoint" ] &&
  pass "the other run's checkpoint and the lookalike are byte-identical" ||
  fail "--keep-last changed a file its lineage did not write"
rm -f "$TS_TMP/lin/step-00000001.safetensors" "$TS_TMP/lin/step-00000005.safetensors"
# --resume from a checkpoint of another lineage is refused, the directory
# untouched: with another configuration, naming the flag; with the same one,
# saying whose directory it is
mv "$TS_TMP/lin/step-00000008.safetensors" "$TS_TMP/lin8.bak"
cp "$TS_TMP/lin2/step-00000004.safetensors" "$TS_TMP/lin/"
expect_exit 2 "^tessera train: --resume: the run that owns --ckpt-dir .*/lin \(.*/lin/tessera.identity\) was written with --seed 1337, this run has 7$" \
  "$TESSERA_BIN" train $LIN --steps 6 --seed 7 --ckpt-dir "$TS_TMP/lin" --resume
rm -rf "$TS_TMP/lin3"
expect_exit 0 "" "$TESSERA_BIN" train $LIN --steps 4 --ckpt-dir "$TS_TMP/lin3"
id3=$(dir_run_id "$TS_TMP/lin3")
rm -f "$TS_TMP/lin/step-00000004.safetensors"
cp "$TS_TMP/lin3/step-00000004.safetensors" "$TS_TMP/lin/"
expect_exit 2 "^tessera train: --resume: checkpoint .*/lin/step-00000004.safetensors is of run $id3, but --ckpt-dir .*/lin belongs to run $id1 \(its tessera.identity\): resume that checkpoint in a new --ckpt-dir$" \
  "$TESSERA_BIN" train $LIN --steps 6 --ckpt-dir "$TS_TMP/lin" --resume
TS_CHECKS=$((TS_CHECKS + 1))
cmp -s "$TS_TMP/lin/tessera.identity" "$TS_TMP/lin.identity" &&
  cmp -s "$TS_TMP/lin/step-00000004.safetensors" "$TS_TMP/lin3/step-00000004.safetensors" &&
  pass "the refused resumes left the directory as it was" || fail "a refused resume changed the directory"
# a copy into a new directory continues its lineage there
rm -rf "$TS_TMP/lin4" && mkdir -p "$TS_TMP/lin4"
cp "$TS_TMP/lin2/step-00000004.safetensors" "$TS_TMP/lin4/"
expect_exit 0 "" "$TESSERA_BIN" train $LIN --steps 6 --seed 7 --ckpt-dir "$TS_TMP/lin4" --resume
TS_CHECKS=$((TS_CHECKS + 1))
[ "$(dir_run_id "$TS_TMP/lin4")" = "$id2" ] && grep -q '"first_step":4,' "$TS_TMP/lin4/tessera.identity" &&
  pass "a checkpoint resumed in a new directory brings its lineage ($id2, from step 4)" ||
  fail "the new directory's identity: $(head -c 120 "$TS_TMP/lin4/tessera.identity")"
# --restart starts a new lineage
expect_exit 0 "" "$TESSERA_BIN" train $LIN --steps 2 --ckpt-dir "$TS_TMP/lin" --restart
new=$(dir_run_id "$TS_TMP/lin")
TS_CHECKS=$((TS_CHECKS + 1))
[ -n "$new" ] && [ "$new" != "$id1" ] &&
  [ "$(ckpt_run_id "$TS_TMP/lin/step-00000002.safetensors")" = "$new" ] &&
  pass "--restart writes a new identity ($new)" || fail "--restart's identity: '$new' (was $id1)"
# an identity that is not one is refused, naming it, and not overwritten
printf 'garbage' >"$TS_TMP/lin/tessera.identity"
expect_exit 1 "^tessera: --ckpt-dir .*/lin: .*/lin/tessera.identity is not a run identity tessera writes \(not JSON\)" \
  "$TESSERA_BIN" train $LIN --steps 4 --ckpt-dir "$TS_TMP/lin" --resume
TS_CHECKS=$((TS_CHECKS + 1))
[ "$(cat "$TS_TMP/lin/tessera.identity")" = garbage ] && pass "the damaged identity is left as it was" ||
  fail "the damaged identity was overwritten"

# --- --init-from CKPT: the weights alone; a new optimizer, schedule and step count ---
INIT="--model tiny --steps 3 --warmup 2 --data $DATA --quiet --eval-batches 1"
expect_exit 0 "" "$TESSERA_BIN" train $INIT --log "$TS_TMP/scratch.jsonl"
expect_exit 0 "" "$TESSERA_BIN" train $INIT --init-from "$TS_TMP/ck/step-00000008.safetensors" \
  --ckpt-dir "$TS_TMP/init" --log "$TS_TMP/init.jsonl"
expect_stdout "^initialised from .*ck/step-00000008.safetensors \(its step 8\): new optimizer state and schedule from step 0$"
first_loss() { grep '"type":"step"' "$1" | head -n 1 | sed -n 's/.*"loss":\([0-9.]*\),.*/\1/p'; }
TS_CHECKS=$((TS_CHECKS + 1))
a=$(first_loss "$TS_TMP/init.jsonl") b=$(first_loss "$TS_TMP/scratch.jsonl")
awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && a + 0.1 < b) }' &&
  pass "step 1 from the trained weights: loss $a, from scratch $b" || fail "step 1 loss '$a' from the checkpoint, '$b' from scratch"
# the schedule from its start: step 1's rate is the warmup's first, as from scratch
TS_CHECKS=$((TS_CHECKS + 1))
[ "$(lr_of "$TS_TMP/init.jsonl" 1)" = "$(lr_of "$TS_TMP/scratch.jsonl" 1)" ] && pass "the warmup starts anew" ||
  fail "step 1 lr $(lr_of "$TS_TMP/init.jsonl" 1), from scratch $(lr_of "$TS_TMP/scratch.jsonl" 1)"
# its checkpoints count its own steps, its optimizer too
TS_CHECKS=$((TS_CHECKS + 1))
hdr=$(head -c 20000 "$TS_TMP/init/step-00000003.safetensors" | tr -d '\0')
case $hdr in
*'"tessera.step":"3"'*'"tessera.adam_step":"3"'* | *'"tessera.adam_step":"3"'*'"tessera.step":"3"'*)
  pass "the run's checkpoint is its step 3 (optimizer step 3)" ;;
*) fail "checkpoint of the --init-from run: $(printf '%s' "$hdr" | grep -o '"tessera.[a-z_]*step":"[0-9]*"' | tr '\n' ' ')" ;;
esac
TS_CHECKS=$((TS_CHECKS + 1))
grep -q '"init_from":"[^"]*ck/step-00000008.safetensors"' "$TS_TMP/init.jsonl" &&
  pass "the config records --init-from" || fail "no init_from in $(head -c 300 "$TS_TMP/init.jsonl")"
# it resumes like any run: stopped after step 2 and resumed, it ends where it did
expect_exit 0 "" "$TESSERA_BIN" train $INIT --init-from "$TS_TMP/ck/step-00000008.safetensors" \
  --ckpt-dir "$TS_TMP/init2" --ckpt-every 1 --log "$TS_TMP/init2.jsonl"
rm -f "$TS_TMP/init2/step-00000003.safetensors"
expect_exit 0 "" "$TESSERA_BIN" train $INIT --ckpt-dir "$TS_TMP/init2" --resume --log "$TS_TMP/init2.jsonl"
expect_stdout "resumed from .*init2/step-00000002.safetensors"
expect_compare identical "an --init-from run stopped after step 2 and resumed" "$TS_TMP/init.jsonl" "$TS_TMP/init2.jsonl"
# another architecture is refused, naming the field and its flag
expect_exit 2 "^tessera train: --init-from .*step-00000008.safetensors: another architecture: its \"d\" is 64, this run's \(--d\) 128$" \
  "$TESSERA_BIN" train $INIT --d 128 --init-from "$TS_TMP/ck/step-00000008.safetensors"
expect_exit 2 "another architecture: its \"variant\" is gpt, this run's \(--model\) llama$" \
  "$TESSERA_BIN" train $INIT --model llama-tiny --init-from "$TS_TMP/ck/step-00000008.safetensors"
expect_exit 2 "another architecture: its \"seq\" is 64, this run's \(--seq\) 128$" \
  "$TESSERA_BIN" train $INIT --seq 128 --init-from "$TS_TMP/ck/step-00000008.safetensors"
expect_exit 2 "another architecture: its \"rope_theta\" is 10000, this run's \(--rope-theta\) 500000$" \
  "$TESSERA_BIN" train $INIT --model llama-tiny --rope-theta 500000 --init-from "$TS_TMP/llck/step-00000001.safetensors"
# a checkpoint of the run's own --ckpt-dir would be written over: refused
expect_exit 2 "^tessera train: --init-from .*ck/step-00000008.safetensors: a checkpoint of --ckpt-dir .*ck \(it would be overwritten\)" \
  "$TESSERA_BIN" train $INIT --init-from "$TS_TMP/ck/step-00000008.safetensors" --ckpt-dir "$TS_TMP/ck"
# what is not the architecture may differ: the training settings, and a LLaMA's context
expect_exit 0 "" "$TESSERA_BIN" train $INIT --model llama-tiny --seq 128 --batch 2 --lr 3e-4 --dropout 0.1 \
  --steps 1 --init-from "$TS_TMP/llck/step-00000001.safetensors"
expect_exit 1 "checkpoint .*missing.safetensors: cannot open" "$TESSERA_BIN" train $INIT \
  --init-from "$TS_TMP/missing.safetensors"
cp "$TS_TMP/step3.bak" "$TS_TMP/damaged.safetensors"
printf '\377' | dd of="$TS_TMP/damaged.safetensors" bs=1 seek=$((size - 10)) conv=notrunc 2>/dev/null
expect_exit 1 "checkpoint .*damaged.safetensors.*(checksum|crc|CRC)" "$TESSERA_BIN" train $INIT \
  --init-from "$TS_TMP/damaged.safetensors"

# --- --resume and eval read the checkpoint's data unless --data says ---
make_corpus "$TS_TMP/own.txt" 40000
OWN="--model tiny --steps 4 --warmup 2 --quiet --eval-batches 1"
expect_exit 0 "" "$TESSERA_BIN" train $OWN --data "$TS_TMP/own.txt" --val-frac 0.2 --log "$TS_TMP/own-straight.jsonl"
expect_exit 0 "" "$TESSERA_BIN" train $OWN --data "$TS_TMP/own.txt" --val-frac 0.2 --ckpt-dir "$TS_TMP/own" \
  --ckpt-every 2 --log "$TS_TMP/own.jsonl"
rm -f "$TS_TMP/own/step-00000004.safetensors"
# neither --data nor --val-frac: the checkpoint's file and split
expect_exit 0 "" "$TESSERA_BIN" train $OWN --ckpt-dir "$TS_TMP/own" --resume --log "$TS_TMP/own.jsonl"
expect_compare identical "resumed without --data, against the run done straight" \
  "$TS_TMP/own-straight.jsonl" "$TS_TMP/own.jsonl"
evalhex() { sed -n 's/.*val loss [0-9.]* (\([^)]*\)).*/\1/p' "$TS_OUT"; }
expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$TS_TMP/own/step-00000004.safetensors" --eval-batches 1
recorded=$(evalhex)
expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$TS_TMP/own/step-00000004.safetensors" --eval-batches 1 \
  --data "$TS_TMP/own.txt" --val-frac 0.2
told=$(evalhex)
expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$TS_TMP/own/step-00000004.safetensors" --eval-batches 1 --data "$DATA"
other=$(evalhex)
TS_CHECKS=$((TS_CHECKS + 1))
[ -n "$recorded" ] && [ "$recorded" = "$told" ] && [ "$recorded" != "$other" ] &&
  pass "eval without --data: the checkpoint's data and split ($recorded; the bundled corpus gives $other)" ||
  fail "eval: recorded '$recorded', told '$told', the bundled corpus '$other'"
# the recorded file gone: one line naming it and the way out
mv "$TS_TMP/own.txt" "$TS_TMP/own-moved.txt"
expect_exit 1 "^tessera: checkpoint .*step-00000004.safetensors was trained on .*own\.txt, which cannot be read \(No such file or directory\): pass --data$" \
  "$TESSERA_BIN" eval --ckpt "$TS_TMP/own/step-00000004.safetensors"
expect_exit 1 "^tessera: checkpoint .*step-00000004.safetensors was trained on .*own\.txt, which cannot be read \(No such file or directory\): pass --data$" \
  "$TESSERA_BIN" train $OWN --steps 5 --ckpt-dir "$TS_TMP/own" --resume
expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$TS_TMP/own/step-00000004.safetensors" --eval-batches 1 \
  --data "$TS_TMP/own-moved.txt" --val-frac 0.2
TS_CHECKS=$((TS_CHECKS + 1))
[ "$(evalhex)" = "$recorded" ] && pass "the moved file, named: the same loss" || fail "moved file: $(evalhex), recorded $recorded"

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

# --- a resumed run records its start (its layout and processes) and still compares ---
# identical; resumed again from the same checkpoint, the first resume's record goes
# with the steps it made
rm -f "$TS_TMP/torn/step-00000006.safetensors" "$TS_TMP/torn/step-00000008.safetensors"
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/torn" --ckpt-every 3 --resume --log "$TS_TMP/torn.jsonl"
n=$(grep -c '^{"type":"resume","step":3,"world":1,"layout":"serial","ranks":\[{"rank":0,"host":"[^"]*","pid":[0-9]*}\]}$' "$TS_TMP/torn.jsonl")
[ "$n" = 1 ] && pass "one resume record of step 3" || fail "$n resume records of step 3: $(grep resume "$TS_TMP/torn.jsonl")"
expect_exit 0 "" "$TESSERA_BIN" compare "$TS_TMP/straight.jsonl" "$TS_TMP/torn.jsonl"
expect_stdout "^identical"

# --- a log that ends before the checkpoint's step is another run's: refused, untouched ---
rm -f "$TS_TMP/torn/step-00000006.safetensors" "$TS_TMP/torn/step-00000008.safetensors"
head -n 3 "$TS_TMP/straight.jsonl" >"$TS_TMP/short.jsonl"
cp "$TS_TMP/short.jsonl" "$TS_TMP/short.bak"
expect_exit 1 "^tessera: --log .*short\.jsonl: its step records end at step 2 but the checkpoint is of step 3: not this run's log" \
  "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/torn" --ckpt-every 3 --resume --log "$TS_TMP/short.jsonl"
cmp -s "$TS_TMP/short.jsonl" "$TS_TMP/short.bak" && pass "the short log is untouched" || fail "the short log was changed"
# an empty file is no run's log: the resumed run starts it
: >"$TS_TMP/empty.jsonl"
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --ckpt-dir "$TS_TMP/torn" --ckpt-every 3 --resume --log "$TS_TMP/empty.jsonl"

# --- leftover temporary files: ours removed when their writer is gone ---
sh -c 'exit 0' &
dead=$!
wait $dead
mkdir -p "$TS_TMP/tmps"
# temp names carry the writer's host (letters, digits and '-'; src/base/util.c)
host=$(hostname | tr -c 'A-Za-z0-9\n-' '-' | cut -c1-63)
[ -n "$host" ] || host=host
for f in step-00000003.safetensors.tmp.$host.$dead step-00000003.safetensors.tmp.$host.$$ \
  other.tmp.$host.$dead; do
  : >"$TS_TMP/tmps/$f"
done
: >"$TS_TMP/tl.jsonl.tmp.$host.$dead"
: >"$TS_TMP/tl.jsonl.tmp.elsewhere-$host.$dead" # another machine's writer: alive or not, unknown here
expect_exit 0 "" "$TESSERA_BIN" train $FLAGS --steps 1 --ckpt-dir "$TS_TMP/tmps" --log "$TS_TMP/tl.jsonl"
[ ! -e "$TS_TMP/tmps/step-00000003.safetensors.tmp.$host.$dead" ] && pass "a dead run's checkpoint temp removed" || fail "a dead run's checkpoint temp is still there"
[ ! -e "$TS_TMP/tl.jsonl.tmp.$host.$dead" ] && pass "a dead run's log temp removed" || fail "a dead run's log temp is still there"
[ -e "$TS_TMP/tl.jsonl.tmp.elsewhere-$host.$dead" ] && pass "another host's log temp kept" || fail "another host's log temp was removed"
[ -e "$TS_TMP/tmps/step-00000003.safetensors.tmp.$host.$$" ] && pass "a live writer's temp kept" || fail "a live writer's temp was removed"
[ -e "$TS_TMP/tmps/other.tmp.$host.$dead" ] && pass "a file of another pattern kept" || fail "a file of another pattern was removed"

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

# --- SIGTERM, SIGINT, SIGHUP: the step under way is finished and checkpointed ---
# (exit 128 + the signal's number, one line saying how to resume); --resume
# then ends where the run done straight ends. The signal is sent once the
# log holds a step; a run that finished before it arrived proves nothing and
# is retried with more steps.
SIGFLAGS="--model tiny --dropout 0.1 --warmup 2 --eval-every 64 --data $DATA"
# start_bg ARGS...: tessera ARGS in the background ($bg), output in $TS_OUT, $TS_ERR
start_bg() {
  "$TESSERA_BIN" "$@" >"$TS_OUT" 2>"$TS_ERR" &
  bg=$!
}
# wait_for PATTERN FILE: until FILE matches PATTERN (grep -E), for at most
# 60 s while the background run lives; 1 when it never did
wait_for() {
  _i=0
  while [ $_i -lt 1200 ]; do
    grep -Eq -- "$1" "$2" 2>/dev/null && return 0
    kill -0 "$bg" 2>/dev/null || { grep -Eq -- "$1" "$2" 2>/dev/null; return; }
    sleep 0.05
    _i=$((_i + 1))
  done
  return 1
}
# wait_file PATH: until it exists (or the background run has ended)
wait_file() {
  _i=0
  while [ $_i -lt 1200 ]; do
    [ -e "$1" ] && return 0
    kill -0 "$bg" 2>/dev/null || { [ -e "$1" ]; return; }
    sleep 0.05
    _i=$((_i + 1))
  done
  return 1
}
# the signal mask bit of signal number N in /proc's hex masks
sigbit() { printf '%d' $(( (0x$1 >> ($2 - 1)) & 1 )); }

N=200
sig_rc=0
for attempt in 1 2 3; do
  rm -rf "$TS_TMP/sigck" "$TS_TMP/sig.jsonl"
  start_bg train $SIGFLAGS --steps $N --ckpt-dir "$TS_TMP/sigck" --ckpt-every 50 --log "$TS_TMP/sig.jsonl"
  if ! wait_for '"type":"step"' "$TS_TMP/sig.jsonl"; then
    kill -KILL $bg 2>/dev/null
    wait $bg
    fail "the run to be stopped logged no step: $(head -c 300 "$TS_ERR")"
    break
  fi
  # the handlers are there (Linux): SIGTERM, SIGHUP caught; SIGINT, which sh
  # starts background jobs with ignored, left ignored
  if [ -r /proc/$bg/status ]; then
    cgt=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$bg/status)
    ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$bg/status)
    TS_CHECKS=$((TS_CHECKS + 1))
    if [ -n "$cgt" ] && [ "$(sigbit "$cgt" 15)$(sigbit "$cgt" 1)$(sigbit "$ign" 2)" = 111 ]; then
      pass "SIGTERM and SIGHUP caught, an ignored SIGINT left ignored (SigCgt $cgt, SigIgn $ign)"
    else
      fail "signal dispositions: SigCgt '$cgt', SigIgn '$ign'"
    fi
  fi
  kill -TERM $bg
  wait $bg
  sig_rc=$?
  [ $sig_rc -ne 0 ] && break
  echo "note: the $N-step run finished before SIGTERM reached it; again with more steps"
  N=$((N * 4))
done
TS_CHECKS=$((TS_CHECKS + 1))
msg=$(tail -n 1 "$TS_ERR")
k=$(printf '%s\n' "$msg" | sed -n 's/^tessera: stopped by SIGTERM after step \([0-9]*\) of '$N': .*/\1/p')
if [ $sig_rc -ne 143 ]; then
  fail "SIGTERM: exit $sig_rc, expected 143 (128 + 15); stderr: $(head -c 500 "$TS_ERR")"
elif [ -z "$k" ] || ! printf '%s\n' "$msg" | grep -Eq "checkpoint .*/sigck/step-$(printf %08d "$k")\.safetensors written; to continue, run the same command with --resume \(--ckpt-dir .*/sigck\)$"; then
  fail "SIGTERM: exit 143 but the last line of stderr is '$msg'"
else
  pass "SIGTERM: stopped after step $k of $N, exit 143: $msg"
  grep -q "^tessera: SIGTERM: stopping after this step" "$TS_ERR" &&
    pass "the signal was acknowledged at once" || fail "no acknowledgement of the signal: $(head -c 300 "$TS_ERR")"
  [ -f "$TS_TMP/sigck/step-$(printf %08d "$k").safetensors" ] && pass "checkpoint of step $k written" ||
    fail "no checkpoint of step $k: $(ls "$TS_TMP/sigck")"
  last=$(grep '"type":"step"' "$TS_TMP/sig.jsonl" | tail -n 1 | sed -n 's/.*"step":\([0-9]*\),.*/\1/p')
  [ "$last" = "$k" ] && pass "the log ends at step $k" || fail "the log ends at step '$last', the run at $k"
  grep -q '"type":"final"' "$TS_TMP/sig.jsonl" && fail "a stopped run's log has a final record"
  expect_exit 0 "" "$TESSERA_BIN" train $SIGFLAGS --steps $N --quiet --ckpt-dir "$TS_TMP/sigck" \
    --ckpt-every 50 --resume --log "$TS_TMP/sig.jsonl"
  expect_stdout "resumed from .*step-$(printf %08d "$k")\.safetensors"
  expect_exit 0 "" "$TESSERA_BIN" train $SIGFLAGS --steps $N --quiet --log "$TS_TMP/sig-straight.jsonl"
  expect_exit 0 "" "$TESSERA_BIN" compare "$TS_TMP/sig-straight.jsonl" "$TS_TMP/sig.jsonl"
  expect_stdout "^identical$"
fi

# SIGHUP as SIGTERM (exit 129); without --ckpt-dir the line says there is no
# checkpoint; --quiet: that line alone on stderr
sig_case() { # sig_case SIGNAL STATUS [launcher...]: a 400-step run stopped by SIGNAL
  _sig=$1 _want=$2
  shift 2
  rm -f "$TS_TMP/sig2.jsonl"
  "$@" "$TESSERA_BIN" train $SIGFLAGS --steps 400 --quiet --log "$TS_TMP/sig2.jsonl" >"$TS_OUT" 2>"$TS_ERR" &
  bg=$!
  wait_for '"type":"step"' "$TS_TMP/sig2.jsonl"
  kill -$_sig $bg
  wait $bg
  _rc=$?
  TS_CHECKS=$((TS_CHECKS + 1))
  if [ $_rc -eq $_want ] && [ "$(wc -l <"$TS_ERR")" -eq 1 ] &&
     grep -Eq "^tessera: stopped by SIG$_sig after step [0-9]+ of 400: no --ckpt-dir, so no checkpoint to resume from$" "$TS_ERR"; then
    pass "SIG$_sig: exit $_rc, $(cat "$TS_ERR")"
  elif [ $_rc -eq 0 ]; then
    fail "SIG$_sig: the 400-step run was not stopped (exit 0)"
  else
    fail "SIG$_sig: exit $_rc (expected $_want), stderr: $(head -c 500 "$TS_ERR")"
  fi
}
sig_case HUP 129
# SIGINT is ignored in a background job of sh; env gives it back its default
if env --default-signal=INT true 2>/dev/null; then
  sig_case INT 130 env --default-signal=INT
fi

# A second signal exits at once, in the middle of a step (1 s each here),
# leaving the checkpoints already written whole. (The first signal goes once
# step 1's checkpoint is in place: its record comes before its checkpoint,
# and on a loaded machine the two signals could both fall in between.)
rm -rf "$TS_TMP/sig3"
start_bg train $SIGFLAGS --seq 4096 --batch 4 --steps 3 --eval-batches 1 --ckpt-dir "$TS_TMP/sig3" \
  --ckpt-every 1 --log "$TS_TMP/sig3.jsonl"
TS_CHECKS=$((TS_CHECKS + 1))
if wait_for '"type":"step"' "$TS_TMP/sig3.jsonl" &&
  wait_file "$TS_TMP/sig3/step-00000001.safetensors"; then
  kill -TERM $bg
  wait_for "stopping after this step" "$TS_ERR"
  kill -TERM $bg
  wait $bg
  rc=$?
  if [ $rc -eq 143 ] && grep -q "^tessera: SIGTERM again: exiting at once" "$TS_ERR" &&
     ! grep -q "stopped by" "$TS_ERR"; then
    pass "a second SIGTERM: exit $rc at once"
  else
    fail "a second SIGTERM: exit $rc, stderr: $(head -c 500 "$TS_ERR")"
  fi
  expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$TS_TMP/sig3/step-00000001.safetensors" --data "$DATA" \
    --eval-batches 1
else
  kill -KILL $bg 2>/dev/null
  wait $bg
  fail "the 1-second-step run logged no step: $(head -c 300 "$TS_ERR")"
fi

done_testing
