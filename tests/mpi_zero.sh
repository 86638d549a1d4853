#!/bin/sh
# Partitioned model state under --zero (docs/ALGORITHMS.md §12,
# src/dist/shard.h, src/dist/zero.c): the replica group (the dp·sp
# ranks of a stage, which hold the same parameters) shards the stage's AdamW
# moments (1), and its gradients (2) and layer parameters (3) as well; each
# rank updates its shard and broadcasts it after the step (3: each layer's
# just before its use). Every run must equal the serial run bit for bit
# (tessera compare says identical) over the data group, the sequence group,
# both, pipeline stages of them (every stage; under 2 and 3 a stage's
# microbatches go in rounds, both schedules), with Muon (whole matrices to
# one shard), dropout, the LLaMA variant and GPT's tied embedding (whose
# gradient the last stage sums apart), balanced LSS (lss-zigzag) included.
#
# Memory: rank 0 holds the moments of its shard only, 8·⌊n/Z⌋ bytes for n
# parameters and Z replicas (AdamW: the cut falls anywhere), and the model
# state summed over the ranks is Z·8·n (parameters and gradients on every
# replica) + 8·n (the moments once), against 16·n·Z without --zero.
#
# Checkpoints: written under --dp 2 --sp 2 --zero 1, --pp 2 --dp 2 --zero 1
# and --pp 2 --dp 2 --zero 3, each holds the serial checkpoint's model state
# (tessera compare), and each resumes under another layout to end where the
# straight run does;
# --init-from one of them under --pp 2 --dp 2 --zero 1 equals the serial run.
#
# Compressed pipelines (--compress, docs/COMPRESSION.md): every codec under
# --pp 2 --dp 2 at one or more stages, mapl-vq under --dp 2 --zero 1 and with
# --vq-backward on under --pp 2 --dp 2 --zero 2 and 3, equal
# the serial compressed run; rank 0's bytes count the codec's tensors whole
# (ends of the stage); a cut inside a boundary's codebooks moves to their end;
# a --zero 3 checkpoint is the serial one's bytes and resumes under --zero 1.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
T=$TESSERA_BIN
DATA=$TESSERA_SRCDIR/data/corpus.txt
RUN_MPI="timeout -k 10 180 $MPIEXEC"
common="--batch 4 --steps 3 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1"

# equal NAME SERIAL_FLAGS NRANKS LAYOUT_FLAGS
equal() {
  name=$1 flags=$2 n=$3 lay=$4
  S=$TS_TMP/$name-serial.jsonl L=$TS_TMP/$name.jsonl
  rm -f "$S" "$L"
  expect_exit 0 "" "$T" train $common $flags --log "$S" || return
  expect_exit 0 "" $RUN_MPI -n "$n" "$T" train $common $flags $lay --log "$L" || return
  expect_compare identical "$flags | $lay, against serial" "$S" "$L"
}

state() { # FILE KEY: the first step record's state_bytes KEY
  grep '"type":"step"' "$1" | head -n 1 | sed -n "s/.*\"state_bytes\":{[^}]*\"$2\":\([0-9]*\).*/\1/p"
}

equal dp2 "--model tiny" 2 "--dp 2 --zero 1"
equal dp4 "--model tiny" 4 "--dp 4 --zero 1"
equal sp2 "--model tiny" 2 "--sp 2 --sp-mode lss --zero 1"
equal muon "--model tiny --optimizer muon" 2 "--dp 2 --zero 1"
equal pp-dp "--model tiny --layers 4" 4 "--pp 2 --dp 2 --microbatches 2 --zero 1"
equal llama "--model llama-tiny --layers 4 --dropout 0.1" 4 \
  "--dp 2 --sp 2 --sp-mode ulysses --zero 1"
equal pp-sp "--model llama-tiny --layers 4 --dropout 0.1" 4 \
  "--pp 2 --sp 2 --sp-mode upipe --microbatches 4 --zero 1"

