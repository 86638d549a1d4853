#!/bin/sh
# python/tessera_torch.py: tessera checkpoints in PyTorch and exported to the Hugging
# Face layouts (docs/CHECKPOINTS.md, "PyTorch and Hugging Face").
#
# 1. Tiny models trained 20 steps with checkpoints: GPT tied and untied, LLaMA untied
#    with 2 key/value heads for 4 query heads and LLaMA tied with one, and a GPT on a
#    u16 token file with --vocab 300. For each, tests/interop/check.py checks the
#    module's validation loss against `tessera eval`'s on the same windows (bound 1e-5
#    relative, stated and argued there), and the HF export read back by a model
#    written in HF's conventions against the module (logits within 1e-5 of their
#    scale), with negative controls that must fail the same bound.
#    check.py runs the module's `loss` (on the data the checkpoint records) and
#    `export` commands in its process, to spare a start of torch each.
# 2. The command line's refusals: a bad flag, the other variant's format, a .bin that
#    does not say its format, a compressed model, a damaged file.
#
# Skips (77) when $PYTHON_ORACLE (default /usr/bin/python3) cannot import PyTorch.

python=${PYTHON_ORACLE:-/usr/bin/python3}
if ! "$python" -c 'import torch, numpy' >/dev/null 2>&1; then
  echo "SKIP: $python cannot import torch and numpy (set PYTHON_ORACLE to a Python with PyTorch)"
  exit 77
fi

. "$(dirname "$0")/lib.sh"

tt="$TESSERA_SRCDIR/python/tessera_torch.py"
corpus=$TESSERA_SRCDIR/data/corpus.txt
export OMP_NUM_THREADS=1 # torch too: the machine is shared, the models are tiny

# pyrun ARGS...: the module's CLI (-B keeps bytecode out of the source tree)
pyrun() { "$python" -B "$tt" "$@"; }

# hexloss: the %a value in the loss line of the last expect_exit's stdout
hexloss() { sed -n 's/.*val loss [0-9.]* (\([^)]*\)).*/\1/p' "$TS_OUT"; }

# interop NAME DATA: tessera eval on run NAME's checkpoint, then check.py, which runs
# the module's `loss` and `export` commands and checks what they give
interop() {
  local name=$1 data=$2 ck=$TS_TMP/$1/step-00000020.safetensors
  expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$ck" --data "$data" --eval-batches 4 || return
  TS_CHECKS=$((TS_CHECKS + 1))
  if "$python" -B "$TESSERA_SRCDIR/tests/interop/check.py" "$ck" "$data" "$(hexloss)" \
    "$TS_TMP/$name.hf"; then
    pass "$name: the module's loss is tessera's, the HF export the module's"
  else
    fail "$name: tests/interop/check.py"
  fi
}

# train NAME ARGS...: 20 steps at a rate that moves every weight, checkpoint at the end
train() {
  local name=$1
  shift
  expect_exit 0 "" "$TESSERA_BIN" train --steps 20 --lr 0.01 --warmup 2 --eval-batches 4 \
    --ckpt-dir "$TS_TMP/$name" --ckpt-every 20 --quiet "$@"
}

# --- 1. the module against tessera, the export against the module --------------------
train gpt --model tiny --data "$corpus" && interop gpt "$corpus"
train gpt-untied --model tiny --untied --data "$corpus" && interop gpt-untied "$corpus"
train llama --model llama-tiny --kv-heads 2 --data "$corpus" && interop llama "$corpus"
train llama-tied --model llama-tiny --tied --kv-heads 1 --data "$corpus" &&
  interop llama-tied "$corpus"
write_ids "$TS_TMP/ids.bin" 2 0 20000 # ids 0..299, uint16, no header
train u16 --model tiny --vocab 300 --data "$TS_TMP/ids.bin" --data-format u16 &&
  interop u16 "$TS_TMP/ids.bin"

# --- 2. the CLI's refusals ------------------------------------------------------------
expect_exit 0 "" pyrun --help && expect_stdout "export"
ck=$TS_TMP/llama/step-00000020.safetensors
expect_exit 2 "^tessera_torch: --format gpt2: .* holds a llama model; export it with --format llama$" \
  pyrun export --ckpt "$ck" --format gpt2 --out "$TS_TMP/wrong"
[ -e "$TS_TMP/wrong" ] && fail "a refused export left $TS_TMP/wrong"
expect_exit 2 "^tessera_torch: argument --format: invalid choice: 'gpt3'" \
  pyrun export --ckpt "$ck" --format gpt3 --out "$TS_TMP/wrong"
