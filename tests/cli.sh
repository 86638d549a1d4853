#!/bin/sh
# The command line: help, one-line usage errors (exit 2) before any work,
# runtime errors (exit 1), info, compare, and a short real run.
. "$(dirname "$0")/lib.sh"

T=$TESSERA_BIN

# --- help and version ------------------------------------------------------------
expect_exit 0 "" "$T" --help
expect_stdout "^usage: tessera <command>"
expect_exit 0 "" "$T" -h
expect_stdout "^usage: tessera"
expect_exit 0 "" "$T" --version
expect_stdout "^tessera [0-9]+\.[0-9]+"
for cmd in train eval dump compare plot info plan; do
  expect_exit 0 "" "$T" "$cmd" --help
  expect_stdout "^usage: tessera $cmd"
  expect_stdout "^example:"
  expect_exit 0 "" "$T" "$cmd" -h
  expect_stdout "^usage: tessera $cmd"
done
expect_exit 0 "" "$T" train --help
expect_stdout "--steps N .*default 100"
expect_stdout "--vocab V .*default 256"
expect_stdout "--data-format FMT .*u16.*u32.*llmc"
expect_stdout "--val-data PATH"
expect_stdout "--fast"
expect_stdout "exact"
expect_stdout "^SIGTERM, SIGINT or SIGHUP stops the run after the step under way"
expect_stdout "exits 128 \+ the signal's number \(143,"
expect_exit 2 "" "$T" # no command: usage on stderr

# --- usage errors: exit 2, one line naming the flag, before any work -------------
# (--data points at a missing file: reaching the run would give exit 1 instead)
NODATA="--data $TS_TMP/never-read.txt"
expect_exit 2 "unknown command 'fly'" "$T" fly
expect_exit 2 "--frobnicate: unknown flag" "$T" train --frobnicate $NODATA
expect_exit 2 "--steps: missing value" "$T" train $NODATA --steps
expect_exit 2 "--log: missing value \(FILE\) before --quiet; a value that begins with -- is written --log=VALUE" \
  "$T" train $NODATA --log --quiet
expect_exit 2 "--steps abc: not an integer" "$T" train $NODATA --steps abc
expect_exit 2 "--steps 12x: not an integer" "$T" train $NODATA --steps 12x
expect_exit 2 "--seq 1.5: not an integer" "$T" train $NODATA --seq 1.5
expect_exit 2 "--steps 99999999999: out of range" "$T" train $NODATA --steps 99999999999
expect_exit 2 "--lr fast: not a number" "$T" train $NODATA --lr fast
expect_exit 2 "--lr nan" "$T" train $NODATA --lr nan
expect_exit 2 "--seed -1" "$T" train $NODATA --seed -1
expect_exit 2 "--steps -5: must be >= 1" "$T" train $NODATA --steps -5
expect_exit 2 "--steps 0" "$T" train $NODATA --steps=0
expect_exit 2 "--dropout 1.5: must be in \[0, 1\)" "$T" train $NODATA --dropout 1.5
expect_exit 2 "--seq 100: must be a multiple of the tile \(8\)" "$T" train $NODATA --seq 100
expect_exit 2 "--heads 3: must divide --d \(64\)" "$T" train $NODATA --heads 3
expect_exit 2 "--tile 24: must be a power of two" "$T" train $NODATA --tile 24
expect_exit 2 "--batch 0" "$T" train $NODATA --batch 0
expect_exit 2 "--val-frac 1" "$T" train $NODATA --val-frac 1
expect_exit 2 "--model huge: unknown preset" "$T" train $NODATA --model huge
expect_exit 2 "--dp 1 --sp 2 --pp 1: needs dp x sp x pp = 2 ranks but the MPI world size is 1" \
  "$T" train $NODATA --sp 2
expect_exit 2 "--dp 4: needs 4 ranks but the MPI world size is 1" "$T" train $NODATA --dp 4
expect_exit 2 "--dp 1 --sp 1 --pp 2: needs dp x sp x pp = 2 ranks" "$T" train $NODATA --pp 2
expect_exit 2 "--compress mapl: needs --rank R" "$T" train $NODATA --compress mapl --pp 2
expect_exit 2 "--rank 65: larger than the model width d = 64" \
  "$T" train $NODATA --compress ssn --rank 65 --compress-stages 2
