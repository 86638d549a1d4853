#!/usr/bin/python3
"""Tables and a plot of bench/upipe_nu.sh: UPipe's attention-block peaks against the UPipe
paper's formulas for ν = 1, 2, 4, 8 stages, and the U sweep of memory and step time.

    /usr/bin/python3 bench/upipe_report.py --results bench/results/upipe --img-dir docs/img

Reads RESULTS/manifest.tsv and the run logs it names (docs/RUN-LOG.md: the step record's
mem_peak_bytes, rank 0's), prints the tables, writes the same text to RESULTS/report.md,
the numbers to RESULTS/summary.json and the plot IMG_DIR/upipe_nu.png.

Peaks are in units of one local shard, T/N·d floats. With γ = 1 + 2/G (Q, K and V
together), ν = H/U the forward's stages and ν_b = H/U_b the backward's (U_b = lcm(U, N·G):
whole key/value groups on every rank):
  forward, Table 2 of the paper: Ulysses γ + 2, UPipe 2 + γ/ν;
  backward of upipe-dx, Table 7 (the kernel's column): max(3 + 2γ/ν_b, 2 + 2γ/ν_b + 2(ν_b−1)/ν_b);
  backward of the exact upipe and ulysses, ours (the gathered dQ, dK, dV held):
  3 + γ + (2γ + 2)/ν_b.
The formulas leave out the stage's log-sum-exp and row sums (1/(ν·dh) and 2/(ν_b·dh)).
The forward formula assumes a rank's U/N heads of a stage are whole groups; rows where they
are not are marked, their peak is higher. Times are medians over the step records after the
first.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (ReportError, arg_parser, load_log, manifest_lines, median,  # noqa: E402
                      output_paths, run_command, run_main, save_fig, table, write_report, ROOT)

DH = 16  # bench/upipe_nu.sh: d = 16·H


def formulas(mode, H, G, N, U):
    g = 1 + 2 / G
    nu = H / U
    ub = U * N * G // math.gcd(U, N * G)
    nb = H / ub
    fwd = g + 2 if mode == "ulysses" else 2 + g / nu
    if mode == "upipe-dx":
        bwd = max(3 + 2 * g / nb, 2 + 2 * g / nb + 2 * (nb - 1) / nb)
    else:
        bwd = 3 + g + (2 * g + 2) / nb
    whole = (U // N) % G == 0
    return nu, nb, fwd, bwd, whole


def main():
    a = arg_parser(__doc__, os.path.join(ROOT, "bench/results/upipe")).parse_args()
    results, md_path, json_path = output_paths(a)
    runs = []
    for sweep, H, G, N, T, mode, U, name, status in manifest_lines(results, "bench/upipe_nu.sh", 9):
        H, G, N, T, U = int(H), int(G), int(N), int(T), int(U)
        if status == "n/a":
            continue
        if status != "ok":
            raise ReportError("%s: %s" % (name, status))
        meta, cfg, steps = load_log(results, name)
        peaks = steps[0].get("mem_peak_bytes")
        if not peaks or "attn_bwd" not in peaks:
            raise ReportError("%s: no mem_peak_bytes in its step record" % name)
        unit = T // N * DH * H * 4.0
        nu, nb, f_fwd, f_bwd, whole = formulas(mode, H, G, N, U)
        ms = median([s["step_ms"] for s in steps[1:]])
        runs.append({"sweep": sweep, "H": H, "G": G, "N": N, "T": T, "mode": mode, "U": U,
                     "name": name, "nu": nu, "nu_b": nb, "fwd": peaks["attn_fwd"] / unit,
                     "bwd": peaks["attn_bwd"] / unit, "fwd_formula": f_fwd,
                     "bwd_formula": f_bwd, "whole_groups": whole, "step_ms": ms})
    nus = [r for r in runs if r["sweep"] == "nu"]
    us = [r for r in runs if r["sweep"] == "u"]
    if not nus and not us:
        raise ReportError("no completed runs in %s" % results)
    md = []

    def pct(x, f):
        return "%+.1f%%" % (100 * (x / f - 1))

    if nus:
        md += ["", "**Attention-block peaks against the paper's formulas** (units of T/N·d; "
               "T = %d, dh %d, one layer; e.g. `%s`)" % (nus[0]["T"], DH,
                                                       run_command(results, nus[0]["name"], ROOT)), ""]
        head = ["H", "G", "N", "mode", "U", "ν", "ν_b", "fwd", "Table 2", "Δ",
                "bwd", "formula", "Δ"]
        rows = []
        for r in nus:
            fnote = "" if r["whole_groups"] or r["mode"] == "ulysses" else " (part groups)"
            bname = "Table 7" if r["mode"] == "upipe-dx" else "ours"
            rows.append([str(r["H"]), str(r["G"]), str(r["N"]), r["mode"], str(r["U"]),
                         "%g" % r["nu"], "%g" % r["nu_b"], "%.3f" % r["fwd"],
                         "%.3f%s" % (r["fwd_formula"], fnote), pct(r["fwd"], r["fwd_formula"]),
                         "%.3f" % r["bwd"], "%.3f (%s)" % (r["bwd_formula"], bname),
                         pct(r["bwd"], r["bwd_formula"])])
        md += table(head, ["---:"] * 3 + ["---"] + ["---:"] * 9, rows)
    if us:
        r0 = us[0]
        ul = next((r for r in us if r["mode"] == "ulysses"), None)
        md += ["", "**The U sweep** (H %d, G %d, N %d, T %d, two layers; median step time; "
               "e.g. `%s`)" % (r0["H"], r0["G"], r0["N"], r0["T"],
                               run_command(results, r0["name"], ROOT)), ""]
        head = ["mode", "U", "ν", "ν_b", "fwd peak", "bwd peak", "step", "vs ulysses"]
        rows = []
        for r in us:
            rows.append([r["mode"], str(r["U"]), "%g" % r["nu"], "%g" % r["nu_b"],
                         "%.3f" % r["fwd"], "%.3f" % r["bwd"], "%.0f ms" % r["step_ms"],
                         "%.2f×" % (r["step_ms"] / ul["step_ms"]) if ul else "—"])
        md += table(head, ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"], rows)
    write_report(md, md_path, {"runs": runs}, json_path)
    if a.no_plots:
        return 0
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # a panel for each sweep that ran (SWEEPS=u: the U sweep's alone)
    fig, axes = plt.subplots(1, 2 if nus and us else 1, figsize=(12 if nus and us else 7, 4.5),
                             squeeze=False)
    axes = list(axes[0])
    style = {"ulysses": ("tab:brown", "X"), "upipe": ("tab:blue", "o"), "upipe-dx": ("tab:red", "^")}
    ax = axes[0] if nus else None
    top = 1.0
    for mode, (c, m) in style.items() if nus else ():
        rs = [r for r in nus if r["mode"] == mode]
        if not rs:
            continue
        ax.scatter([r["fwd_formula"] for r in rs], [r["fwd"] for r in rs], color=c, marker=m,
                   facecolors="none", label=mode + " forward (Table 2)")
        ax.scatter([r["bwd_formula"] for r in rs], [r["bwd"] for r in rs], color=c, marker=m,
                   label=mode + " backward (%s)" % ("Table 7" if mode == "upipe-dx" else "ours"))
        top = max([top] + [r["bwd"] for r in rs] + [r["bwd_formula"] for r in rs])
    if nus:
        xs = [0, top * 1.05]
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, [x * 0.95 for x in xs], [x * 1.05 for x in xs], color="grey",
                        alpha=0.2, label="±5%")
        ax.set_xlabel("formula (units of T/N·d)")
        ax.set_ylabel("measured peak (units)")
        ax.set_title("attention block: measured against the formulas")
        ax.legend(fontsize=7)
    ax = axes[-1]
    if us:
        for mode, (c, m) in style.items():
            rs = [r for r in us if r["mode"] == mode]
            if rs:
                ax.plot([r["U"] for r in rs], [r["bwd"] for r in rs], color=c, marker=m,
                        label=mode + " backward peak")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("U (heads per stage)")
        ax.set_ylabel("backward peak (units)")
        ax2 = ax.twinx()
        for mode, (c, m) in style.items():
            rs = [r for r in us if r["mode"] == mode]
            if rs:
                ax2.plot([r["U"] for r in rs], [r["step_ms"] / 1000 for r in rs], color=c,
                         marker=m, ls="--", label=mode + " step time")
        ax2.set_ylabel("step time (s, dashed)")
        ax.set_title("U sweep (H %d, G %d, N %d, T %d)" % (us[0]["H"], us[0]["G"], us[0]["N"],
                                                          us[0]["T"]))
        ax.legend(fontsize=7, loc="upper left")
        ax2.legend(fontsize=7, loc="upper right")
    save_fig(fig, os.path.join(a.img_dir, "upipe_nu.png"))
    return 0


if __name__ == "__main__":
    run_main(main, "bench/upipe_report.py")
