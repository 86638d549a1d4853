#!/bin/sh
# The source tree's shape (tests/structure.py says what is checked): the
# registries named in the docs, no long function outside the kernels, the
# model's internals behind their seams.
. "$(dirname "$0")/lib.sh"

PY=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1; then PY=$p; break; fi
done
[ -n "$PY" ] || skip "no python3 (scripts/install-deps installs it)"
"$PY" "$TS_TESTS_DIR/structure.py" "$TESSERA_SRCDIR"
