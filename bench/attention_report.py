#!/usr/bin/python3
"""The tables and the plot of docs/PERFORMANCE.md's "Attention at long T" from what
bench/attention.sh wrote: RESULTS/kernel.txt (lines "LABEL T tile fwd_s bwd_s GFLOP/s
roof of_roof", LABEL before or after), RESULTS/step-LABEL-T<T>.jsonl (tessera's run
logs) and, when LAYOUTS was set, RESULTS/layouts.txt (bench/attention --layout's lines
"serial ...", "rank ..." and "layout ...": the layouts' local attention, communication
excluded). Medians over the rounds; ratios after / before.

usage: python3 bench/attention_report.py [--results bench/results/attention]
         [--img-dir docs/img] [--md RESULTS/report.md] [--json RESULTS/summary.json] [--no-plots]
"""
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def read_kernel(path):
    """{(label, T): [(fwd_s, bwd_s, gflops, roof), ...]} from kernel.txt."""
    out = {}
    for line in (benchlib.read(path, "") or "").splitlines():
        f = line.split()
        if len(f) != 8 or f[0] not in ("before", "after"):
            continue
        out.setdefault((f[0], int(f[1])), []).append(
            (float(f[3]), float(f[4]), float(f[5]), float(f[6])))
    return out


def read_steps(results):
    """{(label, T): (step_ms, tokens_per_s, mfu, roof_gflops, steps)} from the run logs:
    the median over steps 2.. when the run took more than one (step 1 pays the first
    touch of every buffer), else step 1."""
    out = {}
    for path in glob.glob(os.path.join(results, "step-*-T*.jsonl")):
        m = re.match(r"step-(before|after)-T(\d+)\.jsonl$", os.path.basename(path))
        if not m:
            continue
        roof, steps = None, []
        for line in open(path):
            rec = json.loads(line)
            if rec.get("type") == "config" or "roof_gflops" in rec:
                roof = rec.get("roof_gflops", roof)
            if rec.get("type") == "step" or ("mfu" in rec and "step_ms" in rec):
                steps.append(rec)
        use = steps[1:] or steps
        if use:
            out[(m.group(1), int(m.group(2)))] = (
                statistics.median(r["step_ms"] for r in use),
                statistics.median(r["tokens_per_s"] for r in use),
                statistics.median(r["mfu"] for r in use), roof, len(steps))
    return out


def read_layouts(path):
    """{(layout, ranks, T): {"ranks": {r: [GFLOP/s, ...]}, "layout": [(busiest_s, mean_s,
    busiest/mean, GFLOP/s, serial GFLOP/s), ...], "heads": heads}} from layouts.txt."""
    out = {}
    for line in (benchlib.read(path, "") or "").splitlines():
        f = line.split()
        if len(f) == 11 and f[0] == "rank":
            # rank T tile layout ranks r fwd_s bwd_s GFLOP GFLOP/s of_roof
            e = out.setdefault((f[3], int(f[4]), int(f[1])), {"ranks": {}, "layout": []})
            e["ranks"].setdefault(int(f[5]), []).append(float(f[9]))
        elif len(f) == 11 and f[0] == "layout":
            # layout T tile layout ranks busiest_s mean_s busiest/mean GFLOP/s serial of_serial
            e = out.setdefault((f[3], int(f[4]), int(f[1])), {"ranks": {}, "layout": []})
            e["layout"].append(tuple(float(x) for x in f[5:10]))
    return out