expect_exit 2 "--rank x: " "$T" train $NODATA --compress ssn --rank x
expect_exit 2 "--vq-sync-codes 0: must be >= 1" "$T" train $NODATA --vq-sync-codes 0
expect_exit 2 "--optimizer sgd: must be adamw, muon or muon-pe" "$T" train $NODATA --optimizer sgd
expect_exit 2 "--data-format u8: must be bytes, u16, u32 or llmc" "$T" train $NODATA --data-format u8
expect_exit 2 "--vocab 1: must be >= 2" "$T" train $NODATA --vocab 1
expect_exit 2 "--vocab 100: --data-format bytes has token ids 0..255" "$T" train $NODATA --vocab 100 --data-format bytes
expect_exit 2 "^tessera train: --val-frac: not with --val-data" "$T" train $NODATA --val-data "$TS_TMP/v.bin" --val-frac 0.2
expect_exit 2 "--vocab: not a flag of 'tessera eval'" "$T" eval $NODATA --ckpt x --vocab 300
expect_exit 2 "--muon-lr 0.1: only with --optimizer muon or muon-pe" "$T" train $NODATA --muon-lr 0.1
# a 0 that the configuration would read as "not given" is refused, not made the default
for c in "--muon-lr 0:--muon-lr 0" "--muon-lr 0:--optimizer muon --muon-lr 0" \
  "--vq-commit 0:--vq-commit 0" "--proj-lr 0.0:--proj-lr 0.0" \
  "--vq-gamma 0:--compress mapl-vq --rank 16 --compress-stages 2 --vq-gamma 0"; do
  # shellcheck disable=SC2086  # the flags are several words
  expect_exit 2 "^tessera train: ${c%%:*}: must be above 0 \(leave the flag out for its default\)" \
    "$T" train $NODATA ${c#*:}
done
# and a flag the model has no use for is refused on every variant
expect_exit 2 "^tessera train: --rope-theta: only with a LLaMA model" "$T" train $NODATA --rope-theta 500
expect_exit 2 "^tessera train: --compress-stages: only with --compress" "$T" train $NODATA --compress-stages 2
expect_exit 2 "--sp-mode zigzag" "$T" train $NODATA --sp-mode zigzag
expect_exit 2 "--device cuda: " "$T" train $NODATA --device cuda
expect_exit 2 "--device tpu: must be cpu or cuda" "$T" train $NODATA --device tpu
expect_exit 2 "--precision fp16: must be fp32 or bf16" "$T" train $NODATA --precision fp16
expect_exit 2 "--precision bf16: needs --device cuda" "$T" train $NODATA --precision bf16
expect_exit 2 "--fast: takes no value" "$T" train $NODATA --fast=yes
expect_exit 2 "^tessera train: --threads 100000: must be in \[0, 1024\]" "$T" train $NODATA --threads 100000
expect_exit 2 "^tessera eval: --threads 100000: must be in" "$T" eval $NODATA --ckpt x --threads 100000
expect_exit 2 "--ckpt-every 5: needs --ckpt-dir" "$T" train $NODATA --ckpt-every 5
expect_exit 2 "--resume: needs --ckpt-dir" "$T" train $NODATA --resume
expect_exit 2 "unexpected argument 'extra'" "$T" train $NODATA extra
expect_exit 2 "--ckpt: not a flag of 'tessera train'" "$T" train $NODATA --ckpt x
expect_exit 2 "--ckpt FILE is required" "$T" eval $NODATA
expect_exit 2 "--out DIR is required" "$T" dump $NODATA
expect_exit 2 "--traj-steps -1" "$T" dump $NODATA --out "$TS_TMP/d" --traj-steps -1
expect_exit 2 "^tessera dump: --fused-ce: a dump holds the logits" "$T" dump $NODATA --out "$TS_TMP/d" --fused-ce
expect_exit 2 "unexpected argument" "$T" info extra
[ -e "$TS_TMP/d" ] && fail "a refused dump created its output directory"

# --- runtime errors: exit 1, naming the file --------------------------------------
expect_exit 1 "missing-corpus\.txt" "$T" train --steps 1 --quiet --data "$TS_TMP/missing-corpus.txt"
# a model that cannot fit is refused before anything is allocated (any size)
expect_exit 1 "^tessera: the model's weight matrices alone need .*--layers 10000000" "$T" train --steps 1 --quiet --layers 10000000 --data "$TS_TMP/missing-corpus.txt"
expect_exit 1 "^tessera: the model's weight matrices alone need .*--layers 10000000" "$T" dump --layers 10000000 --data "$TS_TMP/missing-corpus.txt" --out "$TS_TMP/nodump"
[ -e "$TS_TMP/nodump" ] && fail "a refused dump created its output directory"

# --- outputs never overwrite inputs (exit 2, before any work), writes are checked (exit 1)
make_corpus "$TS_TMP/in.txt" 32768
cp "$TS_TMP/in.txt" "$TS_TMP/in.orig"
ln -f "$TS_TMP/in.txt" "$TS_TMP/in-link.txt"
expect_exit 2 "^tessera train: --log .*in\.txt: the --data file" "$T" train --data "$TS_TMP/in.txt" --log "$TS_TMP/in.txt"
expect_exit 2 "^tessera train: --log .*: the --data file" "$T" train --data "$TS_TMP/in.txt" --log "$TS_TMP/./in.txt"
expect_exit 2 "^tessera train: --log .*in-link\.txt: the --data file" "$T" train --data "$TS_TMP/in.txt" --log "$TS_TMP/in-link.txt"
expect_exit 2 "^tessera train: --log .*: a checkpoint of --ckpt-dir" "$T" train --data "$TS_TMP/in.txt" --ckpt-dir "$TS_TMP/ck" --log "$TS_TMP/ck/step-00000001.safetensors"
expect_exit 2 "^tessera train: --log .*: the --ckpt-dir directory" "$T" train --data "$TS_TMP/in.txt" --ckpt-dir "$TS_TMP/ck" --log "$TS_TMP/ck"
expect_exit 2 "^tessera train: --data .*: a checkpoint of --ckpt-dir" "$T" train --data "$TS_TMP/ck/step-00000002.safetensors" --ckpt-dir "$TS_TMP/ck/"
expect_exit 2 "^tessera train: --log .*in\.txt: the --val-data file" "$T" train --data "$TS_TMP/in.orig" --val-data "$TS_TMP/in.txt" --log "$TS_TMP/in.txt"
mkdir -p "$TS_TMP/dd" && cp "$TS_TMP/in.txt" "$TS_TMP/dd/config.json"
expect_exit 2 "^tessera dump: --data .*config\.json: a file tessera dump writes into --out" "$T" dump --data "$TS_TMP/dd/config.json" --out "$TS_TMP/dd"
cmp -s "$TS_TMP/in.txt" "$TS_TMP/in.orig" && pass "the corpus is untouched" || fail "the corpus was changed"
[ -e "$TS_TMP/ck" ] && fail "a refused run created its checkpoint directory"
# a log that cannot be written: at the first line, or when the disk fills mid-run
if [ -w /dev/full ]; then
  expect_exit 1 "^tessera: cannot write log /dev/full: " "$T" train --steps 2 --quiet --data "$TS_TMP/in.txt" --log /dev/full
fi
# (a pipe whose reader goes away after 3000 bytes fails a later write, as a
# disk that fills mid-run does; SIGPIPE ignored, so that the write reports it)
mkfifo "$TS_TMP/pipe.jsonl"
head -c 3000 "$TS_TMP/pipe.jsonl" >/dev/null &
reader=$!
( trap '' PIPE; exec "$T" train --steps 8 --quiet --data "$TS_TMP/in.txt" --log "$TS_TMP/pipe.jsonl" ) \
  >"$TS_OUT" 2>"$TS_ERR"
rc=$?
kill $reader 2>/dev/null # still waiting only if the run never opened the log
wait
[ $rc -eq 1 ] && grep -q "^tessera: cannot write log .*pipe\.jsonl: " "$TS_ERR" &&
  pass "a log write failing mid-run ends the run (exit 1)" ||
  fail "a log write failing mid-run: exit $rc, stderr $(head -c 300 "$TS_ERR")"

# --- info ------------------------------------------------------------------------
expect_exit 0 "" "$T" info
expect_stdout "^  products +ts_mm on "
expect_stdout "^  BLAS +(OpenBLAS|none: built --without-blas)"
expect_stdout "^  MPI +(MPICH|none: built --without-mpi)"
expect_stdout "cuda"
expect_stdout "tile"
# idle OpenMP threads: passive with a short spin where the user set neither
# (src/run/omp_env.c), the user's own settings kept as given
expect_exit 0 "" env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$T" info
expect_stdout "OMP_WAIT_POLICY=passive, GOMP_SPINCOUNT=3000$"
expect_exit 0 "" env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=77 "$T" info
expect_stdout "OMP_WAIT_POLICY=passive, GOMP_SPINCOUNT=77$"
expect_exit 0 "" env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active "$T" info
expect_stdout "OMP_WAIT_POLICY=active, GOMP_SPINCOUNT=unset$"

# --- compare on hand-written logs -------------------------------------------------
cat >"$TS_TMP/a.jsonl" <<'LOG'
{"type":"config","version":"0.1.0"}
{"type":"step","step":1,"loss":5.5,"loss_hex":"0x1.6p+2","tokens_per_s":100}
{"type":"step","step":2,"loss":5.25,"loss_hex":"0x1.5p+2","tokens_per_s":100}
{"type":"final","step":2,"param_hash":"00112233445566ff"}
LOG
sed 's/"tokens_per_s":100/"tokens_per_s":250/' "$TS_TMP/a.jsonl" >"$TS_TMP/same.jsonl"
sed 's/0x1.5p+2/0x1.5000000000001p+2/' "$TS_TMP/a.jsonl" >"$TS_TMP/diff.jsonl"
printf '{"type":"step","step":1,"loss":\n' >"$TS_TMP/bad.jsonl"
expect_exit 0 "" "$T" compare "$TS_TMP/a.jsonl" "$TS_TMP/same.jsonl"
expect_stdout "^identical$"
expect_exit 1 "" "$T" compare "$TS_TMP/a.jsonl" "$TS_TMP/diff.jsonl"
expect_stdout "^first divergence: step 2, loss: "
expect_exit 0 "" "$T" compare "$TS_TMP/a.jsonl" "$TS_TMP/diff.jsonl" --rtol 1e-6
expect_exit 2 "bad\.jsonl:1:" "$T" compare "$TS_TMP/a.jsonl" "$TS_TMP/bad.jsonl"
expect_exit 2 "nope\.jsonl" "$T" compare "$TS_TMP/a.jsonl" "$TS_TMP/nope.jsonl"
# a repeated key or a damaged hex field is a broken log (2), not a divergence (1)
sed 's/"loss_hex":"0x1.5p+2"/"loss_hex":"0x1.5p+2","loss_hex":"0x1.6p+2"/' "$TS_TMP/a.jsonl" >"$TS_TMP/dup.jsonl"
sed 's/0x1.5p+2/0x1.5q+2/' "$TS_TMP/a.jsonl" >"$TS_TMP/hex.jsonl"
expect_exit 2 "dup\.jsonl:3: key \"loss_hex\" appears twice" "$T" compare "$TS_TMP/a.jsonl" "$TS_TMP/dup.jsonl"
expect_exit 2 "hex\.jsonl:3: \"loss_hex\" is not a C hex float" "$T" compare "$TS_TMP/a.jsonl" "$TS_TMP/hex.jsonl"
# a record of 200000 members (a damaged or crafted line): its repeated keys
# are looked for by sorting, in a fraction of a second (pairwise: minutes)
awk 'BEGIN { printf "{\"type\":\"step\",\"step\":1,\"loss_hex\":\"0x1p+0\"";
  for (i = 0; i < 200000; i++) printf ",\"k%d\":1", i; print "}" }' >"$TS_TMP/wide.jsonl"
