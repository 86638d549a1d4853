#!/bin/sh
# tessera plot: two real short runs drawn as SVG (well-formed XML, one path
# per run with a vertex per step record, a marker per eval record, the token
# axis really scaled by each run's batch x seq), and the refusals of bad
# input (exit 2, one line naming the file and line), leaving no file behind.
. "$(dirname "$0")/lib.sh"

T=$TESSERA_BIN
need_python "to read the SVG back"

cd "$TS_TMP" || exit 99
# two runs that differ in length, evaluation interval and tokens per step
expect_exit 0 "" "$T" train --model tiny --steps 6 --eval-every 3 --eval-batches 1 --threads 1 --quiet --log a.jsonl
expect_exit 0 "" "$T" train --model tiny --steps 4 --batch 8 --seed 2 --eval-every 2 --eval-batches 1 --threads 1 --quiet --log b.jsonl

# check_svg SVG MODE LOG...: the drawing holds, per log in order, one path
# whose vertices are its step records (x increasing) and one marker per eval
# record; MODE "step" or "tokens" also checks which run reaches further right.
check_svg() {
  TS_CHECKS=$((TS_CHECKS + 1))
  if out=$("$PY" - "$@" 2>&1 <<'EOF'
import json, re, sys
import xml.etree.ElementTree as ET
svg, mode, logs = sys.argv[1], sys.argv[2], sys.argv[3:]
ns = {"s": "http://www.w3.org/2000/svg"}
root = ET.parse(svg).getroot()  # raises on XML that is not well-formed
runs = root.findall("s:g[@class='run']", ns)
assert len(runs) == len(logs), "%d runs drawn for %d logs" % (len(runs), len(logs))
last_x = {}
for g, log in zip(runs, logs):
    recs = [json.loads(l) for l in open(log) if l.strip()]
    steps = [r for r in recs if r["type"] == "step"]
    evals = [r for r in recs if r["type"] == "eval"]
    assert g.get("data-file") == log, "run named %r, not %r" % (g.get("data-file"), log)
    paths = g.findall("s:path", ns)
    assert len(paths) == 1, "%s: %d paths" % (log, len(paths))
    d = paths[0].get("d")
    verts = [(float(x), float(y)) for x, y in re.findall(r"[ML](-?[\d.]+) (-?[\d.]+)", d)]
    assert len(verts) == len(steps), "%s: %d vertices for %d steps" % (log, len(verts), len(steps))
    assert d.count("M") == 1, "%s: the line is broken: %s" % (log, d)
    assert all(a[0] < b[0] for a, b in zip(verts, verts[1:])), "%s: x not increasing" % log
    # a falling loss is drawn lower (larger y) at its end than at its start
    if steps[-1]["loss"] < steps[0]["loss"]:
        assert verts[-1][1] > verts[0][1], "%s: loss axis upside down" % log
    marks = g.findall("s:circle[@class='val']", ns)
    assert len(marks) == len(evals), "%s: %d markers for %d evals" % (log, len(marks), len(evals))
    for c in marks:
        assert 70 <= float(c.get("cx")) <= 776 and 44 <= float(c.get("cy")) <= 444, "marker outside"
    last_x[log] = verts[-1][0]
texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
for log in logs:
    assert log in texts, "%s not in the legend" % log
if mode == "step":    # a: 6 steps, b: 4
    assert last_x[logs[0]] > last_x[logs[1]], "step axis: %s" % last_x
elif mode == "tokens":  # a: 6 x 4 x 64 = 1536 tokens, b: 4 x 8 x 64 = 2048
    assert last_x[logs[1]] > last_x[logs[0]], "tokens axis: %s" % last_x
EOF
  ); then
    pass "$1 ($2): one path per run, a vertex per step, a marker per eval"
  else
    fail "$1 ($2): $out"
  fi
}

expect_exit 0 "" "$T" plot a.jsonl b.jsonl --out loss.svg
check_svg loss.svg step a.jsonl b.jsonl
expect_exit 0 "" "$T" plot a.jsonl b.jsonl --out tokens.svg --x tokens --log-y --title 'A & <B>'
check_svg tokens.svg tokens a.jsonl b.jsonl
TS_CHECKS=$((TS_CHECKS + 1))
if grep -q '>A &amp; &lt;B&gt;</text>' tokens.svg && grep -q 'log scale' tokens.svg; then
  pass "--title escaped, --log-y labelled"
