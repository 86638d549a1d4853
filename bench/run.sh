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
#   WAIT_LOAD  wait before starting until the 1-minute load average is at most this
#              (default 2.5; 0 = do not wait) ...
#   WAIT_MAX   ... but for at most this many seconds, then run anyway (default 900)
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

# Quiet enough? Other helpers may be building; wait a bounded time, then go anyway.
if [ "$WAIT_LOAD" != 0 ]; then
  waited=0
  while awk -v l="$(load1)" -v m="$WAIT_LOAD" 'BEGIN{exit !(l > m)}'; do
    [ "$waited" -ge "$WAIT_MAX" ] && { echo "load still $(load1) after ${waited}s; running anyway" >&2; break; }
    echo "load average $(load1) > $WAIT_LOAD; waiting ($waited/${WAIT_MAX}s)" >&2
    sleep 30; waited=$((waited + 30))
  done
fi

rm -rf "$RAW"
mkdir -p "$RAW"
RAW=$(cd "$RAW" && pwd)   # the runs below change directory
echo "$STEPS" > "$RAW/steps"
date -u +%Y-%m-%dT%H:%M:%SZ > "$RAW/date"
"$TESSERA" info > "$RAW/tessera-info.txt" 2>&1 || true
# the commit the binary was built from, when it sits in a git checkout
git -C "$(dirname "$TESSERA")" describe --always --dirty > "$RAW/tessera-rev" 2>/dev/null || rm -f "$RAW/tessera-rev"
uptime > "$RAW/uptime-start.txt"

# run NAME CMD... : runs CMD with stdout to NAME.out, stderr to NAME.err, and writes
# NAME.cmd (the command) and NAME.meta (load, wall time, own and others' CPU seconds)
run() {
  local name=$1; shift
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
    echo "load_before $l0"
    echo "load_after $(cat /proc/loadavg)"
    echo "wall_s $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')"
    if [ -n "$cs" ]; then echo "own_cpu_s $(awk -v u="$cu" -v s="$cs" 'BEGIN{printf "%.2f", u+s}')"; fi
    if [ -n "$cm" ]; then echo "time_maxrss_kb $cm"; fi
    echo "machine_busy_s $(awk -v a="$j0" -v b="$j1" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}')"
  } > "$RAW/$name.meta"
  [ "$rc" = 0 ] || echo "bench/run.sh: $name failed (exit $rc); see $RAW/$name.err" >&2
}

for c in $CASES; do
  read -r T B <<< "$(case_shape "$c")"
  echo "== $c: small, T=$T B=$B, $STEPS steps (load $(load1))" >&2
  # tessera first; --eval-batches 1 keeps the untimed final evaluation short
  (cd "$ROOT" && run "$c.tessera" "$TESSERA" train --model small --seq "$T" --batch "$B" \
     --steps "$STEPS" --eval-batches 1 --data data/corpus.txt --log "$RAW/$c.tessera.jsonl")
  tail -n 3 "$RAW/$c.tessera.out" >&2 || true
  (cd "$ROOT" && run "$c.torch" "$PYTHON" bench/torch_gpt.py --seq "$T" --batch "$B" \
     --steps "$STEPS" --d 512 --layers 6 --heads 8)
  tail -n 2 "$RAW/$c.torch.err" >&2 || true
done

uptime > "$RAW/uptime-end.txt"
"$PYTHON" "$ROOT/bench/report.py" --raw "$RAW" --cases "$CASES" \
  --json "$RESULTS/latest.json" --doc "$DOC"
echo "wrote $RESULTS/latest.json and $DOC" >&2
