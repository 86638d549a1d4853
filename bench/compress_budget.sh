#!/bin/bash
# Boundary compression's quality at a budget where the differences can show
# (docs/COMPRESSION.md, "Quality at ten tokens a parameter"): a LLaMA trained on real text
# (data/debian-docs/) for TOKENS_PER_PARAM tokens per parameter of the uncompressed model,
# every configuration with several seeds, resumable across sessions.
#
#   nohup bench/compress_budget.sh > compress-budget.out 2>&1 &   # many hours on 2 cores
#   bench/compress_budget.sh                  # again later: skips what is done, resumes the rest
#   QUICK=1 bench/compress_budget.sh          # a tiny model: checks this script and resume (~2 min)
#   ESTIMATE=1 bench/compress_budget.sh       # a few steps of every mode: the full run's duration
#
# Runs: the uncompressed model, then for every P in STAGES and R in RANKS each mode of
# MODES, at P in EXTRA_STAGES also each mode of EXTRA_MODES, and at P in ANCHOR_STAGES and
# R in ANCHOR_RANKS also mapl with each --mapl-anchor kind of ANCHORS (the anchor ablation;
# mapl itself has the factorised default); every one with each seed of SEEDS (--seed).
# Every run of the first seed finishes before any run of the second starts, and so on, so
# a partial matrix is a whole one with fewer seeds (SEED_BARRIER=0 lets the next seed's
# runs take a core the last runs of a seed leave idle). Each compressed run is the serial
# reference of the P-stage model (--compress-stages P), which a pipelined run reproduces bit
# for bit (tests/mpi_compress.sh).
#
# Resuming: every run checkpoints into RESULTS/ckpt/NAME (--ckpt-every CKPT_EVERY,
# --keep-last 1) and is always started with --resume, so tessera continues it from its
# latest checkpoint (or starts at step 0 when there is none) and cuts its log back to that
# step; the result is the run done straight, bit for bit (docs/CHECKPOINTS.md). A run whose
# RESULTS/NAME.meta says "status ok" is skipped. Nothing in RESULTS is removed, except
# by QUICK=1 in its own folder. Stop it at any time: `kill -TERM PID` (this script's pid)
# makes every tessera write its checkpoint after the step under way, and a rerun goes on
# from there; a run killed outright goes on from its last --ckpt-every checkpoint.
# The settings are checked against RESULTS/setup.txt of the runs already there: a rerun
# with another model, budget or optimizer into the same RESULTS is refused.
#
# Environment (defaults in brackets):
#   TESSERA     the binary [build/tessera, else ./tessera]; this script builds nothing
#   DATA_DIR    the corpus [data/debian-docs]: train.bin, val.bin (u16), tokenizer.model
#   MODEL_FLAGS ["--model llama-mini --layers 8 --d 64 --heads 4 --kv-heads 2 --d-ff 172
#               --vocab 4096": 887,872 parameters]
#   SEQ [128]  BATCH [8]
#   TOKENS_PER_PARAM  the budget in tokens per parameter of the uncompressed model [10]
#   STEPS       steps per run [TOKENS_PER_PARAM x parameters / (SEQ x BATCH), rounded up
#               to a multiple of 20]; the parameters are read from a one-step run's log
#   EVAL_EVERY  validation every N steps [STEPS/20: evaluations at 1/4, 1/2 and all of it]
#   EVAL_BATCHES validation batches per evaluation [8]
#   CKPT_EVERY  checkpoint every N steps [EVAL_EVERY]
#   OPT_FLAGS   ["--optimizer muon-pe --muon-lr 0.02 --lr 0.01 --warmup 30"], as
#               bench/compress_quality.sh
#   STAGES ["4 8"]  RANKS ["16 8"] (d/4, d/8 of d 64)
#   MODES       ["ssn-confined mapl mapl-vq"] at every P and R
#   EXTRA_STAGES ["4"]  EXTRA_MODES ["mapl-frozen mapl-unconstrained"] at those P only
#   ANCHOR_STAGES ["8"]  ANCHOR_RANKS ["16"]  ANCHORS ["none static full"]: mapl with
#               --mapl-anchor KIND at those P and R (of STAGES and RANKS) only, named
#               mapl-pP-rR-anchor-KIND-sS, "mapl anchor KIND" in the manifest
#   VQ_FLAGS    extra flags of the mapl-vq runs [none]
#   SEEDS       ["1 2 3"]
#   JOBS        runs at once, one thread each, at nice 19 [2]
#   SEED_BARRIER 1: every run of a seed ends before the next seed's start [1]; 0: a run
#               starts whenever fewer than JOBS run (the matrix finishes sooner; a stop
#               part-way leaves seeds part-done)
#   TIMEOUT     seconds one attempt may run [43200]; one stopped by it resumes next time
#   RESULTS     [bench/results/compress-budget]   IMG_DIR [RESULTS/img]
#   REPORT      run bench/compress_budget_report.py at the end [1]; REPORT_ARGS to it
#   QUICK=1     llama-tiny with 4 layers, T 64, 40 steps, P 4, r 16, ssn-confined and
#               mapl, mapl with anchor none, seeds 1 2, into
#               bench/results/quick/compress-budget (emptied first);
#               INTERRUPT=20: the first attempt of every run is stopped by a SIGTERM
#               once its log reaches step 20 and resumed at once, and one run is also
#               done straight and compared with `tessera compare` (log and checkpoint)
#   ESTIMATE=1  ESTIMATE_STEPS [30] steps of each configuration (first seed) into a
#               temporary folder: the median step time of each, the full run's CPU hours
#               and its wall time at JOBS at once
#
# Files: RESULTS/NAME.{cmd,jsonl,err,meta} as bench/lib.sh writes them (an attempt's
# stderr is appended to NAME.err.earlier before the next one; a finished run's log is
# gzipped into NAME.jsonl.gz, but with QUICK=1), RESULTS/manifest.tsv
# (mode, P, r, seed, name: the whole matrix, written at every start), RESULTS/setup.txt,
# and RESULTS/NAME.whole: the finished run's last checkpoint scored on the whole validation
# split (`tessera eval --whole-split`: the same tokens for every seed, where the run's own
# evaluations score EVAL_BATCHES batches drawn from its seed), written when the run ends, or
# by a later start for a finished run whose checkpoint is still in RESULTS/ckpt.
# A failed run does not stop the others; the script exits 1 at the end naming it, and a
# rerun resumes it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/compress_budget.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

