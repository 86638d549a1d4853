#!/bin/sh
# The serial reference reproduces its golden files (golden/*/, docs/GOLDEN.md)
# byte for byte on this machine, whatever its CPU: every product of the exact
# path is defined element by element (docs/EXACTNESS.md), so there is no
# machine class to fall back from. Each configuration is dumped on the best
# instruction set this CPU has and on AVX2 where it has it, and under
# OpenBLAS kernels other than the environment's (the exact path calls no
# BLAS, so they must change nothing); the narrowest path, generic C, is slow
# and runs on the smallest configuration alone (GOLDEN_GENERIC=all: every one).
. "$(dirname "$0")/lib.sh"

GOLDEN=$TESSERA_SRCDIR/golden
DATA=$TESSERA_SRCDIR/data/corpus.txt
GENERIC=${GOLDEN_GENERIC:-gpt-tied}

# the instruction sets this CPU runs (tessera refuses the others)
have() { TESSERA_ISA=$1 "$TESSERA_BIN" info >/dev/null 2>&1; }
best=
for isa in avx512 avx2 neon; do have $isa && { best=$isa; break; }; done
[ -n "$best" ] || best=generic
# the runs of each configuration, ISA:OPENBLAS_CORETYPE (-: as the environment has it)
runs="$best:-"
[ "$best" != avx2 ] && have avx2 && runs="$runs avx2:-"
# (a build without BLAS has no kernel to pick: those runs would repeat the first)
# (SkylakeX only where the CPU has AVX-512: OpenBLAS dies of SIGILL otherwise)
blas_wide=SkylakeX
grep -qw avx512f /proc/cpuinfo 2>/dev/null || blas_wide=Haswell
"$TESSERA_BIN" info 2>/dev/null | grep -q '^ *BLAS *OpenBLAS' && runs="$runs $best:Sandybridge $best:$blas_wide"
echo "instruction sets: $best$(have avx2 && [ "$best" != avx2 ] && echo ', avx2'), generic (on: $GENERIC)"

# dump NAME ISA CORETYPE OUT: one dump, compared file by file
dump_and_compare() {
  name=$1 isa=$2 core=$3 out=$4
  dir=$GOLDEN/$name
  set -- env
  [ "$isa" = default ] || set -- "$@" TESSERA_ISA="$isa"
  [ "$core" = - ] || set -- "$@" OPENBLAS_CORETYPE="$core"
  # shellcheck disable=SC2046
  expect_exit 0 "" "$@" "$TESSERA_BIN" dump --out "$out" --data "$DATA" $(cat "$dir/args") || return
  for f in config.json weights.safetensors grads.safetensors result.json; do
    if cmp -s "$dir/$f" "$out/$f"; then
      pass "$name/$f identical ($isa, OpenBLAS kernel $core)"
    else
      fail "$name/$f differs from the golden file ($isa, OpenBLAS kernel $core)"
    fi
  done
}

n=0
for dir in "$GOLDEN"/*/; do
  name=$(basename "$dir")
  [ -f "$dir/args" ] || continue
  n=$((n + 1))
  for r in $runs; do
    isa=${r%%:*} core=${r#*:}
    dump_and_compare "$name" "$isa" "$core" "$TS_TMP/$name-$isa-$core"
    rm -rf "$TS_TMP/$name-$isa-$core"
  done
  case " $GENERIC " in
    *" $name "* | " all ") dump_and_compare "$name" generic - "$TS_TMP/$name-generic" ;;
  esac
done
[ $n -gt 0 ] || fail "no golden configurations found under $GOLDEN"
done_testing