expect_exit 0 "" timeout 30 "$T" compare "$TS_TMP/wide.jsonl" "$TS_TMP/wide.jsonl"
expect_stdout "^identical$"
sed -i '1s/}$/,"k7":0}/' "$TS_TMP/wide.jsonl"
expect_exit 2 "wide\.jsonl:1: key \"k7\" appears twice" timeout 30 "$T" compare "$TS_TMP/wide.jsonl" "$TS_TMP/a.jsonl"
expect_exit 2 "--rtol -1" "$T" compare "$TS_TMP/a.jsonl" "$TS_TMP/a.jsonl" --rtol -1
expect_exit 2 "needs two run logs" "$T" compare "$TS_TMP/a.jsonl"

# --- a short real run, twice: the logs must be identical ---------------------------
make_corpus "$TS_TMP/corpus.txt" 32768
RUN="train --model tiny --steps 3 --warmup 1 --quiet --data $TS_TMP/corpus.txt"
if expect_exit 0 "" "$T" $RUN --log "$TS_TMP/r1.jsonl" &&
   expect_exit 0 "" "$T" $RUN --log "$TS_TMP/r2.jsonl"; then
  steps=$(grep -c '"type": *"step"' "$TS_TMP/r1.jsonl" 2>/dev/null)
  [ "${steps:-0}" -eq 3 ] || fail "r1.jsonl should have 3 step records, has ${steps:-none}"
  head -n 1 "$TS_TMP/r1.jsonl" | grep -q '"type": *"config"' ||
    fail "r1.jsonl should start with the config record"
  expect_exit 0 "" "$T" compare "$TS_TMP/r1.jsonl" "$TS_TMP/r2.jsonl"
  expect_stdout "^identical$"
  # another seed gives another run, and compare says where
  if expect_exit 0 "" "$T" $RUN --seed 7 --log "$TS_TMP/r3.jsonl"; then
    expect_exit 1 "" "$T" compare "$TS_TMP/r1.jsonl" "$TS_TMP/r3.jsonl"
    expect_stdout "^first divergence: step 1, "
  fi
