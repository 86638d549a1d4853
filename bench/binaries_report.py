#!/usr/bin/env python3
"""The table of bench/binaries.sh: for each case and load, the median step time of the
old and the new binary (each run's median over steps 2..N, then the median over the
rounds), the speed-up, the new binary's tokens/s and MFU against the roof its run
measured at start-up, and how much one busy process slows each binary (busy / quiet).

    /usr/bin/python3 bench/binaries_report.py bench/results/binaries
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def run_stats(path):
    """(median step ms over steps 2.., tokens per step, FLOPs per token, roof GFLOP/s)."""
    steps, cfg = [], None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "config":
                cfg = r
            elif r.get("type") == "step" and r["step"] >= 2:
                steps.append(r["step_ms"])
    if not cfg or not steps:
        return None
    m = cfg["model"]
    return (benchlib.median(steps), m["batch"] * m["seq"], cfg["flops_per_token"], cfg["roof_gflops"])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: binaries_report.py RESULTS")
    res = sys.argv[1]
    runs = {}  # (case, load) -> which -> [stats]
    for p in sorted(glob.glob(os.path.join(res, "*.jsonl"))):
        mt = re.match(r"(.+)\.(old|new)\.(\d+)\.(quiet|busy)\.jsonl$", os.path.basename(p))
        st = run_stats(p) if mt else None
        if st:
            runs.setdefault((mt.group(1), mt.group(4)), {}).setdefault(mt.group(2), []).append(st)
    if not runs:
        sys.exit("binaries_report.py: no runs in %s" % res)
    order = ["small-t1024", "small-t4096", "gpt2-t64", "gpt2-t1024"]
    keys = sorted(runs, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1] != "quiet"))
    med = {}
    rows = []
    for case, load in keys:
        r = runs[(case, load)]
        if "old" not in r or "new" not in r:
            continue
        old = benchlib.median([s[0] for s in r["old"]])
        new = benchlib.median([s[0] for s in r["new"]])
        tok, fpt, roof = r["new"][0][1], r["new"][0][2], benchlib.median([s[3] for s in r["new"]])
        med[(case, load)] = (old, new)
        mfu = fpt * tok / (new / 1e3) / (roof * 1e9)
        same = ""
        cmpf = os.path.join(res, case + ".compare")
        if load == "quiet" and os.path.exists(cmpf):
            same = "identical" if "identical" in open(cmpf).read() else "differ"
        rows.append([case, load, "%.0f" % old, "%.0f" % new, "%.2f×" % (old / new),
                     "%.0f" % (tok / (new / 1e3)), "%.0f%% of %.0f" % (100 * mfu, roof), same,
                     "%d / %d" % (len(r["old"]), len(r["new"]))])
    out = benchlib.table(["case", "load", "old ms/step", "new ms/step", "speed-up", "new tokens/s",
                          "new MFU (roof GFLOP/s)", "runs agree", "runs"],
                         ["---", "---", "---:", "---:", "---:", "---:", "---:", "---", "---:"], rows)
    busy = []
    for (case, load), (old, new) in med.items():
        if load == "busy" and (case, "quiet") in med:
            qo, qn = med[(case, "quiet")]
            busy.append([case, "%.2f×" % (old / qo), "%.2f×" % (new / qn)])
    if busy:
        out += ["", "One busy process beside the run (step time busy / quiet):", ""]
        out += benchlib.table(["case", "old", "new"], ["---", "---:", "---:"], busy)
    about = os.path.join(res, "about.txt")
    if os.path.exists(about):
        out += [""] + ["- " + l for l in open(about).read().splitlines()]
    print("\n".join(out))


if __name__ == "__main__":
    main()
