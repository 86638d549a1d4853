#!/bin/sh
# Exact sequence parallelism (docs/ALGORITHMS.md §2): `mpiexec -n D·N tessera train
# --sp N --dp D --sp-mode MODE` equals the serial run of the same global batch
# bit for bit (tessera compare says identical, the final parameter hashes
# match) for MODE lss, lss-fused, lss-basic, lss-unfused, N in {1, 2, 4, 8}, D in {1, 2}
# (world <= 8), dropout off and on.
#
# The step records count the collectives of every attention layer exactly.
# Per layer and per sequence a rank holds, with T·d the sequence's floats of
# width d, counted on rank 0 as bytes sent plus received:
#   all-gather of T/N rows of d floats:    2·(N-1)·(T/N)·d·4   (the input, E, K or V)
#   reduce-scatter of n floats (the tree): 8·n·(N-1)/N         (n = 2·T·d for [dK|dV],
#                                                               T·d for dK, dV or dE)
#   lss        1 all-gather (input)              + 1 reduce-scatter ([dK|dV])     = 2
#   lss-fused  2 all-gathers (input, E)          + 2 reduce-scatters ([dK|dV], dE) = 4
#   lss-basic  3 all-gathers (K, V, E)           + 3 reduce-scatters (dK, dV, dE)  = 6
#   lss-unfused 2 all-gathers (K, V)             + 2 reduce-scatters (dK, dV)      = 4
#   lss-zigzag 1 all-gather (input)              + 1 reduce-scatter ([dK|dV] of the
#              first runs for the first chunks, of the second runs for both: 3/2 of
#              lss's floats)                                                      = 2
#              and two gradient all-reduces per sequence (each run's partials)
#   lss-fused-zigzag, lss-basic-zigzag: the ablations balanced the same way, 4 and 6
#              (their dK, dV reduce-scatters 3/2 of the contiguous ones' floats)
#   megatron   4 all-gathers (ln1, ln2, dy, dy') + 4 reduce-scatters (partial
#              projections W_o, W_2 forward; dx of W_1, of W_q/k/v backward)   = 8
#   megatron-2022 megatron's 8 and the forward's 2 + 2 again, replayed in the
#              backward (full recomputation)                                   = 12
# megatron and megatron-2022 sum partial projections across ranks, so they are
# in the tolerance tier: loss, gradient norm and validation loss within rtol
# 1e-5 of serial at every step. Measured: 1e-7 (one ulp of the norm) or less
# after 3 steps (megatron-2022: 9e-8, dropout 0 and 0.1); a wrong slice or a
# missing term moves the loss by 1e-3 or more.
# Layouts that cannot be exact are refused before any work; a failure on one
# rank ends every rank.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
# tiny: T 64, d 64, 2 layers, tile 8, leaf 8: up to 8 segments of one leaf.
# Batch 2: with D = 1 a rank runs two sequences one after the other (their
# gradients join in a tree), with D = 2 one each. One thread per rank: this
# machine has two cores and waiting ranks busy-poll.
SEQ=64
DM=64
BASE="--model tiny --batch 2 --steps 2 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"
RUN_MPI="timeout -k 10 180 $MPIEXEC"

