"""Memory and predicted step time of one layout against T, from `tessera plan --json`.

usage: /usr/bin/python3 bench/plan_plot.py TESSERA OUT.png [PLAN FLAGS...]

Runs `TESSERA plan --json --seq T PLAN FLAGS...` for T = 1024, 2048, ... up to
the plan's longest T of its first layout, keeps that layout at every T (by its
name), and draws two panels: the largest rank's memory by kind, stacked (the
fit check's count: docs/PLAN.md), with the line of 90% of --device-mem; and
the predicted step time, compute and communication. Nothing is measured
here: every number is the plan's.
"""
import json
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KINDS = [  # (label, the estimate's members summed)
    ("parameters", ("params", "copies")),
    ("gradients", ("grads", "strategy", "transient")),
    ("AdamW state", ("optimizer",)),
    ("activations", ("activations", "scratch", "codec", "strategy_state")),
    ("attention calls", ("incall",)),
    ("packing", ("comm_buffers",)),
]


def plan(binary, flags, seq):
    out = subprocess.run([binary, "plan", "--json", "--seq", str(seq)] + flags,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("plan_plot: %s plan --seq %d %s: %s" % (binary, seq, " ".join(flags),
                                                         out.stderr.strip()))
    return json.loads(out.stdout)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) < 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    binary, png, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    first = plan(binary, flags, 1024)
    rows = [r for r in first["rows"] if "refused" not in r and r["fits"]]
    if not rows:
        sys.exit("plan_plot: no layout fits at T 1024")
    name, longest, limit = rows[0]["layout"], first["longest_seq"], 0.9 * first["device_mem"]
    Ts, mem, comp, comm = [], {k: [] for k, _ in KINDS}, [], []
    T = 1024
    while T <= longest:
        row = next(r for r in plan(binary, flags, T)["rows"] if r["layout"] == name)
        if "refused" in row:
            break
        m = row["memory_largest"]
        Ts.append(T)
        for label, keys in KINDS:
            mem[label].append(sum(m[k] for k in keys) / 2**30)
        comp.append(row["compute_s"])
        comm.append(row["comm_s"])
        T *= 2
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.stackplot(Ts, [mem[k] for k, _ in KINDS], labels=[k for k, _ in KINDS])
    a.axhline(limit / 2**30, color="k", ls="--", lw=1, label="90% of the memory")
    a.set_xscale("log", base=2)
    a.set_xlabel("T (tokens)")
    a.set_ylabel("GiB per rank (largest)")
    a.set_title("memory by kind")
    a.legend(fontsize=7, loc="upper left")
    b.plot(Ts, comp, "o-", label="compute")
    b.plot(Ts, comm, "s-", label="communication")
    b.plot(Ts, [x + y for x, y in zip(comp, comm)], "k-", lw=1, label="step (no overlap)")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("T (tokens)")
    b.set_ylabel("seconds")
    b.set_title("predicted step time")
    b.legend(fontsize=7)
    title = "tessera plan: %s, %s (longest T %d)" % (name, " ".join(flags), longest)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print("%s: %s at T %d..%d" % (png, name, Ts[0], Ts[-1]))


main()