# stages 2 and 3: one pass per rank (one sequence per rank under --sp), and
# several in rounds (accumulation's microbatches; a rank's sequences under --sp)
equal dp4-z2 "--model tiny" 4 "--dp 4 --zero 2"
equal dp4-z3 "--model tiny" 4 "--dp 4 --zero 3"
equal muon-z3 "--model tiny --optimizer muon" 2 "--dp 2 --zero 3"
equal sp2-z3 "--model tiny --batch 1" 2 "--sp 2 --sp-mode lss --zero 3"
equal ring-z2 "--model tiny --batch 2 --dropout 0.1" 4 "--dp 2 --sp 2 --sp-mode ring --zero 2"
equal llama-z3 "--model llama-tiny --layers 4 --dropout 0.1 --batch 2" 4 \
  "--dp 2 --sp 2 --sp-mode ulysses --zero 3"
equal upipe-z3 "--model llama-tiny --layers 4 --batch 1 --kv-heads 4" 4 \
  "--sp 4 --sp-mode upipe --zero 3"
equal accum-z3 "--model tiny --batch 8 --dropout 0.1 --eval-every 2 --eval-batches 2" 2 \
  "--dp 2 --microbatches 4 --zero 3"
equal accum-muon-z2 "--model llama-tiny --batch 8 --optimizer muon" 4 "--dp 4 --microbatches 2 --zero 2"
equal rounds-z3 "--model llama-tiny --layers 4 --batch 4 --dropout 0.1" 4 \
  "--dp 2 --sp 2 --sp-mode ulysses --zero 3"
# under a pipeline: each stage's microbatches in rounds over its replica group
# (GPT tiny: the tied embedding's gradient on the last stage, summed apart)
# balanced LSS: each run's partials summed apart, layer by layer under 2 and 3
equal zigzag-z1 "--model tiny --batch 2" 4 "--dp 2 --sp 2 --sp-mode lss-zigzag --zero 1"
equal zigzag-z3 "--model tiny --batch 2 --dropout 0.1" 2 "--sp 2 --sp-mode lss-zigzag --zero 3"
equal zigzag-llama-z2 "--model llama-tiny --batch 4" 4 "--dp 2 --sp 2 --sp-mode lss-zigzag --zero 2"
equal pp-dp-z2 "--model tiny --layers 4" 4 "--pp 2 --dp 2 --microbatches 2 --zero 2 --schedule 1f1b"
equal pp-dp-z3 "--model tiny --layers 4 --dropout 0.1" 4 \
  "--pp 2 --dp 2 --microbatches 2 --zero 3 --schedule gpipe"
equal pp-sp-z3 "--model tiny --layers 4" 4 \
  "--pp 2 --sp 2 --sp-mode ulysses --microbatches 4 --zero 3"
# balanced LSS in pipeline stages: each run's partials, the tied embedding's too
equal pp-zigzag-z3 "--model tiny --layers 4 --dropout 0.1" 4 \
  "--pp 2 --sp 2 --sp-mode lss-zigzag --microbatches 4 --zero 3"
equal pp-zigzag-llama-z1 "--model llama-tiny --layers 4" 4 \
  "--pp 2 --sp 2 --sp-mode lss-zigzag --microbatches 4 --zero 1 --schedule gpipe"
equal pp-zigzag-dp-z2 "--model tiny --dropout 0.1" 8 \
  "--pp 2 --sp 2 --dp 2 --sp-mode lss-zigzag --microbatches 2 --zero 2"
equal pp-llama-z3 "--model llama-tiny --layers 4 --batch 8 --dropout 0.1" 4 \
  "--pp 2 --dp 2 --microbatches 2 --zero 3"
equal pp-muon-z3 "--model tiny --layers 4 --optimizer muon" 4 \
  "--pp 2 --dp 2 --microbatches 2 --zero 3 --schedule gpipe"