# expected per-layer record of rank 0: nb sequences per rank, mode, N
layer_counts() { # nb mode N
  nb=$1 mode=$2 N=$3
  ag=$((2 * (N - 1) * (SEQ / N) * DM * 4))
  rs1=$((8 * SEQ * DM * (N - 1) / N))
  case $mode in
  lss) echo "{\"reduce_scatter\":{\"calls\":$nb,\"bytes\":$((nb * 2 * rs1))},\"allgather\":{\"calls\":$nb,\"bytes\":$((nb * ag))}}" ;;
  lss-fused-zigzag) echo "{\"reduce_scatter\":{\"calls\":$((2 * nb)),\"bytes\":$((nb * 4 * rs1))},\"allgather\":{\"calls\":$((2 * nb)),\"bytes\":$((nb * 2 * ag))}}" ;;
  lss-basic-zigzag) echo "{\"reduce_scatter\":{\"calls\":$((3 * nb)),\"bytes\":$((nb * 4 * rs1))},\"allgather\":{\"calls\":$((3 * nb)),\"bytes\":$((nb * 3 * ag))}}" ;;
  lss-zigzag) echo "{\"reduce_scatter\":{\"calls\":$nb,\"bytes\":$((nb * 3 * rs1))},\"allgather\":{\"calls\":$nb,\"bytes\":$((nb * ag))}}" ;;
  lss-fused) echo "{\"reduce_scatter\":{\"calls\":$((2 * nb)),\"bytes\":$((nb * 3 * rs1))},\"allgather\":{\"calls\":$((2 * nb)),\"bytes\":$((nb * 2 * ag))}}" ;;
  lss-unfused) echo "{\"reduce_scatter\":{\"calls\":$((2 * nb)),\"bytes\":$((nb * 2 * rs1))},\"allgather\":{\"calls\":$((2 * nb)),\"bytes\":$((nb * 2 * ag))}}" ;;
  lss-basic) echo "{\"reduce_scatter\":{\"calls\":$((3 * nb)),\"bytes\":$((nb * 3 * rs1))},\"allgather\":{\"calls\":$((3 * nb)),\"bytes\":$((nb * 3 * ag))}}" ;;
  megatron) echo "{\"reduce_scatter\":{\"calls\":$((4 * nb)),\"bytes\":$((nb * 4 * rs1))},\"allgather\":{\"calls\":$((4 * nb)),\"bytes\":$((nb * 4 * ag))}}" ;;
  megatron-2022) echo "{\"reduce_scatter\":{\"calls\":$((6 * nb)),\"bytes\":$((nb * 6 * rs1))},\"allgather\":{\"calls\":$((6 * nb)),\"bytes\":$((nb * 6 * ag))}}" ;;
  esac
}

for drop in 0 0.1; do
  S=$TS_TMP/serial-$drop.jsonl
  expect_exit 0 "" "$T" train $BASE --dropout $drop --log "$S"
  for mode in lss lss-fused lss-basic lss-unfused lss-zigzag lss-fused-zigzag lss-basic-zigzag megatron \
    megatron-2022; do
    # N = 1 is the serial (D = 1) or data-parallel layout whatever the mode;
    # megatron splits the 4 heads of tiny, so N <= 4; lss-zigzag cuts T into
    # 2N chunks of whole tiles, so N <= 4
    case $mode in
    lss) layouts="1x1 1x2 2x1 2x2 4x1 4x2 8x1" ;;
    megatron|lss-zigzag) layouts="2x1 2x2 4x1" ;;
    megatron-2022) layouts="2x1 4x1" ;;
    *-zigzag|lss-unfused) layouts="2x1 4x1" ;;
    *) layouts="2x1 2x2 4x1 4x2 8x1" ;;
    esac
    for nd in $layouts; do
      N=${nd%x*} D=${nd#*x}
      L=$TS_TMP/$mode-sp$N-dp$D-$drop.jsonl
      if [ $((N * D)) -eq 1 ]; then
        expect_exit 0 "" "$T" train $BASE --dropout $drop --sp 1 --sp-mode $mode --log "$L" || continue
      else
        expect_exit 0 "" $RUN_MPI -n $((N * D)) "$T" train $BASE --dropout $drop --sp $N --dp $D \
          --sp-mode $mode --log "$L" || continue
      fi
      if [ $mode = megatron ] || [ $mode = megatron-2022 ]; then
        expect_exit 0 "" "$T" compare --rtol 1e-5 "$S" "$L"
        expect_stdout "^equal within rtol 1e-05"
      else
        expect_exit 0 "" "$T" compare "$S" "$L"
        expect_stdout "^identical"
        h1=$(grep '"final"' "$S")
        h2=$(grep '"final"' "$L")
        TS_CHECKS=$((TS_CHECKS + 1))
        if [ -n "$h1" ] && [ "$h1" = "$h2" ]; then
          pass "$mode sp $N dp $D dropout $drop: final parameter hash equal"
        else
          fail "$mode sp $N dp $D dropout $drop: final records differ: $h1 / $h2"
        fi
      fi
      [ "$N" -gt 1 ] && [ "$drop" = 0 ] || continue
      # the collectives of every attention layer, in every step record
      want=$(layer_counts $((2 / D)) $mode $N)
      steps=$(grep -c '"type":"step"' "$L")
      good=$(grep '"type":"step"' "$L" | grep -F "\"layers\":{\"0\":$want,\"1\":$want}" | wc -l)
      TS_CHECKS=$((TS_CHECKS + 1))
      if [ "$steps" -eq 2 ] && [ "$good" -eq 2 ]; then
        pass "$mode sp $N dp $D: every step counts per layer $want"
      else
        fail "$mode sp $N dp $D: $good of $steps step records have per layer $want: $(grep '"type":"step"' "$L" | head -n 1 | sed 's/.*"comm"/"comm"/')"
      fi
      # not per layer: the sequence group's gradient all-reduce once per
      # sequence (2/D of them), as its backward ends, then the data group's
      ar=$(grep '"type":"step"' "$L" | head -n 1 | sed -n 's/.*"comm":{"allreduce":{"calls":\([0-9]*\).*/\1/p')
      want_ar=$((2 / D + (D > 1 ? 1 : 0)))
      case $mode in *-zigzag) want_ar=$((2 * 2 / D + (D > 1 ? 1 : 0))) ;; esac # each run's partials
      TS_CHECKS=$((TS_CHECKS + 1))
      [ "$ar" = "$want_ar" ] && pass "$mode sp $N dp $D: $ar gradient all-reduce(s) per step" ||
        fail "$mode sp $N dp $D: '$ar' gradient all-reduces per step, expected $want_ar"
    done
  done
