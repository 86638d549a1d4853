#!/bin/sh
# tessera plan against runs of this machine (issue 31 item 2; docs/PLAN.md):
# for each layout, one training step with --log, and the plan's numbers for
# that layout (tests/plan.py says what is compared): a layer's collectives
# and the step's reductions, gathers and all-to-alls equal to the run's
# counters, its memory by kind within 5% of the step record's state_bytes.
# A run checked against another layout's plan must differ (the check can
# fail); a layout train refuses is refused by the plan too. Then the command
# line: help, refusals.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mpi_lib.sh"

need_python "to read the plan's JSON and the run logs"
DATA=$TESSERA_SRCDIR/data/corpus.txt
CHECK="$PY $TS_TESTS_DIR/plan.py"
# --flops given: no roof measured (the times are not compared)
PLAN="$TESSERA_BIN plan --flops 1e11 --json"

# plan_json NAME RANKS MODEL-FLAGS...: the plan of RANKS ranks into $TS_TMP/NAME.json
plan_json() {
  _name=$1 _n=$2
  shift 2
  expect_exit 0 "" $PLAN --ranks "$_n" "$@" && cp "$TS_OUT" "$TS_TMP/$_name.json"
}

# against PLAN LOG DP SP MODE PP ZERO CKPT [--expect-differ]: tests/plan.py's verdict
against() {
  TS_CHECKS=$((TS_CHECKS + 1))
  if $CHECK "$TS_TMP/$1.json" "$TS_TMP/$2.jsonl" "$3" "$4" "$5" "$6" "$7" "$8" ${9:-} \
    >"$TS_OUT" 2>&1; then
    pass "plan $1 against run $2 (dp $3 sp $4 $5 pp $6 zero $7 ckpt $8) ${9:-}"
    sed 's/^/    /' "$TS_OUT"
  else
    fail "plan $1 against run $2 (dp $3 sp $4 $5 pp $6 zero $7 ckpt $8) ${9:-}: $(grep -v '^ok' "$TS_OUT" | head -5)"
  fi
}

# run NAME RANKS FLAGS...: one step, logged to $TS_TMP/NAME.jsonl
run() {
  _name=$1 _n=$2
  shift 2
  expect_exit 0 "" timeout -k 10 120 $MPIEXEC -n "$_n" "$TESSERA_BIN" train --steps 1 --quiet \
    --data "$DATA" --log "$TS_TMP/$_name.jsonl" "$@"
}

plan_json gpt1 1 --model tiny
plan_json gpt2 2 --model tiny
plan_json llama2 2 --model llama-tiny --kv-heads 2

run serial 1 --model tiny && against gpt1 serial 1 1 - 1 0 0
run dp 2 --model tiny --dp 2 && against gpt2 dp 2 1 - 1 0 0
run zero1 2 --model tiny --dp 2 --zero 1 && against gpt2 zero1 2 1 - 1 1 0
run lss 2 --model tiny --sp 2 && against gpt2 lss 1 2 lss 1 0 0
run lssck 2 --model tiny --sp 2 --checkpoint && against gpt2 lssck 1 2 lss 1 0 1
run ulysses 2 --model tiny --sp 2 --sp-mode ulysses && against gpt2 ulysses 1 2 ulysses 1 0 0
# the plan's pipeline runs each sequence as a microbatch
run pp 2 --model tiny --pp 2 --microbatches 4 && against gpt2 pp 1 1 - 2 0 0
run upipe 2 --model llama-tiny --kv-heads 2 --sp 2 --sp-mode upipe &&
  against llama2 upipe 1 2 upipe 1 0 0
run fused 2 --model llama-tiny --kv-heads 2 --sp 2 --sp-mode lss-fused &&
  against llama2 fused 1 2 lss-fused 1 0 0
