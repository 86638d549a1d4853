#!/usr/bin/python3
"""The plan's longest T against bench/maxlen.sh's fitted limits (docs/PLAN.md,
"Against the maxlen benchmark").

For every layout a maxlen results folder fitted (its summary.json: the mode, N, the
usable memory and T_cont, the T where the line through the first step's peak per rank
meets that memory; and the runs' lifetime peaks, GNU time's, over both steps and the
evaluation, through which this script fits a line of its own the same way), asks
`tessera plan` the same question with the same settings: the model and --zero of the run,
--batch 1 --checkpoint --fused-ce --tiled-mlp, the run's threads, and a device memory of
usable / 0.9 / N per rank (the plan keeps 10% back, as the fit check does). The plan's
longest T of a --sp layout is a power of two (the layout rules), so its continuous limit
is also given: the line through the plan's memory at the longest T and half of it, where
it meets 90% of the device memory.

    /usr/bin/python3 bench/plan_maxlen.py --tessera build/tessera \\
        bench/results/maxlen-zero3 bench/results/maxlen-zero3-long

prints a markdown table, one row a layout, with the plan's continuous limit against each
folder's two fits, first step and lifetime (+: the plan allows more than the fit).
Standard library only.
"""
import argparse
import json
import subprocess
import sys

MEMORY_FLAGS = ["--batch", "1", "--checkpoint", "--fused-ce", "--tiled-mlp"]


def plan(tessera, setup, mode, n, device_gib, seq):
    """The plan's --json answer for one layout at --seq seq."""
    cmd = [tessera, "plan", "--model", setup["model"], "--seq", str(seq), *MEMORY_FLAGS,
           "--device-mem", "%.6f" % device_gib, "--json", "--dp", "1", "--pp", "1"]
    if n == 1:
        cmd += ["--sp", "1", "--zero", "0", "--threads", setup.get("serial_threads", "2")]
    else:
        sp_mode, _, u = mode.partition("-u")
        cmd += ["--sp", str(n), "--sp-mode", sp_mode, "--zero", setup.get("zero", "0"),
                "--threads", setup.get("threads", "1")]
        if u:
            cmd += ["--upipe-u", u]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("plan_maxlen: %s failed: %s" % (" ".join(cmd), out.stderr.strip()))
    return cmd, json.loads(out.stdout)


def plan_limit(tessera, setup, mode, n, usable_mb):
    """(the plan's longest T, its continuous limit, the command) for one layout."""
    device_gib = usable_mb / 0.9 / n / 1024
    cmd, first = plan(tessera, setup, mode, n, device_gib, 1024)
    longest = first["longest_seq"]
    budget = 0.9 * first["device_mem"]
    mem = {}
    for t in (longest // 2, longest):
        _, ans = plan(tessera, setup, mode, n, device_gib, t)
        mem[t] = ans["rows"][0]["memory_largest"]["total"]
    (t0, m0), (t1, m1) = sorted(mem.items())
    cont = t1 + (budget - m1) * (t1 - t0) / (m1 - m0)
    return longest, cont, " ".join(cmd)


def lifetime_fit(summary, mode, budget):
    """T where the least-squares line through the runs' lifetime peaks (largest rank)
    meets budget MiB, or None."""
    pts = [(r["T"], r["rss_max_mb"]) for r in summary["runs"]
           if r.get("kind") == "tessera" and r.get("mode") == mode]
    if len(pts) < 2:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((t - mt) * (y - my) for t, y in pts) / sum((t - mt) ** 2 for t, _ in pts)
    return mt + (budget - my) / slope if slope > 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", required=True, help="the tessera binary")
    ap.add_argument("results", nargs="+", help="bench/maxlen.sh results folders")
    args = ap.parse_args()
    runs = []
    for folder in args.results:
        try:
            with open(folder + "/summary.json", encoding="utf-8") as f:
                runs.append((folder, json.load(f)))
        except (OSError, ValueError) as e:
            sys.exit("plan_maxlen: %s/summary.json: %s" % (folder, e))
    modes = []
    for _, s in runs:
        for mode, p in s["predictions"].items():
            if mode != "pytorch" and p.get("T_cont") and mode not in modes:
                modes.append(mode)
    head = ["layout", "plan: longest T (continuous)"]
    for f, _ in runs:
        name = f.rstrip("/").split("/")[-1]
        head += ["%s: first step · lifetime" % name, "plan against them"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    commands = []
    for mode in modes:
        _, s0 = next((f, s) for f, s in runs if mode in s["predictions"])
        n = int(s0["predictions"][mode]["N"])
        longest, cont, cmd = plan_limit(args.tessera, s0["setup"], mode, n, s0["usable_mb"])
        commands.append(cmd)
        row = [mode if n == 1 else "`--sp %d --zero %s` %s" % (n, s0["setup"].get("zero", "0"), mode),
               "%d (%.0f)" % (longest, cont)]
        for _, s in runs:
            fits = [s["predictions"].get(mode, {}).get("T_cont"),
                    lifetime_fit(s, mode, s["usable_mb"] / n)]
            row.append(" · ".join("%.0f" % t if t else "—" for t in fits))
            row.append(" · ".join("%+.1f%%" % (100 * (cont / t - 1)) if t else "—" for t in fits))
        print("| " + " | ".join(row) + " |")
    print("\nplan commands (at --seq 1024; the longest T and half of it for the line):")
    for c in commands:
        print("  " + c)


if __name__ == "__main__":
    main()