done

# The LLaMA variant (RoPE at global positions, grouped-query attention with
# H 4, Hkv 2): the LSS modes are exact too. Its reduce-scatter packs
# [dK | dV] of the key/value heads only: n = 2·T·Ckv, Ckv = Hkv·dh = 32.
LBASE="--model llama-tiny --batch 2 --steps 2 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"
for drop in 0 0.1; do
  S=$TS_TMP/llama-serial-$drop.jsonl
  expect_exit 0 "" "$T" train $LBASE --dropout $drop --log "$S"
  for run in lss:2x1 lss:4x2 lss-fused:4x1 lss-basic:2x2 lss-unfused:2x1 lss:8x1 lss-zigzag:2x2 \
    lss-zigzag:4x1 lss-fused-zigzag:2x1 lss-basic-zigzag:2x2; do
    mode=${run%:*} nd=${run#*:}
    N=${nd%x*} D=${nd#*x}
    L=$TS_TMP/llama-$mode-sp$N-dp$D-$drop.jsonl
    expect_exit 0 "" $RUN_MPI -n $((N * D)) "$T" train $LBASE --dropout $drop --sp $N --dp $D \
      --sp-mode $mode --log "$L" || continue
    expect_exit 0 "" "$T" compare "$S" "$L"
    expect_stdout "^identical"
  done
done
nb=2
want="{\"reduce_scatter\":{\"calls\":$nb,\"bytes\":$((nb * 8 * 2 * SEQ * 32 / 2))},\"allgather\":{\"calls\":$nb,\"bytes\":$((nb * 2 * (SEQ / 2) * DM * 4))}}"
TS_CHECKS=$((TS_CHECKS + 1))
if grep '"type":"step"' "$TS_TMP/llama-lss-sp2-dp1-0.jsonl" | grep -qF "\"layers\":{\"0\":$want,\"1\":$want}"; then
  pass "llama lss sp 2: per layer $want"
else
  fail "llama lss sp 2: step records lack per layer $want"
fi
expect_exit 2 "--sp-mode megatron: the baseline is built for the GPT variant" \
  "$T" train $LBASE --sp 2 --sp-mode megatron --log "$TS_TMP/never.jsonl"
expect_exit 2 "--sp-mode megatron-2022: the baseline is built for the GPT variant" \
  "$T" train $LBASE --sp 2 --sp-mode megatron-2022 --log "$TS_TMP/never.jsonl"

# megatron-2022 materialises the T x T probabilities of its Hl = 4/N heads
# (forward) and their gradient (backward), from the tracked allocator, beside
# the (T, Hl·dh) buffers its attention holds (q, k, v, out; backward also their
# gradients): attn_fwd = 4·T·Kl·4 + Hl·T²·4 bytes, attn_bwd = 8·T·Kl·4 +
# 2·Hl·T²·4, Kl = Hl·16 (dropout 0). Tiled attention would hold no T² term.
for N in 2 4; do
  Hl=$((4 / N)) Kl=$((4 / N * 16))
  want="\"mem_peak_bytes\":{\"attn_fwd\":$((16 * SEQ * Kl + 4 * Hl * SEQ * SEQ)),\"attn_bwd\":$((32 * SEQ * Kl + 8 * Hl * SEQ * SEQ))"
  got=$(grep '"type":"step"' "$TS_TMP/megatron-2022-sp$N-dp1-0.jsonl" | grep -cF "$want")
  TS_CHECKS=$((TS_CHECKS + 1))
  [ "$got" = 2 ] && pass "megatron-2022 sp $N: both steps record $want" ||
    fail "megatron-2022 sp $N: $got of 2 step records have $want: $(grep '"type":"step"' "$TS_TMP/megatron-2022-sp$N-dp1-0.jsonl" | head -n 1 | grep -o '"mem_peak_bytes":{[^}]*}')"
done

# the layout is named in the config record
grep -q '"layout":"dp2-sp4-lss-basic"' "$TS_TMP/lss-basic-sp4-dp2-0.jsonl" &&
  pass "config record: layout dp2-sp4-lss-basic" || fail "config record lacks layout dp2-sp4-lss-basic"

# every step record has the ranks' compute spread (docs/RUN-LOG.md):
# compute_ms_min <= compute_ms_mean <= compute_ms_max, all positive, rank 0's
# own step_ms - comm_ms among them, and the mean of N ranks no further from
# either end than N - 1 of them can take it; one rank's three are equal.
# (The figures are printed to 0.001 ms: 0.002 ms of slack each.)
compute_spread() { # FILE RANKS
  TS_CHECKS=$((TS_CHECKS + 1))
  out=$(python3 - "$1" "$2" <<'PY' 2>&1
import json, sys
n, bad, steps = int(sys.argv[2]), [], 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") != "step":
        continue
    steps += 1
    try:
        hi, mean, lo = r["compute_ms_max"], r["compute_ms_mean"], r["compute_ms_min"]
    except KeyError as e:
        bad.append("step %d lacks %s" % (r["step"], e))
        continue
    own, eps = r["step_ms"] - r["comm_ms"], 0.002
    ok = 0 < lo <= mean <= hi and lo - eps <= own <= hi + eps
    ok = ok and (hi + (n - 1) * lo) / n - eps <= mean <= ((n - 1) * hi + lo) / n + eps
    if n == 1:
        ok = ok and lo == mean == hi
    if not ok:
        bad.append("step %d: min %s mean %s max %s, rank 0's %.3f" % (r["step"], lo, mean, hi, own))
print("; ".join(bad) if bad else "ok %d steps" % steps if steps else "no step records")
PY
)
  case $out in
  ok*) pass "compute spread of $(basename "$1") ($2 ranks): $out" ;;
  *) fail "compute spread of $(basename "$1") ($2 ranks): $out" ;;
  esac
}
compute_spread "$TS_TMP/serial-0.jsonl" 1
compute_spread "$TS_TMP/lss-sp4-dp2-0.jsonl" 8
compute_spread "$TS_TMP/lss-zigzag-sp2-dp1-0.jsonl" 2

