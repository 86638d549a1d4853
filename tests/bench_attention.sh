#!/bin/sh
# bench/attention --layout (docs/PERFORMANCE.md, "Attention at long T"): for
# each distributed layout at N = 2 and 4, T = 512, the kernel calls the
# microbenchmark makes for the ranks cover the serial layer's (query, key)
# pairs exactly once, forward and backward (so the ranks' FLOPs sum to the
# serial layer's), and compute the serial kernel's bits for each rank's rows
# or heads (--check: memcmp against the serial kernel in the same process).
# Bad options are refused with one line, exit 2, before any work.
. "$(dirname "$0")/lib.sh"

BENCH=${TESSERA_BUILDDIR:-$(dirname "$TESSERA_BIN")}/bench/attention
if [ ! -x "$BENCH" ]; then
  echo "ERROR: $BENCH not built" >&2
  exit 99
fi

T=512
PAIRS=$((8 * T * (T + 1) / 2)) # 8 heads, key j <= query i
for N in 2 4; do
  for L in lss lss-zigzag ulysses ring; do
    expect_exit 0 "" "$BENCH" --layout "$L" --ranks "$N" --seq "$T" --reps 1 --check || continue
    expect_stdout "^check +$T +64 +$L +$N +pairs $PAIRS = serial, .* results identical$"
    TS_CHECKS=$((TS_CHECKS + 1))
    ranks=$(grep -c '^rank ' "$TS_OUT")
    last=$(tail -n 1 "$TS_OUT" | awk '{print $1, $2, $4, $5}')
    if [ "$ranks" -eq "$N" ] && [ "$last" = "layout $T $L $N" ]; then
      pass "$L over $N: $N rank lines, the layout's line last"
    else
      fail "$L over $N: $ranks rank lines, last line '$last'"
    fi
  done
done

# the serial output is the one line per T it always was
expect_exit 0 "" "$BENCH" --seq "$T" --reps 1
expect_stdout "^ +$T +64 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+%$"

expect_exit 2 "^--layout bogus: must be" "$BENCH" --layout bogus
expect_exit 2 "^--ranks 3: must be a power of two" "$BENCH" --layout lss --ranks 3 --seq 512
expect_exit 2 "^--ranks: the serial layout has one rank" "$BENCH" --ranks 2 --seq 512
expect_exit 2 "^--check: the serial layout" "$BENCH" --check --seq 512
expect_exit 2 "^--heads 2 with --ranks 4: ulysses" "$BENCH" --layout ulysses --ranks 4 --heads 2 --seq 512
expect_exit 2 "^--seq 384 with --ranks 2: each segment" "$BENCH" --layout ring --ranks 2 --seq 384
expect_exit 2 "^--seq 512 with --ranks 8: lss-zigzag" "$BENCH" --layout lss-zigzag --ranks 8 --seq 512
expect_exit 2 "^usage:" "$BENCH" --layout

done_testing