fi

# --- token files (docs/DATA.md) ---------------------------------------------------
write_ids "$TS_TMP/ids16.bin" 2 0 2000
write_ids "$TS_TMP/ids32.bin" 4 0 2000
write_ids "$TS_TMP/idsllmc.bin" 2 1 2000
write_ids "$TS_TMP/val16.bin" 2 0 600
sizes=$(wc -c <"$TS_TMP/ids16.bin")/$(wc -c <"$TS_TMP/ids32.bin")/$(wc -c <"$TS_TMP/idsllmc.bin")
TS_CHECKS=$((TS_CHECKS + 1))
[ "$sizes" = "4000/8000/5024" ] && pass "token files written ($sizes bytes)" ||
  fail "token files have sizes $sizes, expected 4000/8000/5024"
TOK="train --model tiny --steps 2 --warmup 1 --eval-batches 1 --quiet"
# a raw .bin does not say how wide its ids are: refused asking for the flag
# (a usage error, exit 2: the fix is --data-format), before any work
expect_exit 2 "^tessera train: --data .*ids16\.bin: .*--data-format u16, u32" "$T" $TOK --data "$TS_TMP/ids16.bin" --vocab 300
expect_exit 2 "^tessera train: --val-data .*val16\.bin: .*--data-format" "$T" $TOK --data "$TS_TMP/idsllmc.bin" --val-data "$TS_TMP/val16.bin" --vocab 300
expect_exit 2 "^tessera dump: --data .*ids16\.bin: .*--data-format" "$T" dump --data "$TS_TMP/ids16.bin" --vocab 300 --out "$TS_TMP/tokdump"
[ -e "$TS_TMP/tokdump" ] && fail "a refused dump created its output directory"
# an id the vocabulary cannot hold: the file, the id and its byte offset (exit 1)
expect_exit 1 "^tessera: .*ids16\.bin: token id 259 at byte offset 74 is out of range for --vocab 256" \
  "$T" $TOK --data "$TS_TMP/ids16.bin" --data-format u16