QUICK=${QUICK:-0}
ESTIMATE=${ESTIMATE:-0}
if [ "$QUICK" = 1 ]; then
  : "${MODEL_FLAGS:=--model llama-tiny --layers 4 --vocab 4096}" "${SEQ:=64}" "${STEPS:=40}"
  : "${EVAL_EVERY:=10}" "${EVAL_BATCHES:=2}" "${CKPT_EVERY:=10}" "${STAGES:=4}" "${RANKS:=16}"
  : "${MODES:=ssn-confined mapl}" "${EXTRA_MODES:=}" "${SEEDS:=1 2}" "${INTERRUPT:=20}"
  : "${ANCHOR_STAGES:=4}" "${ANCHOR_RANKS:=16}" "${ANCHORS:=none}"
  : "${RESULTS:=$ROOT/bench/results/quick/compress-budget}"
fi
MODEL_FLAGS=${MODEL_FLAGS:---model llama-mini --layers 8 --d 64 --heads 4 --kv-heads 2 --d-ff 172 --vocab 4096}
SEQ=${SEQ:-128}
BATCH=${BATCH:-8}
TOKENS_PER_PARAM=${TOKENS_PER_PARAM:-10}
EVAL_BATCHES=${EVAL_BATCHES:-8}
OPT_FLAGS=${OPT_FLAGS:---optimizer muon-pe --muon-lr 0.02 --lr 0.01 --warmup 30}
STAGES=${STAGES:-"4 8"}
RANKS=${RANKS:-"16 8"}
MODES=${MODES-"ssn-confined mapl mapl-vq"}
EXTRA_STAGES=${EXTRA_STAGES-4}
EXTRA_MODES=${EXTRA_MODES-"mapl-frozen mapl-unconstrained"}
ANCHOR_STAGES=${ANCHOR_STAGES-8}
ANCHOR_RANKS=${ANCHOR_RANKS-16}
ANCHORS=${ANCHORS-"none static full"}
VQ_FLAGS=${VQ_FLAGS:-}
SEEDS=${SEEDS:-"1 2 3"}
JOBS=${JOBS:-2}
SEED_BARRIER=${SEED_BARRIER:-1}
TIMEOUT=${TIMEOUT:-43200}
INTERRUPT=${INTERRUPT:-0}
RESULTS=${RESULTS:-$ROOT/bench/results/compress-budget}
IMG_DIR=${IMG_DIR:-$RESULTS/img}
WAIT_LOAD=0 # losses do not depend on the load; the runs are niced instead
bench_defaults
DATA_DIR=${DATA_DIR:-$ROOT/data/debian-docs}
DATA=$DATA_DIR/train.bin
{ [ -f "$DATA" ] && [ -f "$DATA_DIR/val.bin" ] && [ -f "$DATA_DIR/tokenizer.model" ]; } ||
  die "$DATA_DIR: no train.bin, val.bin and tokenizer.model; build it: /usr/bin/python3 data/debian_docs.py --tessera TESSERA (docs/DATA.md)"

