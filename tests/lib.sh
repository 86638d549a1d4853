# Shared helpers for tessera's script tests. Source it first:
#   . "$(dirname "$0")/lib.sh"
# Exit status follows the automake test protocol: 0 pass, 1 fail, 77 skip,
# 99 hard error (the test itself could not run).

set -u

TS_TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
TESSERA_SRCDIR=${TESSERA_SRCDIR:-$(cd "$TS_TESTS_DIR/.." && pwd)}
export TESSERA_SRCDIR

# The binary: $TESSERA_BIN (set by `make check`), else the one in the
# current directory (where make runs tests), else next to the tests folder.
if [ -z "${TESSERA_BIN:-}" ]; then
  if [ -x ./tessera ]; then
    TESSERA_BIN=$(pwd)/tessera
  else
    TESSERA_BIN=$TS_TESTS_DIR/../tessera
  fi
fi
if [ ! -x "$TESSERA_BIN" ]; then
  echo "ERROR: tessera binary not found at $TESSERA_BIN (build it, or set TESSERA_BIN)" >&2
  exit 99
fi

# Scratch space, removed however the script ends.
TS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/tessera-test.XXXXXX") || exit 99
trap 'rm -rf "$TS_TMP"' EXIT
TS_OUT=$TS_TMP/.stdout # stdout of the last expect_exit
TS_ERR=$TS_TMP/.stderr # stderr of the last expect_exit

TS_FAILS=0
TS_CHECKS=0

# fail MESSAGE: records a failed check and goes on, so one run shows them all.
fail() {
  TS_FAILS=$((TS_FAILS + 1))
  echo "FAIL: $*"
}

pass() {
  echo "ok: $*"
}

# skip REASON: the whole script is skipped (exit 77).
skip() {
  echo "SKIP: $*"
  exit 77
}

# need_python WHY: PY is Debian's python3 (the one with the packages
# scripts/install-deps installs), else the first python3 on PATH; without one
# the script is skipped, saying what it needed it for.
need_python() {
  PY=
  for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1; then PY=$p; break; fi
  done
  [ -n "$PY" ] || skip "no python3 $1 (scripts/install-deps installs it)"
}

# expect_exit CODE PATTERN CMD [ARGS...]
# Runs CMD with stdout and stderr captured in $TS_OUT and $TS_ERR and checks
# the exit status. A non-empty PATTERN (grep -E) must match stderr, and stderr
# must then be exactly one line: errors are one clear line, never a cascade.
expect_exit() {
  local want=$1 pattern=$2 rc lines t0 took
  shift 2
  TS_CHECKS=$((TS_CHECKS + 1))
  t0=$(date +%s.%N)
  "$@" >"$TS_OUT" 2>"$TS_ERR"
  rc=$?
  # seconds it took, on the ok line: where a slow suite spends its time
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -ne "$want" ]; then
    fail "'$*' exited $rc, expected $want; stderr: $(head -c 500 "$TS_ERR")"
    return 1
  fi
  if [ -n "$pattern" ]; then
    lines=$(wc -l <"$TS_ERR")
    if [ "$lines" -ne 1 ]; then
      fail "'$*': stderr has $lines lines, expected one: $(head -c 500 "$TS_ERR")"
      return 1
    fi
    if ! grep -Eq -- "$pattern" "$TS_ERR"; then
      fail "'$*': stderr '$(cat "$TS_ERR")' does not match /$pattern/"
      return 1
    fi
  fi
  pass "$* -> $rc ($took s)"
  return 0
}

# expect_stdout PATTERN: the stdout of the last expect_exit matches (grep -E).
expect_stdout() {
  TS_CHECKS=$((TS_CHECKS + 1))
  if grep -Eq -- "$1" "$TS_OUT"; then
    pass "stdout matches /$1/"
  else
    fail "stdout does not match /$1/: $(head -c 500 "$TS_OUT")"
  fi
}