# --fast lets MPI sum the gradients: equal within a tolerance
F=$TS_TMP/fast.jsonl
if expect_exit 0 "" $RUN_MPI -n 2 "$T" train $BASE --sp 2 --fast --log "$F"; then
  expect_exit 0 "" "$T" compare --rtol 1e-5 "$TS_TMP/serial-0.jsonl" "$F"
fi

# resume under sp 2 from a checkpoint of the serial run: the layout is not
# part of a checkpoint
expect_resume_identical 2 2 "" "--sp 2" $BASE
expect_resume_identical 2 2 "" "--sp 2 --sp-mode lss-zigzag" $BASE

# --- megatron owns its blocks (src/cp/megatron.c) --------------------------------
# Rank s of N holds of every layer the blocks of its heads and MLP columns,
# the rest whole, and (all modes) its T/N rows of the positional table.
# tiny: C 64, F 256, L 2, T 64; per layer the split tensors hold
# 3(C² + C) (Q, K, V) + C² (output projection) + F·C + F (W1, b1) + C·F (W2).
st() { # FILE KEY: the first step record's state_bytes KEY
  grep '"type":"step"' "$1" | head -n 1 | sed -n "s/.*\"state_bytes\":{[^}]*\"$2\":\([0-9]*\).*/\1/p"
}
n=$(($(st "$TS_TMP/serial-0.jsonl" grads) / 4))
split=$((2 * (4 * DM * DM + 3 * DM + 2 * 256 * DM + 256)))
for nd in 2x1 4x1 2x2; do
  N=${nd%x*} D=${nd#*x}
  L=$TS_TMP/megatron-sp$N-dp$D-0.jsonl
  held=$((n - (N - 1) * (split + SEQ * DM) / N))
  for key in params grads optimizer model_sum; do
    case $key in
      params | grads) want=$((4 * held)) ;;
      optimizer) want=$((8 * held)) ;;
      model_sum) want=$((N * D * 16 * held)) ;; # every rank holds as much
    esac
    got=$(st "$L" $key)
    TS_CHECKS=$((TS_CHECKS + 1))
    [ "$got" = "$want" ] && pass "megatron sp $N dp $D: rank 0's $key $got bytes (n = $n)" ||
      fail "megatron sp $N dp $D: rank 0's $key '$got' bytes, expected $want (n = $n, held $held)"
  done
