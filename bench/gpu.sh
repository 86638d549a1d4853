#!/bin/bash
# GPU benchmark: tessera's CUDA backend against PyTorch on the same GPU, one run after
# the other in one invocation. Models: the `small` GPT preset and the `llama-100m`
# preset (docs/MODEL.md), batch 1, T = 4096, 16384 and 65536, in fp32 (tessera's exact
# tier: the CPU's bits), fp32 with --fast (cuBLAS's products) and bf16. For each
# run: tokens/s (median over the steps after the first), MFU against the H200's dense
# peak (989 TFLOP/s bf16, 67 TFLOP/s fp32), and peak device memory, sampled with
# nvidia-smi every 0.2 s (largest sample minus the idle reading before the run).
#
#   bench/gpu.sh                              # from the repository root, after the CUDA build
#   BUDGET_S=60 CASES="small:4096" PRECISIONS=bf16 bench/gpu.sh     # a quick look
#
# Environment:
#   TESSERA     the tessera binary, built with --enable-cuda (default build-cuda/tessera);
#               this script builds nothing. One built by tests/gpu/run.sh against the
#               libraries of tests/gpu/kit.sh finds them through .gpu-kit/env.sh
#   PYTHON      the Python with PyTorch + CUDA (default python3); without them the
#               table says "PyTorch with CUDA not available on this machine"
#   STEPS       optimizer steps per run, the first is warm-up (default 4, at least 2)
#   CASES       MODEL:T words, run in this order (default: every model at T=4096, then
#               16384, then 65536, so the short cases are measured first)
#   PRECISIONS  default "fp32 fast bf16": fp32 is tessera's exact tier, fast is fp32 with
#               --fast (docs/GPU.md); PyTorch runs fp32 (its row is shown for both) and bf16
#   IMPLS       default "tessera torch"
#   BUDGET_S    seconds for all runs together (default 150). Before each run the time
#               left is checked, and a run that the same implementation's run at a
#               smaller T shows will not fit in it (or in the device memory, or that
#               ran out of memory or time there already) is skipped and recorded as
#               "skipped: out of time/memory"; each run is also killed at the time left
#   RUN_MAX_S   cap on one run in seconds (default 120)
#   GPU_INDEX   the nvidia-smi index of the device to sample (default 0)
#   RESULTS     results folder (default bench/results/gpu): latest.md (the report,
#               written to a temporary name and renamed) and raw/ (each run's command,
#               output, run log, memory samples and a .meta summary)
#
# Exit status: 0 the report was written and at least one tessera run was measured;
# 1 otherwise (the report, if any, says why each run is missing); 2 bad settings.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=bench/gpu.sh
TESSERA=${TESSERA:-$ROOT/build-cuda/tessera}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-4}
CASES=${CASES:-"small:4096 llama-100m:4096 small:16384 llama-100m:16384 small:65536 llama-100m:65536"}
PRECISIONS=${PRECISIONS:-"fp32 fast bf16"}
IMPLS=${IMPLS:-"tessera torch"}
BUDGET_S=${BUDGET_S:-150}
RUN_MAX_S=${RUN_MAX_S:-120}
GPU_INDEX=${GPU_INDEX:-0}
RESULTS=${RESULTS:-$ROOT/bench/results/gpu}
MIN_RUN_S=10 # less time left than this: not worth starting a run

usage() { echo "$BENCH: $*" >&2; exit 2; }
is_uint() { case "$1" in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }
{ is_uint "$STEPS" && [ "$STEPS" -ge 2 ]; } || usage "STEPS=$STEPS: need a whole number >= 2 (1 warm-up + 1 or more measured)"
is_uint "$BUDGET_S" || usage "BUDGET_S=$BUDGET_S: need a whole number of seconds"
{ is_uint "$RUN_MAX_S" && [ "$RUN_MAX_S" -ge 1 ]; } || usage "RUN_MAX_S=$RUN_MAX_S: need a whole number of seconds >= 1"
for c in $CASES; do
  m=${c%%:*} t=${c#*:}
  case "$m" in small | llama-100m | tiny | mini | large | llama-tiny | llama-mini) ;;
    *) usage "CASES: '$c': unknown model '$m' (small, llama-100m, or another tessera preset)" ;;
  esac
  { is_uint "$t" && [ "$t" -gt 0 ]; } || usage "CASES: '$c': T must be a positive whole number (MODEL:T)"