# the bytes: n parameters from the serial record, Z = 4 replicas
n=$(($(state "$TS_TMP/dp4-serial.jsonl" grads) / 4))
for key in optimizer model_sum; do
  got=$(state "$TS_TMP/dp4.jsonl" $key)
  case $key in optimizer) want=$((8 * (n / 4))) ;; model_sum) want=$((4 * 8 * n + 8 * n)) ;; esac
  expect_equal "dp 4 --zero 1: $key bytes (n = $n parameters)" "$got" "$want"
done

# stages 2 and 3 (rank 0's record): the gradients (2) and parameters (3)
# but rank 0's shard let go, the ends' as the layers' (outside a pipeline);
# rank 0's shard is the first ⌊n/4⌋ elements. Summed over the 4 ranks: each
# gradient once (2, 3), each parameter once (3) or on every rank (2), the
# moments once: the serial run's 16·n bytes under 3.
for z in 2 3; do
  for key in grads params optimizer model_sum; do
    got=$(state "$TS_TMP/dp4-z$z.jsonl" $key)
    case $key in
      grads) want=$((4 * (n / 4))) ;;
      params) want=$([ $z = 3 ] && echo $((4 * (n / 4))) || echo $((4 * n))) ;;
      optimizer) want=$((8 * (n / 4))) ;;
      model_sum) want=$((4 * n + 8 * n + $([ $z = 3 ] && echo $((4 * n)) || echo $((4 * 4 * n))))) ;;
    esac
    expect_equal "dp 4 --zero $z: $key bytes (n = $n)" "$got" "$want"
  done
done
# and the same for the serial run's state under --sp: the rows of the
# position table are each rank's own, the rest is sharded
got=$(state "$TS_TMP/sp2-z3.jsonl" model_sum) want=$(state "$TS_TMP/sp2-z3-serial.jsonl" model_sum)
expect_equal "sp 2 --zero 3: the model state's bytes over the ranks, against serial's" "$got" "$want"

# under --pp 2 --dp 2 (rank 0: stage 0 of data replica 0, Z = 2): stage 0
# holds the positional table (64 rows of 64) and half the layers, n0 of its
# own, and the tied embedding (256 rows) as a copy; the last stage the
# embedding, the other half and the final norm. Rank 0's shard is the first
# ⌊n0/2⌋ elements (the positional table in it whole): it holds that many
# gradients, their moments, and under 3 that many parameters with the copy.
n=$(($(state "$TS_TMP/pp-dp-z2-serial.jsonl" grads) / 4))
layers=$((n - (256 + 64) * 64 - 128))
ends=$(((256 + 64) * 64 + 128)) copy=$((256 * 64))
n0=$((64 * 64 + layers / 2))
for z in 2 3; do
  for key in grads params optimizer model_sum; do
    got=$(state "$TS_TMP/pp-dp-z$z.jsonl" $key)
    case $key in
      grads) want=$((4 * (n0 / 2))) ;;
      params) want=$((4 * (copy + $([ $z = 3 ] && echo $((n0 / 2)) || echo $n0)))) ;;
      optimizer) want=$((8 * (n0 / 2))) ;;
      model_sum) # the ends on both replicas, the layers once (3: the values too), the
        # moments once, the copy on stage 0's two ranks
        want=$((4 * (2 * ends + layers) + 8 * n + 4 * 2 * copy + \
                $([ $z = 3 ] && echo $((4 * (2 * ends + layers))) || echo $((4 * 2 * n))))) ;;
    esac
    expect_equal "pp 2 dp 2 --zero $z: $key bytes (n = $n)" "$got" "$want"
  done
done