run zigzag 2 --model tiny --sp 2 --sp-mode lss-zigzag && against gpt2 zigzag 1 2 lss-zigzag 1 0 0
run lssdx 2 --model tiny --sp 2 --sp-mode lss-dx && against gpt2 lssdx 1 2 lss-dx 1 0 0
run megatron 2 --model tiny --sp 2 --sp-mode megatron && against gpt2 megatron 1 2 megatron 1 0 0
run ring 2 --model tiny --sp 2 --sp-mode ring && against gpt2 ring 1 2 ring 1 0 0
run ringzz 2 --model tiny --sp 2 --sp-mode ring-zigzag && against gpt2 ringzz 1 2 ring-zigzag 1 0 0
# the strategies whose buffers live inside their calls (the plan's incall:
# megatron-2022's T x T probabilities, upipe-dx's stages, usp's blocks), the
# traffic of usp, upipe-dx, --zero 2 and 3, and a compressed boundary
run m2022 2 --model tiny --sp 2 --sp-mode megatron-2022 &&
  against gpt2 m2022 1 2 megatron-2022 1 0 0
run upipedx 2 --model llama-tiny --kv-heads 2 --sp 2 --sp-mode upipe-dx &&
  against llama2 upipedx 1 2 upipe-dx 1 0 0
run usp 2 --model tiny --sp 2 --sp-mode usp && against gpt2 usp 1 2 usp 1 0 0
run zero2 2 --model tiny --dp 2 --zero 2 && against gpt2 zero2 2 1 - 1 2 0
run zero3 2 --model tiny --sp 2 --zero 3 && against gpt2 zero3 1 2 lss 1 3 0
plan_json vq2 2 --model tiny --compress mapl-vq --rank 16 --compress-stages 2
run vq 2 --model tiny --pp 2 --microbatches 4 --compress mapl-vq --rank 16 &&
  against vq2 vq 1 1 - 2 0 0
# the gradients quantised too, and the codebooks streamed by microbatch: the
# plan's stream counts the layout's microbatches, as train does
VQB="--compress mapl-vq --rank 16 --vq-backward on --vq-stream-unit microbatch --vq-stream-every 3"
plan_json vqb2 2 --model tiny $VQB --compress-stages 2
run vqb 2 --model tiny --pp 2 --microbatches 4 $VQB && against vqb2 vqb 1 1 - 2 0 0
against vq2 vqb 1 1 - 2 0 0 --expect-differ
# a data group of three (not a power of two: the tree over the ranks has an
# empty position, comm_tree.h): its all-reduce's bytes are the plan's
plan_json gpt3 3 --model tiny --batch 6
run dp3 3 --model tiny --batch 6 --dp 3 && against gpt3 dp3 3 1 - 1 0 0
# four ranks (busy-polling on two cores: a few seconds): the data group's sums
# over the sequence group's, --zero 1's shards without the positional rows
# (memory within 5%: the plan's 1/4 of them, the run's whole rows), and a
# pipeline of sequence groups, GPipe, checkpointed: the forwards it repeats
plan_json gpt4 4 --model tiny
plan_json gpt4g 4 --model tiny --schedule gpipe
run dpspz 4 --model tiny --dp 2 --sp 2 --zero 1 && against gpt4 dpspz 2 2 lss 1 1 0
run usp4 4 --model tiny --sp 4 --sp-mode usp && against gpt4 usp4 1 4 usp 1 0 0
run sppp 4 --model tiny --sp 2 --pp 2 --microbatches 4 --schedule gpipe --checkpoint &&
  against gpt4g sppp 1 2 lss 2 0 1
# --zero 2 and 3 in a pipeline: each microbatch a round (its layers' and the
# stage's ends' sums), stage 3's gathers before each forward and backward
run ppz3 4 --model tiny --dp 2 --pp 2 --microbatches 2 --zero 3 && against gpt4 ppz3 2 1 - 2 3 0
run ppz2 4 --model tiny --sp 2 --pp 2 --microbatches 4 --zero 2 --sp-mode lss-zigzag &&
  against gpt4 ppz2 1 2 lss-zigzag 2 2 0

# no layout valid (6 ranks, 2 layers, 4 sequences): the table says why, most
# common refusal first, without --verbose
expect_exit 0 "" "$TESSERA_BIN" plan --model tiny --ranks 6 &&
  expect_stdout "no layout is valid; the refusals, the most common first:" &&
  expect_stdout "^  256 layouts: --sp 3: must be a power of two"
# the check tells layouts apart: another layout's plan does not match the run
against gpt2 lss 1 2 ulysses 1 0 0 --expect-differ
against gpt2 lss 1 2 lss 1 0 1 --expect-differ
against gpt2 dp 2 1 - 1 1 0 --expect-differ

