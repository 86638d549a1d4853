#!/usr/bin/python3
"""Tables and a plot of bench/compress_quality.sh: validation loss of each boundary
compression mode at the same token budget, its gap to the uncompressed model, and the
bytes per token that cross a boundary each way.

    /usr/bin/python3 bench/compress_report.py --results bench/results/compress --img-dir docs/img

Reads RESULTS/manifest.tsv and the run logs it names (docs/RUN-LOG.md), prints markdown
tables, writes the same text to RESULTS/report.md, the numbers to RESULTS/summary.json,
and the loss curves to IMG_DIR/compress_quality.png.

Validation loss: the last eval record of each run (the mean over its --eval-batches
held-out batches, the same batches for every run). Gap: (loss − loss_none) / loss_none.
Bytes per token per boundary, from the model's configuration (src/boundary/, src/boundary/vq.h):
forward d·4 (none), r·4 (ssn, ssn-confined, mapl*), R·r/G one-byte codes (mapl-vq); backward d·4 or
r·4; after each step the projector A_p (d·r floats) and mapl-vq's streamed codes
(R·sync·r floats) per boundary, shown amortised over the step's B·T tokens; with
--vq-backward on (the rows marked +bwd) the gradient crosses as R·r/G codes and a float
scale, and its codebook streams as many floats the other way.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (ROOT, ReportError, arg_parser, manifest_lines, output_paths,  # noqa: E402
                      read, read_kv, run_command, run_main, save_fig, shown, table,
                      write_report)

MODE_ORDER = ["none", "ssn", "ssn-confined", "mapl-frozen", "mapl", "mapl-unconstrained", "mapl-vq",
              "mapl-vq full sync", "mapl-vq +bwd", "mapl-vq full sync +bwd"]
STYLE = {"none": ("black", "--"), "ssn": ("tab:orange", "-"), "ssn-confined": ("tab:brown", "-."), "mapl": ("tab:blue", "-"),
         "mapl-unconstrained": ("tab:purple", ":"), "mapl-vq": ("tab:green", "-"),
         "mapl-vq full sync": ("tab:olive", "-."), "mapl-frozen": ("tab:gray", "-"),
         "mapl-vq +bwd": ("tab:red", "-"), "mapl-vq full sync +bwd": ("tab:brown", "-.")}


ANCHOR_STYLE = {"none": ":", "static": "--", "full": "-."}


def label(row):
    """The row's name in tables and plots: its mode, full sync, +bwd for the gradients
    quantised too (--vq-backward on) and the anchor when not the factorised default
    (--mapl-anchor); the manifest's sync column carries them, "+"-separated."""
    parts = row["sync"].split("+")
    name = row["mode"] + (" full sync" if parts[0] == "full" else "") + (" +bwd" if "bwd" in parts[1:] else "")
    anchors = [p[len("anchor-"):] for p in parts[1:] if p.startswith("anchor-")]
    return name + (" anchor " + anchors[0] if anchors else "")


def base_label(lbl):
    """The label without its anchor: the key of MODE_ORDER and STYLE."""
    return lbl.split(" anchor ")[0]


def label_rank(lbl):
    """A label's place in tables: its mode's in MODE_ORDER, then its anchor's (the
    factorised default first)."""
    kinds = ["factorised"] + list(ANCHOR_STYLE)
    anchor = lbl.split(" anchor ")[1] if " anchor " in lbl else "factorised"
    return (MODE_ORDER.index(base_label(lbl)), kinds.index(anchor))


def order(row):
    return label_rank(label(row))


def style(lbl):
    """The mode's colour; another anchor than the default gets its own line style."""
    colour, ls = STYLE[base_label(lbl)]
    return colour, ANCHOR_STYLE[lbl.split(" anchor ")[1]] if " anchor " in lbl else ls