expect_exit 1 "^tessera: .*idsllmc\.bin: token id 259 at byte offset 1098 is out of range for --vocab 256" \
  "$T" $TOK --data "$TS_TMP/idsllmc.bin"
expect_exit 1 "^tessera: .*ids32\.bin: token id 259 at byte offset 148 " "$T" $TOK --data "$TS_TMP/ids32.bin" --data-format u32
expect_exit 1 "^tessera: .*ids32\.bin: not an llm.c token file: it does not start with the magic 20240520" \
  "$T" $TOK --data "$TS_TMP/ids32.bin" --data-format llmc --vocab 300
# text cannot be read with fewer than 256 ids (the format was detected: exit 2)
expect_exit 2 "^tessera train: --vocab 100: .*in\.orig is read as bytes" "$T" $TOK --data "$TS_TMP/in.orig" --vocab 100
# the same ids in the three formats train the same run, bit for bit
if expect_exit 0 "" "$T" $TOK --data "$TS_TMP/ids16.bin" --data-format u16 --vocab 300 --log "$TS_TMP/t16.jsonl" &&
   expect_exit 0 "" "$T" $TOK --data "$TS_TMP/ids32.bin" --data-format u32 --vocab 300 --log "$TS_TMP/t32.jsonl" &&
   expect_exit 0 "" "$T" $TOK --data "$TS_TMP/idsllmc.bin" --vocab 300 --log "$TS_TMP/tllmc.jsonl"; then
  expect_exit 0 "" "$T" compare "$TS_TMP/t16.jsonl" "$TS_TMP/t32.jsonl"
  expect_stdout "^identical$"
  expect_exit 0 "" "$T" compare "$TS_TMP/t16.jsonl" "$TS_TMP/tllmc.jsonl"
  expect_stdout "^identical$"
  TS_CHECKS=$((TS_CHECKS + 1))
  grep -q '"vocab":300,' "$TS_TMP/t16.jsonl" && grep -q '"data_format":"u16"' "$TS_TMP/t16.jsonl" &&
    grep -q '"data_format":"llmc"' "$TS_TMP/tllmc.jsonl" &&
    pass "the config records the vocabulary and the format read (llmc detected)" ||
    fail "config records: $(head -c 400 "$TS_TMP/tllmc.jsonl")"
fi
# a validation file: recorded, and another validation loss than the tail's
if expect_exit 0 "" "$T" $TOK --data "$TS_TMP/ids16.bin" --val-data "$TS_TMP/val16.bin" --data-format u16 --vocab 300 --log "$TS_TMP/tval.jsonl"; then
  TS_CHECKS=$((TS_CHECKS + 1))
  grep -q '"val_path":"[^"]*val16\.bin"' "$TS_TMP/tval.jsonl" && pass "the config records --val-data" ||
    fail "no val_path in $(head -c 400 "$TS_TMP/tval.jsonl")"
  expect_exit 1 "" "$T" compare "$TS_TMP/t16.jsonl" "$TS_TMP/tval.jsonl"
