#!/usr/bin/env python3
"""The table of bench/llmc.sh: for each case and load, llm.c's and tessera's median step
time (each run's median over steps 2..N, then the median over the rounds), both trainers'
tokens/s and their ratio, the MFU of each against the roof tessera's quiet runs measured
at start-up (the same FLOPs per token for both: the same model and shapes), how much one busy
process slows each trainer (busy / quiet), and the first step's loss of each trainer's
first quiet run (the same weights and batch: equal to float rounding).

    /usr/bin/python3 bench/llmc_report.py bench/results/llmc
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

STEP = re.compile(r"^step (\d+): train loss ([-+0-9.eEnaif]+) \(took ([0-9.]+) ms\)")


def llmc_run(path):
    """({step: ms}, {step: loss}) of a bench/llmc_driver.c output."""
    ms, loss = {}, {}
    with open(path) as f:
        for line in f:
            m = STEP.match(line)
            if m:
                ms[int(m.group(1))], loss[int(m.group(1))] = float(m.group(3)), float(m.group(2))
    return ms, loss


def tessera_run(path):
    """({step: ms}, {step: loss}, config record) of a tessera run log."""
    ms, loss, cfg = {}, {}, None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "config":
                cfg = r
            elif r.get("type") == "step":
                ms[r["step"]], loss[r["step"]] = r["step_ms"], r["loss"]
    return ms, loss, cfg


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: llmc_report.py RESULTS")
    res = sys.argv[1]
    runs = {}  # (case, load) -> which -> [median ms]
    cfgs, first = {}, {}
    for p in sorted(glob.glob(os.path.join(res, "*.*.*.*"))):
        m = re.match(r"(t\d+)\.(llmc|tessera)\.(\d+)\.(quiet|busy)\.(out|jsonl)$", os.path.basename(p))
        if not m:
            continue
        case, which, rnd, load = m.group(1), m.group(2), int(m.group(3)), m.group(4)
        if which == "llmc":
            ms, loss = llmc_run(p)
        else:
            ms, loss, cfg = tessera_run(p)
            if cfg and load == "quiet":  # the roof a quiet run measured
                cfgs.setdefault(case, []).append(cfg)
        later = [v for s, v in ms.items() if s >= 2]
        if later:
            runs.setdefault((case, load), {}).setdefault(which, []).append(benchlib.median(later))
        if rnd == 1 and load == "quiet" and 1 in loss:
            first.setdefault(case, {})[which] = loss[1]
    if not runs:
        sys.exit("llmc_report.py: no runs in %s" % res)
    order = {"t64": 0, "t1024": 1}
    keys = sorted(runs, key=lambda k: (order.get(k[0], 9), k[1] != "quiet"))
    print("| case | load | llm.c ms/step | tessera ms/step | llm.c tokens/s | tessera tokens/s "
          "| tessera / llm.c | llm.c MFU | tessera MFU | roof GFLOP/s | runs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    med = {}
    for case, load in keys:
        r = runs[(case, load)]
        if "llmc" not in r or "tessera" not in r or case not in cfgs:
            continue
        c = cfgs[case][0]
        tok = c["model"]["batch"] * c["model"]["seq"]
        fpt = c["flops_per_token"]
        roof = benchlib.median([x["roof_gflops"] for x in cfgs[case]])
        a, b = benchlib.median(r["llmc"]), benchlib.median(r["tessera"])
        med[(case, load)] = (a, b)
        ta, tb = tok / (a / 1e3), tok / (b / 1e3)
        mfu = ""
        if load == "quiet":
            mfu = "| %.0f%% | %.0f%% | %.0f " % (100 * fpt * ta / (roof * 1e9), 100 * fpt * tb / (roof * 1e9), roof)
        else:
            mfu = "| | | "
        print("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.2f× %s| %d / %d |"
              % (case, load, a, b, ta, tb, a / b, mfu, len(r["llmc"]), len(r["tessera"])))
    busy = [(c, med[(c, "quiet")], med[(c, "busy")]) for c, l in keys
            if l == "busy" and (c, "quiet") in med and (c, "busy") in med]
    if busy:
        print("\nOne busy process beside the run (step time busy / quiet):\n")
        print("| case | llm.c | tessera |")
        print("|---|---:|---:|")
        for c, q, b in busy:
            print("| %s | %.2f× | %.2f× |" % (c, b[0] / q[0], b[1] / q[1]))
    if first:
        print("\nFirst step's loss (same initial weights, same batch):\n")
        for c in sorted(first, key=lambda k: order.get(k, 9)):
            f = first[c]
            print("- %s: llm.c %s, tessera %s" % (c, f.get("llmc", "?"), f.get("tessera", "?")))
    abouts = sorted(glob.glob(os.path.join(res, "about-*.txt")))
    if abouts:
        print()
    for about in abouts:
        for line in open(about):
            print("- " + line.rstrip())


if __name__ == "__main__":
    main()
