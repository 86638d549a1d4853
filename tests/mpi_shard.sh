#!/bin/sh
# Double gradient averaging (tests/test_shard.c) needs a launcher: run it on
# 4 ranks as dp 2 x sp 2. Each rank fills its gradient with known integers
# (the positional embedding's rows it does not own poisoned) and the result
# of ts_shard_sync_grads is checked exactly: every replicated gradient summed
# over all ranks, every positional-embedding row summed over its owners' data
# group, all replicas identical; exact and --fast, one and two sequences per
# rank.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
PROG=${TESSERA_BUILDDIR:-$(dirname "$TESSERA_BIN")}/tests/test_shard
if [ ! -x "$PROG" ]; then
  echo "ERROR: $PROG not built (make check builds it)" >&2
  exit 99
fi

# ranks busy-poll: with more ranks than cores a collective costs ms, not µs
if expect_exit 0 "" timeout -k 10 120 $MPIEXEC -n 4 "$PROG"; then
  grep -E "^\[ +OK +\]" "$TS_OUT" | sed "s/^/  [4 ranks] /"
else
  cat "$TS_OUT" "$TS_ERR" | tail -40
fi
done_testing