# train's refusals are the plan's: megatron with --checkpoint, --zero on one rank
TS_CHECKS=$((TS_CHECKS + 1))
if $PY -c "
import json, sys
rows = json.load(open('$TS_TMP/gpt2.json'))['rows']
bad = [r for r in rows if r['sp_mode'] == 'megatron' and r['checkpoint'] and 'refused' not in r]
bad += [r for r in rows if r['zero'] and r['dp'] * r['sp'] < 2 and 'refused' not in r]
sys.exit(1 if bad or not any('refused' in r for r in rows) else 0)"; then
  pass "the plan refuses what train refuses (megatron with --checkpoint, --zero with one replica)"
else
  fail "the plan accepts a layout train refuses"
fi

# the fit check counts what lives only inside an attention call: megatron-2022's
# T x T probabilities at T = 131072 (2 heads a rank: 256 GiB) are refused
# before any work, the line naming them
# (every rank says it: the pattern is checked on stderr here)
if expect_exit 1 "" timeout -k 10 60 $MPIEXEC -n 2 "$TESSERA_BIN" train --model tiny --sp 2 \
  --sp-mode megatron-2022 --seq 131072 --steps 1 --quiet --data "$DATA"; then
  TS_CHECKS=$((TS_CHECKS + 1))
  if grep -q "rank 0: this model needs about .*megatron-2022's attention buffers" "$TS_ERR"; then
    pass "the refusal names megatron-2022's attention buffers"
  else
    fail "the refusal does not name the attention buffers: $(head -c 400 "$TS_ERR")"
  fi
fi

# --calibrate LOG: the efficiency measured on a run (src/tools/plan_calibrate.c),
# recomputed here from the log's own fields: the median over the steps after
# the first of flops_per_token x batch x seq / world / (compute_ms_max x roof).
# Each row's compute time is its FLOPs at that efficiency, and the overlap
# bound is the larger of compute and communication.
expect_exit 0 "" "$TESSERA_BIN" train --model tiny --steps 5 --quiet --data "$DATA" \
  --log "$TS_TMP/cal.jsonl"
if expect_exit 0 "" "$TESSERA_BIN" plan --model tiny --ranks 2 --flops 1e11 --json \
  --calibrate "$TS_TMP/cal.jsonl"; then
  TS_CHECKS=$((TS_CHECKS + 1))
  if why=$($PY - "$TS_OUT" "$TS_TMP/cal.jsonl" <<'PYEOF'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
recs = [json.loads(l) for l in open(sys.argv[2])]
cfg = recs[0]
steps = [r for r in recs if r.get("type") == "step"][1:]
m = cfg["model"]
eff = statistics.median(cfg["flops_per_token"] * m["batch"] * m["seq"] / cfg["world"]
                        / (r["compute_ms_max"] * 1e-3 * cfg["roof_gflops"] * 1e9) for r in steps)
if abs(plan["efficiency"] - eff) > 1e-9 * eff or plan["efficiency_steps"] != len(steps):
    sys.exit("efficiency %r over %d steps, the log gives %r over %d"
             % (plan["efficiency"], plan["efficiency_steps"], eff, len(steps)))
rows = [r for r in plan["rows"] if "refused" not in r]
for r in rows:
    if r["step_overlap_s"] != max(r["compute_s"], r["comm_s"]):
        sys.exit("%s: overlap %r, compute %r, comm %r" % (r["layout"], r["step_overlap_s"],
                                                          r["compute_s"], r["comm_s"]))
# the data-parallel layout without checkpointing: half the step's FLOPs a rank
r = next(r for r in rows if r["dp"] == 2 and r["zero"] == 0 and not r["checkpoint"])
want = cfg["flops_per_token"] * m["batch"] * m["seq"] / 2 / (1e11 * eff)
if abs(r["compute_s"] - want) > 1e-4 * want:
    sys.exit("dp2 compute %r s, want %r" % (r["compute_s"], want))
print("efficiency %.4g over %d steps" % (eff, len(steps)))
PYEOF
  ); then
    pass "--calibrate: the log's median efficiency, the compute and overlap times from it ($why)"
  else
    fail "--calibrate: $why"
  fi
