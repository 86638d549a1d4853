#!/bin/sh
# tessera sample from the command line (docs/SAMPLING.md), on a GPT and a
# LLaMA checkpoint trained here: the text is the prompt and its continuation;
# --json holds the ids and log-probabilities; one seed gives the same tokens
# on every run and every thread count, and another seed others; greedy is
# deterministic and is top-k 1; --prompt-file is --prompt; bad flags exit 2
# naming the flag, a missing or damaged checkpoint exits 1, and a failure
# prints nothing on stdout; with tests/tessera_emu, --device cuda samples too. That the decoder's logits are
# the training forward's bit for bit is tests/test_sample.c's.
. "$(dirname "$0")/lib.sh"

T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
cd "$TS_TMP" || exit 99

expect_exit 0 "" "$T" sample --help
expect_stdout "^usage: tessera sample --ckpt FILE --prompt TEXT"
expect_stdout "--top-p P .*\(0, 1\]"
expect_stdout "--json .*logprobs .*before top-k and top-p"
expect_stdout "^example:"
expect_exit 0 "" "$T" --help
expect_stdout "^  sample +generate text from a checkpoint"

for model in tiny llama-tiny; do
  expect_exit 0 "" "$T" train --model $model --steps 8 --data "$DATA" --ckpt-dir "ck-$model" --eval-batches 1 \
    --quiet --threads 1
done
CK=ck-tiny/step-00000008.safetensors
CL=ck-llama-tiny/step-00000008.safetensors

# json_ids FILE KEY: the array KEY of the JSON object in FILE, one id a line
json_ids() {
  sed -n "s/.*\"$2\":\[\([^]]*\)\].*/\1/p" "$1" | tr ',' '\n'
}

# --- text: the prompt, then as many bytes as --tokens, then a newline ---------------------
expect_exit 0 "" "$T" sample --ckpt "$CK" --prompt "the model " --tokens 30
expect_stdout "^the model "
TS_CHECKS=$((TS_CHECKS + 1))
n=$(wc -c <"$TS_OUT")
if [ "$n" -eq 41 ]; then pass "text: 10 + 30 bytes and a newline"; else fail "text: $n bytes, expected 41"; fi

