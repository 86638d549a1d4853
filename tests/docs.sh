#!/bin/sh
# The short shell commands of README.md and docs/*.md, run as the pages show
# them against the built tessera (tests/docs.py says how, and how a block is
# marked not to run). DOCS_TEST_SLOW=1 runs the blocks marked slow too.
. "$(dirname "$0")/lib.sh"

PY=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1; then PY=$p; break; fi
done
[ -n "$PY" ] || skip "no python3 (scripts/install-deps installs it)"
if [ -z "${MPIEXEC:-}" ] || ! command -v "${MPIEXEC%% *}" >/dev/null 2>&1; then MPIEXEC=mpiexec; fi
export MPIEXEC
TMPDIR=$TS_TMP "$PY" "$TS_TESTS_DIR/docs.py" "$TESSERA_SRCDIR" "$TESSERA_BIN" "$@"
