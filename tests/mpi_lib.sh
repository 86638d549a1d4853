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
