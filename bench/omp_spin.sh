#!/bin/bash
# How long an idle OpenMP thread should spin before it sleeps (GOMP_SPINCOUNT under
# OMP_WAIT_POLICY=passive, src/run/omp_env.c): GPT-2 124M's shape at T=64 B=4, where a step
# is hundreds of short parallel regions, on a quiet machine and beside one busy process (a
# shell loop holding a core), each spin count in turn, ROUNDS times.
#
#   TESSERA=build/tessera bench/omp_spin.sh         # ~15 min on 2 cores
#
# Environment: TESSERA (the binary), SPINS (spin counts, libgomp's unit: about 100 a
# microsecond; ["0 3000 10000 30000"]), ROUNDS [3], STEPS [6; the median is over the last
# 5], RESULTS [bench/results/omp-spin], TOKENS (the token file, as bench/binaries.sh makes
# it). Writes RESULTS/runs.tsv (round, load, spin, median ms a step) and RESULTS/summary.md
# (the median over rounds, and busy ÷ quiet).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/omp_spin.sh
. "$ROOT/bench/lib.sh"
SPINS=${SPINS:-"0 3000 10000 30000"}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
RESULTS=${RESULTS:-$ROOT/bench/results/omp-spin}
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$TESSERA" ] || die "$TESSERA: not an executable (TESSERA=the binary)"
[ "$STEPS" -ge 2 ] 2>/dev/null || die "STEPS=$STEPS: must be at least 2"
bench_lock
mkdir -p "$RESULTS"
TOKENS=${TOKENS:-${TMPDIR:-/tmp}/tessera-gpt2-tokens.u16}
if [ ! -s "$TOKENS" ]; then # the same 2M random ids as bench/binaries.sh
  "$PYTHON" -c 'import random, array, sys; r = random.Random(1)
array.array("H", (r.randrange(50257) for _ in range(2000000))).tofile(open(sys.argv[1], "wb"))' "$TOKENS"
fi
FLAGS="--d 768 --layers 12 --heads 12 --d-ff 3072 --vocab 50257 --tied --data $TOKENS
  --data-format u16 --seq 64 --batch 4 --steps $STEPS --quiet --eval-batches 1"
log=$RESULTS/run.jsonl
printf 'round\tload\tspin\tstep_ms\n' > "$RESULTS/runs.tsv"
for round in $(seq "$ROUNDS"); do
  for load in quiet busy; do
    for sc in $SPINS; do
      spin=
      if [ "$load" = busy ]; then (while :; do :; done) & spin=$!; fi
      # shellcheck disable=SC2086
      OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=$sc "$TESSERA" train $FLAGS --log "$log" \
        > /dev/null 2> "$RESULTS/run.err" || { [ -n "$spin" ] && kill "$spin"; die "run failed: $(head -c 300 "$RESULTS/run.err")"; }
      [ -n "$spin" ] && kill "$spin"
      ms=$(grep -o '"step_ms":[0-9.]*' "$log" | tail -n $((STEPS - 1)) | cut -d: -f2 | sort -n |
        awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
      printf '%s\t%s\t%s\t%s\n' "$round" "$load" "$sc" "$ms" | tee -a "$RESULTS/runs.tsv"
    done
  done
done
rm -f "$log" "$RESULTS/run.err"
"$PYTHON" - "$RESULTS" "$SPINS" "$(date -u +%FT%TZ)" <<'PY'
import csv, statistics, sys
res, spins, when = sys.argv[1], sys.argv[2].split(), sys.argv[3]
rows = list(csv.DictReader(open(res + "/runs.tsv"), delimiter="\t"))
med = {(l, s): statistics.median(float(r["step_ms"]) for r in rows if r["load"] == l and r["spin"] == s)
       for l in ("quiet", "busy") for s in spins}
out = ["| GOMP_SPINCOUNT | quiet ms/step | busy ms/step | busy ÷ quiet | quiet ÷ spin 0 |",
       "|---:|---:|---:|---:|---:|"]
for s in spins:
    out.append("| %s | %.0f | %.0f | %.2f× | %.2f |" % (s, med["quiet", s], med["busy", s],
               med["busy", s] / med["quiet", s], med["quiet", s] / med["quiet", spins[0]]))
out += ["", "GPT-2 124M shape, T=64 B=4, median over rounds of each run's median step (%s)." % when]
open(res + "/summary.md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