for v in JOBS EVAL_BATCHES SEQ BATCH TIMEOUT; do
  [ "${!v}" -ge 1 ] 2>/dev/null || die "$v=${!v}: not a positive integer"
done
[ "$INTERRUPT" -ge 0 ] 2>/dev/null || die "INTERRUPT=$INTERRUPT: not a non-negative integer"
awk -v t="$TOKENS_PER_PARAM" 'BEGIN{exit !(t + 0 > 0)}' ||
  die "TOKENS_PER_PARAM=$TOKENS_PER_PARAM: not a positive number"
for m in $MODES $EXTRA_MODES; do
  case $m in ssn|ssn-confined|mapl|mapl-unconstrained|mapl-vq|mapl-frozen) ;; *) die "MODES: unknown mode '$m'" ;; esac
done
for a in $ANCHORS; do
  case $a in none|static|full) ;; *) die "ANCHORS: '$a' is not none, static or full (factorised is mapl itself)" ;; esac
done
for s in $SEEDS; do [ "$s" -ge 0 ] 2>/dev/null || die "SEEDS: '$s' is not a non-negative integer"; done
[ -n "$SEEDS" ] || die "SEEDS: empty"
case $SEED_BARRIER in 0|1) ;; *) die "SEED_BARRIER: '$SEED_BARRIER' is not 0 or 1" ;; esac

STEPS_ASKED=${STEPS:-}
STEPS=${STEPS_ASKED:-2} # checked by bench_snapshot; the budget's steps are computed below
NSEEDS=$(wc -w <<< "$SEEDS")
bench_snapshot tessera-budget
cd "$ROOT"
DATA_FLAGS=(--data "${DATA#"$ROOT"/}" --val-data "${DATA_DIR#"$ROOT"/}/val.bin" --data-format u16
            --tokenizer "${DATA_DIR#"$ROOT"/}/tokenizer.model")

# The uncompressed model's parameters, from the config record of a one-step run's log
# (tessera counts them; nothing here repeats its arithmetic)
count_params() {
  local log="$SNAP/params.jsonl"
  # MODEL_FLAGS is a word list on purpose
  # shellcheck disable=SC2086
  "$BIN" train $MODEL_FLAGS --seq "$SEQ" --batch "$BATCH" --steps 1 --eval-batches 1 --threads 1 \
    "${DATA_FLAGS[@]}" --quiet --log "$log" > "$SNAP/params.out" 2>&1 ||
    die "the model does not run: $(tail -n 1 "$SNAP/params.out")"
  "$PYTHON" -c 'import json,sys; print(next(json.loads(l)["params"] for l in open(sys.argv[1]) if "\"config\"" in l))' "$log"
}
PARAMS=$(count_params)
if [ -z "$STEPS_ASKED" ]; then
  # the budget: TOKENS_PER_PARAM x PARAMS tokens, rounded up to whole steps and to a
  # multiple of 20 so that the evaluations fall on 1/4, 1/2 and the end exactly
  STEPS=$(awk -v t="$TOKENS_PER_PARAM" -v p="$PARAMS" -v n=$((SEQ * BATCH)) \
    'BEGIN{s = t * p / n; s = (s == int(s)) ? s : int(s) + 1; s = int((s + 19) / 20) * 20; print s}')
fi
EVAL_EVERY=${EVAL_EVERY:-$(( STEPS / 20 > 0 ? STEPS / 20 : 1 ))}
CKPT_EVERY=${CKPT_EVERY:-$EVAL_EVERY}
for v in STEPS EVAL_EVERY CKPT_EVERY; do
  [ "${!v}" -ge 1 ] 2>/dev/null || die "$v=${!v}: not a positive integer"
done
TPP=$(awk -v s="$STEPS" -v n=$((SEQ * BATCH)) -v p="$PARAMS" 'BEGIN{printf "%.2f", s * n / p}')

