#!/bin/sh
# The serial reference reproduces its golden files (golden/*/, docs/GOLDEN.md).
# On the machine class that recorded them (same CPU model and BLAS kernel, see
# golden/MACHINE) every file must be equal byte for byte. On another machine
# the BLAS kernels differ, so the results are compared within the oracle's
# fp32 tolerances instead (tests/oracle/compare_dumps.py) and the test says so.
. "$(dirname "$0")/lib.sh"

GOLDEN=$TESSERA_SRCDIR/golden
DATA=$TESSERA_SRCDIR/data/corpus.txt
PY=${PYTHON_ORACLE:-/usr/bin/python3}
[ -f "$GOLDEN/MACHINE" ] || skip "no golden files recorded ($GOLDEN/MACHINE missing)"

here=$("$TESSERA_SRCDIR/golden/machine-id.sh" "$TESSERA_BIN")
recorded=$(cat "$GOLDEN/MACHINE")
same=0
[ "$here" = "$recorded" ] && same=1
[ $same -eq 1 ] || echo "note: this machine ($here) differs from the one that recorded the golden files ($recorded): comparing within tolerance"

n=0
for dir in "$GOLDEN"/*/; do
  name=$(basename "$dir")
  [ -f "$dir/args" ] || continue
  n=$((n + 1))
  out=$TS_TMP/$name
  # shellcheck disable=SC2046
  expect_exit 0 "" "$TESSERA_BIN" dump --out "$out" --data "$DATA" $(cat "$dir/args") || continue
  if [ $same -eq 1 ]; then
    for f in config.json weights.safetensors grads.safetensors result.json; do
      if cmp -s "$dir/$f" "$out/$f"; then pass "$name/$f identical"; else fail "$name/$f differs from the golden file"; fi
    done
  else
    if "$PY" -B "$TESSERA_SRCDIR/tests/oracle/compare_dumps.py" "$dir" "$out"; then
      pass "$name within tolerance"
    else
      fail "$name out of tolerance"
    fi
  fi
done
[ $n -gt 0 ] || fail "no golden configurations found under $GOLDEN"
done_testing