done
for p in $PRECISIONS; do case "$p" in fp32 | fast | bf16) ;; *) usage "PRECISIONS: '$p': fp32, fast or bf16" ;; esac; done
for i in $IMPLS; do case "$i" in tessera | torch) ;; *) usage "IMPLS: '$i': tessera or torch" ;; esac; done
[ -f "$ROOT/data/corpus.txt" ] || die "$ROOT/data/corpus.txt: missing"
command -v timeout > /dev/null || die "timeout (coreutils) not found"
REPORT_PY=${REPORT_PY:-$(command -v python3 || echo "$PYTHON")}

START=$(date +%s)
left_s() { echo $((BUDGET_S - ($(date +%s) - START))); }

bench_lock
RAW=$RESULTS/raw
rm -rf "$RAW"
mkdir -p "$RAW"
cd "$ROOT" || die "$ROOT: cannot enter"

# --- what runs where -----------------------------------------------------------------
HAVE_SMI=0
if command -v nvidia-smi > /dev/null && timeout 20 nvidia-smi -L > "$RAW/nvidia-smi-L.txt" 2>&1 \
  && grep -q '^GPU' "$RAW/nvidia-smi-L.txt"; then
  HAVE_SMI=1
fi
smi_used() {
  timeout 5 nvidia-smi -i "$GPU_INDEX" --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | head -n 1 | tr -dc '0-9'
}
MEM_TOTAL=0
if [ $HAVE_SMI = 1 ]; then
  MEM_TOTAL=$(timeout 5 nvidia-smi -i "$GPU_INDEX" --query-gpu=memory.total --format=csv,noheader,nounits 2> /dev/null | head -n 1 | tr -dc '0-9')
  GPU_DESC=$(timeout 5 nvidia-smi -i "$GPU_INDEX" --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null | head -n 1)
else
  GPU_DESC="no nvidia-smi or no device: $(head -c 200 "$RAW/nvidia-smi-L.txt" 2> /dev/null | tr '\n' ' ')"
fi
MEM_TOTAL=${MEM_TOTAL:-0}

TS_OK=1 TS_WHY="" HAVE_PREC=0
if [ ! -x "$TESSERA" ]; then
  TS_OK=0 TS_WHY="TESSERA=$TESSERA: not an executable (build with ./configure --enable-cuda first)"
else
  TESSERA=$(cd "$(dirname "$TESSERA")" && pwd)/$(basename "$TESSERA")
  # a binary built against tests/gpu/kit.sh's libraries needs them on the library path
  if ! "$TESSERA" info > /dev/null 2>&1 && [ -f "$ROOT/.gpu-kit/env.sh" ]; then
    # shellcheck source=/dev/null
    . "$ROOT/.gpu-kit/env.sh" "$ROOT/.gpu-kit" >&2
  fi
  "$TESSERA" info > "$RAW/tessera-info.txt" 2>&1 || true
  if ! grep -Eq '^ *cuda +built' "$RAW/tessera-info.txt"; then
    TS_OK=0 TS_WHY="$TESSERA has no CUDA backend (tessera info: $(grep -E '^ *cuda ' "$RAW/tessera-info.txt" | head -n 1 | sed 's/^ *//'))"
  fi
  # into a variable first: grep -q would end the pipe early, and pipefail would see that
  help=$(timeout 20 "$TESSERA" train --help 2> /dev/null)
  case "$help" in *--precision*) HAVE_PREC=1 ;; esac