for ck in "$CK" "$CL"; do
  name=$(dirname "$ck")
  # --- one seed, one sample; another seed, another ---------------------------------------
  for s in 5 5b 6; do
    expect_exit 0 "" "$T" sample --ckpt "$ck" --prompt "the model " --tokens 40 --json \
      --seed "${s%b}" --temperature 1.2 --top-k 50 --top-p 0.95
    cp "$TS_OUT" "$name-seed$s.json"
  done
  TS_CHECKS=$((TS_CHECKS + 2))
  if cmp -s "$name-seed5.json" "$name-seed5b.json"; then pass "$name: seed 5 twice: the same"
  else fail "$name: seed 5 twice differs"; fi
  # the thread count changes no bit of the logits, so no token
  expect_exit 0 "" "$T" sample --ckpt "$ck" --prompt "the model " --tokens 40 --json \
    --seed 5 --temperature 1.2 --top-k 50 --top-p 0.95 --threads 2
  TS_CHECKS=$((TS_CHECKS + 1))
  if cmp -s "$TS_OUT" "$name-seed5.json"; then pass "$name: --threads 2 gives --threads 1's sample"
  else fail "$name: --threads 2 differs from --threads 1"; fi
  if [ "$(json_ids "$name-seed5.json" ids)" != "$(json_ids "$name-seed6.json" ids)" ]; then
    pass "$name: seeds 5 and 6 draw different tokens"
  else fail "$name: seeds 5 and 6 drew the same tokens"; fi
  TS_CHECKS=$((TS_CHECKS + 1))
  n=$(json_ids "$name-seed5.json" ids | wc -l)
  p=$(json_ids "$name-seed5.json" prompt_ids | paste -sd, -)
  lp=$(json_ids "$name-seed5.json" logprobs | awk '$1 > 0 || $1 !~ /^-?[0-9]/ { bad++ } END { print bad + 0, NR }')
  if [ "$n" -eq 40 ] && [ "$p" = "116,104,101,32,109,111,100,101,108,32" ] && [ "$lp" = "0 40" ]; then
    pass "$name: --json: the prompt's ids, 40 ids, 40 log-probabilities <= 0"
  else fail "$name: --json: $n ids, prompt ids $p, logprobs (bad, count) $lp: $(cat "$name-seed5.json")"; fi

  # --- greedy: deterministic whatever the seed, and top-k 1 -------------------------------
  expect_exit 0 "" "$T" sample --ckpt "$ck" --prompt "the model " --tokens 40 --json \
    --temperature 0 --seed 1
  json_ids "$TS_OUT" ids >"$name-greedy1"
  expect_exit 0 "" "$T" sample --ckpt "$ck" --prompt "the model " --tokens 40 --json \
    --temperature 0 --seed 2 --top-p 0.3
  json_ids "$TS_OUT" ids >"$name-greedy2"
  expect_exit 0 "" "$T" sample --ckpt "$ck" --prompt "the model " --tokens 40 --json \
    --top-k 1 --seed 3
  json_ids "$TS_OUT" ids >"$name-topk1"
  TS_CHECKS=$((TS_CHECKS + 1))
  if cmp -s "$name-greedy1" "$name-greedy2" && cmp -s "$name-greedy1" "$name-topk1"; then
    pass "$name: greedy: the same tokens for every seed, and top-k 1's"
  else fail "$name: greedy differs between seeds or from top-k 1"; fi

  # --- --prompt-file is --prompt ----------------------------------------------------------
  printf 'the model ' >prompt.txt
  expect_exit 0 "" "$T" sample --ckpt "$ck" --prompt-file prompt.txt --tokens 40 --json \
    --seed 5 --temperature 1.2 --top-k 50 --top-p 0.95
  TS_CHECKS=$((TS_CHECKS + 1))
  if cmp -s "$TS_OUT" "$name-seed5.json"; then pass "$name: --prompt-file gives --prompt's sample"
  else fail "$name: --prompt-file differs from --prompt"; fi
done

# --- usage errors: exit 2, one line naming the flag, nothing on stdout ------------------------
# empty_stdout: the last command printed nothing on stdout
empty_stdout() {
  TS_CHECKS=$((TS_CHECKS + 1))
  if [ -s "$TS_OUT" ]; then fail "stdout not empty: $(head -c 200 "$TS_OUT")"; else pass "stdout empty"; fi
}
P="--prompt x"
expect_exit 2 "--ckpt FILE is required" "$T" sample $P
expect_exit 2 "--prompt TEXT or --prompt-file FILE is required" "$T" sample --ckpt "$CK"
expect_exit 2 "--prompt, --prompt-file: give one of them" "$T" sample --ckpt "$CK" $P \
  --prompt-file prompt.txt
expect_exit 2 "--prompt: empty" "$T" sample --ckpt "$CK" --prompt ""
: >empty.txt
expect_exit 2 "--prompt-file: empty" "$T" sample --ckpt "$CK" --prompt-file empty.txt
expect_exit 2 "--tokens 0: must be >= 1" "$T" sample --ckpt "$CK" $P --tokens 0
expect_exit 2 "--tokens -3: must be >= 1" "$T" sample --ckpt "$CK" $P --tokens -3
expect_exit 2 "--tokens x: not an integer" "$T" sample --ckpt "$CK" $P --tokens x
expect_exit 2 "--temperature -1: must be >= 0" "$T" sample --ckpt "$CK" $P --temperature -1
expect_exit 2 "--top-k -1: must be >= 0" "$T" sample --ckpt "$CK" $P --top-k -1
expect_exit 2 "--top-p 0: must be in \(0, 1\]" "$T" sample --ckpt "$CK" $P --top-p 0
expect_exit 2 "--top-p 1.5: must be in \(0, 1\]" "$T" sample --ckpt "$CK" $P --top-p 1.5
expect_exit 2 "--seed -1: not a non-negative integer" "$T" sample --ckpt "$CK" $P --seed -1
expect_exit 2 "--data: not a flag of 'tessera sample'" "$T" sample --ckpt "$CK" $P --data x
expect_exit 2 "--tokens: not a flag of 'tessera train'" "$T" train --tokens 5
expect_exit 2 "--device tpu: must be cpu or cuda" "$T" sample --ckpt "$CK" $P --device tpu
# the context: the tiny models' T is 64
expect_exit 2 "--tokens 60: the prompt's 10 tokens and 60 more exceed the checkpoint's context of 64 positions \(at most 54 more\)" \
  "$T" sample --ckpt "$CL" --prompt "the model " --tokens 60