expect_exit 2 "^tessera_torch: --data .*ids.bin: a \.bin without llm.c's header .*--data-format" \
  pyrun loss --ckpt "$TS_TMP/gpt/step-00000020.safetensors" --data "$TS_TMP/ids.bin"

# tessera's input rules, shared: each bad input to the loss is refused by tessera eval and
# by tessera_torch alike, with the same message and exit status
gck=$TS_TMP/gpt/step-00000020.safetensors
mkfifo "$TS_TMP/fifo"
# both STATUS MESSAGE ARGS...
both() {
  code=$1 msg=$2
  shift 2
  expect_exit "$code" "^tessera( eval)?: $msg" "$TESSERA_BIN" eval --ckpt "$gck" "$@"
  expect_exit "$code" "^tessera_torch: $msg" timeout 60 "$python" -B "$tt" loss --ckpt "$gck" "$@"
}
both 1 "--data /dev/zero: cannot open: not a regular file" --data /dev/zero
both 1 "--data .*fifo: cannot open: not a regular file" --data "$TS_TMP/fifo"
both 1 "--data .*nothere: cannot open: No such file or directory" --data "$TS_TMP/nothere"
both 2 "--val-frac: not with --val-data" --val-data "$corpus" --val-frac 0.2
both 2 "--eval-batches 0: must be >= 1" --eval-batches 0
both 2 "--eval-batches 99999999999: out of range" --eval-batches 99999999999
both 2 "--data: empty value" --data ""

# --whole-split: the module tiles the validation split as tessera eval does, and scores
# the same tokens (the bound of section 1: 1e-5 relative, the same function in other
# float32 operations); a split shorter than one batch, and --eval-batches beside it, are
# refused by both
wsplit() { sed -n 's/.*(\(the whole validation split, tiled: [0-9]* of its [0-9]* tokens scored\)).*/\1/p' "$TS_OUT"; }
if expect_exit 0 "" "$TESSERA_BIN" eval --ckpt "$gck" --whole-split; then
  tw=$(hexloss) tsplit=$(wsplit)
  if expect_exit 0 "" pyrun loss --ckpt "$gck" --whole-split; then
    pw=$(hexloss) psplit=$(wsplit)
    TS_CHECKS=$((TS_CHECKS + 1))
    if [ -n "$tsplit" ] && [ "$tsplit" = "$psplit" ] &&
      "$python" -c 'import sys; t, p = (float.fromhex(x) for x in sys.argv[1:]); sys.exit(abs(t - p) > 1e-5 * abs(p))' "$tw" "$pw"; then
      pass "--whole-split: the module's loss $pw is tessera's $tw, on the same tokens ($tsplit)"
    else
      fail "--whole-split: tessera $tw ($tsplit), the module $pw ($psplit)"
    fi
  fi
fi
head -c 193 "$corpus" >"$TS_TMP/short.txt"
both 2 "--whole-split: the validation split of .*short\.txt has 193 tokens, fewer than one batch of 4 windows of 64 \(257 tokens\)$" \
  --val-data "$TS_TMP/short.txt" --whole-split
both 2 "--eval-batches: not with --whole-split" --whole-split --eval-batches 2

expect_exit 0 "" "$TESSERA_BIN" train --model llama-tiny --layers 2 --compress mapl --rank 8 \
  --compress-stages 2 --steps 2 --ckpt-dir "$TS_TMP/mapl" --ckpt-every 2 --data "$corpus" --quiet
expect_exit 1 "^tessera_torch: .*: a compressed model \(--compress mapl, 2 stages\)" \
  pyrun export --ckpt "$TS_TMP/mapl/step-00000002.safetensors" --out "$TS_TMP/mapl.hf"

# one changed byte in the data section: the data CRC refuses it, nothing is written
cp "$TS_TMP/gpt/step-00000020.safetensors" "$TS_TMP/bad.safetensors"
size=$(wc -c <"$TS_TMP/bad.safetensors")
# the top byte of the last float: 0xff there would be a NaN, which no checkpoint holds
printf '\377' | dd of="$TS_TMP/bad.safetensors" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
expect_exit 1 "^tessera_torch: .*bad.safetensors: the data's CRC-32 is not tessera.data_crc32" \
  pyrun export --ckpt "$TS_TMP/bad.safetensors" --out "$TS_TMP/bad.hf"
[ -e "$TS_TMP/bad.hf" ] && fail "a refused export left $TS_TMP/bad.hf"

done_testing
