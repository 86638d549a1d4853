#!/bin/sh
# The same bits on another instruction set: tessera cross-built for aarch64
# (without MPI and BLAS, which no result depends on) and run under qemu's
# user-mode emulation dumps every golden configuration (golden/*/) with the
# golden files' bytes. The exact path defines every product, exponential and
# sum element by element (docs/EXACTNESS.md), so the NEON and generic paths
# of an ARM CPU, its compiler and its C library must change nothing.
#
# Needs the cross compiler and qemu (scripts/install-deps: gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross, qemu-user); skips without them. The build is the slow
# part (about two minutes on 2 cores); set TESSERA_AARCH64_BUILD=DIR to keep
# it in DIR between runs. When a file differs, the native build's dump of the
# same configuration says whether the golden file or the aarch64 build is the
# odd one out, and the first differing tensor is named.
. "$(dirname "$0")/lib.sh"

HOST=aarch64-linux-gnu
SYSROOT=/usr/$HOST
GOLDEN=$TESSERA_SRCDIR/golden
DATA=$TESSERA_SRCDIR/data/corpus.txt
command -v $HOST-gcc >/dev/null 2>&1 || skip "no $HOST-gcc (scripts/install-deps: gcc-aarch64-linux-gnu)"
command -v qemu-aarch64 >/dev/null 2>&1 || skip "no qemu-aarch64 (scripts/install-deps: qemu-user)"
[ -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ] ||
  skip "no aarch64 C library in $SYSROOT (scripts/install-deps: libc6-dev-arm64-cross)"
[ -x "$TESSERA_SRCDIR/configure" ] || skip "no $TESSERA_SRCDIR/configure (run autoreconf -fi)"

# --- the aarch64 build ---------------------------------------------------------------
BUILD=${TESSERA_AARCH64_BUILD:-$TS_TMP/build}
mkdir -p "$BUILD"
# make check's own make settings (its jobserver) are not this build's
unset MAKEFLAGS MFLAGS MAKELEVEL
t0=$(date +%s)
if [ ! -f "$BUILD/Makefile" ]; then
  "$TESSERA_SRCDIR/scripts/outoftree" "$BUILD" --quiet --host=$HOST --without-mpi --without-blas \
    --disable-tests --without-sentencepiece >"$TS_TMP/configure.log" 2>&1 || {
    tail -n 20 "$TS_TMP/configure.log"
    fail "configure --host=$HOST failed"
    done_testing
  }
fi
make -C "$BUILD" -j2 tessera >"$TS_TMP/make.log" 2>&1 || {
  tail -n 30 "$TS_TMP/make.log"
  fail "make tessera for $HOST failed"
  done_testing
}
pass "tessera built for $HOST in $(($(date +%s) - t0)) s"
A64="qemu-aarch64 -L $SYSROOT $BUILD/tessera"
# shellcheck disable=SC2086
expect_exit 0 "" $A64 info
expect_stdout "products +ts_mm on neon"

# first_difference A B: the first tensor (or JSON line) of two files that
# differs, for the failure message.
first_difference() {
  python3 - "$1" "$2" <<'PY' 2>/dev/null || echo "(no python3 to say where)"
import json, struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
if not sys.argv[1].endswith(".safetensors"):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    k = max(a.rfind(b",", 0, i), a.rfind(b"{", 0, i)) + 1  # from the member's start
    print("byte %d: ...%s... vs ...%s..." % (i, a[k:i + 24].decode(errors="replace").replace("\n", " "),
                                            b[k:i + 24].decode(errors="replace").replace("\n", " ")))
    sys.exit()
def table(d):
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    h.pop("__metadata__", None)
    return 8 + n, sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0])
(oa, ta), (ob, tb) = table(a), table(b)
if [k for k, _ in ta] != [k for k, _ in tb]:
    print("different tensor tables")
    sys.exit()
for (name, ia), (_, ib) in zip(ta, tb):
    s0, s1 = ia["data_offsets"]
    xa, xb = a[oa + s0:oa + s1], b[ob + ib["data_offsets"][0]:ob + ib["data_offsets"][1]]
    if xa != xb:
        fa = struct.unpack("<%df" % (len(xa) // 4), xa)
        fb = struct.unpack("<%df" % (len(xb) // 4), xb)
        diff = [i for i in range(len(fa)) if struct.pack("<f", fa[i]) != struct.pack("<f", fb[i])]
        i = diff[0]
        print("tensor %s: %d of %d elements differ, first [%d] %r vs %r"
              % (name, len(diff), len(fa), i, fa[i], fb[i]))
        sys.exit()
print("same tensors; the headers differ")
PY
}

# --- every golden configuration --------------------------------------------------------
n=0
for dir in "$GOLDEN"/*/; do
  name=$(basename "$dir")
  [ -f "$dir/args" ] || continue
  n=$((n + 1))
  out=$TS_TMP/a64-$name
  t0=$(date +%s)
  # shellcheck disable=SC2046,SC2086
  expect_exit 0 "" $A64 dump --out "$out" --data "$DATA" $(cat "$dir/args") || continue
  echo "  ($name: $(($(date +%s) - t0)) s under qemu)"
  native=
  for f in config.json weights.safetensors grads.safetensors result.json; do
    TS_CHECKS=$((TS_CHECKS + 1))
    if cmp -s "$dir/$f" "$out/$f"; then
      pass "$name/$f identical on $HOST"
      continue
    fi
    if [ -z "$native" ]; then # once per configuration, on the first difference
      native=$TS_TMP/native-$name
      # shellcheck disable=SC2046
      "$TESSERA_BIN" dump --out "$native" --data "$DATA" $(cat "$dir/args") >/dev/null 2>&1
    fi
    if cmp -s "$native/$f" "$out/$f"; then
      why="the same as this machine's native dump: the golden file is not this build's"
    elif cmp -s "$native/$f" "$dir/$f"; then
      why="the native dump equals the golden file: $HOST computes differently"
    else
      why="the native dump differs from both"
    fi
    fail "$name/$f differs from the golden file ($why); $HOST vs golden: $(first_difference "$out/$f" "$dir/$f")"
  done
done
[ $n -gt 0 ] || fail "no golden configurations found under $GOLDEN"
done_testing