fi
# one look at PyTorch up front: without it (or without CUDA for it) every PyTorch run
# would only say so, seconds each
TORCH_ERR=""
if ! command -v "$PYTHON" > /dev/null; then
  TORCH_DESC="PYTHON=$PYTHON: not found"
else
  TORCH_DESC=$(timeout 120 "$PYTHON" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available" if torch.cuda.is_available() else "NOT available")' 2>&1 | tail -n 1)
fi
case "$TORCH_DESC" in
  *" NOT available") TORCH_ERR="PyTorch with CUDA not available on this machine ($PYTHON: torch $TORCH_DESC)" ;;
  *" available") ;;
  *) TORCH_ERR="PyTorch with CUDA not available on this machine ($PYTHON: $TORCH_DESC)" ;;
esac

{
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpu $GPU_DESC"
  echo "tessera $( (head -n 1 "$RAW/tessera-info.txt" 2> /dev/null || echo "not found") | tr '\n' ' ')($(git -C "$ROOT" describe --always --dirty 2> /dev/null || echo unknown))"
  echo "torch $TORCH_DESC ($PYTHON)"
  echo "steps $STEPS"
  echo "budget_s $BUDGET_S"
  if [ -n "$TORCH_ERR" ]; then echo "torch_error $PYTHON: $TORCH_DESC"; fi
} > "$RAW/setup.txt"
echo "$BENCH: $GPU_DESC; tessera: ${TS_WHY:-ok}; torch: $TORCH_DESC; budget ${BUDGET_S}s" >&2

# --- one run ---------------------------------------------------------------------------
# meta NAME KEY VALUE...: appends "KEY VALUE" lines to NAME.meta
meta() {
  local f=$RAW/$1.meta; shift
  while [ $# -ge 2 ]; do printf '%s %s\n' "$1" "$2" >> "$f"; shift 2; done
}

# skip_run NAME IMPL MODEL T PREC REASON
skip_run() {
  meta "$1" impl "$2" model "$3" seq "$4" batch 1 prec "$5" steps "$STEPS" status skipped reason "$6"
  echo "  $1: skipped: $6" >&2
}

SAMPLER=""
stop_sampler() {
  if [ -n "$SAMPLER" ]; then kill "$SAMPLER" 2> /dev/null; wait "$SAMPLER" 2> /dev/null; SAMPLER=""; fi
}
trap stop_sampler EXIT

# measure NAME IMPL MODEL T PREC CMD...: runs CMD under timeout with memory sampling
measure() {
  local name=$1 impl=$2 model=$3 T=$4 prec=$5; shift 5
  local left cap base rc status reason t0 t1
  left=$(left_s)
  if [ "$left" -lt "$MIN_RUN_S" ]; then skip_run "$name" "$impl" "$model" "$T" "$prec" "out of time (${left}s of the ${BUDGET_S}s budget left)"; return; fi
  local verdict
  verdict=$("$REPORT_PY" "$ROOT/bench/gpu_report.py" estimate --raw "$RAW" --impl "$impl" --model "$model" \
    --prec "$prec" --seq "$T" --steps "$STEPS" --left-s "$left" --mem-total-mib "$MEM_TOTAL" 2>&1 | tail -n 1)
  case "$verdict" in
    run) ;;
    "skip "*) skip_run "$name" "$impl" "$model" "$T" "$prec" "${verdict#skip }"; return ;;
    *) echo "  $name: estimate failed ($verdict); running it" >&2 ;;
  esac
  cap=$left
  [ "$cap" -le "$RUN_MAX_S" ] || cap=$RUN_MAX_S
  printf '%q ' "$@" | sed 's/ $//' > "$RAW/$name.cmd"
  base=""
  if [ $HAVE_SMI = 1 ]; then
    base=$(smi_used)
    # shellcheck disable=SC2005  # echo ends each sample with the newline smi_used strips
    (while :; do echo "$(smi_used)"; sleep 0.2; done) > "$RAW/$name.mem" 2> /dev/null &
    SAMPLER=$!
  fi
  echo "+ [cap ${cap}s] $(cat "$RAW/$name.cmd")" >&2
  t0=$(date +%s.%N)
  timeout -k 10 "$cap" "$@" > "$RAW/$name.out" 2> "$RAW/$name.err"
  rc=$?
  t1=$(date +%s.%N)
  stop_sampler
  status=ok reason=""
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    status=timeout reason="out of time (killed at its ${cap}s cap)"
  elif [ $rc != 0 ]; then
    status=failed
    reason=$(grep -v '^\s*$' "$RAW/$name.err" | grep -iv '^pytorch step' | tail -n 1 | cut -c 1-160)
    [ -n "$reason" ] || reason=$(tail -n 1 "$RAW/$name.out" | cut -c 1-160)
    if grep -qi 'out of memory' "$RAW/$name.err" "$RAW/$name.out" 2> /dev/null; then
      reason="out of memory: $reason"
    fi
    reason="exit $rc: ${reason:-no message}"
  fi
  meta "$name" impl "$impl" model "$model" seq "$T" batch 1 prec "$prec" steps "$STEPS" \
    rc "$rc" status "$status" reason "$reason" cap_s "$cap" \
    wall_s "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')" base_mib "${base:-}"
  echo "  $name: $status${reason:+ ($reason)}, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s" >&2
}