empty_stdout
expect_exit 0 "" "$T" sample --ckpt "$CL" --prompt "the model " --tokens 54 --json
expect_exit 2 "--prompt: 64 tokens leave no room in the checkpoint's context of 64" \
  "$T" sample --ckpt "$CK" --prompt "$(printf '%064d' 0)" --tokens 1
# a tokenizer whose vocabulary is not the checkpoint's: both named
expect_exit 0 "" "$T" train --model tiny --vocab 300 --steps 2 --data "$DATA" --ckpt-dir ck-v300 \
  --eval-batches 1 --threads 1 --quiet
expect_exit 2 "checkpoint ck-v300/step-00000002.safetensors has a vocabulary of 300 and records no tokenizer, and the default \(bytes, 256 ids\) does not fit it" \
  "$T" sample --ckpt ck-v300/step-00000002.safetensors $P
empty_stdout

# --- runtime errors: exit 1 naming the file, nothing on stdout ------------------------------
expect_exit 1 "nothing.safetensors" "$T" sample --ckpt nothing.safetensors $P
empty_stdout
head -c 3000 "$CK" >cut.safetensors
expect_exit 1 "cut.safetensors" "$T" sample --ckpt cut.safetensors $P
empty_stdout
printf 'not a checkpoint' >junk.safetensors
expect_exit 1 "junk.safetensors" "$T" sample --ckpt junk.safetensors $P
expect_exit 1 "--prompt-file missing.txt: cannot open" "$T" sample --ckpt "$CK" \
  --prompt-file missing.txt
expect_exit 1 "no-such.model" "$T" sample --ckpt "$CK" $P --tokenizer no-such.model
empty_stdout
# stage-boundary compression: refused, naming the mode
expect_exit 0 "" "$T" train --model tiny --compress ssn --rank 16 --compress-stages 2 --steps 1 \
  --data "$DATA" --ckpt-dir ck-ssn --eval-batches 1 --quiet --threads 1
expect_exit 1 "stage-boundary compression \(--compress ssn\) cannot be sampled" \
  "$T" sample --ckpt ck-ssn/step-00000001.safetensors $P

# --- --device cuda on the emulated GPU ------------------------------------------------------
EMU=${TESSERA_BUILDDIR:-$(dirname "$T")}/tests/tessera_emu
if [ -x "$EMU" ]; then
  for ck in "$CK" "$CL"; do
    expect_exit 0 "" "$EMU" sample --device cuda --ckpt "$ck" --prompt "the model " --tokens 20 \
      --json --seed 5
    cp "$TS_OUT" emu1.json
    expect_exit 0 "" "$EMU" sample --device cuda --ckpt "$ck" --prompt "the model " --tokens 20 \
      --json --seed 5
    TS_CHECKS=$((TS_CHECKS + 1))
    n=$(json_ids emu1.json ids | wc -l)
    if [ "$n" -eq 20 ] && cmp -s emu1.json "$TS_OUT"; then
      pass "$(dirname "$ck"): --device cuda (emulated): 20 ids, the same twice"
    else fail "$(dirname "$ck"): --device cuda (emulated): $n ids, or two runs differ"; fi
  done
else
  echo "note: no tests/tessera_emu (a build with --enable-cuda): --device cuda not tried here"
fi

done_testing