if [ "$ESTIMATE" = 1 ]; then
  FULL_STEPS=$STEPS
  STEPS=${ESTIMATE_STEPS:-30} SEEDS=${SEEDS%% *} INTERRUPT=0 CKPT_EVERY=$STEPS EVAL_EVERY=$STEPS
  RESULTS=$SNAP/estimate REPORT=0
fi
if [ "$QUICK" = 1 ] && [ -d "$RESULTS" ]; then
  # QUICK's folder is a test's: it starts empty (no other folder is ever emptied)
  case $RESULTS in */results/quick/*) rm -rf "$RESULTS" ;; esac
fi
bench_lock

# every run's name and line of the manifest, in the order they run: seed-major
MANIFEST=$RESULTS/manifest.tsv
names=() lines=()
plan() { # MODE P R SEED [ANCHOR]
  local name=$1 mode=$1; [ "$1" = none ] || name=$1-p$2-r$3
  if [ -n "${5:-}" ]; then name=$name-anchor-$5 mode="$1 anchor $5"; fi
  name=$name-s$4
  names+=("$name") lines+=("$mode	$2	$3	$4	$name")
}
for s in $SEEDS; do
  plan none 1 0 "$s"
  for p in $STAGES; do
    for r in $RANKS; do
      for m in $MODES; do plan "$m" "$p" "$r" "$s"; done
      if [[ " $EXTRA_STAGES " == *" $p "* ]]; then
        for m in $EXTRA_MODES; do plan "$m" "$p" "$r" "$s"; done
      fi
      if [[ " $ANCHOR_STAGES " == *" $p "* ]] && [[ " $ANCHOR_RANKS " == *" $r "* ]]; then
        for a in $ANCHORS; do plan mapl "$p" "$r" "$s" "$a"; done
      fi
    done
  done
done

# the settings that make a run what it is; a rerun must keep them
SETTINGS=("model_flags $MODEL_FLAGS" "data ${DATA_DIR#"$ROOT"/}" "seq $SEQ" "batch $BATCH" "steps $STEPS"
          "eval_every $EVAL_EVERY" "eval_batches $EVAL_BATCHES" "opt_flags $OPT_FLAGS" "vq_flags $VQ_FLAGS")
if [ -f "$RESULTS/setup.txt" ] && ls "$RESULTS"/*.jsonl "$RESULTS"/*.jsonl.gz > /dev/null 2>&1; then
  for kv in "${SETTINGS[@]}"; do
    old=$(grep -m1 "^${kv%% *} " "$RESULTS/setup.txt" || echo "${kv%% *} ")
    [ "$old" = "${kv% }" ] || [ "$old" = "$kv" ] ||
      die "RESULTS=$RESULTS holds runs with '$old', this run has '$kv': another RESULTS, or the same settings"
  done
fi
{ printf 'mode\tP\tr\tseed\tname\n'; printf '%s\n' "${lines[@]}"; } > "$MANIFEST.tmp" && mv "$MANIFEST.tmp" "$MANIFEST"
bench_setup "${SETTINGS[@]}" "params $PARAMS" "tokens_per_param $TPP" "tokens_per_param_asked $TOKENS_PER_PARAM" \
  "ckpt_every $CKPT_EVERY" "seeds $SEEDS" "jobs $JOBS" "started_by $BENCH"
echo "binary $TESSERA" >> "$RESULTS/setup.txt"
bench_binary
mkdir -p "$RESULTS/ckpt"

# run_pids [NAME]: the tessera processes of this invocation (their program is BIN, this
# invocation's private copy), those writing RESULTS/NAME.jsonl when NAME is given
run_pids() {
  local f pid first
  for f in /proc/[0-9]*/cmdline; do
    { IFS= read -r -d '' first < "$f"; } 2> /dev/null || continue
    [ "$first" = "$BIN" ] || continue
    # bench_run gives tessera the paths inside ROOT relative to it
    [ -z "${1:-}" ] || tr '\0' '\n' < "$f" 2> /dev/null |
      grep -qxF -e "$RESULTS/$1.jsonl" -e "${RESULTS#"$ROOT"/}/$1.jsonl" || continue
    pid=${f#/proc/}; echo "${pid%/cmdline}"
  done
}