done

# Its checkpoints are the serial layout's file: a run resumed from one under
# megatron equals the straight run (its step-2 checkpoint the same model
# state), and the serial layout reads it (the same parameter hash, a fold in
# canonical order on both); megatron resumes a serial checkpoint, and another
# N its own (the blocks are read back by their canonical ranges).
MK=$TS_TMP/mg
rm -rf "$MK" && mkdir -p "$MK/a" "$MK/b" "$MK/c" "$MK/d" "$MK/e"
MG="--sp 2 --sp-mode megatron"
if expect_exit 0 "" $RUN_MPI -n 2 "$T" train $BASE $MG --ckpt-dir "$MK/a" --ckpt-every 1 \
  --log "$MK/a.jsonl"; then
  cp "$MK/a/step-00000001.safetensors" "$MK/b/"
  cp "$MK/a/step-00000001.safetensors" "$MK/d/"
  cp "$MK/a/step-00000002.safetensors" "$MK/c/"
  grep -v '"step":2' "$MK/a.jsonl" | grep -v '"final"' >"$MK/b.jsonl"
  cp "$MK/b.jsonl" "$MK/d.jsonl"
  expect_exit 0 "" $RUN_MPI -n 2 "$T" train $BASE $MG --ckpt-dir "$MK/b" --resume \
    --log "$MK/b.jsonl"
  expect_stdout "resumed from .*step-00000001"
  expect_compare identical "megatron resumed from its step 1, against the straight run" \
    "$MK/a.jsonl" "$MK/b.jsonl"
  expect_compare "same model state" "megatron's step-2 checkpoints, straight and resumed" \
    "$MK/a/step-00000002.safetensors" "$MK/b/step-00000002.safetensors"
  h1=$(grep '"final"' "$MK/a.jsonl")
  expect_exit 0 "" "$T" train $BASE --ckpt-dir "$MK/c" --resume --log "$MK/c.jsonl"
  h2=$(grep '"final"' "$MK/c.jsonl")
  TS_CHECKS=$((TS_CHECKS + 1))
  [ -n "$h1" ] && [ "$h1" = "$h2" ] && pass "serial reads megatron's checkpoint: $h2" ||
    fail "serial reads megatron's checkpoint: '$h2', megatron's '$h1'"
  expect_exit 0 "" $RUN_MPI -n 4 "$T" train $BASE --sp 4 --sp-mode megatron --ckpt-dir "$MK/d" \
    --resume --log "$MK/d.jsonl"
  expect_exit 0 "" "$T" compare --rtol 1e-5 "$TS_TMP/serial-0.jsonl" "$MK/d.jsonl"
  expect_stdout "^equal within rtol 1e-05"