fi
# a checkpoint of a token-file run evaluates (a raw .bin read as its ids), and
# resuming it in another format is refused
if expect_exit 0 "" "$T" $TOK --data "$TS_TMP/ids16.bin" --data-format u16 --vocab 300 --ckpt-dir "$TS_TMP/tokck"; then
  expect_exit 0 "" "$T" eval --ckpt "$TS_TMP/tokck/step-00000002.safetensors" --data "$TS_TMP/ids16.bin" --eval-batches 1
  expect_stdout "^checkpoint .*step-00000002.safetensors \(step 2\): val loss [0-9.]+ "
  expect_exit 0 "" "$T" eval --ckpt "$TS_TMP/tokck/step-00000002.safetensors" --val-data "$TS_TMP/val16.bin" --eval-batches 1
  expect_exit 1 "ids16\.bin: token id [0-9]+ at byte offset 0 is out of range for --vocab 300" \
    "$T" eval --ckpt "$TS_TMP/tokck/step-00000002.safetensors" --data "$TS_TMP/ids16.bin" --data-format u32
  expect_exit 2 "^tessera train: --resume: checkpoint .*step-00000002.safetensors was written reading --data-format u16, this run reads u32" \
    "$T" $TOK --data "$TS_TMP/ids32.bin" --data-format u32 --vocab 300 --ckpt-dir "$TS_TMP/tokck" --resume
  # the same ids stored as uint32 in a raw .bin: read as the checkpoint's uint16
  # they would be ids every second one 0, so eval refuses (told the width, it reads them)
  expect_exit 2 "^tessera eval: --data .*ids32\.bin: a \.bin without a header, read as checkpoint .*'s uint16 ids, looks like uint32 ids" \
    "$T" eval --ckpt "$TS_TMP/tokck/step-00000002.safetensors" --data "$TS_TMP/ids32.bin" --eval-batches 1
  expect_exit 0 "" "$T" eval --ckpt "$TS_TMP/tokck/step-00000002.safetensors" --data "$TS_TMP/ids32.bin" \
    --data-format u32 --eval-batches 1
  # without --data, eval reads the checkpoint's own data in its recorded
  # format (a raw .bin says nothing itself): the same loss as when told
  expect_exit 0 "" "$T" eval --ckpt "$TS_TMP/tokck/step-00000002.safetensors" --data "$TS_TMP/ids16.bin" \
    --data-format u16 --eval-batches 1
  told=$(sed -n 's/.*val loss [0-9.]* (\([^)]*\)).*/\1/p' "$TS_OUT")
  expect_exit 0 "" "$T" eval --ckpt "$TS_TMP/tokck/step-00000002.safetensors" --eval-batches 1
  TS_CHECKS=$((TS_CHECKS + 1))
  got=$(sed -n 's/.*val loss [0-9.]* (\([^)]*\)).*/\1/p' "$TS_OUT")
  [ -n "$told" ] && [ "$got" = "$told" ] && pass "eval without --data: the checkpoint's data ($got)" ||
    fail "eval without --data: '$got', with the checkpoint's --data '$told'"
fi

# --whole-split: the validation split tiled from its start in windows of --seq
# (tiny: batches of 4 x 64). A split of one 64-byte block X eight times over
# (and X's first byte) tiles into 2 batches whose every window is X, so its
# loss is, bit for bit, the loss of a split holding X alone (one window); the
# same split's windows drawn from the seed start anywhere, so theirs is not.
X='the quick brown fox jumps over the lazy dog; pack my box with fi'
printf '%s%s' "$X" t >"$TS_TMP/x1.txt"
printf '%s%s%s%s%s%s%s%s%s' "$X" "$X" "$X" "$X" "$X" "$X" "$X" "$X" t >"$TS_TMP/x8.txt"
printf '%s%s%s%s' "$X" "$X" "$X" t >"$TS_TMP/x3.txt"
hexloss() { sed -n 's/.*val loss [0-9.]* (\([^)]*\)).*/\1/p' "$TS_OUT"; }
if expect_exit 0 "" "$T" train --model tiny --steps 10 --warmup 2 --eval-batches 1 --quiet --ckpt-dir "$TS_TMP/wsck" --ckpt-every 10; then
  WS="$T eval --ckpt $TS_TMP/wsck/step-00000010.safetensors"
  expect_exit 0 "" $WS --val-data "$TS_TMP/x1.txt" --eval-batches 1
  one=$(hexloss)
  expect_exit 0 "" $WS --val-data "$TS_TMP/x8.txt" --whole-split
  expect_stdout "over 2 batches of 4x64 \(the whole validation split, tiled: 512 of its 513 tokens scored\)"
  tiled=$(hexloss)
  expect_exit 0 "" $WS --val-data "$TS_TMP/x8.txt" --eval-batches 2
  drawn=$(hexloss)
  TS_CHECKS=$((TS_CHECKS + 1))
  [ -n "$one" ] && [ "$tiled" = "$one" ] && [ "$drawn" != "$one" ] &&
    pass "--whole-split scores the aligned windows ($tiled; drawn windows $drawn)" ||
    fail "--whole-split: $tiled, the one window $one, drawn windows $drawn"
  expect_exit 2 "^tessera eval: --whole-split: the validation split of .*x3\.txt has 193 tokens, fewer than one batch of 4 windows of 64 \(257 tokens\)$" \
    $WS --val-data "$TS_TMP/x3.txt" --whole-split
  expect_exit 2 "^tessera eval: --eval-batches: not with --whole-split" \
    $WS --val-data "$TS_TMP/x8.txt" --whole-split --eval-batches 2
fi

# --- training conveniences: the AdamW constants, the schedule, the progress lines ---
CONV="train --model tiny --steps 5 --warmup 2 --eval-batches 1"
expect_exit 0 "" "$T" $CONV --quiet --log "$TS_TMP/adam-default.jsonl"
# the defaults spelled out are the same run, bit for bit; another beta2 is not
expect_exit 0 "" "$T" $CONV --quiet --beta1 0.9 --beta2 0.95 --eps 1e-8 --log "$TS_TMP/adam-spelled.jsonl"
expect_compare identical "--beta1 0.9 --beta2 0.95 --eps 1e-8, against the defaults" \
  "$TS_TMP/adam-default.jsonl" "$TS_TMP/adam-spelled.jsonl"
