#!/bin/bash
# tessera plan at the papers' settings (issue 31 item 3; docs/PERFORMANCE.md, "The papers'
# tables against the plan"): nothing is trained, every number is the plan's (tessera plan
# --json), beside the figures the three papers publish:
#
#   upipe   Llama3-8B (--shape llama3-8b) on one node of 8 H100 80 GB, --sp 8, --zero 3
#           (FSDP over the 8), --checkpoint --fused-ce --tiled-mlp, ulysses and upipe
#           (U = C = 8): the longest T under the exact rules and under --fast, the memory
#           at the UPipe paper's Table 8 lengths (128K ... 5M) and the step time at its
#           Table 9 lengths (1M, 2M, 3M)
#   lss     the LSS paper's 20M GPT (--model small, batch 4) with --sp N lss, N = 6 ... 864
#           at T = 58 N (its Table 3a) and with 4 data groups (its Table 4a, to 3,456
#           GPUs), V100 16 GB, 6 a node; and its 1.5B GPT (--model large, batch 1, 32 GB)
#           at its Table 6a's N and T. --fast: its N are not powers of two
#   mapl    the MAPL paper's LLaMA-2 models (--shape mapl-150m, mapl-500m, mapl-1b) at P = 4
#           and 8, --compress none, mapl (r = 256) and mapl-vq: the bytes each boundary
#           carries per step, and the pipeline's bubble as M grows
#
#   bench/plan_papers.sh                # from the repository root, after `make`; ~1 min
#   TESSERA=build/tessera RESULTS=bench/results/plan-papers bench/plan_papers.sh
#
# Writes RESULTS/NAME.json (one plan each), RESULTS/commands.txt (every command line) and
# RESULTS/report.md (bench/plan_papers_report.py, run with /usr/bin/python3).
set -eu
TESSERA=${TESSERA:-./tessera}
RESULTS=${RESULTS:-bench/results/plan-papers}
PY=${PY:-/usr/bin/python3}
mkdir -p "$RESULTS"
: >"$RESULTS/commands.txt"

# plan NAME FLAGS...: one plan, its JSON kept, its command line recorded
plan() {
  local name=$1
  shift
  echo "tessera plan $* --json > $name.json" >>"$RESULTS/commands.txt"
  "$TESSERA" plan "$@" --json >"$RESULTS/$name.json.tmp"
  mv "$RESULTS/$name.json.tmp" "$RESULTS/$name.json"
}

# --- UPipe: 8 x H100 80 GB; 989 TFLOP/s dense bf16 a GPU (the H100's figure; the paper
# states none); NVLink 900 GB/s both ways = 450 each way, InfiniBand 400 Gb/s = 50 GB/s
H100="--ranks 8 --ranks-per-node 8 --device-mem 80 --flops 989e12 --bw-intra 450 --bw-inter 50"
UP="--shape llama3-8b --sp 8 --zero 3 --checkpoint --fused-ce --tiled-mlp $H100"
for mode in ulysses upipe; do
  own=""
  [ "$mode" = upipe ] && own="--upipe-u 8"
  plan "upipe-$mode-longest" $UP --sp-mode $mode $own --seq 131072
  plan "upipe-$mode-longest-fast" $UP --sp-mode $mode $own --seq 131072 --fast
  for T in 131072 262144 524288 1048576 2097152 3145728 4194304 5242880; do
    # memory without the limit (the paper's table runs past 80 GB: its OOM column)
    plan "upipe-$mode-T$T" ${UP/--device-mem 80/--device-mem 100000} --sp-mode $mode $own \
      --seq $T --fast
  done
done

# --- LSS: Summit, 6 V100 a node; 15.7 TFLOP/s fp32 a GPU, NVLink 50 GB/s each way within
# a node, two EDR InfiniBand rails (2 x 12.5 GB/s) between nodes: the machine's published
# figures, the paper states none. T = 58 N: segments of 58 tokens, tile and leaf 2
V100="--ranks-per-node 6 --flops 15.7e12 --bw-intra 50 --bw-inter 25"
for N in 6 36 108 324 864; do
  T=$((58 * N))
  for dp in 1 4; do
    plan "lss-small-dp$dp-N$N" --model small --batch 4 --seq $T --tile 2 --leaf 2 --fast \
      --dp $dp --sp $N --sp-mode lss --zero 0 --device-mem 16 $V100
  done
done
# Table 6a: the 1.5B model, sequence length ~ sqrt(GPUs), 32 GB GPUs
for NT in 6:366 36:900 108:1512; do
  plan "lss-large-N${NT%%:*}" --model large --batch 1 --seq ${NT##*:} --tile 1 --leaf 1 --fast \
    --sp ${NT%%:*} --sp-mode lss --zero 0 --device-mem 32 $V100
done

# --- MAPL: 4 H100 a node; r = 256 (4x at d 1024, 6x at 1536, 8x at 2048), global batch 512.
# tessera's stages hold equal numbers of layers: a model whose layers P does not divide
# (9, 18, 20 at P = 8) is planned with the next multiple of P (--layers; a boundary's
# bytes and the bubble do not depend on them)
MH="--ranks-per-node 4 --device-mem 80 --flops 989e12 --bw-intra 450 --bw-inter 50"
for shape in mapl-150m:9 mapl-500m:18 mapl-1b:20; do
  L=${shape##*:} shape=${shape%%:*}
  for P in 4 8; do
    layers=$(((L + P - 1) / P * P))
    for c in none mapl mapl-vq; do
      comp=""
      [ "$c" != none ] && comp="--compress $c --rank 256 --compress-stages $P"
      for M in $P $((4 * P)) 512; do
          plan "mapl-$shape-P$P-$c-M$M" --shape $shape --layers $layers --batch 512 --pp $P \
          --microbatches $M --zero 0 $comp $MH
      done
    done
  done
done

"$PY" bench/plan_papers_report.py "$RESULTS" >"$RESULTS/report.md.tmp"
mv "$RESULTS/report.md.tmp" "$RESULTS/report.md"
echo "wrote $RESULTS/report.md"