fi
if expect_exit 0 "" "$T" train $BASE --ckpt-dir "$MK/e" --ckpt-every 1 --log "$MK/e.jsonl"; then
  rm -f "$MK/e/step-00000002.safetensors"
  grep -v '"step":2' "$MK/e.jsonl" | grep -v '"final"' >"$MK/e1.jsonl"
  expect_exit 0 "" $RUN_MPI -n 2 "$T" train $BASE $MG --ckpt-dir "$MK/e" --resume \
    --log "$MK/e1.jsonl"
  expect_exit 0 "" "$T" compare --rtol 1e-5 "$MK/e.jsonl" "$MK/e1.jsonl"
  expect_stdout "^equal within rtol 1e-05"
fi

# --- lss-dx: the LSS paper's backward, dx reduce-scattered (src/cp/lss_dx.c) -----------
# The forward is lss's; the backward forms the gradient of the whole gathered
# input on every rank and reduce-scatters it (n = T·d floats, against lss's
# 2·T·Ckv for [dK | dV]: half for the GPT, the same for llama-tiny's Ckv =
# d/2). dx and the K, V weight gradients are the serial sums regrouped (by
# rank, then the group's tree): tolerance tier, loss, gradient norm and
# validation loss within rtol 1e-5 of serial at every step (measured: 1e-7 or
# less; a missing term moves the loss by 1e-3 or more).
for model in tiny llama-tiny; do
  for drop in 0 0.1; do
    MB="--model $model --batch 2 --steps 2 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"
    S=$TS_TMP/dx-serial-$model-$drop.jsonl
    expect_exit 0 "" "$T" train $MB --dropout $drop --log "$S" || continue
    for nd in 2x1 4x1 2x2; do
      N=${nd%x*} D=${nd#*x}
      L=$TS_TMP/lss-dx-$model-sp$N-dp$D-$drop.jsonl
      expect_exit 0 "" $RUN_MPI -n $((N * D)) "$T" train $MB --dropout $drop --sp $N --dp $D \
        --sp-mode lss-dx --log "$L" || continue
      expect_exit 0 "" "$T" compare --rtol 1e-5 "$S" "$L"
      expect_stdout "^equal within rtol 1e-05"
    done
  done
done
# per layer: lss's all-gather, one reduce-scatter of T·d floats (2/D sequences a rank)
for model in tiny llama-tiny; do
  for nd in 2x1 4x1 2x2; do
    N=${nd%x*} D=${nd#*x} nb=$((2 / D))
    want="{\"reduce_scatter\":{\"calls\":$nb,\"bytes\":$((nb * 8 * SEQ * DM * (N - 1) / N))},\"allgather\":{\"calls\":$nb,\"bytes\":$((nb * 2 * (N - 1) * (SEQ / N) * DM * 4))}}"
    L=$TS_TMP/lss-dx-$model-sp$N-dp$D-0.jsonl
    TS_CHECKS=$((TS_CHECKS + 1))
    good=$(grep '"type":"step"' "$L" | grep -cF "\"layers\":{\"0\":$want,\"1\":$want}")
    [ "$good" = 2 ] && pass "lss-dx $model sp $N dp $D: every step counts per layer $want" ||
      fail "lss-dx $model sp $N dp $D: $good of 2 step records have per layer $want"
  done
done
# its memory: the gathered input of every layer (L·T·d floats) and the whole
# sequence's dx (T·d) beyond lss's (GPT: lss has no scratch)
ab() { st "$1" activations; }
got=$(($(ab "$TS_TMP/lss-dx-tiny-sp2-dp1-0.jsonl") - $(ab "$TS_TMP/lss-sp2-dp1-0.jsonl")))
TS_CHECKS=$((TS_CHECKS + 1))
[ "$got" = $((3 * SEQ * DM * 4)) ] && pass "lss-dx sp 2: activations $got bytes above lss's (3·T·d floats)" ||
  fail "lss-dx sp 2: activations '$got' bytes above lss's, expected $((3 * SEQ * DM * 4))"

# --- refused before any work: one line, exit 2, no log written ------------------------
NOLOG=$TS_TMP/never.jsonl
expect_exit 2 "--sp 3: must be a power of two" "$T" train $BASE --sp 3 --log "$NOLOG"
expect_exit 2 "--seq 64: must split into --sp 16 segments of whole tiles" \
  "$T" train $BASE --sp 16 --log "$NOLOG"
# 96 tokens, tile 8: segments of 48 tokens = 6 tiles
expect_exit 2 "--seq 96 with --sp 2: each segment of 48 tokens must hold a power of two" \
  "$T" train $BASE --seq 96 --tile 8 --leaf 8 --sp 2 --log "$NOLOG"
expect_exit 2 "--sp-mode megatron with --sp 8: the 4 heads and the MLP width 256 must divide by 8" \
  "$T" train $BASE --sp 8 --sp-mode megatron --log "$NOLOG"
expect_exit 2 "--sp-mode lss-zigzag with --sp 8: --seq 64 must split into 16 chunks of a power of two of whole tiles \\(8\\)" \
  "$T" train $BASE --sp 8 --sp-mode lss-zigzag --log "$NOLOG"
expect_exit 2 "--zero 1 with --sp-mode megatron: not built" \
  "$T" train $BASE --sp 2 --sp-mode megatron --zero 1 --log "$NOLOG"
expect_exit 2 "--optimizer muon with --sp-mode megatron: not built" \
  "$T" train $BASE --optimizer muon --sp 2 --sp-mode megatron --log "$NOLOG"
expect_exit 2 "--sp-mode bogus: must be lss, lss-fused, lss-basic, megatron, ulysses, upipe, ring" \
  "$T" train $BASE --sp-mode bogus --log "$NOLOG"
expect_exit 2 "--dp 1 --sp 4 --pp 1: needs dp x sp x pp = 4 ranks but the MPI world size is 2" \
  $RUN_MPI -n 2 "$T" train $BASE --sp 4 --log "$NOLOG"
expect_exit 2 "--dp 2 --sp 2 --pp 1: needs dp x sp x pp = 4 ranks but the MPI world size is 2" \
  $RUN_MPI -n 2 "$T" train $BASE --sp 2 --dp 2 --log "$NOLOG"
TS_CHECKS=$((TS_CHECKS + 1))
[ ! -e "$NOLOG" ] && pass "refused runs wrote no log" || fail "a refused run wrote $NOLOG"

# --- a failure on one rank ends every rank, at once, with the rank's message ----------
expect_fault_ends_all "sp 2" 2 train $BASE --sp 2
expect_fault_ends_all "sp 2 dp 2" 4 train $BASE --sp 2 --dp 2

done_testing