# expect_equal LABEL GOT WANT: a counted value (bytes, messages) is the one
# its formula gives.
expect_equal() {
  TS_CHECKS=$((TS_CHECKS + 1))
  if [ "$2" = "$3" ]; then pass "$1: $2"; else fail "$1: '$2', expected $3"; fi
}

# expect_compare WANT LABEL A B: `tessera compare A B` prints exactly WANT
# ("identical" for two logs, "same model state" for two checkpoints).
expect_compare() {
  local want=$1 label=$2 out
  TS_CHECKS=$((TS_CHECKS + 1))
  out=$("$TESSERA_BIN" compare "$3" "$4" 2>&1)
  if [ "$out" = "$want" ]; then pass "$label: $want"; else fail "$label: $out"; fi
}

# expect_same_bytes LABEL A B: two checkpoints hold the same bytes but their
# run members (",\"tessera.run\":\"…\"", the run's own settings: paths,
# threads, layout) and what its length moves (the length word, the header's
# padding): the tensor table, the rest of the metadata and the data section
# byte for byte (docs/CHECKPOINTS.md).
expect_same_bytes() {
  local label=$1 out
  TS_CHECKS=$((TS_CHECKS + 1))
  out=$(python3 - "$2" "$3" <<'PY' 2>&1
import re, struct, sys
def rest(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = re.sub(rb',"tessera\.run":"(?:[^"\\]|\\.)*"', b"", b[8:8 + n].rstrip(b" "), count=1)
    return h, b[8 + n:]
(ha, da), (hb, db) = rest(sys.argv[1]), rest(sys.argv[2])
if ha != hb:
    i = next((k for k in range(min(len(ha), len(hb))) if ha[k] != hb[k]), min(len(ha), len(hb)))
    print("headers differ at byte %d: %r vs %r" % (i, ha[i:i + 40], hb[i:i + 40]))
elif da != db:
    print("data sections differ (%d and %d bytes)" % (len(da), len(db)))
else:
    print("same bytes")
PY
)
  if [ "$out" = "same bytes" ]; then pass "$label: the same bytes but the run's settings"; else fail "$label: $out"; fi
}

# make_corpus FILE [BYTES]: deterministic text, enough for small test runs.
make_corpus() {
  local file=$1 bytes=${2:-65536}
  # MINSTD generator, exact in awk's doubles, so every awk writes the same bytes
  awk -v n="$bytes" 'BEGIN {
    x = 7; w[0]="the"; w[1]="model"; w[2]="sees"; w[3]="every"; w[4]="token";
    w[5]="once"; w[6]="and"; w[7]="learns"; w[8]="a"; w[9]="pattern";
    s = 0;
    while (s < n) { line = "";
      for (i = 0; i < 12; i++) { x = (x * 48271) % 2147483647; line = line w[x % 10] " " }
      print line; s += length(line) + 1 }
  }' | head -c "$bytes" >"$file"
}

# write_ids FILE WIDTH LLMC N: N token ids (7i mod 300: 0..299, the first one
# above 255 is id 259 at index 37) as WIDTH-byte little-endian words, after
# llm.c's 1024-byte header when LLMC is 1. awk spells the bytes as octal
# escapes and printf(1) writes them, so no other tool is needed.
write_ids() {
  awk -v w="$2" -v h="$3" -v n="$4" '
    function le(v, k,   s, i) { s = ""; for (i = 0; i < k; i++) { s = s sprintf("\\%03o", v % 256); v = int(v / 256) }; return s }
    BEGIN { s = ""
      if (h) { s = le(20240520, 4) le(1, 4) le(n, 4); for (i = 3; i < 256; i++) s = s le(0, 4) }
      for (i = 0; i < n; i++) s = s le((i * 7) % 300, w)
      printf "%s", s }' >"$1.fmt"
  # shellcheck disable=SC2059
  printf "$(cat "$1.fmt")" >"$1"
  rm -f "$1.fmt"
}

# done_testing: the script's exit status.
done_testing() {
  echo "$TS_CHECKS checks, $TS_FAILS failed"
  [ "$TS_FAILS" -eq 0 ] && exit 0
  exit 1
}