expect_exit 0 "" "$T" $CONV --quiet --beta2 0.99 --log "$TS_TMP/adam-b2.jsonl"
expect_exit 1 "" "$T" compare "$TS_TMP/adam-default.jsonl" "$TS_TMP/adam-b2.jsonl"
# (step 1's loss comes before any update, and AdamW's first update is g/|g|
# whatever the betas up to rounding, so step 2's or 3's loss is the first to
# see beta2)
expect_stdout "^first divergence: step [23], loss:"
TS_CHECKS=$((TS_CHECKS + 1))
grep -q '"beta2":0.99' "$TS_TMP/adam-b2.jsonl" && pass "the config records --beta2" ||
  fail "no beta2 0.99 in $(head -c 300 "$TS_TMP/adam-b2.jsonl")"
for bad in "--beta1 1:--beta1 1: must be in \[0, 1\)" "--beta2 -0.1:--beta2 -0.1: must be in \[0, 1\)" \
  "--eps 0:--eps 0: must be > 0" "--lr-schedule step:--lr-schedule step: must be cosine, linear, constant or wsd" \
  "--decay-frac 0.3:--decay-frac 0.3: only with --lr-schedule wsd" \
  "--lr-schedule wsd --decay-frac 0:--decay-frac 0: must be > 0" \
  "--lr-schedule wsd --decay-frac 1.5:--decay-frac 1.5: must be in \(0, 1\]" \
  "--log-every 0:--log-every 0: must be >= 1" "--keep-last -1:--keep-last -1: must be >= 0" \
  "--keep-last 2:--keep-last 2: needs --ckpt-dir" \
  "--init-from x.safetensors --resume --ckpt-dir ck:--init-from: not with --resume"; do
  # shellcheck disable=SC2086
  expect_exit 2 "^tessera train: ${bad#*:}" "$T" train $NODATA ${bad%%:*}
done
# each schedule's learning rates are its own after the warmup (the values
# themselves: tests/test_schedule.c); the log records the schedule
for sched in linear constant wsd; do
  expect_exit 0 "" "$T" $CONV --quiet --lr-schedule $sched --log "$TS_TMP/sched-$sched.jsonl"
  TS_CHECKS=$((TS_CHECKS + 1))
  grep -q "\"lr_schedule\":\"$sched\"" "$TS_TMP/sched-$sched.jsonl" && pass "the config records --lr-schedule $sched" ||
    fail "no lr_schedule $sched in $(head -c 300 "$TS_TMP/sched-$sched.jsonl")"
  expect_exit 1 "" "$T" compare "$TS_TMP/adam-default.jsonl" "$TS_TMP/sched-$sched.jsonl"
  # the warmup (steps 1, 2) and step 3's rate, the first after it, are --lr's
  expect_stdout "^first divergence: step 4, lr:"
done
# --log-every: progress lines for steps 2, 4 and the last, 5; the log has all
expect_exit 0 "" "$T" $CONV --log-every 2 --log "$TS_TMP/every.jsonl"
TS_CHECKS=$((TS_CHECKS + 1))
lines=$(grep -o '^step *[0-9]*/5' "$TS_OUT" | tr -s ' ' | tr '\n' ',')
[ "$lines" = "step 2/5,step 4/5,step 5/5," ] && pass "--log-every 2: progress lines $lines" ||
  fail "--log-every 2: progress lines '$lines'"
expect_compare identical "--log-every 2's log, against every step's" "$TS_TMP/adam-default.jsonl" "$TS_TMP/every.jsonl"

# --- the bundled corpus is found from any working directory ----------------------
# (the source tree's data/ for an uninstalled build, the installed copy after
# make install), so --data can be left out wherever tessera runs
ELSEWHERE=$TS_TMP/elsewhere
mkdir -p "$ELSEWHERE"
expect_exit 0 "" sh -c "cd '$ELSEWHERE' && '$T' train --model tiny --steps 1 --eval-batches 1 --quiet --log run.jsonl"
TS_CHECKS=$((TS_CHECKS + 1))
if grep -q '"data_path":"/[^"]*corpus.txt"' "$ELSEWHERE/run.jsonl" 2>/dev/null; then
  pass "run from another directory read the bundled corpus by its full path"
else
  fail "run from another directory: no absolute corpus path in its config record"
fi
# --- the environment is input: OpenMP's settings checked like --threads ----------
# (libgomp segfaults creating 100000 threads, and stops with a message naming
# no setting on a stack too small for a thread)
TINY1="train --model tiny --steps 1 --eval-batches 1 --quiet"
expect_exit 2 "^tessera: OMP_NUM_THREADS=100000: must be a number of threads from 1 to 1024" \
  env OMP_NUM_THREADS=100000 "$T" $TINY1
# (values libgomp itself finds invalid it also names, in lines of its own, as it
# loads: tessera's one line is the last)
last_line_is() { TS_CHECKS=$((TS_CHECKS + 1)); tail -n 1 "$TS_ERR" | grep -Eq -- "$1" &&
  pass "last line: $1" || fail "last line '$(tail -n 1 "$TS_ERR")' does not match /$1/"; }
