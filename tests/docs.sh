#!/bin/sh
# The short shell commands of README.md and docs/*.md, run as the pages show
# them against the built tessera (tests/docs.py says how, and how a block is
# marked not to run). DOCS_TEST_SLOW=1 runs the blocks marked slow too.
. "$(dirname "$0")/lib.sh"

need_python "to run the pages' commands"
if [ -z "${MPIEXEC:-}" ] || ! command -v "${MPIEXEC%% *}" >/dev/null 2>&1; then MPIEXEC=mpiexec; fi
export MPIEXEC
TMPDIR=$TS_TMP "$PY" "$TS_TESTS_DIR/docs.py" "$TESSERA_SRCDIR" "$TESSERA_BIN" "$@"
