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
TESSERA=${TESSERA:-./tessera}
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${STEPS:-5}
CASES=${CASES:-"t1024 t4096"}
WAIT_LOAD=${WAIT_LOAD:-2.5}
WAIT_MAX=${WAIT_MAX:-900}
RETRIES=${RETRIES:-2}
RESULTS=${RESULTS:-$ROOT/bench/results}
DOC=${DOC:-$ROOT/docs/PERFORMANCE.md}
RAW=$RESULTS/raw

die() { echo "bench/run.sh: $*" >&2; exit 1; }
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

load1() { cut -d' ' -f1 /proc/loadavg; }
# busy jiffies of the whole machine: user nice system irq softirq steal
busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }

# cores busy right now, averaged over 5 seconds (the load average lags by a minute)
busy_now() {
  local j0 j1; j0=$(busy_jiffies); sleep 5; j1=$(busy_jiffies)
  awk -v a="$j0" -v b="$j1" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz/5}'
}

# Quiet enough? Other work may be running. Before the first run: 1-minute load average
# at most WAIT_LOAD and under half a core busy now; before each later run only the
# latter (the load average still carries our own previous run). All waits together
# take at most WAIT_MAX seconds; after that the runs go ahead and the load is recorded.
waited=0
wait_quiet() {
  [ "$WAIT_LOAD" != 0 ] || return 0
  local first=$1 l b
  while :; do
    l=$(load1); b=$(busy_now)
    if [ "$first" = 1 ]; then
      awk -v l="$l" -v m="$WAIT_LOAD" -v b="$b" 'BEGIN{exit !(l > m || b > 0.5)}' || break
    else
      awk -v b="$b" 'BEGIN{exit !(b > 0.5)}' || break
    fi
    if [ "$waited" -ge "$WAIT_MAX" ]; then
      echo "still busy after ${waited}s of waiting (load $l, $b cores busy); running anyway" >&2; break
    fi
    echo "load average $l (limit $WAIT_LOAD), $b cores busy; waiting ($waited/${WAIT_MAX}s)" >&2
    sleep 25; waited=$((waited + 30))
  done
}

# one benchmark at a time per results folder: two at once would wipe each other's raw
# outputs and slow each other down
mkdir -p "$RESULTS"
exec 9< "$RESULTS"
if command -v flock > /dev/null; then
  flock -n 9 || die "another bench/run.sh is running with RESULTS=$RESULTS"
fi
rm -rf "$RAW"
mkdir -p "$RAW"
# the runs below work in the repository root: make every path absolute first
RAW=$(cd "$RAW" && pwd); RESULTS=$(cd "$RESULTS" && pwd)
DOC=$(cd "$(dirname "$DOC")" && pwd)/$(basename "$DOC")
echo "$STEPS" > "$RAW/steps"
"$TESSERA" info > "$RAW/tessera-info.txt" 2>&1 || true
# the commit the binary was built from, when it sits in a git checkout
git -C "$(dirname "$TESSERA")" describe --always --dirty > "$RAW/tessera-rev" 2>/dev/null || rm -f "$RAW/tessera-rev"

# run NAME CMD... : runs CMD with stdout to NAME.out, stderr to NAME.err, and writes
# NAME.cmd (the command) and NAME.meta (load, wall time, own and others' CPU seconds)
run() {
  local name=$1; shift
  local w0=$waited
  wait_quiet "$first_run"
  if [ "$first_run" = 1 ]; then
    date -u +%Y-%m-%dT%H:%M:%SZ > "$RAW/date"; uptime > "$RAW/uptime-start.txt"; first_run=0
  fi
  printf '%q ' "$@" | sed 's/ $//' > "$RAW/$name.cmd"
  local l0 j0 t0 j1 t1 rc=0
  l0=$(cat /proc/loadavg); j0=$(busy_jiffies); t0=$(date +%s.%N)
  if [ -x /usr/bin/time ]; then   # GNU time: the run's own CPU seconds and max RSS
    /usr/bin/time -f '%U %S %M' -o "$RAW/$name.time" "$@" > "$RAW/$name.out" 2> "$RAW/$name.err" || rc=$?
  else
    "$@" > "$RAW/$name.out" 2> "$RAW/$name.err" || rc=$?
  fi
  t1=$(date +%s.%N); j1=$(busy_jiffies)
  local cu="" cs="" cm=""
  if [ -s "$RAW/$name.time" ]; then read -r cu cs cm < <(tail -n 1 "$RAW/$name.time") || true; fi
  {
    echo "rc $rc"
    echo "waited_s $((waited - w0))"
    echo "load_before $l0"
    echo "load_after $(cat /proc/loadavg)"
    echo "wall_s $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')"
    if [ -n "$cs" ]; then echo "own_cpu_s $(awk -v u="$cu" -v s="$cs" 'BEGIN{printf "%.2f", u+s}')"; fi
    if [ -n "$cm" ]; then echo "time_maxrss_kb $cm"; fi
    echo "machine_busy_s $(awk -v a="$j0" -v b="$j1" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}')"
  } > "$RAW/$name.meta"
  [ "$rc" = 0 ] || echo "bench/run.sh: $name failed (exit $rc); see $RAW/$name.err" >&2
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
first_run=1
for c in $CASES; do
  read -r T B <<< "$(case_shape "$c")"
  echo "== $c: small, T=$T B=$B, $STEPS steps (load $(load1))" >&2
  # tessera first; --eval-batches 1 keeps the untimed final evaluation short
  run_quiet "$c.tessera" "$TESSERA" train --model small --seq "$T" --batch "$B" \
    --steps "$STEPS" --eval-batches 1 --data data/corpus.txt --log "$RAW/$c.tessera.jsonl"
  tail -n 3 "$RAW/$c.tessera.out" >&2 || true
  run_quiet "$c.torch" "$PYTHON" bench/torch_gpt.py --seq "$T" --batch "$B" \
    --steps "$STEPS" --d 512 --layers 6 --heads 8
  tail -n 2 "$RAW/$c.torch.err" >&2 || true
done

uptime > "$RAW/uptime-end.txt"
"$PYTHON" "$ROOT/bench/report.py" --raw "$RAW" --cases "$CASES" \
  --json "$RESULTS/latest.json" --doc "$DOC"
echo "wrote $RESULTS/latest.json and $DOC" >&2
