#!/usr/bin/env bash
# SentencePiece from text to a trained model (docs/TOKENIZER.md), with a
# small tokenizer trained here on the bundled corpus: `tessera tokenize`
# writes exactly spm_encode's ids (plus the line breaks' for a byte-fallback
# model), `tessera train --tokenizer` records the model file's digest in its
# checkpoints, --resume and `tokenize --ckpt` check it, and the refusals.
# Skips without SentencePiece in the build or spm_train/spm_encode on PATH.
. "$(dirname "$0")/lib.sh"
T=$TESSERA_BIN
# --- help, in every build ----------------------------------------------------------
expect_exit 0 "" "$T" tokenize --help
expect_stdout "^usage: tessera tokenize --tokenizer MODEL --in TEXT --out TOKENS"
expect_stdout "^  --out TOKENS +token file to write"
expect_stdout "^  --data-format FMT +u16 or u32"
expect_stdout "^example:"
expect_exit 0 "" "$T" --help
expect_stdout "^  tokenize +turn a text file into a token file"
expect_exit 0 "" "$T" train --help
expect_stdout "^  --tokenizer MODEL +the SentencePiece model the token data was made with"
expect_exit 0 "" "$T" dump --help # --out is dump's directory still
expect_stdout "^  --out DIR +directory for the golden files"
expect_exit 2 "^tessera train: --in: not a flag of 'tessera train'" "$T" train --in x.txt
expect_exit 2 "^tessera tokenize: --steps: not a flag of 'tessera tokenize'" "$T" tokenize --steps 3
[ "$TS_FAILS" -eq 0 ] || done_testing # a failure above is not hidden by a skip below

"$T" info | grep -Eq "^  tokenizers +bytes, sentencepiece" ||
  skip "tessera was built without SentencePiece (Debian package libsentencepiece-dev; configure --with-sentencepiece)"
command -v spm_train >/dev/null && command -v spm_encode >/dev/null ||
  skip "spm_train and spm_encode are not on PATH (Debian package: sentencepiece)"
D=$(cd "$TS_TMP" && pwd -P)
CORPUS=$TESSERA_SRCDIR/data/corpus.txt
head -n 3000 "$CORPUS" >"$D/text.txt"
# the documented training flags, with a small vocabulary
spm_() { spm_train --input="$1" --model_prefix="$2" --vocab_size="$3" --character_coverage=1.0 \
  --byte_fallback="$4" --minloglevel=2 >"$D/spm.log" 2>&1 || fail "spm_train $*: $(tail -3 "$D/spm.log")"; }
spm_ "$CORPUS" "$D/m" 400 true
spm_ "$D/text.txt" "$D/other" 400 true # the same size, other pieces
spm_ "$CORPUS" "$D/plain" 300 false

# --- tokenize: spm_encode's ids ----------------------------------------------------
expect_exit 0 "" "$T" tokenize --tokenizer "$D/m.model" --in "$D/text.txt" --out "$D/tokens.bin"
expect_stdout "^tessera tokenize: [0-9]+ tokens .* into .*tokens\.bin, u16, sentencepiece tokenizer, 400 ids"
expect_stdout "^train on it: tessera train --data .*tokens\.bin --data-format u16 --vocab 400 --tokenizer .*m\.model"
ls "$D"/tokens.bin.tmp.* >/dev/null 2>&1 && fail "tokenize left its temporary file"
# stopped (SIGTERM between its 4 MB chunks; a background job ignores SIGINT):
# exit 143, one line, nothing left under --out's name, not even the temporary file
for _ in $(seq 1 40); do cat "$CORPUS"; done >"$D/big.txt"
"$T" tokenize --tokenizer "$D/m.model" --in "$D/big.txt" --out "$D/big.bin" --quiet \
  >"$TS_OUT" 2>"$TS_ERR" &
tk=$!
sleep 1
kill -TERM $tk 2>/dev/null
wait $tk
rc=$?
TS_CHECKS=$((TS_CHECKS + 1))
if [ $rc -eq 0 ]; then
  pass "tokenize finished before SIGTERM reached it (a fast machine): nothing to check"