# checkpoints of sharded state: the serial checkpoint's model state, and each
# resumed under another layout
C="--model tiny --layers 4 $common --ckpt-every 2"
rm -rf "$TS_TMP/k0" "$TS_TMP/k1" "$TS_TMP/k2" "$TS_TMP/k4"
expect_exit 0 "" "$T" train $C --ckpt-dir "$TS_TMP/k0" --log "$TS_TMP/k0.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --dp 2 --sp 2 --zero 1 --ckpt-dir "$TS_TMP/k1" \
  --log "$TS_TMP/k1.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --pp 2 --dp 2 --microbatches 2 --zero 1 \
  --ckpt-dir "$TS_TMP/k2" --log "$TS_TMP/k2.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --pp 2 --dp 2 --microbatches 2 --zero 3 \
  --ckpt-dir "$TS_TMP/k4" --log "$TS_TMP/k4.jsonl"
for k in k1 k2 k4; do
  expect_compare "same model state" "$k's checkpoint against the serial run's" \
    "$TS_TMP/k0/step-00000002.safetensors" "$TS_TMP/$k/step-00000002.safetensors"
  expect_same_bytes "$k's checkpoint against the serial run's" \
    "$TS_TMP/k0/step-00000002.safetensors" "$TS_TMP/$k/step-00000002.safetensors"
  rm -f "$TS_TMP/$k/step-00000003.safetensors"
done
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --pp 2 --dp 2 --microbatches 2 --zero 1 \
  --ckpt-dir "$TS_TMP/k1" --log "$TS_TMP/k1.jsonl" --resume
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --dp 4 --zero 1 --ckpt-dir "$TS_TMP/k2" \
  --log "$TS_TMP/k2.jsonl" --resume
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C --pp 2 --sp 2 --sp-mode ulysses --microbatches 4 \
  --zero 2 --ckpt-dir "$TS_TMP/k4" --log "$TS_TMP/k4.jsonl" --resume
for k in k1 k2 k4; do
  expect_compare identical "$k resumed under another layout, against the straight run" \
    "$TS_TMP/k0.jsonl" "$TS_TMP/$k.jsonl"
done

# --dp 2 --sp 2 --zero 3 (one sequence per rank): the serial checkpoint's
# model state, resumed under --dp 4 --zero 2 to end where the straight run does
C3="--model tiny --layers 4 --batch 2 --steps 3 --warmup 1 --eval-batches 1 --data $DATA --quiet --threads 1 --ckpt-every 2"
rm -rf "$TS_TMP/k3s" "$TS_TMP/k3"
expect_exit 0 "" "$T" train $C3 --ckpt-dir "$TS_TMP/k3s" --log "$TS_TMP/k3s.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $C3 --dp 2 --sp 2 --zero 3 --ckpt-dir "$TS_TMP/k3" \
  --log "$TS_TMP/k3.jsonl"
expect_compare "same model state" "--dp 2 --sp 2 --zero 3's checkpoint against the serial run's" \
  "$TS_TMP/k3s/step-00000002.safetensors" "$TS_TMP/k3/step-00000002.safetensors"
expect_same_bytes "--dp 2 --sp 2 --zero 3's checkpoint against the serial run's" \
  "$TS_TMP/k3s/step-00000002.safetensors" "$TS_TMP/k3/step-00000002.safetensors"
rm -f "$TS_TMP/k3/step-00000003.safetensors"
expect_exit 0 "" $RUN_MPI -n 2 "$T" train $C3 --dp 2 --zero 2 --ckpt-dir "$TS_TMP/k3" \
  --log "$TS_TMP/k3.jsonl" --resume
expect_compare identical "--zero 3 resumed under --dp 2 --zero 2, against the straight run" \
  "$TS_TMP/k3s.jsonl" "$TS_TMP/k3.jsonl"
# and the serial checkpoint resumed under --dp 2 --zero 3: each rank reads
# its shard, the ends' included
rm -rf "$TS_TMP/k3r" && mkdir "$TS_TMP/k3r"
cp "$TS_TMP/k3s/step-00000002.safetensors" "$TS_TMP/k3r/" && cp "$TS_TMP/k3s.jsonl" "$TS_TMP/k3r.jsonl"
expect_exit 0 "" $RUN_MPI -n 2 "$T" train $C3 --dp 2 --zero 3 --ckpt-dir "$TS_TMP/k3r" \
  --log "$TS_TMP/k3r.jsonl" --resume