fi
expect_exit 0 "" "$TESSERA_BIN" plan --model tiny --flops 1e11 --calibrate "$TS_TMP/cal.jsonl"
expect_stdout "at efficiency [0-9.e-]+ \\(measured: .*cal.jsonl, median of 4 steps\\)"
head -n 2 "$TS_TMP/cal.jsonl" >"$TS_TMP/cal1.jsonl"
expect_exit 2 "--calibrate .*cal1.jsonl: needs a run of at least 2 steps" \
  "$TESSERA_BIN" plan --model tiny --calibrate "$TS_TMP/cal1.jsonl"
expect_exit 2 "--calibrate .*cal.jsonl with --efficiency 0.5: give one" \
  "$TESSERA_BIN" plan --model tiny --calibrate "$TS_TMP/cal.jsonl" --efficiency 0.5
expect_exit 2 "--calibrate .*corpus.txt: .*corpus.txt:1: malformed JSON" "$TESSERA_BIN" plan --model tiny --calibrate "$DATA"
expect_exit 2 "--calibrate .*absent.jsonl: cannot open" \
  "$TESSERA_BIN" plan --model tiny --calibrate "$TS_TMP/absent.jsonl"

# the text form: the ranking, and the refusals' reasons with --verbose
expect_exit 0 "" "$TESSERA_BIN" plan --model tiny --ranks 2 --flops 1e11 --verbose
expect_stdout "^[0-9]+ layouts: [0-9]+ valid"
expect_stdout "refused .*--sp-mode"
expect_stdout "^   1  dp"
expect_exit 0 "" "$TESSERA_BIN" plan --shape llama3-8b --seq 8192 --ranks 8 --device-mem 80 \
  --flops 400e12 --top 3
expect_stdout "d 4096, 32 layers, 32 heads \\(8 kv\\)"
expect_stdout "longest T that fits"

# the command line
expect_exit 0 "" "$TESSERA_BIN" --help
expect_stdout "^  plan "
expect_exit 0 "" "$TESSERA_BIN" plan --help
expect_stdout "--ranks N"
expect_exit 2 "--ranks 0: must be >= 1" "$TESSERA_BIN" plan --ranks 0
expect_exit 2 "--shape gpt5: must be one of gpt2-124m" "$TESSERA_BIN" plan --shape gpt5
expect_exit 2 "--shape llama3-8b: not with --model mini" "$TESSERA_BIN" plan --shape llama3-8b \
  --model mini
expect_exit 2 "--efficiency 2: must be in \\(0, 1\\]" "$TESSERA_BIN" plan --efficiency 2