# --- the runs -------------------------------------------------------------------------
for c in $CASES; do
  model=${c%%:*} T=${c#*:}
  for prec in $PRECISIONS; do
    for impl in $IMPLS; do
      name=$impl-$model-T$T-$prec
      if [ "$impl" = tessera ]; then
        if [ $TS_OK = 0 ]; then skip_run "$name" tessera "$model" "$T" "$prec" "$TS_WHY"; continue; fi
        pflag=()
        if [ "$prec" = fast ]; then
          pflag=(--fast)
        elif [ $HAVE_PREC = 1 ]; then
          pflag=(--precision "$prec")
        elif [ "$prec" != fp32 ]; then
          skip_run "$name" tessera "$model" "$T" "$prec" "this tessera has no --precision flag"; continue
        fi
        measure "$name" tessera "$model" "$T" "$prec" "$TESSERA" train --device cuda "${pflag[@]}" \
          --model "$model" --seq "$T" --batch 1 --steps "$STEPS" --eval-batches 1 \
          --data data/corpus.txt --log "$RAW/$name.jsonl" --quiet
      else
        # PyTorch has no exact tier: its fp32 run stands beside both of tessera's
        [ "$prec" = fast ] && continue
        if [ -n "$TORCH_ERR" ]; then skip_run "$name" torch "$model" "$T" "$prec" "$TORCH_ERR"; continue; fi
        measure "$name" torch "$model" "$T" "$prec" "$PYTHON" "$ROOT/bench/torch_gpu.py" \
          --model "$model" --seq "$T" --batch 1 --steps "$STEPS" --precision "$prec"
        # exit 3: no PyTorch or no CUDA for it; the rest would say the same
        if grep -q '^rc 3$' "$RAW/$name.meta" 2> /dev/null; then
          TORCH_ERR=$(sed -n 's/.*"error": *"\([^"]*\)".*/\1/p' "$RAW/$name.out" | tail -n 1)
          TORCH_ERR="PyTorch with CUDA not available on this machine (${TORCH_ERR:-see $name.out})"
          echo "torch_error ${TORCH_ERR#*(}" | sed 's/)$//' >> "$RAW/setup.txt"
        fi
      fi
    done
  done
done

"$REPORT_PY" "$ROOT/bench/gpu_report.py" report --raw "$RAW" --out "$RESULTS/latest.md" || die "the report failed (raw files in $RAW)"
echo "$BENCH: done in $(($(date +%s) - START)) s; report $RESULTS/latest.md" >&2
grep -q '^status ok$' "$RAW"/tessera-*.meta 2> /dev/null || { echo "$BENCH: no tessera run was measured" >&2; exit 1; }
exit 0