def layout_table(lay):
    md = ["| layout | T | ranks | GFLOP/s per rank (rank 0, 1, …) | busiest (s) | busiest ÷ mean "
          "| layout GFLOP/s | serial kernel GFLOP/s | of serial |",
          "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    summary = []
    for (name, n, T) in sorted(lay, key=lambda k: (k[0], k[1], k[2])):
        e = lay[(name, n, T)]
        if not e["layout"]:
            continue
        per = [statistics.median(e["ranks"][r]) for r in sorted(e["ranks"])]
        busiest, ratio, gf, sgf = (med(e["layout"], i) for i in (0, 2, 3, 4))
        row = {"layout": name, "ranks": n, "T": T, "rank_gflops": per, "busiest_s": busiest,
               "busiest_over_mean": ratio, "gflops": gf, "serial_gflops": sgf, "of_serial": gf / sgf}
        md.append("| %s | %d | %d | %s | %.3f | %.2f | %.1f | %.1f | %.0f%% |"
                  % (name, T, n, " / ".join("%.1f" % g for g in per), busiest, ratio, gf, sgf,
                     100 * gf / sgf))
        summary.append(row)
    return md, summary


def med(rows, i):
    return statistics.median(r[i] for r in rows)


def kernel_table(k):
    md = ["| T | fwd + bwd before (s) | after (s) | GFLOP/s before | after | ratio | roof | of roof before | after |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    summary = []
    for T in sorted({t for _, t in k}):
        b, a = k.get(("before", T)), k.get(("after", T))
        if not a:
            continue
        ta, ga, ra = med(a, 0) + med(a, 1), med(a, 2), med(a, 3)
        row = {"T": T, "after_s": ta, "after_gflops": ga, "roof": ra, "after_of_roof": ga / ra}
        if b:
            tb, gb, rb = med(b, 0) + med(b, 1), med(b, 2), med(b, 3)
            row.update(before_s=tb, before_gflops=gb, before_of_roof=gb / rb, ratio=ga / gb)
            md.append("| %d | %.3f | %.3f | %.1f | %.1f | %.2f× | %.0f | %.0f%% | %.0f%% |"
                      % (T, tb, ta, gb, ga, ga / gb, ra, 100 * gb / rb, 100 * ga / ra))
        else:
            md.append("| %d | — | %.3f | — | %.1f | — | %.0f | — | %.0f%% |" % (T, ta, ga, ra, 100 * ga / ra))
        summary.append(row)
    return md, summary


def step_table(s):
    md = ["| T | steps | step before (s) | after (s) | ratio | tokens/s after | MFU before | MFU after | roof (GFLOP/s) |",
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    summary = []
    for T in sorted({t for _, t in s}):
        b, a = s.get(("before", T)), s.get(("after", T))
        if not a:
            continue
        row = {"T": T, "after_s": a[0] / 1e3, "after_mfu": a[2], "after_roof": a[3], "steps": a[4]}
        n = "1" if a[4] == 1 else "median of 2–%d" % a[4]
        if b:
            row.update(before_s=b[0] / 1e3, before_mfu=b[2], ratio=b[0] / a[0])
            md.append("| %d | %s | %.1f | %.1f | %.2f× | %.1f | %.0f%% | %.0f%% | %.0f |"
                      % (T, n, b[0] / 1e3, a[0] / 1e3, b[0] / a[0], a[1], 100 * b[2], 100 * a[2], a[3]))
        else:
            md.append("| %d | %s | — | %.1f | — | %.1f | — | %.0f%% | %.0f |" % (T, n, a[0] / 1e3, a[1], 100 * a[2], a[3]))
        summary.append(row)
    return md, summary


def plot(ks, ss, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for key, label, style in (("before_of_roof", "attention kernel, before", "o--"),
                              ("after_of_roof", "attention kernel, after", "o-")):
        pts = [(r["T"], r[key]) for r in ks if key in r]
        if pts:
            ax.plot([t for t, _ in pts], [100 * y for _, y in pts], style, color="C0", label=label)
    for key, label, style in (("before_mfu", "training step MFU, before", "s--"),
                              ("after_mfu", "training step MFU, after", "s-")):
        pts = [(r["T"], r[key]) for r in ss if key in r]
        if pts:
            ax.plot([t for t, _ in pts], [100 * y for _, y in pts], style, color="C1", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("% of the sgemm roof (same threads)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    ax.axhline(60, color="0.5", linestyle=":", linewidth=1)
    ax.text(ax.get_xlim()[0] * 1.05, 61, "target: attention at 60% of the roof", fontsize=8, color="0.4")
    title = "small model (8 heads of 64), one thread: attention forward + backward (bench/attention)"
    if ss:
        title += "\nand one training step with --checkpoint --fused-ce --tiled-mlp (MFU)"
    ax.set_title(title, fontsize=10)
    benchlib.save_fig(fig, path)
    plt.close(fig)


def main():
    ap = benchlib.arg_parser(__doc__, "bench/results/attention")
    a = ap.parse_args()
    results, md_path, json_path = benchlib.output_paths(a)
    k_md, ks = kernel_table(read_kernel(os.path.join(results, "kernel.txt")))
    s_md, ss = step_table(read_steps(results))
    l_md, ls = layout_table(read_layouts(os.path.join(results, "layouts.txt")))
    md = []
    if ks or ss or not ls:
        md = ["**One layer's attention, forward + backward**", ""] + k_md + [
            "", "**One training step**", ""] + s_md
    if ls:
        md += [""] * bool(md) + ["**The layouts' local attention, per rank (communication excluded)**", ""] + l_md
    if not a.no_plots:
        plot(ks, ss, os.path.join(a.img_dir, "attention_long_t.png"))
    benchlib.write_report(md, md_path, {"kernel": ks, "step": ss, "layouts": ls}, json_path)


if __name__ == "__main__":
    main()
