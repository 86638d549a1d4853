#!/bin/bash
# Side-by-side benchmark: tessera's serial CPU trainer against eager PyTorch on the
# same machine, one case after the other, same model (docs/MODEL.md), same sizes.
#
#   bench/run.sh                      # from the repository root, after `make`
#   TESSERA=/path/to/tessera STEPS=6 bench/run.sh
#
# Environment:
#   TESSERA    the tessera binary (default ./tessera); this script builds nothing
#   PYTHON     the Python that has PyTorch (default /usr/bin/python3)
#   STEPS      optimizer steps per run; the first is warm-up, the median is over the
#              rest (default 5)
#   CASES      which cases to run (default "t1024 t4096"; "t64" is a quick smoke test)
#   WAIT_LOAD  wait before the first run until the 1-minute load average is at most
#              this, and before every run until under half a core is busy (default
#              2.5; 0 = never wait) ...
#   WAIT_MAX   ... but for at most this many seconds in all, then run anyway (default 900)
#   RETRIES    rerun a run that other processes slowed (they took > 0.1 cores on
#              average) up to this many times (default 2), and keep the attempt they
#              disturbed least
#   RESULTS    results folder (default bench/results); raw outputs go to RESULTS/raw
#   DOC        the page whose table is regenerated (default docs/PERFORMANCE.md)
#
# Each run is wrapped so that the load on the machine is on record: the load average
# before and after, and the CPU time that *other* processes used while it ran (busy
# time of the whole machine from /proc/stat minus the run's own user+system time).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/run.sh
# the default documented above, set before bench/lib.sh would pick build/tessera
TESSERA=${TESSERA:-./tessera}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${STEPS:-5}
CASES=${CASES:-"t1024 t4096"}
WAIT_LOAD=${WAIT_LOAD:-2.5}
WAIT_MAX=${WAIT_MAX:-900}
RETRIES=${RETRIES:-2}
RESULTS=${RESULTS:-$ROOT/bench/results}
DOC=${DOC:-$ROOT/docs/PERFORMANCE.md}

[ -x "$TESSERA" ] || die "TESSERA=$TESSERA: not an executable (build first: make -j2)"
TESSERA=$(cd "$(dirname "$TESSERA")" && pwd)/$(basename "$TESSERA")
"$PYTHON" -c 'import torch' 2>/dev/null || die "PYTHON=$PYTHON: cannot import torch"
[ "$STEPS" -ge 3 ] 2>/dev/null || die "STEPS=$STEPS: need at least 3 (1 warm-up + a median of 2 or more)"
[ -f "$ROOT/data/corpus.txt" ] || die "$ROOT/data/corpus.txt: missing"

# case -> "T B"; the model is the `small` preset: d 512, 6 layers, 8 heads, d_ff 2048
case_shape() {
  case "$1" in
    t1024) echo "1024 4" ;;
    t4096) echo "4096 1" ;;
    t64) echo "64 1" ;;   # seconds, not minutes: for checking this script itself
    *) die "CASES: unknown case '$1' (t1024, t4096, t64)" ;;
  esac
}

for c in $CASES; do case_shape "$c" > /dev/null; done

# one benchmark at a time per results folder: two at once would wipe each other's raw
# outputs and slow each other down. bench_lock also makes RESULTS absolute, as the runs
# below work in the repository root.
bench_lock
RAW=$RESULTS/raw
rm -rf "$RAW"
mkdir -p "$RAW"
DOC=$(cd "$(dirname "$DOC")" && pwd)/$(basename "$DOC")
echo "$STEPS" > "$RAW/steps"
"$TESSERA" info > "$RAW/tessera-info.txt" 2>&1 || true
# the commit the binary was built from, when it sits in a git checkout
git -C "$(dirname "$TESSERA")" describe --always --dirty > "$RAW/tessera-rev" 2>/dev/null || rm -f "$RAW/tessera-rev"