expect_compare identical "serial resumed under --dp 2 --zero 3, against the straight run" \
  "$TS_TMP/k3s.jsonl" "$TS_TMP/k3r.jsonl"
# --init-from under partitioned layouts: each rank reads the byte ranges of
# what it holds (a stage's tensors and the copies it keeps), its moments
# start at zero; the runs equal the serial run from the same weights
I="--model tiny --layers 4 $common --init-from $TS_TMP/k0/step-00000003.safetensors --lr-schedule wsd"
expect_exit 0 "" "$T" train $I --log "$TS_TMP/init-serial.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $I --pp 2 --dp 2 --microbatches 2 --zero 1 \
  --log "$TS_TMP/init-pp-dp.jsonl"
expect_stdout "^initialised from .*k0/step-00000003.safetensors \(its step 3\)"
expect_compare identical "--init-from under --pp 2 --dp 2 --zero 1, against serial" \
  "$TS_TMP/init-serial.jsonl" "$TS_TMP/init-pp-dp.jsonl"
# and it did start from those weights: step 1's loss is not the fresh model's
expect_exit 1 "" "$T" compare "$TS_TMP/k0.jsonl" "$TS_TMP/init-serial.jsonl"
expect_stdout "^first divergence: step 1, loss:"

# --- compressed pipelines (docs/COMPRESSION.md) ------------------------------------
# Every codec under --pp 2 --dp 2 against the serial compressed run at 2
# stages, which the same pipelined run without --zero equals
# (tests/mpi_compress.sh). What a codec updates itself (a boundary's projector;
# mapl-vq's four codebooks, statistics in their gradient slots) goes whole to
# one shard; the anchors are AdamW's, cut anywhere.
CM="--model llama-tiny --layers 4 --dropout 0.1 --rank 16 $common"
for mode in ssn mapl mapl-unconstrained mapl-frozen mapl-vq; do
  rm -f "$TS_TMP/c-serial-$mode.jsonl"
  expect_exit 0 "" "$T" train $CM --compress $mode --compress-stages 2 \
    --log "$TS_TMP/c-serial-$mode.jsonl"
done
rm -rf "$TS_TMP/ck-serial" "$TS_TMP/ck-z3"
expect_exit 0 "" "$T" train $CM --compress mapl-vq --compress-stages 2 --ckpt-every 2 \
  --ckpt-dir "$TS_TMP/ck-serial" --log "$TS_TMP/ck-serial.jsonl"
# cequal NAME MODE NRANKS LAYOUT_FLAGS: against the serial run of MODE
cequal() {
  name=$1 mode=$2 n=$3 lay=$4 L=$TS_TMP/c-$1.jsonl
  rm -f "$L"
  expect_exit 0 "" $RUN_MPI -n "$n" "$T" train $CM --compress $mode $lay --log "$L" || return
  expect_compare identical "--compress $mode | $lay, against serial" \
    "$TS_TMP/c-serial-$mode.jsonl" "$L"
}
PD="--pp 2 --dp 2 --microbatches 2"
cequal ssn-z2 ssn 4 "$PD --zero 2"
cequal mapl-z1 mapl 4 "$PD --zero 1"
cequal mapl-z2 mapl 4 "$PD --zero 2"
cequal mapl-z3 mapl 4 "$PD --zero 3 --schedule gpipe"
cequal unc-z3 mapl-unconstrained 4 "$PD --zero 3"
cequal frozen-z1 mapl-frozen 4 "$PD --zero 1 --schedule gpipe"
cequal vq-z1 mapl-vq 4 "$PD --zero 1"
cequal vq-z2 mapl-vq 4 "$PD --zero 2 --schedule gpipe"
cequal vq-dp-z1 mapl-vq 2 "--compress-stages 2 --dp 2 --zero 1"
# the stream by microbatch (--vq-stream-unit microbatch, every 3 of the step's
# --dp x --microbatches = 4): the shared copies built inside a step from the
# codebooks the owner updated and broadcast; the serial run has --microbatches 4
MBS="--vq-stream-unit microbatch --vq-stream-every 3"
rm -f "$TS_TMP/c-serial-vq-mb.jsonl" "$TS_TMP/c-vq-mb-z2.jsonl"
expect_exit 0 "" "$T" train $CM --compress mapl-vq $MBS --compress-stages 2 --microbatches 4 \
  --log "$TS_TMP/c-serial-vq-mb.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $CM --compress mapl-vq $MBS $PD --zero 2 \
  --log "$TS_TMP/c-vq-mb-z2.jsonl" &&
  expect_compare identical "--compress mapl-vq $MBS | $PD --zero 2, against serial" \
    "$TS_TMP/c-serial-vq-mb.jsonl" "$TS_TMP/c-vq-mb-z2.jsonl"