elif [ $rc -eq 143 ] && [ "$(grep -c . "$TS_ERR")" -eq 1 ] &&
     grep -q "^tessera: tokenize stopped by SIGTERM: --out .*big.bin not written" "$TS_ERR" &&
     [ ! -e "$D/big.bin" ] && ! ls "$D"/big.bin.tmp.* >/dev/null 2>&1; then
  pass "tokenize stopped by SIGTERM: exit 143, no --out, no temporary file"
else
  fail "tokenize after SIGTERM: exit $rc, stderr $(head -c 300 "$TS_ERR"), left: $(ls "$D" | grep big.bin | tr '\n' ' ')"
fi
rm -f "$D/big.txt"
# each line's ids, then the id of the byte piece <0x0A> (its line in m.vocab, from 0)
nl=$(awk -F'\t' '$1 == "<0x0A>" { print NR - 1 }' "$D/m.vocab")
spm_encode --model="$D/m.model" --output_format=id <"$D/text.txt" |
  awk -v nl="$nl" '{ for (i = 1; i <= NF; i++) print $i; print nl }' >"$D/want.txt"
od -An -v -tu2 "$D/tokens.bin" | tr -s ' ' '\n' | sed '/^$/d' >"$D/got.txt"
TS_CHECKS=$((TS_CHECKS + 1))
if [ -n "$nl" ] && [ "$(wc -l <"$D/want.txt")" -gt 30000 ] && cmp -s "$D/want.txt" "$D/got.txt"; then
  pass "tokenize = spm_encode's ids with <0x0A> (id $nl) after each line ($(wc -l <"$D/got.txt") tokens)"
else
  fail "tokenize's ids differ from spm_encode's: $(diff "$D/want.txt" "$D/got.txt" | head -3 | tr '\n' ' ')"
fi
# without byte fallback a model has no line break: spm_encode's ids, run together (u32 asked for)
expect_exit 0 "" "$T" tokenize --tokenizer "$D/plain.model" --in "$D/text.txt" --out "$D/plain.bin" --data-format u32 --quiet
spm_encode --model="$D/plain.model" --output_format=id <"$D/text.txt" | tr ' ' '\n' | sed '/^$/d' >"$D/want32.txt"
od -An -v -tu4 "$D/plain.bin" | tr -s ' ' '\n' | sed '/^$/d' >"$D/got32.txt"
TS_CHECKS=$((TS_CHECKS + 1))
cmp -s "$D/want32.txt" "$D/got32.txt" && pass "tokenize --data-format u32 = spm_encode's ids (no line breaks)" ||
  fail "tokenize u32 differs from spm_encode: $(diff "$D/want32.txt" "$D/got32.txt" | head -3 | tr '\n' ' ')"

# --- refusals ----------------------------------------------------------------------
expect_exit 1 "^tessera: --tokenizer .*missing\.model: cannot open: No such file" \
  "$T" tokenize --tokenizer "$D/missing.model" --in "$D/text.txt" --out "$D/x.bin"
expect_exit 1 "^tessera: --tokenizer .*corpus\.txt: not a SentencePiece model file" \
  "$T" tokenize --tokenizer "$CORPUS" --in "$D/text.txt" --out "$D/x.bin"
expect_exit 1 "^tessera: --in .*nothere\.txt: cannot read" \
  "$T" tokenize --tokenizer "$D/m.model" --in "$D/nothere.txt" --out "$D/x.bin"
expect_exit 2 "^tessera tokenize: --out .*text\.txt: the --in file" \
  "$T" tokenize --tokenizer "$D/m.model" --in "$D/text.txt" --out "$D/text.txt"
expect_exit 2 "^tessera tokenize: --tokenizer MODEL \(or --ckpt FILE\) is required" \
  "$T" tokenize --in "$D/text.txt" --out "$D/x.bin"
expect_exit 2 "^tessera tokenize: --data-format llmc: tessera tokenize writes u16 or u32" \
  "$T" tokenize --tokenizer "$D/m.model" --in "$D/text.txt" --out "$D/x.bin" --data-format llmc
[ -e "$D/x.bin" ] && fail "a refused tokenize wrote its --out"
RUN="train --model tiny --warmup 1 --eval-batches 1 --quiet --data $D/tokens.bin --data-format u16"
expect_exit 2 "^tessera train: --tokenizer .*m\.model has 400 ids, but --vocab is 512" \
  "$T" $RUN --steps 2 --vocab 512 --tokenizer "$D/m.model"
