#!/bin/sh
# The source tree's shape (tests/structure.py says what is checked): the
# registries named in the docs, no long function outside the kernels, the
# model's internals behind their seams.
. "$(dirname "$0")/lib.sh"

need_python "to read the source tree"
"$PY" "$TS_TESTS_DIR/structure.py" "$TESSERA_SRCDIR"
