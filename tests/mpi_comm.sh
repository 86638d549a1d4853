#!/bin/sh
# The communicator's unit tests (tests/test_comm.c) need a launcher: run them
# on 2 and on 4 ranks. The exact reductions are compared bit for bit with a
# local canonical tree over the ranks' inputs; see the file for the rest.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
PROG=${TESSERA_BUILDDIR:-$(dirname "$TESSERA_BIN")}/tests/test_comm
if [ ! -x "$PROG" ]; then
  echo "ERROR: $PROG not built (make check builds it)" >&2
  exit 99
fi

for n in 2 3 4; do
  # ranks busy-poll: with more ranks than cores a collective costs ms, not µs
  if expect_exit 0 "" timeout -k 10 120 $MPIEXEC -n "$n" "$PROG"; then
    grep -E "PASSED|SKIPPED" "$TS_OUT" | sed "s/^/  [$n ranks] /"
  else
    cat "$TS_OUT" "$TS_ERR" | tail -40
  fi
done

# The same tests on the NCCL communicator between emulated GPUs, one per rank
# (a plain build's tests/test_comm_nccl_emu; docs/GPU.md): the buffers in host
# memory (its MPI and staging paths), then in device memory (NCCL itself).
EMU=${TESSERA_BUILDDIR:-$(dirname "$TESSERA_BIN")}/tests/test_comm_nccl_emu
if [ -x "$EMU" ]; then
  for n in 2 3 4; do
    for where in host device; do
      if expect_exit 0 "" env TS_EMU_DEVICES="$n" TS_TEST_BUFFERS=$where timeout 120 \
        $MPIEXEC -n "$n" "$EMU"; then
        grep -E "PASSED|SKIPPED" "$TS_OUT" | sed "s/^/  [nccl, $n ranks, $where buffers] /"
      else
        cat "$TS_OUT" "$TS_ERR" | tail -40
      fi
    done
  done
else
  echo "note: no tests/test_comm_nccl_emu (a CUDA build): the NCCL communicator is checked on the GPU"
fi
done_testing