expect_exit 1 "^tessera: --tokenizer .*missing\.model: cannot open" \
  "$T" $RUN --steps 2 --vocab 400 --tokenizer "$D/missing.model"
expect_exit 1 "^tessera: .*corpus\.txt: not a SentencePiece model file" \
  "$T" $RUN --steps 2 --vocab 400 --tokenizer "$CORPUS"

# --- train records the tokenizer ---------------------------------------------------------
expect_exit 0 "" "$T" $RUN --steps 3 --vocab 400 --tokenizer "$D/m.model" --ckpt-dir "$D/ck" --ckpt-every 1 \
  --log "$D/run.jsonl"
# FNV-1a (64-bit) of the model file's bytes, computed apart
fnv() { "${PYTHON_ORACLE:-python3}" -c 'import sys
h = 0xcbf29ce484222325
for b in open(sys.argv[1], "rb").read(): h = ((h ^ b) * 0x100000001b3) % 2**64
print("%016x" % h)' "$1"; }
digest=$(fnv "$D/m.model" 2>/dev/null)
record="{\"kind\":\"sentencepiece\",\"file\":\"$D/m.model\",\"vocab\":400,\"digest\":\"$digest\"}"
TS_CHECKS=$((TS_CHECKS + 1))
if [ ${#digest} -ne 16 ]; then
  fail "no python3 to compute the model's digest"
elif head -1 "$D/run.jsonl" | grep -qF ",\"tokenizer\":$record}" &&
  grep -aqF "$(printf '%s' "$record" | sed 's/"/\\"/g')" "$D/ck/step-00000003.safetensors"; then
  pass "the log and the checkpoint record the tokenizer (digest $digest)"
else
  fail "tokenizer record $record not in the log's config or the checkpoint"
fi
# --tokenizer changes no bit: the same ids without it train the same run
expect_exit 0 "" "$T" $RUN --steps 3 --vocab 400 --log "$D/plain.jsonl" --ckpt-dir "$D/ck-plain"
expect_compare identical "with and without --tokenizer" "$D/run.jsonl" "$D/plain.jsonl"
TS_CHECKS=$((TS_CHECKS + 1))
grep -aq "tessera.tokenizer" "$D/ck-plain/step-00000003.safetensors" &&
  fail "a run without --tokenizer recorded one" || pass "a run without --tokenizer records none"
# its token ids are no bytes: tokenize --ckpt asks for the tokenizer
expect_exit 2 "^tessera tokenize: checkpoint .*ck-plain/step-00000003\.safetensors has a vocabulary of 400 and records no tokenizer, and the default \(bytes, 256 ids\) does not fit it: name its tokenizer with --tokenizer" \
  "$T" tokenize --ckpt "$D/ck-plain/step-00000003.safetensors" --in "$D/text.txt" --out "$D/x.bin"
# --resume: another model file is refused, the same one (or none) accepted
rm "$D/ck/step-00000003.safetensors"
expect_exit 2 "^tessera train: --resume: checkpoint .*step-00000002\.safetensors was written with tokenizer .*m\.model \(digest $digest\); this run's --tokenizer .*other\.model is another" \
  "$T" $RUN --steps 3 --vocab 400 --tokenizer "$D/other.model" --ckpt-dir "$D/ck" --resume
expect_exit 0 "" "$T" $RUN --steps 3 --vocab 400 --ckpt-dir "$D/ck" --resume
TS_CHECKS=$((TS_CHECKS + 1))
grep -aqF "$digest" "$D/ck/step-00000003.safetensors" &&
  pass "a resumed run without --tokenizer keeps the checkpoint's record" ||
  fail "the resumed run's checkpoint lost the tokenizer record"

# --- tokenize --ckpt: the checkpoint's tokenizer ------------------------------------------
expect_exit 0 "" "$T" tokenize --ckpt "$D/ck/step-00000003.safetensors" --in "$D/text.txt" --out "$D/again.bin" --quiet
TS_CHECKS=$((TS_CHECKS + 1))
cmp -s "$D/tokens.bin" "$D/again.bin" && pass "tokenize --ckpt uses the recorded tokenizer" ||
  fail "tokenize --ckpt wrote other tokens"
expect_exit 2 "^tessera tokenize: --tokenizer .*other\.model: not the tokenizer checkpoint .*step-00000003\.safetensors was trained with \(.*m\.model, digest $digest" \
  "$T" tokenize --ckpt "$D/ck/step-00000003.safetensors" --tokenizer "$D/other.model" --in "$D/text.txt" --out "$D/x.bin"
# tessera sample: the recorded tokenizer encodes the prompt (spm_encode's ids) and decodes
CK3=$D/ck/step-00000003.safetensors
expect_exit 0 "" "$T" sample --ckpt "$CK3" --prompt "the salt of Orla" --tokens 4 --json
want=$(printf 'the salt of Orla\n' | spm_encode --model="$D/m.model" --output_format=id | tr ' ' ',')
expect_stdout "\"tokenizer\":\"sentencepiece\""
expect_stdout "\"prompt_ids\":\[$want\]"
expect_exit 0 "" "$T" sample --ckpt "$CK3" --prompt "the salt of Orla" --tokens 4
expect_stdout "^the salt of Orla"
expect_exit 2 "^tessera sample: --tokenizer .*other\.model: not the tokenizer checkpoint .*step-00000003\.safetensors was trained with" \
  "$T" sample --ckpt "$CK3" --prompt "the salt" --tokens 2 --tokenizer "$D/other.model"
cp "$D/m.model" "$D/copy.model"
expect_exit 0 "" "$T" tokenize --ckpt "$D/ck/step-00000003.safetensors" --tokenizer "$D/copy.model" --in "$D/text.txt" --out "$D/x.bin" --quiet
mv "$D/m.model" "$D/moved.model"
expect_exit 1 "^tessera: checkpoint .* was trained with tokenizer .*m\.model, which cannot be opened .*: name a copy of it with --tokenizer" \
  "$T" tokenize --ckpt "$D/ck/step-00000003.safetensors" --in "$D/text.txt" --out "$D/y.bin"
expect_exit 1 "^tessera: checkpoint .* was trained with tokenizer .*m\.model, which cannot be opened" \
  "$T" sample --ckpt "$CK3" --prompt "the salt" --tokens 2
expect_exit 0 "" "$T" sample --ckpt "$CK3" --prompt "the salt" --tokens 2 --tokenizer "$D/moved.model"
# --init-from and eval check what the checkpoint was trained on: another tokenizer, or text
# for a model of token ids (and the other way round), is refused by name
INIT="train --model tiny --warmup 1 --eval-batches 1 --quiet --steps 1 --vocab 400"
expect_exit 2 "^tessera train: --init-from .*step-00000003\.safetensors was trained with tokenizer .*; this run's --tokenizer .*other\.model is another" \
  "$T" $INIT --data "$D/tokens.bin" --data-format u16 --tokenizer "$D/other.model" \
  --init-from "$D/ck/step-00000003.safetensors"
expect_exit 2 "^tessera train: --init-from .*step-00000003\.safetensors was trained on token ids, but this run's --data .*corpus\.txt is text \(bytes\)" \
  "$T" $INIT --data "$CORPUS" --init-from "$D/ck/step-00000003.safetensors"
expect_exit 0 "" "$T" $INIT --data "$D/tokens.bin" --data-format u16 \
  --init-from "$D/ck/step-00000003.safetensors"
expect_exit 2 "^tessera eval: --data .*corpus\.txt is text \(bytes\), but checkpoint .*step-00000003\.safetensors was trained on token ids \(u16\)" \
  "$T" eval --ckpt "$D/ck/step-00000003.safetensors" --data "$CORPUS"
# another model in the recorded file's place: the file is blamed, not a flag never given
cp "$D/other.model" "$D/m.model"
expect_exit 1 "^tessera: checkpoint .* was trained with tokenizer .*m\.model \(digest [0-9a-f]*\), but that file has changed since .*: name a copy of the original with --tokenizer" \
  "$T" sample --ckpt "$CK3" --prompt "the salt" --tokens 2
done_testing