def panel_grid(groups):
    """pyplot and one panel a stage count (rows) and rank (columns, largest first) of the
    (P, r) groups: (plt, fig, axes, Ps, rs)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Ps = sorted({P for P, _ in groups})
    rs = sorted({r for _, r in groups}, reverse=True)
    fig, axes = plt.subplots(len(Ps), len(rs), figsize=(5.2 * len(rs), 3.8 * len(Ps)),
                             sharex=True, sharey=True, squeeze=False)
    return plt, fig, axes, Ps, rs


def load_run(results, name):
    """(config, eval curve [(step, val_loss)]) of a completed run."""
    text = read(os.path.join(results, name + ".jsonl"))
    if text is None:
        raise ReportError("%s: no run log (%s/%s.jsonl)" % (name, results, name))
    meta = read_kv(os.path.join(results, name + ".meta"))
    if meta.get("status") != "ok":
        raise ReportError("%s: the run did not complete (status %s)" % (name, meta.get("status", "?")))
    try:
        recs = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as e:
        raise ReportError("%s: unreadable run log: %s" % (name, e))
    cfg = next((r for r in recs if r.get("type") == "config"), None)
    curve = [(r["step"], r["val_loss"]) for r in recs if r.get("type") == "eval"]
    if cfg is None or not curve or not any(r.get("type") == "final" for r in recs):
        raise ReportError("%s: incomplete run log (no config, eval or final record)" % name)
    return {"config": cfg, "curve": curve, "val_loss": curve[-1][1], "params": cfg["params"]}


def wire_bytes(model):
    """(forward, backward) bytes per token per boundary, and the bytes sent per boundary
    after each step."""
    d, mode = model["d"], model.get("compress", 0)
    if not mode:
        return 4 * d, 4 * d, 0
    r = model["compress_rank"]
    fwd, bwd, sync = 4 * r, 4 * r, 0
    if mode in (2, 3, 4):               # a learned projector goes to the receiver
        sync = 4 * d * r
    if mode == 4:                       # mapl-vq: codes forward, streamed codes after the step
        fwd = model["vq_rounds"] * r // model["vq_groups"]
        sync += 4 * model["vq_rounds"] * model["vq_sync_codes"] * r
        if model.get("vq_backward"):    # the gradient's codes and scale back, its stream up
            bwd = fwd + 4
            sync += 4 * model["vq_rounds"] * model["vq_sync_codes"] * r
    return fwd, bwd, sync


def main():
    a = arg_parser(__doc__, "bench/results/compress").parse_args()
    results, md_path, json_path = output_paths(a)
    rows = [dict(zip(("mode", "P", "r", "sync", "name"), f))
            for f in manifest_lines(results, "bench/compress_quality.sh", 5)]
    if not rows:
        raise ReportError("manifest.tsv: no runs")
    setup = read_kv(os.path.join(results, "setup.txt"))
    runs = {r["name"]: load_run(results, r["name"]) for r in rows}
    base = next((r for r in rows if r["mode"] == "none"), None)
    if base is None:
        raise ReportError("manifest.tsv: no uncompressed run (mode none) to compare with")
    b = runs[base["name"]]
    m0 = b["config"]["model"]
    tokens = m0["batch"] * m0["seq"]
    groups = sorted({(int(r["P"]), int(r["r"])) for r in rows if r["mode"] != "none"})

    md = ["## Boundary compression: validation loss at the same token budget", ""]
    md.append("- Date: %s (UTC); tessera %s (binary `%s`, sha256 %s…)" % (
        setup.get("date", "?"), setup.get("rev", "?"), shown(setup.get("binary", "?"), ROOT),
        setup.get("binary_sha256", "?")))
    md.append("- Model: `%s`, d %d, %d layers, %d heads (%d key/value), T %d, batch %d: %d tokens per "
              "step, %s steps (%s tokens) in every run; `%s`" % (
                  setup.get("model_flags", "?"), m0["d"], m0["n_layer"], m0["n_head"],
                  m0.get("n_kv_head", m0["n_head"]), m0["seq"], m0["batch"], tokens,
                  setup.get("steps", "?"), format(tokens * int(setup.get("steps", "0")), ","),
                  setup.get("opt_flags", "")))
    md.append("- Each compressed run is the serial reference of the P-stage model (`--compress-stages P`); "
              "`mpiexec -n P … --pp P` gives the same bits (tests/mpi_compress.sh). Validation loss: the "
              "last evaluation, %s held-out batches. Uncompressed: **%.4f**." % (
                  setup.get("eval_batches", "?"), b["val_loss"]))
    md.append("- Bytes per token per boundary each way, fp32 unless codes; *ratio*: forward bytes over "
              "the uncompressed d·4. *after step*: projector and streamed codes per boundary per step, "
              "amortised per token of the step.")
    md.append("- Command of the uncompressed run: `%s`" % run_command(results, base["name"], ROOT))
    if setup.get("added_runs"):
        md.append("- Runs added later to this folder: %s" % setup["added_runs"])
    md.append("")
    summary = {"setup": setup, "none": b["val_loss"], "runs": {}}
    for P, r in groups:
        md += ["### P = %d stages (%d boundaries), r = %d (d/%d)" % (P, P - 1, r, m0["d"] // r), ""]
        out = []
        for row in sorted((x for x in rows if (x["mode"] == "none") or (int(x["P"]), int(x["r"])) == (P, r)),
                          key=order):
            run = runs[row["name"]]
            fwd, bwd, sync = wire_bytes(run["config"]["model"])
            gap = (run["val_loss"] - b["val_loss"]) / b["val_loss"]
            out.append([label(row), "%.4f" % run["val_loss"], "—" if row["mode"] == "none" else "%+.2f%%" % (100 * gap),
                        str(fwd), str(bwd), "%.3f" % (fwd / (4.0 * m0["d"])),
                        "%.1f" % (sync / tokens), format(run["params"], ",")])
            if row["mode"] != "none":
                summary["runs"][row["name"]] = {"val_loss": run["val_loss"], "gap": gap, "forward_bytes": fwd,
                                                "backward_bytes": bwd, "sync_bytes_per_step": sync,
                                                "curve": run["curve"]}
        md += table(["mode", "val loss", "gap", "fwd B/token", "bwd B/token", "ratio", "after step, B/token",
                     "parameters"], ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"], out)
        md.append("")

    if not a.no_plots:
        plt, fig, axes, Ps, rs = panel_grid(groups)
        lo = min(min(v for _, v in run["curve"]) for run in runs.values())
        hi = max(run["curve"][min(1, len(run["curve"]) - 1)][1] for run in runs.values())
        for i, P in enumerate(Ps):
            for j, r in enumerate(rs):
                ax = axes[i][j]
                for row in sorted(rows, key=order):
                    if row["mode"] != "none" and (int(row["P"]), int(row["r"])) != (P, r):
                        continue
                    c, ls = style(label(row))
                    xs, ys = zip(*runs[row["name"]]["curve"])
                    ax.plot(xs, ys, color=c, linestyle=ls, label=label(row))
                ax.set_title("P = %d, r = %d (%d× fewer floats)" % (P, r, m0["d"] // r))
                ax.set_yscale("log")    # the gaps near the end are small next to the start
                ax.set_ylim(lo * 0.95, hi * 1.05)
                ticks = [t for t in (0.3, 0.4, 0.5, 0.6, 0.8, 1, 1.5, 2, 3, 4, 5, 6) if lo * 0.95 <= t <= hi * 1.05]
                ax.set_yticks(ticks)
                ax.set_yticklabels(["%g" % t for t in ticks])
                ax.minorticks_off()
                ax.grid(alpha=0.3)
                if i == len(Ps) - 1:
                    ax.set_xlabel("step (%d tokens each)" % tokens)
                if j == 0:
                    ax.set_ylabel("validation loss")
        axes[0][0].legend(fontsize=8)
        fig.suptitle("Boundary compression at the same token budget")
        out_png = os.path.join(a.img_dir, "compress_quality.png")
        save_fig(fig, out_png)
        md += ["![validation loss by mode](%s)" % shown(out_png, ROOT), ""]
    write_report(md, md_path, summary, json_path)


if __name__ == "__main__":
    run_main(main, "bench/compress_report.py")
