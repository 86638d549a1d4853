#!/bin/bash
# Packs what tests/gpu/run.sh needs to build tessera on a GPU machine that has the CUDA
# toolkit but not tessera's other dependencies (the lent GPU machines have nvcc, PyTorch
# and Python, and no package registry): the generated autotools files (./configure and
# friends, so no autoreconf is needed there) and the run-time and build-time files of
# OpenBLAS, MPICH (library, headers, mpiexec) and CMocka, taken from this machine.
#
#   tests/gpu/kit.sh               # here, after scripts/install-deps and autoreconf -fi
#
# It writes KIT (default .gpu-kit/, ignored by git):
#   autotools/   configure, Makefile.in, aclocal.m4, config.h.in, build-aux/, m4/
#   deps.tar.xz  bin/ (mpiexec), lib/ (shared libraries and UCX's modules), include/
#   env.sh       `. KIT/env.sh KIT`: unpacks deps.tar.xz once (with tar, or with
#                Python's tarfile where there is no xz) and sets PATH, LD_LIBRARY_PATH,
#                CPPFLAGS, LDFLAGS, MPI_CFLAGS/MPI_LIBS, CMOCKA_CFLAGS/CMOCKA_LIBS and
#                MPIEXEC so that ./configure finds everything there
# run.sh uses it only when the machine lacks one of these. The libraries are Debian's
# (glibc 2.36); they run on any newer glibc. About 15 MB; the device tool carries at
# most 64 MiB with the working tree: name .gpu-kit in its `carry` list.
#
# Environment: KIT (output folder).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KIT=${KIT:-$ROOT/.gpu-kit}
die() { echo "tests/gpu/kit.sh: $*" >&2; exit 1; }

cd "$ROOT"
for f in configure Makefile.in aclocal.m4 config.h.in build-aux; do
  [ -e "$f" ] || die "$ROOT/$f missing: run autoreconf -fi first"
done
[ configure.ac -nt configure ] && die "./configure is older than configure.ac: run autoreconf -fi first"
[ Makefile.am -nt Makefile.in ] && die "Makefile.in is older than Makefile.am: run autoreconf -fi first"
command -v pkg-config > /dev/null || die "pkg-config not found (scripts/install-deps)"
pkg-config --exists mpich cmocka || die "pkg-config finds no mpich or cmocka (scripts/install-deps)"
command -v xz > /dev/null || die "xz not found"

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/tessera-kit.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/autotools" "$STAGE/deps/bin" "$STAGE/deps/lib" "$STAGE/deps/include/mpich"
cp -pR configure Makefile.in aclocal.m4 config.h.in build-aux "$STAGE/autotools/"
[ -d m4 ] && cp -pR m4 "$STAGE/autotools/"