else
  fail "--title or --log-y not in tokens.svg"
fi
TS_CHECKS=$((TS_CHECKS + 1))
if ls | grep -q '\.tmp\.'; then fail "a temporary file was left: $(ls)"; else pass "no temporary file left"; fi

# a diverged step is left out: one vertex fewer, the line broken there
awk '{ if ($0 ~ /"type":"step","step":3,/) sub(/"loss":[0-9.]*,"loss_hex":"[^"]*"/, "\"loss\":NaN,\"loss_hex\":\"nan\""); print }' a.jsonl >nan.jsonl
expect_exit 0 "" "$T" plot nan.jsonl --out nan.svg
TS_CHECKS=$((TS_CHECKS + 1))
d=$(sed -n 's/.*class="loss"[^>]* d="\([^"]*\)".*/\1/p' nan.svg)
if [ "$(echo "$d" | tr -cd 'ML' | wc -c)" -eq 5 ] && [ "$(echo "$d" | tr -cd 'M' | wc -c)" -eq 2 ]; then
  pass "a NaN loss is left out and breaks the line"
else
  fail "the NaN step drawn as: $d"
fi

# --- refusals: exit 2, one line naming the file (and line); nothing written ----
echo "keep" >old.svg
printf '{"type":"step","step":1,"loss":5,"loss_hex":"0x1.4p+2"}\nnot json\n' >bad.jsonl
printf '{"type":"step","step":1,"loss":5,"loss":4}\n' >dup.jsonl
printf '{"type":"step","step":1,"loss":5,"loss_hex":"1.25"}\n' >hex.jsonl
printf '{"type":"step","step":1,"loss":"five"}\n' >str.jsonl
printf '{"type":"step","step":1,"grad_norm":1}\n' >noloss.jsonl
head -n 1 a.jsonl >config-only.jsonl
: >empty.jsonl
printf '{"type":"step","step":1,"loss":5}\n' >noconfig.jsonl
expect_exit 2 "bad\.jsonl:2: malformed JSON" "$T" plot a.jsonl bad.jsonl --out old.svg
expect_exit 2 "dup\.jsonl:1: key \"loss\" appears twice" "$T" plot dup.jsonl --out old.svg
expect_exit 2 "hex\.jsonl:1: \"loss_hex\" is not a C hex float" "$T" plot hex.jsonl --out old.svg
expect_exit 2 "str\.jsonl:1: \"loss\" is not a number" "$T" plot str.jsonl --out old.svg
expect_exit 2 "noloss\.jsonl:1: step record has no \"loss\"" "$T" plot noloss.jsonl --out old.svg
expect_exit 2 "config-only\.jsonl: no step or eval records" "$T" plot config-only.jsonl --out old.svg
expect_exit 2 "empty\.jsonl: no step or eval records" "$T" plot empty.jsonl --out old.svg
expect_exit 2 "noconfig\.jsonl: no config record .*--x tokens" "$T" plot noconfig.jsonl --out old.svg --x tokens
expect_exit 2 "cannot open nope\.jsonl" "$T" plot nope.jsonl --out old.svg
expect_exit 2 "--out \./a\.jsonl: the log a\.jsonl" "$T" plot a.jsonl --out ./a.jsonl
expect_exit 2 "--x steps: must be step or tokens" "$T" plot a.jsonl --out old.svg --x steps
expect_exit 2 "--out FILE is required" "$T" plot a.jsonl
expect_exit 2 "needs at least one run log" "$T" plot --out old.svg
expect_exit 2 "--rtol: not a flag of 'tessera plot'" "$T" plot a.jsonl --out old.svg --rtol 1
expect_exit 1 "cannot write no/such/dir/x\.svg" "$T" plot a.jsonl --out no/such/dir/x.svg
TS_CHECKS=$((TS_CHECKS + 1))
if [ "$(cat old.svg)" = keep ] && "$T" compare a.jsonl a.jsonl >/dev/null; then
  pass "refused plots left --out and the logs as they were"
else
  fail "a refused plot changed old.svg or a log"
fi
done_testing
