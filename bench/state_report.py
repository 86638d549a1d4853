#!/usr/bin/python3
"""Tables and a plot of bench/state_memory.sh: what each rank holds, by kind, under the
serial run and the parallel layouts, with and without --zero 1, 2, 3.

    /usr/bin/python3 bench/state_report.py --results bench/results/state --img-dir docs/img

Reads RESULTS/manifest.tsv and the run logs it names (docs/RUN-LOG.md: the step
record's state_bytes and peak_rss_mb_max), prints a markdown table per case, writes the
same text to RESULTS/report.md, the numbers to RESULTS/summary.json and the plot
IMG_DIR/state_memory.png. Per layout: rank 0's parameters, gradients, moments,
activations and layout buffers; the model state (parameters + gradients + moments) of
the largest rank and summed over the ranks, each also as a multiple of the serial run's;
and the largest peak RSS of any rank against the serial run's.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (ReportError, arg_parser, fmt_bytes, manifest_lines,  # noqa: E402
                      output_paths, read, run_command, run_main, save_fig, table,
                      write_report, ROOT)

KINDS = ["params", "grads", "optimizer", "activations", "buffers"]


def step_record(results, name):
    text = read(os.path.join(results, name + ".jsonl"))
    if text is None:
        raise ReportError("%s: no run log" % name)
    recs = [json.loads(line) for line in text.splitlines() if line.strip()]
    steps = [r for r in recs if r.get("type") == "step"]
    if not steps or "state_bytes" not in steps[0]:
        raise ReportError("%s: no step record with state_bytes" % name)
    return steps[0]


def main():
    a = arg_parser(__doc__, os.path.join(ROOT, "bench/results/state")).parse_args()
    results, md_path, json_path = output_paths(a)
    rows = manifest_lines(results, "bench/state_memory.sh", 5)
    cases = {}
    refused = {}
    for case, lay, ranks, name, status in rows:
        if status == "n/a":  # the model does not divide into this layout
            refused.setdefault(case, []).append((lay, int(ranks), "n/a (the layout does not divide this model)"))
            continue
        if status == "refused":  # tessera's estimate said it would not fit: its one line
            err = (read(os.path.join(results, name + ".err")) or "").strip().splitlines()
            refused.setdefault(case, []).append((lay, int(ranks), err[0] if err else ""))
            continue
        if status != "ok":
            raise ReportError("%s: %s" % (name, status))
        rec = step_record(results, name)
        cases.setdefault(case, []).append((lay, int(ranks), name, rec))
    md, summary = [], {}
    for case, runs in cases.items():
        serial = next((r for r in runs if r[0] == "serial"), None)
        if serial is None:
            raise ReportError("%s: no serial run" % case)
        s_state = serial[3]["state_bytes"]["model_sum"]
        s_rss = serial[3]["peak_rss_mb_max"]
        md += ["", "**%s** (`%s`)" % (case, run_command(results, serial[2], ROOT)), ""]
        head = ["layout", "ranks"] + ["rank 0 " + k for k in KINDS] + [
            "state, largest rank", "state, all ranks", "peak RSS, largest rank"]
        out = []
        summary[case] = {}
        for lay, ranks, name, rec in runs:
            sb = rec["state_bytes"]
            mx, tot, rss = sb["model_max"], sb["model_sum"], rec["peak_rss_mb_max"]
            out.append([lay, str(ranks)] + [fmt_bytes(sb[k]) for k in KINDS] + [
                "%s (%.2f×)" % (fmt_bytes(mx), mx / s_state),
                "%s (%.2f×)" % (fmt_bytes(tot), tot / s_state),
                "%.0f MB (%.2f×)" % (rss, rss / s_rss)])
            summary[case][lay] = {"ranks": ranks, "state_bytes": sb, "peak_rss_mb_max": rss,
                                  "state_max_vs_serial": mx / s_state,
                                  "state_sum_vs_serial": tot / s_state,
                                  "rss_vs_serial": rss / s_rss}
        md += table(head, ["---", "---:"] + ["---:"] * (len(head) - 2), out)
        for lay, ranks, line in refused.get(case, []):
            md += ["", "- `%s` (%d ranks): %s" % (lay, ranks, line if line.startswith("n/a") else
                                                   "refused before allocating: " + line)]
            summary[case][lay] = {"ranks": ranks, "refused": line}
    write_report(md, md_path, summary, json_path)
    if a.no_plots:
        return 0
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(cases), figsize=(6.5 * len(cases), 4.2), squeeze=False)
    colours = {"params": "tab:blue", "grads": "tab:orange", "optimizer": "tab:green"}
    for ax, (case, runs) in zip(axes[0], cases.items()):
        labels = [r[0] for r in runs]
        bottom = [0.0] * len(runs)
        for k in ["params", "grads", "optimizer"]:
            vals = [r[3]["state_bytes"][k] / 1e9 for r in runs]
            ax.bar(labels, vals, bottom=bottom, color=colours[k], label="rank 0 " + k)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.plot(labels, [r[3]["peak_rss_mb_max"] / 1e3 for r in runs], "k^",
                label="peak RSS, largest rank")
        ax.set_title(case)
        ax.set_ylabel("GB")
        ax.tick_params(axis="x", rotation=45)
        ax.legend(fontsize=8)
    save_fig(fig, os.path.join(a.img_dir, "state_memory.png"))
    return 0


if __name__ == "__main__":
    run_main(main, "bench/state_report.py")