# headers: OpenBLAS's cblas.h and what it includes, MPICH's, CMocka's
cblas=$(printf '#include <cblas.h>\n' | cc -M -E -x c - 2> /dev/null | tr ' ' '\n' | grep '/cblas.h$' | head -n 1)
[ -n "$cblas" ] || die "cblas.h not found (scripts/install-deps: libopenblas-dev)"
cp -L "$(dirname "$(readlink -f "$cblas")")"/*.h "$STAGE/deps/include/"
mpiinc=$(pkg-config --cflags-only-I mpich | tr ' ' '\n' | sed -n 's/^-I//p' | head -n 1)
[ -d "$mpiinc" ] || die "MPICH's include folder ($mpiinc) not found"
cp -LR "$mpiinc"/. "$STAGE/deps/include/mpich/"
cmockainc=$(printf '#include <stdarg.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <setjmp.h>\n#include <cmocka.h>\n' |
  cc -M -E -x c - 2> /dev/null | tr ' ' '\n' | grep '/cmocka.h$' | head -n 1)
[ -n "$cmockainc" ] || die "cmocka.h not found (scripts/install-deps: libcmocka-dev)"
cp -L "$(dirname "$cmockainc")"/cmocka*.h "$STAGE/deps/include/"

# programs: MPICH's launcher and its proxy
hydra=$(readlink -f "$(command -v mpiexec)")
cp -L "$hydra" "$STAGE/deps/bin/mpiexec.hydra"
ln -s mpiexec.hydra "$STAGE/deps/bin/mpiexec"
proxy=$(dirname "$(command -v mpiexec)")/hydra_pmi_proxy
[ -x "$proxy" ] || die "$proxy not found"
cp -L "$proxy" "$STAGE/deps/bin/"

# libraries: the three, their launcher's, and everything they load, except the C
# library and the compiler's run-time libraries (the GPU machine's own must be used)
# awk reads to the end: an early exit would end ldconfig with SIGPIPE (and pipefail)
libpath() { ldconfig -p | awk -v n="$1" '$1 == n && !found {print $NF; found = 1}'; }
roots=()
for l in libopenblas.so.0 libmpich.so.12 libcmocka.so.0; do
  p=$(libpath "$l"); [ -n "$p" ] || die "$l not found (ldconfig -p)"
  roots+=("$p")
done
roots+=("$STAGE/deps/bin/mpiexec.hydra" "$STAGE/deps/bin/hydra_pmi_proxy")
ldd "${roots[@]}" 2> /dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case "$name" in
      libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libresolv.so.* | \
        libutil.so.* | ld-linux* | libgcc_s.so.* | libstdc++.so.* | libgomp.so.*) continue ;;
    esac
    cp -L "$path" "$STAGE/deps/lib/$name"
  done
for l in libopenblas.so.0 libmpich.so.12 libcmocka.so.0; do
  cp -L "$(libpath "$l")" "$STAGE/deps/lib/$l"
  ln -sf "$l" "$STAGE/deps/lib/${l%.*}" # the name the linker looks for: libX.so
done
# UCX loads its transports from the folder beside libucs
ucs=$(libpath libucs.so.0)
if [ -n "$ucs" ] && [ -d "$(dirname "$ucs")/ucx" ]; then
  cp -LR "$(dirname "$ucs")/ucx" "$STAGE/deps/lib/"
  rm -f "$STAGE"/deps/lib/ucx/*.a
fi

cat > "$STAGE/env.sh" << 'EOF'
# shellcheck shell=bash
# Sourced by tests/gpu/run.sh: `. KIT/env.sh KIT` (made by tests/gpu/kit.sh).
_k=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")}" && pwd)
if [ ! -d "$_k/deps" ]; then
  if command -v xz > /dev/null; then
    tar -xJf "$_k/deps.tar.xz" -C "$_k" || return 1
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$_k/deps.tar.xz" "$_k" || return 1
  fi
fi
_d=$_k/deps
export PATH="$_d/bin:$PATH"
export LD_LIBRARY_PATH="$_d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CPPFLAGS="-I$_d/include${CPPFLAGS:+ $CPPFLAGS}"
export LDFLAGS="-L$_d/lib -Wl,-rpath-link,$_d/lib${LDFLAGS:+ $LDFLAGS}"
export MPI_CFLAGS="-I$_d/include/mpich" MPI_LIBS="-L$_d/lib -lmpich"
export CMOCKA_CFLAGS="-I$_d/include" CMOCKA_LIBS="-L$_d/lib -lcmocka"
export MPIEXEC="$_d/bin/mpiexec"
echo "kit: $_d (PATH, LD_LIBRARY_PATH, CPPFLAGS, LDFLAGS, MPI_*, CMOCKA_*, MPIEXEC set)"
unset _k _d
EOF

tar -cJf "$STAGE/deps.tar.xz" -C "$STAGE" deps
rm -rf "$STAGE/deps"
rm -rf "$KIT"
mkdir -p "$(dirname "$KIT")"
mv "$STAGE" "$KIT"
trap - EXIT
chmod 755 "$KIT"
echo "tests/gpu/kit.sh: wrote $KIT ($(du -sh "$KIT" | cut -f1)): $(tar -tJf "$KIT/deps.tar.xz" | grep -c '/lib/lib') libraries"