# interrupt NAME: QUICK's check of resume: once the run's log reaches step INTERRUPT, a
# SIGTERM to its tessera, which writes its checkpoint after the step under way and stops
interrupt() {
  local log=$RESULTS/$1.jsonl i
  for ((i = 0; i < 6000; i++)); do
    if [ -s "$log" ] && grep -q "\"type\":\"step\",\"step\":$INTERRUPT," "$log"; then
      # shellcheck disable=SC2046
      kill -TERM $(run_pids "$1") 2>/dev/null || true
      return 0
    fi
    sleep 0.1
  done
}

# attempt NAME MODE P R SEED FIRST: one run of tessera, resuming; sets RUN_RC
attempt() {
  local name=$1 mode=$2 p=$3 r=$4 seed=$5 first=$6 cmd watcher=""
  # shellcheck disable=SC2206
  cmd=(nice -n 19 "$BIN" train $MODEL_FLAGS --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" $OPT_FLAGS
       --seed "$seed" --eval-every "$EVAL_EVERY" --eval-batches "$EVAL_BATCHES" --threads 1
       "${DATA_FLAGS[@]}" --quiet --log "$RESULTS/$name.jsonl"
       --ckpt-dir "$RESULTS/ckpt/$name" --ckpt-every "$CKPT_EVERY" --keep-last 1 --resume)
  case $mode in
    none) ;;
    "mapl anchor "*) cmd+=(--compress mapl --rank "$r" --compress-stages "$p" --mapl-anchor "${mode#mapl anchor }") ;;
    *) cmd+=(--compress "$mode" --rank "$r" --compress-stages "$p") ;;
  esac
  # shellcheck disable=SC2206
  [ "$mode" = mapl-vq ] && cmd+=($VQ_FLAGS)
  if [ -s "$RESULTS/$name.err" ]; then cat "$RESULTS/$name.err" >> "$RESULTS/$name.err.earlier"; fi
  if [ "$first" = 1 ] && [ "$INTERRUPT" -gt 0 ]; then interrupt "$name" & watcher=$!; fi
  bench_run "$name" "${cmd[@]}"
  if [ -n "$watcher" ]; then kill "$watcher" 2>/dev/null || true; wait "$watcher" 2>/dev/null || true; fi
}

# whole_split NAME: a finished run's last checkpoint scored on the whole validation split,
# into RESULTS/NAME.whole (tessera's one line); nothing when that file is there already or the
# checkpoint is not (it stays on the machine that ran the run)
whole_split() {
  local ck
  ck=$RESULTS/ckpt/$1/$(printf 'step-%08d.safetensors' "$STEPS")
  if [ "$ESTIMATE" = 1 ] || [ -s "$RESULTS/$1.whole" ] || [ ! -f "$ck" ]; then return 0; fi
  if nice -n 19 "$BIN" eval --ckpt "$ck" --whole-split --threads 1 \
       > "$RESULTS/$1.whole.tmp" 2>> "$RESULTS/$1.err"; then
    mv "$RESULTS/$1.whole.tmp" "$RESULTS/$1.whole"
  else
    rm -f "$RESULTS/$1.whole.tmp"
    echo "$BENCH: $1: tessera eval --whole-split failed: $(tail -n 1 "$RESULTS/$1.err"); a rerun tries again" >&2
    return 1
  fi
}

# one_run NAME MODE P R SEED: the run to its end, unless its meta says it is done
one_run() {
  local name=$1
  if grep -qs '^status ok' "$RESULTS/$name.meta"; then whole_split "$name"; return; fi
  attempt "$@" 1
  if [ "$RUN_RC" = 143 ] && [ "$INTERRUPT" -gt 0 ]; then
    grep -q '"type":"final"' "$RESULTS/$name.jsonl" && die "$name: INTERRUPT=$INTERRUPT came too late (the run ended)"
    echo "  $name: stopped (INTERRUPT=$INTERRUPT) after step $(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\).*/\1/p' "$RESULTS/$name.err"); resuming" >&2
    attempt "$@" 0
  fi
  if [ "$RUN_RC" = 143 ] || [ "$RUN_RC" = 124 ]; then
    bench_meta "$name" stopped
    echo "  $name stopped (exit $RUN_RC) at its checkpoint; a rerun resumes it" >&2
    return 1
  fi
  if [ "$RUN_RC" != 0 ]; then
    bench_meta "$name" failed
    echo "$BENCH: $name failed (exit $RUN_RC): $(bench_why "$name"); see $RESULTS/$name.err; a rerun resumes it" >&2
    return 1
  fi
  bench_meta "$name" ok
  # a finished log, 5 MB of step records, kept as gzip (a tenth) so that the results of
  # all the runs can live in the repository; the report reads either
  if [ "$QUICK" != 1 ]; then gzip -9nf "$RESULTS/$name.jsonl"; fi
  echo "  $name done: $(bench_wall_s %.0f) s" >&2
  whole_split "$name"
}

