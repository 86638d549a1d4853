# Shared by the MPI script tests; source it after lib.sh. Sets MPIEXEC to a
# launcher that works here: configure's mpiexec ($MPIEXEC), else plain
# `mpiexec`; with hydra's fork launcher when the default (ssh) cannot start
# local ranks. Skips the test when there is no launcher at all.
MPIEXEC=${MPIEXEC:-mpiexec}
command -v "${MPIEXEC%% *}" >/dev/null 2>&1 || skip "no mpiexec ($MPIEXEC)"
# The probe is retried: a launcher can fail to start once under heavy load.
mpi_probe() {
  for _try in 1 2 3; do
    timeout 60 "$@" -n 2 true >/dev/null 2>&1 && return 0
    sleep 1
  done
  return 1
}
if ! mpi_probe $MPIEXEC; then
  if mpi_probe $MPIEXEC -launcher fork; then
    MPIEXEC="$MPIEXEC -launcher fork"
  else
    echo "ERROR: '$MPIEXEC -n 2 true' fails (also with -launcher fork)" >&2
    exit 99
  fi
fi

# expect_fault_ends_all LABEL NRANKS ARGS...: with TESSERA_FAULT_RANK=1 (rank
# 1 fails as if its data file were unreadable, the others go on into their
# first collective) `mpiexec -n NRANKS tessera ARGS...` must end every rank
# within 20 s with a non-zero status and rank 1's one-line message; a hang is
# a failure (killed after 60 s).
expect_fault_ends_all() {
  _label=$1 _n=$2
  shift 2
  TS_CHECKS=$((TS_CHECKS + 1))
  _t0=$(date +%s)
  TESSERA_FAULT_RANK=1 timeout -k 10 60 $MPIEXEC -n "$_n" "$TESSERA_BIN" "$@" >"$TS_OUT" 2>"$TS_ERR"
  _rc=$?
  _dt=$(($(date +%s) - _t0))
  if [ "$_rc" -eq 0 ] || [ "$_rc" -eq 124 ] || [ "$_rc" -eq 137 ]; then
    fail "$_label, rank 1 failing: exit $_rc after ${_dt}s (expected a quick non-zero exit)"
  elif ! grep -q "^tessera: rank 1: cannot read .*fault injected" "$TS_ERR"; then
    fail "$_label, rank 1 failing: no 'tessera: rank 1: ...' message: $(head -c 500 "$TS_ERR")"
  elif [ "$_dt" -gt 20 ]; then
    fail "$_label, rank 1 failing: took ${_dt}s to bring the run down"
  else
    pass "$_label, rank 1 failing: exit $_rc after ${_dt}s: $(grep '^tessera: rank 1' "$TS_ERR")"
  fi
}

# expect_resume_identical N LAST SERIAL_FLAGS RESUMED_FLAGS ARGS...: a serial
# `tessera train ARGS SERIAL_FLAGS` checkpointing every step; its last
# checkpoint (step LAST) removed; the run resumed from step LAST - 1 by N ranks
# with `ARGS RESUMED_FLAGS` must log what the straight run logged (the layout
# is not part of a checkpoint). The checkpoints stay in $TS_TMP/resume-ck.
expect_resume_identical() {
  _n=$1 _last=$2 _sflags=$3 _rflags=$4
  shift 4
  _ck=$TS_TMP/resume-ck _straight=$TS_TMP/resume-straight.jsonl _log=$TS_TMP/resumed.jsonl
  rm -rf "$_ck" "$_log"
  expect_exit 0 "" "$TESSERA_BIN" train "$@" $_sflags --ckpt-dir "$_ck" --ckpt-every 1 \
    --log "$_log" || return
  cp "$_log" "$_straight"
  rm -f "$_ck/step-$(printf %08d "$_last").safetensors"
  expect_exit 0 "" timeout -k 10 180 $MPIEXEC -n "$_n" "$TESSERA_BIN" train "$@" $_rflags \
    --ckpt-dir "$_ck" --resume --log "$_log" || return
  expect_stdout "resumed from .*step-$(printf %08d $((_last - 1)))"
  expect_exit 0 "" "$TESSERA_BIN" compare "$_straight" "$_log"
  expect_stdout "^identical"
}