# ssn-confined (no dropout; its basis refreshed at step 2): the stream writers,
# updated row-wise, go whole to one shard each; every replica confines the
# whole weights after the broadcast, so --zero 3, which keeps only shards, is refused
CM="--model llama-tiny --layers 4 --rank 16 --ssn-refresh 2 $common"
rm -f "$TS_TMP/c-serial-ssn-confined.jsonl"
expect_exit 0 "" "$T" train $CM --compress ssn-confined --compress-stages 2 \
  --log "$TS_TMP/c-serial-ssn-confined.jsonl"
cequal confined-z2 ssn-confined 4 "$PD --zero 2"
cequal confined-dp-z1 ssn-confined 2 "--compress-stages 2 --dp 2 --zero 1"
expect_exit 2 "--zero 3 with --compress ssn-confined: its confinement projects whole weights" \
  $RUN_MPI -n 4 "$T" train $CM --compress ssn-confined $PD --zero 3 --log "$TS_TMP/never.jsonl"
CM="--model llama-tiny --layers 4 --dropout 0.1 --rank 16 $common"
# the gradients quantised too: the gradient codebooks are stage 1's, a run
# of their own in one shard (whole_run_end), and stage 0 holds their copy
rm -f "$TS_TMP/c-serial-vqb.jsonl"
expect_exit 0 "" "$T" train $CM --compress mapl-vq --vq-backward on --compress-stages 2 \
  --log "$TS_TMP/c-serial-vqb.jsonl"
for z in "2" "3 --schedule gpipe"; do
  L=$TS_TMP/c-vqb-z${z%% *}.jsonl
  rm -f "$L"
  expect_exit 0 "" $RUN_MPI -n 4 "$T" train $CM --compress mapl-vq --vq-backward on $PD --zero $z \
    --log "$L" &&
    expect_compare identical "--compress mapl-vq --vq-backward on | $PD --zero $z, against serial" \
      "$TS_TMP/c-serial-vqb.jsonl" "$L"
done
# --zero 3 writes the serial run's checkpoint, which resumes under --zero 1
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $CM --compress mapl-vq $PD --zero 3 --ckpt-every 2 \
  --ckpt-dir "$TS_TMP/ck-z3" --log "$TS_TMP/ck-z3.jsonl"
expect_compare identical "--compress mapl-vq | $PD --zero 3, against serial" \
  "$TS_TMP/ck-serial.jsonl" "$TS_TMP/ck-z3.jsonl"
expect_compare "same model state" "mapl-vq --zero 3's checkpoint against the serial run's" \
  "$TS_TMP/ck-serial/step-00000002.safetensors" "$TS_TMP/ck-z3/step-00000002.safetensors"
expect_same_bytes "mapl-vq --zero 3's checkpoint against the serial run's" \
  "$TS_TMP/ck-serial/step-00000002.safetensors" "$TS_TMP/ck-z3/step-00000002.safetensors"