bench_start
total=${#names[@]}
done0=$(for n in "${names[@]}"; do grep -ls '^status ok' "$RESULTS/$n.meta" || true; done | wc -l)
what="$STEPS steps ($TPP tokens a parameter)"
[ "$ESTIMATE" != 1 ] || what="$STEPS steps of each (ESTIMATE; the full runs: $FULL_STEPS steps, $TPP tokens a parameter)"
echo "== compression budget: $MODEL_FLAGS ($PARAMS parameters), T $SEQ, B $BATCH, $what," \
  "seeds {$SEEDS}, $total runs ($done0 done), $JOBS at once" >&2
# SIGTERM to this script stops every run after its step under way, with its checkpoint
# (tessera's own handling of the signal); a rerun resumes them. SIGINT and SIGHUP come
# from a terminal to the whole process group, tessera included: passed on, they would be
# its second signal, which stops it at once without the checkpoint
# shellcheck disable=SC2317 # called by the traps below
on_signal() {
  echo "$BENCH: stopping: every run writes its checkpoint after the step under way; rerun to resume" >&2
  # shellcheck disable=SC2046
  [ "$1" != TERM ] || kill -TERM $(run_pids) 2>/dev/null || true
  wait || true
  exit 143
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal HUP' HUP
failed=0 prev_seed=""
for ((i = 0; i < total; i++)); do
  IFS=$'\t' read -r mode p r seed name <<< "${lines[$i]}"
  if [ "$SEED_BARRIER" = 1 ] && [ -n "$prev_seed" ] && [ "$seed" != "$prev_seed" ]; then
    # every run of one seed ends before the next seed starts
    while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
  fi
  prev_seed=$seed
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || failed=1; done
  one_run "$name" "$mode" "$p" "$r" "$seed" &
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
for n in "${names[@]}"; do grep -qs '^status ok' "$RESULTS/$n.meta" || failed=1; done
bench_done

if [ "$QUICK" = 1 ] && [ "$INTERRUPT" -gt 0 ] && [ "$failed" = 0 ]; then
  # the resumed run against the same run done straight: log and last checkpoint
  n=${names[1]}
  IFS=$'\t' read -r mode p r seed _ <<< "${lines[1]}"
  RESULTS_MAIN=$RESULTS RESULTS=$SNAP/straight INTERRUPT=0
  mkdir -p "$RESULTS/ckpt"
  attempt "$n" "$mode" "$p" "$r" "$seed" 0
  [ "$RUN_RC" = 0 ] || die "$n done straight failed (exit $RUN_RC): $(bench_why "$n")"
  last=$(printf 'step-%08d.safetensors' "$STEPS")
  {
    echo "resume_check_run $n"
    echo "resume_check_log $("$BIN" compare "$RESULTS_MAIN/$n.jsonl" "$RESULTS/$n.jsonl" 2>&1 | tail -n 1)"
    echo "resume_check_ckpt $("$BIN" compare "$RESULTS_MAIN/ckpt/$n/$last" "$RESULTS/ckpt/$n/$last" 2>&1 | tail -n 1)"
  } >> "$RESULTS_MAIN/setup.txt"
  RESULTS=$RESULTS_MAIN
  grep '^resume_check' "$RESULTS/setup.txt" >&2
  grep -q '"type":"resume"' "$RESULTS/$n.jsonl" || die "$n: its log has no resume record: INTERRUPT did not stop it"
  { grep -q '^resume_check_log identical' "$RESULTS/setup.txt" &&
    grep -q '^resume_check_ckpt same model state' "$RESULTS/setup.txt"; } ||
    die "the resumed run is not the run done straight (above)"
fi

if [ "$ESTIMATE" = 1 ]; then
  "$PYTHON" "$ROOT/bench/compress_budget_report.py" --results "$RESULTS" --estimate "$FULL_STEPS" \
    --seeds "$NSEEDS" --jobs "$JOBS" --no-plots
  exit "$failed"
fi
[ "$failed" = 0 ] || echo "$BENCH: some runs failed (above); the report shows what is done" >&2
bench_report compress_budget_report.py || failed=1
exit "$failed"