# run NAME CMD... : waits for a quiet machine (wait_quiet: at most WAIT_MAX seconds in
# all, then the runs go ahead and the load is recorded), runs CMD with stdout to NAME.out,
# stderr to NAME.err, and writes NAME.cmd (the command) and NAME.meta (load, wall time,
# own and others' CPU seconds)
run() {
  local name=$1; shift
  local w0=$waited first=$first_run
  wait_quiet
  # wait_quiet leaves first_run alone when WAIT_LOAD=0: the first run is noted here
  if [ "$first" = 1 ]; then
    date -u +%Y-%m-%dT%H:%M:%SZ > "$RAW/date"; uptime > "$RAW/uptime-start.txt"; first_run=0
  fi
  # recorded as a reader can run it from the root: no folder of this machine
  local shown_bin=${TESSERA#"$ROOT"/}
  [ "$shown_bin" = "$TESSERA" ] && shown_bin='$TESSERA'
  printf '%q ' "$@" | sed "s/ \$//; s|$TESSERA|$shown_bin|; s|$ROOT/||g" > "$RAW/$name.cmd"
  # GNU time when there is one: the run's own CPU seconds and max RSS (its .time file stays)
  local timed=()
  if [ -x /usr/bin/time ]; then timed=(/usr/bin/time -f "$GNU_TIME_FORMAT" -o "$RAW/$name.time"); fi
  bench_timed "$RAW/$name" "${timed[@]}" "$@"
  bench_time_read "$RAW/$name.time"
  {
    echo "rc $RUN_RC"
    echo "waited_s $((waited - w0))"
    echo "load_before $RUN_LOAD0"
    echo "load_after $(cat /proc/loadavg)"
    echo "wall_s $(bench_wall_s %.2f)"
    if [ -n "$RUN_CPU_S" ]; then echo "own_cpu_s $RUN_CPU_S"; fi
    if [ -n "$RUN_RSS_KB" ]; then echo "time_maxrss_kb $RUN_RSS_KB"; fi
    echo "machine_busy_s $(bench_busy_s)"
  } > "$RAW/$name.meta"
  [ "$RUN_RC" = 0 ] || echo "$BENCH: $name failed (exit $RUN_RC); see $RAW/$name.err" >&2
}

# others_cores NAME: cores other processes took on average during run NAME
others_cores() {
  awk '{v[$1]=$2} END{ if (v["wall_s"] > 0 && ("own_cpu_s" in v)) { o = v["machine_busy_s"] - v["own_cpu_s"];
       printf "%.2f", (o > 0 ? o : 0) / v["wall_s"] } else print 0 }' "$RAW/$1.meta"
}

# run_quiet NAME CMD...: run, and run again (up to RETRIES times) while other processes
# slowed it; keep the attempt they disturbed least (the others in RAW/attempts/)
run_quiet() {
  local name=$1 attempt=1 o best="" best_o=""
  mkdir -p "$RAW/attempts"
  while :; do
    run "$@"
    echo "attempt $attempt" >> "$RAW/$name.meta"
    o=$(others_cores "$name")
    for f in "$RAW/$name".*; do mv "$f" "$RAW/attempts/$(basename "$f").$attempt"; done
    if [ -z "$best" ] || awk -v o="$o" -v b="$best_o" 'BEGIN{exit !(o < b)}'; then best=$attempt; best_o=$o; fi
    awk -v o="$o" 'BEGIN{exit !(o > 0.1)}' || break
    [ "$attempt" -le "$RETRIES" ] || break
    echo "$name: other processes took $o cores on average; running it again" >&2
    attempt=$((attempt + 1))
  done
  for f in "$RAW/attempts/$name".*."$best"; do
    g=$(basename "$f"); cp "$f" "$RAW/${g%."$best"}"
  done
  [ "$attempt" = 1 ] || echo "$name: kept attempt $best of $attempt (others took $best_o cores)" >&2
}

cd "$ROOT"
for c in $CASES; do
  read -r T B <<< "$(case_shape "$c")"
  echo "== $c: small, T=$T B=$B, $STEPS steps (load $(load1))" >&2
  # tessera first; --eval-batches 1 keeps the untimed final evaluation short
  run_quiet "$c.tessera" "$TESSERA" train --model small --seq "$T" --batch "$B" \
    --steps "$STEPS" --eval-batches 1 --data data/corpus.txt --log "${RAW#"$ROOT"/}/$c.tessera.jsonl"
  tail -n 3 "$RAW/$c.tessera.out" >&2 || true
  run_quiet "$c.torch" "$PYTHON" bench/torch_gpt.py --seq "$T" --batch "$B" \
    --steps "$STEPS" --d 512 --layers 6 --heads 8
  tail -n 2 "$RAW/$c.torch.err" >&2 || true
done

uptime > "$RAW/uptime-end.txt"
"$PYTHON" "$ROOT/bench/report.py" --raw "$RAW" --cases "$CASES" \
  --json "$RESULTS/latest.json" --doc "$DOC"
echo "wrote $RESULTS/latest.json and $DOC" >&2