# the layout flags pin the enumeration (plan only, no training): a pinned
# plan's rows are the unpinned plan's rows of that layout, number for number
# (without --ranks the ranks are dp x sp x pp)
pin_json() {
  _name=$1
  shift
  expect_exit 0 "" $PLAN "$@" && cp "$TS_OUT" "$TS_TMP/$_name.json"
}
# same_rows PINNED FULL COUNT: PINNED has COUNT rows, each equal to FULL's of its layout
same_rows() {
  TS_CHECKS=$((TS_CHECKS + 1))
  if _why=$($PY -c "
import json, sys
pin = json.load(open('$TS_TMP/$1.json'))
full = {r['layout']: r for r in json.load(open('$TS_TMP/$2.json'))['rows']}
rows = pin['rows']
if len(rows) != $3: sys.exit('%d rows, expected $3: %s' % (len(rows), [r['layout'] for r in rows]))
for r in rows:
    if full.get(r['layout']) != r: sys.exit('row %s differs from the unpinned plan' % r['layout'])
"); then
    pass "plan $1: $3 rows, each the unpinned plan's"
  else
    fail "plan $1: $_why"
  fi
}
pin_json pin_ul --model tiny --sp 2 --sp-mode ulysses --zero 1
same_rows pin_ul gpt2 2
pin_json pin_dpz --model tiny --ranks 2 --dp 2 --zero 2 --checkpoint
same_rows pin_dpz gpt2 1
pin_json pin_pp --model tiny --pp 2 --zero 0
same_rows pin_pp gpt2 2
# and they differ from another layout's row (the check can fail)
TS_CHECKS=$((TS_CHECKS + 1))
if $PY -c "
import json, sys
a = json.load(open('$TS_TMP/pin_ul.json'))['rows'][0]
b = [r for r in json.load(open('$TS_TMP/gpt2.json'))['rows'] if r['layout'] != a['layout']
     and r['sp_mode'] == 'ulysses' and r['checkpoint'] == a['checkpoint']][0]
sys.exit(0 if a['memory_largest'] != b['memory_largest'] else 1)"; then
  pass "a pinned row differs from another --zero's"
else
  fail "a pinned row equals another --zero's"
fi
# --microbatches pins a pipeline's microbatches (else one a sequence)
expect_exit 0 "" $PLAN --model tiny --pp 2 --batch 8 --microbatches 2
expect_stdout '"pp":2,"microbatches":2,'
# the longest T of a pinned layout: it fits at that T and not one step
# (leaf x sp) above it; under --fast any multiple of the step is taken,
# under the exact rules T/sp holds a power of two of leaves
longest_at() { # FLAGS...: the plan's longest_seq
  $PLAN "$@" | $PY -c "import json, sys; print(json.load(sys.stdin)['longest_seq'])"
}
fit_at() { # FLAGS...: 1 when the plan's one layout fits
  $PLAN "$@" | $PY -c "import json, sys; r = json.load(sys.stdin)['rows'][0]; print(r.get('fits', 0))"
}
LONG="--model tiny --sp 2 --sp-mode lss --zero 3 --checkpoint --device-mem 0.045"
TS_CHECKS=$((TS_CHECKS + 1))
_lf=$(longest_at $LONG --fast) _le=$(longest_at $LONG)
if [ "$_lf" -gt 4096 ] && [ "$(fit_at $LONG --fast --seq "$_lf")" = 1 ] &&
  [ "$(fit_at $LONG --fast --seq $((_lf + 512)))" = 0 ] && [ "$_le" -le "$_lf" ] &&
  [ $(((_le / 512) & (_le / 512 - 1))) -eq 0 ] && [ "$(fit_at $LONG --seq "$_le")" = 1 ]; then
  pass "longest T of a pinned layout: $_lf (--fast: fits, +512 does not), $_le exact (2 x 256 x a power of two)"
else
  fail "longest T of a pinned layout: --fast $_lf, exact $_le"
fi
# millions of tokens (Llama3-8B, UPipe at the papers' settings): no count
# overflows, the memory grows linearly with T (activations 2x within 1%)
TS_CHECKS=$((TS_CHECKS + 1))
if $PY -c "
import json, subprocess, sys
def acts(T):
    out = subprocess.run('$PLAN --shape llama3-8b --sp 8 --sp-mode upipe --zero 3 --checkpoint '
                         '--fused-ce --tiled-mlp --device-mem 100000 --seq %d' % T, shell=True,
                         capture_output=True, check=True).stdout
    m = json.loads(out)['rows'][0]['memory_largest']
    return m['activations'] + m['incall'], m['total']
(a1, t1), (a2, t2) = acts(4194304), acts(8388608)
sys.exit(0 if abs(a2 / a1 - 2) < 0.01 and t2 > t1 > 0 else 1)"; then
  pass "plan at T = 4M and 8M: activations double"
else
  fail "plan at T = 4M and 8M: activations do not double (an overflow?)"
fi
expect_exit 2 "--zero 4: must be 0, 1, 2 or 3" "$TESSERA_BIN" plan --ranks 2 --zero 4
expect_exit 2 "--sp 3: no layout of --ranks 8 has it" "$TESSERA_BIN" plan --ranks 8 --sp 3
expect_exit 2 "--dp 2 --sp 2 --pp 4: their product is 16, not --ranks 8" "$TESSERA_BIN" plan \
  --ranks 8 --dp 2 --sp 2 --pp 4
expect_exit 2 "--dp 4 --sp 4 --pp 1: their product 16, not --ranks 8 or a divisor" \
  "$TESSERA_BIN" plan --ranks 8 --dp 4 --sp 4
expect_exit 2 "--sp 0: must be >= 1" "$TESSERA_BIN" plan --sp 0
done_testing