rm -f "$TS_TMP/ck-z3/step-00000003.safetensors"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $CM --compress mapl-vq $PD --zero 1 --schedule gpipe \
  --ckpt-every 2 --ckpt-dir "$TS_TMP/ck-z3" --log "$TS_TMP/ck-z3.jsonl" --resume
expect_compare identical "mapl-vq --zero 3 resumed under --zero 1, against the straight run" \
  "$TS_TMP/ck-serial.jsonl" "$TS_TMP/ck-z3.jsonl"

# The bytes of mapl under --pp 2 --dp 2 (rank 0: stage 0 of data replica 0,
# Z = 2). d 64, V 256, r 16: stage 0 owns the embedding, layers 0 and 1, then
# its anchor E_0 (V·r) and projector A_0 (d·r); stage 1 layers 2 and 3, E_1,
# the final norm (d) and the head (V·d), and a copy of A_0. Rank 0's shard is
# the first ⌊n0/2⌋ elements (inside layer 0); the codec's tensors are ends:
# under 2 and 3 rank 0 holds them whole besides its shard, ⌊n0/2⌋ + V·r + d·r.
n=$(($(state "$TS_TMP/c-serial-mapl.jsonl" grads) / 4))
n0=$(($(state "$TS_TMP/c-mapl-z1.jsonl" grads) / 4))
codec=$((256 * 16 + 64 * 16)) copy=$((64 * 16))
ends=$((256 * 64 + codec + 256 * 16 + 64 + 256 * 64)) # both stages'
layers=$((n - ends))
TS_CHECKS=$((TS_CHECKS + 1))
[ "$n0" = $((256 * 64 + layers / 2 + codec)) ] && pass "mapl stage 0 owns $n0 of $n" ||
  fail "mapl stage 0 owns '$n0' of $n, expected $((256 * 64 + layers / 2 + codec))"
for z in 1 2 3; do
  for key in grads params optimizer model_sum; do
    got=$(state "$TS_TMP/c-mapl-z$z.jsonl" $key)
    held=$((4 * (n0 / 2 + codec)))
    case $key in
      grads) want=$([ $z = 1 ] && echo $((4 * n0)) || echo $held) ;;
      params) want=$([ $z = 3 ] && echo $held || echo $((4 * n0))) ;;
      optimizer) want=$((8 * (n0 / 2))) ;;
      model_sum) # parameters and gradients: whole on both replicas, or the ends on both
        # and the layers once; the moments once; A_0's copy on stage 1's two ranks
        whole=$((4 * 2 * n)) part=$((4 * (2 * ends + layers)))
        want=$((8 * n + 4 * 2 * copy + $([ $z = 3 ] && echo $part || echo $whole) + \
                $([ $z = 1 ] && echo $whole || echo $part))) ;;
    esac
    expect_equal "mapl pp 2 dp 2 --zero $z: $key bytes (n = $n)" "$got" "$want"
  done
done

# A cut inside the codebooks moves to their end. mapl-vq at 2 layers with 8
# rounds: stage 0 owns the embedding, layer 0, E_0, then A_0 and the four
# codebooks (nc = R·(r/G)·K = 8·8·256 codes: count nc, sum, codes and recv nc·G
# each), A_0's start before ⌊n0/2⌋: the cut moves to the stage's end and rank 0
# holds and updates all of stage 0 (its replica none of it), still identical.
V8="--model llama-tiny --layers 2 --rank 16 --vq-rounds 8 $common"
rm -f "$TS_TMP/vq8-serial.jsonl" "$TS_TMP/vq8.jsonl"
expect_exit 0 "" "$T" train $V8 --compress mapl-vq --compress-stages 2 --log "$TS_TMP/vq8-serial.jsonl"
expect_exit 0 "" $RUN_MPI -n 4 "$T" train $V8 --compress mapl-vq --pp 2 --dp 2 --zero 3 \
  --log "$TS_TMP/vq8.jsonl"
