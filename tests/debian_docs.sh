#!/usr/bin/env bash
# data/debian_docs.py (docs/DATA.md) on two small fake Debian packages made here with
# dpkg-deb, in a few seconds: it keeps the English .rst sources (plain and gzipped, not
# the translations, not other files), splits whole documents by the hash of their name,
# learns the tokenizer and writes token files that tessera trains on, records each
# package's version and .deb sha256 and each output's in MANIFEST.json with no absolute
# path anywhere, writes the same bytes twice, and --check finds a changed output.
# Skips without dpkg-deb, spm_train or SentencePiece in the build.
. "$(dirname "$0")/lib.sh"
need_python "to run data/debian_docs.py"
T=$TESSERA_BIN
SCRIPT=$TESSERA_SRCDIR/data/debian_docs.py
expect_exit 2 "--vocab 100: must be >= 300" "$PY" "$SCRIPT" --vocab 100 --out "$TS_TMP/never"
expect_exit 1 "MANIFEST.json" "$PY" "$SCRIPT" --check --out "$TS_TMP/never"
[ "$TS_FAILS" -eq 0 ] || done_testing # a failure above is not hidden by a skip below
command -v dpkg-deb >/dev/null || skip "dpkg-deb is not on PATH (Debian package: dpkg)"
command -v spm_train >/dev/null || skip "spm_train is not on PATH (Debian package: sentencepiece)"
"$T" info | grep -Eq "^  tokenizers +bytes, sentencepiece" ||
  skip "tessera was built without SentencePiece (configure --with-sentencepiece)"

D=$(cd "$TS_TMP" && pwd -P)
CORPUS=$TESSERA_SRCDIR/data/corpus.txt
# fakepkg NAME VERSION: a .deb in $D/debs whose documents are 40-line slices of the corpus
mkdir -p "$D/debs"
fakepkg() {
  name=$1 version=$2 root=$D/pkg-$1
  mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name/src/sub" "$root/usr/share/doc/$name/translations/it_IT"
  printf 'Package: %s\nSource: fake-%s\nVersion: %s\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n' \
    "$name" "$name" "$version" >"$root/DEBIAN/control"
  for i in $(seq 1 30); do
    sed -n "$((i * 40 + ${#name})),$((i * 40 + 39 + ${#name}))p" "$CORPUS" >"$root/usr/share/doc/$name/src/doc$i.rst.txt"
  done
  printf 'Zipped\r\nDOCUMENT-IN-GZIP %s\n\n\n\n\nend  \n' "$name" | gzip -n >"$root/usr/share/doc/$name/src/sub/z.rst.gz"
  echo "NOT-ENGLISH-TRANSLATION" >"$root/usr/share/doc/$name/translations/it_IT/t.rst"
  echo "NOT-A-SOURCE" >"$root/usr/share/doc/$name/src/page.html"
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$D/debs/${name}_${version}_all.deb" >/dev/null 2>&1 ||
    fail "dpkg-deb --build $name"
}
fakepkg alpha-doc 1.2-3
fakepkg beta-doc 4.5

run() { # OUT: the script on the fake packages
  expect_exit 0 "" "$PY" "$SCRIPT" --debs "$D/debs" --out "$1" --vocab 400 --val-percent 20 \
    --tessera "$T" --quiet
}
run "$D/out"
O=$D/out
for f in train.txt val.txt tokenizer.model tokenizer.vocab train.bin val.bin MANIFEST.json; do
  TS_CHECKS=$((TS_CHECKS + 1))
  [ -s "$O/$f" ] && pass "$f written" || fail "$f missing or empty"
done
manifest() { "$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$O/MANIFEST.json" "$1"; }
expect_equal "packages" \
  "$(manifest '", ".join("%s %s %s %d" % (p["package"], p["version"], p["source"], p["documents"]) for p in m["packages"])')" \
  "alpha-doc 1.2-3 fake-alpha-doc 31, beta-doc 4.5 fake-beta-doc 31"
for p in alpha-doc_1.2-3 beta-doc_4.5; do
  expect_equal "$p .deb sha256" "$(sha256sum "$D/debs/${p}_all.deb" | cut -d' ' -f1)" \
    "$(manifest "[p['deb_sha256'] for p in m['packages'] if p['deb'] == '${p}_all.deb'][0]")"
done
for f in train.txt val.txt train.bin val.bin tokenizer.model; do
  expect_equal "$f sha256" "$(sha256sum "$O/$f" | cut -d' ' -f1)" "$(manifest "m['files']['$f']['sha256']")"
done
# the split: every document in one split, some in each
expect_equal "documents split" "$(manifest "m['split']['train_documents'] + m['split']['val_documents']")" 62
TS_CHECKS=$((TS_CHECKS + 1))
nval=$(manifest "m['split']['val_documents']")
[ "$nval" -gt 0 ] && [ "$nval" -lt 62 ] && pass "$nval of 62 documents held out" || fail "$nval of 62 documents held out"
# what is kept and how it is cleaned
TS_CHECKS=$((TS_CHECKS + 1))
if cat "$O/train.txt" "$O/val.txt" | grep -q "NOT-ENGLISH-TRANSLATION\|NOT-A-SOURCE"; then
  fail "a translation or a non-.rst file was kept"
else pass "translations and other files left out"; fi
expect_equal "gzipped sources kept" "$(cat "$O/train.txt" "$O/val.txt" | grep -c "^DOCUMENT-IN-GZIP")" 2
TS_CHECKS=$((TS_CHECKS + 1))
if cat "$O/train.txt" "$O/val.txt" | grep -q "$(printf '\r')\| $"; then fail "a CR or a trailing blank was kept"
elif cat "$O/train.txt" "$O/val.txt" | awk 'prev == "" && $0 == "" && NR > 1 { bad = 1 } { prev = $0 } END { exit !bad }'; then
  fail "two blank lines in a row were kept"
else pass "line ends, trailing blanks and blank runs cleaned"; fi
# the token files hold what the manifest says, and tessera trains on them
for s in train val; do
  expect_equal "$s.bin tokens" "$(($(wc -c <"$O/$s.bin") / 2))" "$(manifest "m['files']['$s.bin']['tokens']")"
done
TS_CHECKS=$((TS_CHECKS + 1))
grep -rqF "$D" "$O" && fail "an output names the build's folder $D" || pass "no absolute path in the outputs"
expect_exit 0 "" "$T" train --model tiny --vocab 400 --data "$O/train.bin" --val-data "$O/val.bin" \
  --data-format u16 --tokenizer "$O/tokenizer.model" --seq 64 --batch 2 --steps 1 --eval-batches 1 --quiet
# the same inputs give the same bytes
run "$D/again"
for f in train.txt val.txt tokenizer.model tokenizer.vocab train.bin val.bin MANIFEST.json; do
  TS_CHECKS=$((TS_CHECKS + 1))
  cmp -s "$O/$f" "$D/again/$f" && pass "$f: the same bytes again" || fail "$f differs between two runs"
done
# --check: the outputs against the manifest
expect_exit 0 "" "$PY" "$SCRIPT" --check --out "$O"
expect_stdout "^debian_docs.py --check: 6 files match MANIFEST.json$"
printf 'x' | dd of="$O/val.bin" bs=1 seek=3 conv=notrunc 2>/dev/null
expect_exit 1 "val.bin: its bytes are not the manifest's" "$PY" "$SCRIPT" --check --out "$O"
rm -f "$O/tokenizer.vocab"
expect_exit 1 "tokenizer.vocab: missing" "$PY" "$SCRIPT" --check --out "$O"
done_testing