expect_exit 2 "" env OMP_NUM_THREADS=0 "$T" $TINY1 && last_line_is "^tessera: OMP_NUM_THREADS=0: "
expect_exit 2 "" env OMP_NUM_THREADS=two "$T" $TINY1 && last_line_is "^tessera: OMP_NUM_THREADS=two: "
expect_exit 2 "^tessera: OMP_STACKSIZE=16K: must be a size of at least 1M" env OMP_STACKSIZE=16K "$T" $TINY1
expect_exit 2 "" env OMP_THREAD_LIMIT=-1 "$T" $TINY1 && last_line_is "^tessera: OMP_THREAD_LIMIT=-1: "
expect_exit 0 "" env OMP_NUM_THREADS=2,1 OMP_STACKSIZE=4M "$T" $TINY1
# OpenBLAS runs the kernel OPENBLAS_CORETYPE names whether or not the CPU can
# (the roof's sgemm then dies of SIGILL): one the CPU cannot run is refused
if [ -r /proc/cpuinfo ] && [ "$(uname -m)" = x86_64 ]; then
  if grep -qw avx512f /proc/cpuinfo; then
    expect_exit 0 "" env OPENBLAS_CORETYPE=SkylakeX "$T" $TINY1
  else
    expect_exit 2 "^tessera: OPENBLAS_CORETYPE=SkylakeX: this CPU cannot run that OpenBLAS kernel \\(it lacks avx512f\\)" \
      env OPENBLAS_CORETYPE=SkylakeX "$T" $TINY1
  fi
  expect_exit 0 "" env OPENBLAS_CORETYPE=Sandybridge "$T" $TINY1
fi

# --- a FIFO is refused, never waited on in open() --------------------------------
# (timeout: before, each of these blocked forever waiting for the FIFO's other end)
FIFO=$TS_TMP/fifo
mkfifo "$FIFO"
expect_exit 1 "^tessera: --data .*fifo: cannot open: not a regular file" timeout 60 "$T" $TINY1 --data "$FIFO"
expect_exit 1 "^tessera: --tokenizer .*fifo: cannot open: not a regular file" timeout 60 "$T" $TINY1 --tokenizer "$FIFO"
expect_exit 1 "^tessera: checkpoint .*fifo: not a regular file" timeout 60 "$T" $TINY1 --init-from "$FIFO"
expect_exit 1 "^tessera: cannot open log .*fifo: a FIFO with no reader" timeout 60 "$T" $TINY1 --log "$FIFO"
# an input that cannot be opened is named by its flag
expect_exit 1 "^tessera: --data .*nothere: cannot open: No such file" "$T" $TINY1 --data "$TS_TMP/nothere"
expect_exit 1 "^tessera: --val-data .*nothere: cannot open: No such file" "$T" $TINY1 --val-data "$TS_TMP/nothere"
expect_exit 1 "^tessera: checkpoint .*fifo: not a regular file" timeout 60 "$T" eval --ckpt "$FIFO"
expect_exit 2 "not a regular file" timeout 60 "$T" compare "$FIFO" "$FIFO"
expect_exit 0 "" "$T" $TINY1 --log /dev/null # a character device is a fine output

# --- an empty path is an error naming its flag, never "not given" ------------------
for f in --data --val-data --tokenizer --init-from --ckpt-dir --log; do
  expect_exit 2 "^tessera train: $f: empty value" "$T" $TINY1 $f ''
done
expect_exit 2 "^tessera eval: --ckpt: empty value" "$T" eval --ckpt ''
# --- outputs over inputs through links: refused by what they are, not their names ---
LK=$TS_TMP/links
mkdir -p "$LK/out" "$LK/ck"
cp "$TESSERA_SRCDIR/data/corpus.txt" "$LK/out/config.json"
cp "$LK/out/config.json" "$LK/config.orig"
ln -s out/config.json "$LK/data.txt"
expect_exit 2 "^tessera dump: --data .*data.txt: a file tessera dump writes into --out" \
  "$T" dump --out "$LK/out" --data "$LK/data.txt"
cmp -s "$LK/out/config.json" "$LK/config.orig" && pass "the linked data is untouched" || fail "dump wrote over its linked --data"
if expect_exit 0 "" "$T" $TINY1 --ckpt-dir "$LK/ck"; then
  ln -s ck/step-00000001.safetensors "$LK/init.safetensors"
  expect_exit 2 "^tessera train: --init-from .*init.safetensors: a checkpoint of --ckpt-dir" \
    "$T" $TINY1 --ckpt-dir "$LK/ck" --init-from "$LK/init.safetensors" --restart
  [ -f "$LK/ck/step-00000001.safetensors" ] && pass "the linked --init-from checkpoint stays" ||
    fail "--restart removed the --init-from checkpoint it was linked to"
fi
cp "$LK/config.orig" "$LK/tok.model"
expect_exit 2 "^tessera train: --log .*tok.model: the --tokenizer file" \
  "$T" $TINY1 --tokenizer "$LK/tok.model" --log "$LK/tok.model"
done_testing