expect_compare identical "mapl-vq --vq-rounds 8 | --pp 2 --dp 2 --zero 3, against serial" \
  "$TS_TMP/vq8-serial.jsonl" "$TS_TMP/vq8.jsonl"
nc=$((8 * 8 * 256)) layer=$((2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 3 * 192 * 64))
n0=$((256 * 64 + layer + 256 * 16 + 64 * 16 + nc * (1 + 3 * 2)))
TS_CHECKS=$((TS_CHECKS + 1))
[ $((256 * 64 + layer + 256 * 16)) -lt $((n0 / 2)) ] && pass "the cut falls inside A_0 and the codebooks" ||
  fail "the cut ($((n0 / 2))) does not fall inside A_0 and the codebooks"
for key in grads params optimizer; do
  got=$(state "$TS_TMP/vq8.jsonl" $key)
  want=$(($([ $key = optimizer ] && echo 8 || echo 4) * n0))
  expect_equal "mapl-vq 8 rounds --zero 3: rank 0's $key bytes (n0 = $n0)" "$got" "$want"
done

# --- refused before any work ----------------------------------------------------------
B="--model tiny $common"
NOLOG=$TS_TMP/never.jsonl
expect_exit 2 "--zero 2 with --microbatches 2: the data ranks \\(--dp 2\\) and a microbatch's sequences \\(3\\) must be powers of two" \
  $RUN_MPI -n 4 "$T" train $B --layers 4 --batch 12 --dp 2 --pp 2 --microbatches 2 --zero 2 \
  --log "$NOLOG"
expect_exit 2 "--zero 3 with --microbatches 2: the data ranks \\(--dp 3\\) and a microbatch's sequences \\(1\\) must be powers of two" \
  $RUN_MPI -n 3 "$T" train $B --batch 6 --dp 3 --microbatches 2 --zero 3 --log "$NOLOG"
expect_exit 2 "--zero 4: must be 0, 1, 2 or 3" "$T" train $B --zero 4 --log "$NOLOG"
expect_exit 2 "--zero 1: needs ranks that hold the same parameters" "$T" train $B --zero 1 --log "$NOLOG"
expect_exit 2 "--zero 2 with --compress mapl: only under --pp .*; use --pp 2 or --zero 1" \
  $RUN_MPI -n 2 "$T" train --model llama-tiny --layers 4 $common --compress mapl --rank 16 \
  --compress-stages 2 --dp 2 --zero 2 --log "$NOLOG"
# the fit check before allocation sizes a pipeline stage's sharded state: under
# --pp 2 --dp 2 --zero 3 a rank holds 16/2 bytes a parameter of its stage, half
# of --zero 0's 16 (the embeddings are nothing next to 10^7 layers)
need() { # the GiB the fit check's message says, for --zero $1
  $RUN_MPI -n 4 "$T" train $B --layers 10000000 --pp 2 --dp 2 --zero "$1" --log "$NOLOG" 2>&1 |
    sed -n 's/.*weight matrices alone need \([0-9.]*\) GiB.*(the largest of --pp 2 stages).*/\1/p' |
    head -n 1
}
n0=$(need 0) n3=$(need 3)
TS_CHECKS=$((TS_CHECKS + 1))
awk -v a="$n0" -v b="$n3" 'BEGIN { exit !(a > 0 && (2 * b - a) < 0.15 && (a - 2 * b) < 0.15) }' &&
  pass "the fit check counts a stage's shards: $n3 GiB under --zero 3, $n0 GiB without" ||
  fail "the fit check under --pp 2 --dp 2: '$n3' GiB under --zero 3, '$n0' GiB without"
TS_CHECKS=$((TS_CHECKS + 1))
[ ! -e "$NOLOG" ] && pass "refused runs wrote no log" || fail "a refused run wrote $NOLOG"
done_testing
