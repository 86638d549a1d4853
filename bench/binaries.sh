#!/bin/bash
# Two tessera binaries side by side (a commit against the one before it): the same
# cases, the runs alternating old, new, old, new, ..., each on a quiet machine and, for
# the cases named in BUSY_CASES, once more beside one busy process (a shell loop holding
# one core: what a CI job, a second rank or an editor's indexer does to a step).
#
#   OLD=/path/to/old/tessera NEW=build/tessera bench/binaries.sh
#   CASES=gpt2-t64 ROUNDS=1 OLD=... NEW=... bench/binaries.sh     # one case, quickly
#
# Cases (CASES, default all four):
#   small-t1024   --model small --seq 1024 --batch 4, the byte corpus (bench/run.sh's)
#   small-t4096   --model small --seq 4096 --batch 1
#   gpt2-t64      GPT-2 124M's shape (--d 768 --layers 12 --heads 12 --d-ff 3072
#                 --vocab 50257 --tied), --seq 64 --batch 4, a file of random token ids
#   gpt2-t1024    the same at --seq 1024 --batch 4
# Environment: STEPS (per run, default 5; the median is over steps 2..STEPS), ROUNDS
# (default 2), BUSY_CASES (default "gpt2-t64"), WAIT_LOAD / WAIT_MAX (bench/lib.sh:
# wait for a quiet machine first), RESULTS (default bench/results/binaries), TOKENS (the
# GPT-2 cases' token file, made if missing; default $TMPDIR/tessera-gpt2-tokens.u16),
# OLD_LABEL / NEW_LABEL (what the summary calls each binary, e.g. its commit).
# Each case's first quiet runs are compared (`tessera compare`): binaries that should
# agree bit for bit must say "identical"; across an intended bit change they differ. bench/binaries_report.py writes RESULTS/summary.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/binaries.sh
. "$ROOT/bench/lib.sh"
OLD=${OLD:?OLD=the binary to compare against}
NEW=${NEW:-$TESSERA}
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-2}
CASES=${CASES:-"small-t1024 small-t4096 gpt2-t64 gpt2-t1024"}
BUSY_CASES=${BUSY_CASES:-"gpt2-t64"}
WAIT_LOAD=${WAIT_LOAD:-2.5}
WAIT_MAX=${WAIT_MAX:-600}
RESULTS=${RESULTS:-$ROOT/bench/results/binaries}
PYTHON=${PYTHON:-/usr/bin/python3}
for b in "$OLD" "$NEW"; do [ -x "$b" ] || die "$b: not an executable"; done
bench_lock
rm -f "$RESULTS"/*.jsonl "$RESULTS"/*.err "$RESULTS"/summary.md
TOKENS=${TOKENS:-${TMPDIR:-/tmp}/tessera-gpt2-tokens.u16} # made once, not kept in RESULTS
if [ ! -s "$TOKENS" ]; then # 2M random GPT-2 token ids, fixed seed
  "$PYTHON" -c 'import random, array, sys; r = random.Random(1)
array.array("H", (r.randrange(50257) for _ in range(2000000))).tofile(open(sys.argv[1], "wb"))' "$TOKENS"
fi
GPT2="--d 768 --layers 12 --heads 12 --d-ff 3072 --vocab 50257 --tied --data $TOKENS --data-format u16"
flags() {
  case $1 in
    small-t1024) echo "--model small --seq 1024 --batch 4 --data $ROOT/data/corpus.txt" ;;
    small-t4096) echo "--model small --seq 4096 --batch 1 --data $ROOT/data/corpus.txt" ;;
    gpt2-t64) echo "$GPT2 --seq 64 --batch 4" ;;
    gpt2-t1024) echo "$GPT2 --seq 1024 --batch 4" ;;
    *) die "unknown case '$1' (CASES: small-t1024 small-t4096 gpt2-t64 gpt2-t1024)" ;;
  esac
}
# run CASE WHICH BIN ROUND LOAD
run() {
  local out=$RESULTS/$1.$2.$4.$5 spin=
  wait_quiet
  if [ "$5" = busy ]; then (while :; do :; done) & spin=$!; fi
  echo "$1 $2 round $4 ($5)" >&2
  # shellcheck disable=SC2046
  "$3" train $(flags "$1") --steps "$STEPS" --eval-batches 1 --quiet --log "$out.jsonl" 2> "$out.err" ||
    echo "  exit $? (see $out.err)" >&2
  if [ -n "$spin" ]; then kill "$spin"; wait "$spin" 2> /dev/null || true; fi
}
for c in $CASES; do
  flags "$c" > /dev/null
  loads=quiet
  case " $BUSY_CASES " in *" $c "*) loads="quiet busy" ;; esac
  for r in $(seq 1 "$ROUNDS"); do
    for l in $loads; do
      run "$c" old "$OLD" "$r" "$l"
      run "$c" new "$NEW" "$r" "$l"
    done
  done
  "$NEW" compare "$RESULTS/$c.old.1.quiet.jsonl" "$RESULTS/$c.new.1.quiet.jsonl" > "$RESULTS/$c.compare" 2>&1 ||
    echo "$c: the two binaries' runs differ (see $RESULTS/$c.compare)" >&2
done
{ echo "old: ${OLD_LABEL:-$(basename "$OLD")} ($("$OLD" --version))"
  echo "new: ${NEW_LABEL:-$(basename "$NEW")} ($("$NEW" --version))"
  echo "steps $STEPS, rounds $ROUNDS, $(nproc) cores, $(date -u +%FT%TZ)"; } > "$RESULTS/about.txt"
"$PYTHON" "$ROOT/bench/binaries_report.py" "$RESULTS" | tee "$RESULTS/summary.md"
