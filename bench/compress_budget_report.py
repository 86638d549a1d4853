#!/usr/bin/python3
"""Tables and a plot of bench/compress_budget.sh: the validation loss of each boundary
compression mode at TOKENS_PER_PARAM tokens per parameter over several seeds — mean,
spread, the gap to the uncompressed model at three budgets — and which modes the seeds
separate. Partial results (a matrix still running) are reported as such.

    /usr/bin/python3 bench/compress_budget_report.py --results bench/results/compress-budget \\
        --img-dir bench/results/compress-budget/img

Reads RESULTS/manifest.tsv (mode, P, r, seed, name), RESULTS/setup.txt and the run logs
(docs/RUN-LOG.md); prints markdown, writes it to RESULTS/report.md, the numbers to
RESULTS/summary.json, the curves to IMG_DIR/compress_budget.png and the gap to uncompressed,
seed by seed, to IMG_DIR/compress_budget_gap.png.

Validation loss: the eval record of a finished run (NAME.meta "status ok") at a step, the
mean over --eval-batches held-out batches. tessera draws those windows from the run's seed,
so the runs of one seed share their validation batches (and their training batches), and
runs of two seeds do not: the seeds' spread of one mode's loss holds the spread of the
validation samples, and modes are compared seed by seed. The budgets:
the eval records at 1/4, 1/2 and all of the steps (the script's EVAL_EVERY puts them
there; otherwise the nearest ones); the earlier two are points of the same runs, part-way down their learning-rate
schedule, not runs trained to that budget. Gap: (mean loss − uncompressed mean loss) /
uncompressed mean loss, at the same step, both over the seeds that both have finished; the
gap per seed is the same for each seed alone (its own validation batches on both sides).
Spread: min–max over the seeds and the sample standard deviation (n − 1). Orderings: by the
gap at the whole budget (while seeds are missing, the mean gap over the seeds every mode of
the group has finished); `<` where the two modes share at least two finished seeds and the
left one ends lower on every one of them. Bytes per token per boundary:
bench/compress_report.py's.

Whole validation split (RESULTS/NAME.whole, written by bench/compress_budget.sh when a run
ends: `tessera eval --whole-split` of its last checkpoint): every run scored on the same
tokens, all of the validation split in consecutive windows, whatever its seed, so the seeds'
spread of one mode is the spread of training alone; a table of it, with the gap seed by
seed, for the runs that have one (a run whose checkpoint was lost with its machine has none).

Modes: the manifest's, "mapl anchor KIND" for mapl with --mapl-anchor KIND (the anchor
ablation, beside mapl's factorised default in its P and r), in bench/compress_report.py's
order.

With --estimate STEPS (ESTIMATE=1 bench/compress_budget.sh): the median step time of each
run of RESULTS (its steps after the first) and what STEPS steps × --seeds seeds of every
configuration take, in CPU hours and in wall hours at --jobs runs at once.
"""
import gzip
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (ROOT, ReportError, arg_parser, manifest_lines, median, output_paths,  # noqa: E402
                      read, read_kv, run_command, run_main, save_fig, shown, table, write_report)
from compress_report import label_rank, panel_grid, style, wire_bytes  # noqa: E402

FRACTIONS = (0.25, 0.5, 1.0)


def load(results, name):
    """A run's state: status (ok, stopped, failed, running or not started), the config
    record, eval curve {step: val_loss}, step records' step_ms, and the last step logged."""
    meta = read_kv(os.path.join(results, name + ".meta"))
    text = read(os.path.join(results, name + ".jsonl"))
    if text is None:  # a finished run's log, gzipped by bench/compress_budget.sh
        try:
            with gzip.open(os.path.join(results, name + ".jsonl.gz"), "rt") as f:
                text = f.read()
        except OSError:
            text = None
    run = {"status": meta.get("status") or ("not started" if text is None else "running"),
           "config": None, "curve": {}, "step_ms": [], "last_step": 0}
    if text is None:
        return run
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:      # a torn last line of a run under way
            continue
        t = rec.get("type")
        if t == "config" and run["config"] is None:
            run["config"] = rec
        elif t == "eval":
            run["curve"][rec["step"]] = rec["val_loss"]
        elif t == "step":
            run["last_step"] = rec["step"]
            run["step_ms"].append(rec.get("step_ms"))
    if run["status"] == "ok" and (run["config"] is None or not run["curve"]):
        raise ReportError("%s: status ok but its log has no config or eval record" % name)
    return run


def whole_split(results, name):
    """The whole-split loss of a finished run (NAME.whole: tessera eval's line), else None."""
    text = read(os.path.join(results, name + ".whole"))
    if text is None:
        return None
    m = re.search(r"val loss [0-9.]+ \((0x[0-9a-fp.+-]+)\) over (\d+) batches of (\d+)x(\d+) "
                  r"\(the whole validation split, tiled: (\d+) of its (\d+) tokens scored\)", text)
    if not m:
        raise ReportError("%s.whole: not the line of tessera eval --whole-split: %r" % (name, text[:200]))
    return {"loss": float.fromhex(m.group(1)), "batches": int(m.group(2)), "scored": int(m.group(5)),
            "split": int(m.group(6))}


def mean_sd(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def label(mode):
    return "uncompressed" if mode == "none" else mode


def whole_split_table(results, configs, groups, order, summary):
    """The runs' losses on the whole validation split (NAME.whole), mode by mode, and the
    gap to uncompressed seed by seed; [] while no run has one."""
    whole = {x["name"]: whole_split(results, x["name"]) for c in configs.values() for x in c["done"]}
    have = {k: v for k, v in whole.items() if v is not None}
    if not have:
        return []
    one = next(iter(have.values()))
    base = {int(x["seed"]): have[x["name"]]["loss"] for x in configs[("none", 1, 0)]["done"]
            if x["name"] in have}
    md = ["### The whole validation split", "",
          "Each finished run's last checkpoint scored on all of the validation split, tiled in "
          "consecutive windows (`tessera eval --whole-split`: %s of its %s tokens, %d batches): the "
          "same tokens for every seed, so one mode's spread over seeds is training's alone, where "
          "the runs' own evaluations above score %s batches drawn from each seed. %d of the %d "
          "finished runs have it (a run whose checkpoint stayed on an earlier machine has none). "
          "Gap: against the uncompressed run of the same seed." % (
              format(one["scored"], ","), format(one["split"], ","), one["batches"],
              summary["setup"].get("eval_batches", "?"), len(have), len(whole)), ""]
    out, rows = [], []
    keys = [("none", 1, 0)] + [(m, P, r) for P, r in groups for m in order if (m, P, r) in configs]
    for key in keys:
        got = {int(x["seed"]): have[x["name"]]["loss"] for x in configs[key]["done"] if x["name"] in have}
        if not got:
            continue
        mode, P, r = key
        mu, sd = mean_sd(list(got.values()))
        gaps = {k: (v - base[k]) / base[k] for k, v in sorted(got.items()) if k in base}
        out.append([label(mode), "—" if mode == "none" else str(P), "—" if mode == "none" else str(r),
                    ", ".join("%.4f (%d)" % (v, k) for k, v in sorted(got.items())), "%.4f" % mu,
                    "—" if sd is None else "%.4f" % sd,
                    "—" if mode == "none" or not gaps else ", ".join("%+.2f%% (%d)" % (100 * g, k) for k, g in gaps.items()),
                    "—" if mode == "none" or not gaps else "%+.2f%%" % (100 * statistics.mean(gaps.values()))])
        rows.append({"mode": mode, "P": P, "r": r, "loss": {str(k): v for k, v in got.items()},
                     "mean": mu, "std": sd, "gaps": {str(k): g for k, g in gaps.items()}})
    md += table(["mode", "P", "r", "loss (seed)", "mean", "std", "gap (seed)", "mean gap"],
                ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"], out)
    summary["whole_split"] = {"scored_tokens": one["scored"], "split_tokens": one["split"], "runs": rows}
    return md + [""]


def estimate(a, results, rows):
    """--estimate: the full matrix's duration from a few steps of each configuration."""
    out, cpu_s = [], 0.0
    for row in rows:
        run = load(results, row["name"])
        ms = [x for x in run["step_ms"][1:] if x is not None]
        if not ms:
            raise ReportError("%s: no step records after the first (status %s)" % (row["name"], run["status"]))
        m = median(ms)
        cpu_s += m / 1000.0 * a.estimate * a.seeds
        out.append([label(row["mode"]), row["P"] if row["mode"] != "none" else "—",
                    row["r"] if row["mode"] != "none" else "—", "%.1f" % m,
                    "%.2f" % (m / 1000.0 * a.estimate / 3600.0)])
    md = ["## compress_budget: estimated duration", "",
          "Median step time of %d-step runs (one thread each, at nice 19, on this machine under its "
          "present load); a full run is %d steps (evaluations add a little)." % (
              len(load(results, rows[0]["name"])["step_ms"]), a.estimate), ""]
    md += table(["mode", "P", "r", "ms/step", "hours per run"], ["---", "---:", "---:", "---:", "---:"], out)
    md += ["", "All %d configurations × %d seeds: %.1f CPU hours; %.1f hours wall at %d runs at once." % (
        len(rows), a.seeds, cpu_s / 3600.0, cpu_s / 3600.0 / a.jobs, a.jobs)]
    print("\n".join(md))


def main():
    ap = arg_parser(__doc__, "bench/results/compress-budget")
    ap.add_argument("--estimate", type=int, metavar="STEPS", help="estimate the duration of STEPS-step runs")
    ap.add_argument("--seeds", type=int, default=3, help="--estimate: seeds per configuration (default 3)")
    ap.add_argument("--jobs", type=int, default=2, help="--estimate: runs at once (default 2)")
    a = ap.parse_args()
    results, md_path, json_path = output_paths(a)
    if a.img_dir == "docs/img":     # this benchmark's plot stays with its results
        a.img_dir = os.path.join(results, "img")
    rows = [dict(zip(("mode", "P", "r", "seed", "name"), f))
            for f in manifest_lines(results, "bench/compress_budget.sh", 5)]
    if not rows:
        raise ReportError("manifest.tsv: no runs")
    if a.estimate is not None:
        if a.estimate < 1 or a.seeds < 1 or a.jobs < 1:
            raise ReportError("--estimate, --seeds and --jobs: positive integers")
        return estimate(a, results, rows)
    setup = read_kv(os.path.join(results, "setup.txt"))
    runs = {r["name"]: load(results, r["name"]) for r in rows}
    done = [r for r in rows if runs[r["name"]]["status"] == "ok"]
    missing = [r for r in rows if runs[r["name"]]["status"] != "ok"]
    base_done = [r for r in done if r["mode"] == "none"]
    if not base_done:
        raise ReportError("no finished uncompressed run yet (mode none): nothing to compare with")
    steps = int(setup.get("steps", "0"))
    cfg0 = runs[base_done[0]["name"]]["config"]
    m0 = cfg0["model"]
    tokens = m0["batch"] * m0["seq"]
    params = int(setup.get("params") or cfg0["params"])
    # the evaluation nearest each fraction of the budget (exact with the script's EVAL_EVERY)
    evals = sorted(runs[base_done[0]["name"]]["curve"])
    budgets = sorted({min(evals, key=lambda e: abs(e - f * steps)) for f in FRACTIONS})
    if budgets[-1] != steps:
        raise ReportError("%s: no evaluation at the last step %d" % (base_done[0]["name"], steps))
    for r in done:
        lacking = [s for s in budgets if s not in runs[r["name"]]["curve"]]
        if lacking:
            raise ReportError("%s: no eval record at step %d, which the other runs have" % (r["name"], lacking[0]))
    seeds = sorted({r["seed"] for r in rows}, key=int)

    # the configurations: (mode, P, r) with their finished seeds' curves
    configs = {}
    for r in rows:
        key = (r["mode"], int(r["P"]), int(r["r"]))
        c = configs.setdefault(key, {"planned": 0, "done": [], "names": []})
        c["planned"] += 1
        c["names"].append(r["name"])
        if runs[r["name"]]["status"] == "ok":
            c["done"].append(r)
    base = configs[("none", 1, 0)]

    def at(c, step):
        return [runs[x["name"]]["curve"][step] for x in c["done"]]

    md = ["## Boundary compression at %s tokens a parameter, %d seeds" % (setup.get("tokens_per_param", "?"), len(seeds)), ""]
    md.append("- Date: %s (UTC, last start); tessera %s (binary `%s`, sha256 %s…)" % (
        setup.get("date", "?"), setup.get("rev", "?"), shown(setup.get("binary", "?"), ROOT),
        setup.get("binary_sha256", "?")))
    md.append("- Model: `%s`: d %d, %d layers, %d heads (%d key/value), %s parameters uncompressed; "
              "corpus `%s` (real text, vocabulary %d); T %d, batch %d: %d tokens a step" % (
                  setup.get("model_flags", "?"), m0["d"], m0["n_layer"], m0["n_head"],
                  m0.get("n_kv_head", m0["n_head"]), format(params, ","), setup.get("data", "?"),
                  m0["vocab"], m0["seq"], m0["batch"], tokens))
    md.append("- Budget: %d steps, %s tokens, **%s tokens a parameter** (asked: %s); `%s`; seeds %s; "
              "validation: %s held-out batches every %s steps" % (
                  steps, format(steps * tokens, ","), setup.get("tokens_per_param", "?"),
                  setup.get("tokens_per_param_asked", "?"), setup.get("opt_flags", ""), " ".join(seeds),
                  setup.get("eval_batches", "?"), setup.get("eval_every", "?")))
    if setup.get("vq_flags"):
        md.append("- mapl-vq runs also take `%s`" % setup["vq_flags"])
    md.append("- Each compressed run is the serial reference of the P-stage model (`--compress-stages P`), "
              "which `mpiexec -n P … --pp P` reproduces bit for bit (tests/mpi_compress.sh).")
    if missing:
        md.append("- **Partial results: %d of %d runs finished.** Not finished: %s" % (
            len(done), len(rows), ", ".join("%s (%s%s)" % (
                r["name"], runs[r["name"]]["status"],
                ", step %d of %d" % (runs[r["name"]]["last_step"], steps) if runs[r["name"]]["last_step"] else "")
                for r in missing)))
    else:
        md.append("- All %d runs finished." % len(rows))
    if setup.get("resume_check_run"):
        md.append("- Resume check: %s stopped by SIGTERM and resumed, against the same run done straight: "
                  "log `%s`, last checkpoint `%s` (`tessera compare`)" % (
                      setup["resume_check_run"], setup.get("resume_check_log", "?"), setup.get("resume_check_ckpt", "?")))
    md.append("")

    tpp = ["%.3g" % (s * tokens / params) for s in budgets]
    head = ["mode", "seeds", "val loss mean", "std", "min – max"] + \
        ["gap at %s tok/param (step %d)" % (t, s) for t, s in zip(tpp, budgets)] + \
        ["gap at %s tok/param, seed by seed" % tpp[-1], "fwd B/token"]
    align = ["---", "---:", "---:", "---:", "---:"] + ["---:"] * len(budgets) + ["---:", "---:"]
    summary = {"setup": setup, "budgets_steps": budgets, "tokens_per_param": [float(t) for t in tpp],
               "configs": [], "missing": [r["name"] for r in missing]}
    groups = sorted({(P, r) for (m, P, r) in configs if m != "none"})
    order = sorted({m for (m, _, _) in configs if m != "none"}, key=label_rank)
    orderings = []
    for P, r in groups:
        md += ["### P = %d stages (%d boundaries), r = %d (d/%d)" % (P, P - 1, r, m0["d"] // r), ""]
        out, ranked = [], []
        for mode in ["none"] + order:
            key = (mode, 1, 0) if mode == "none" else (mode, P, r)
            if key not in configs:
                continue
            c = configs[key]
            if not c["done"]:
                out.append([label(mode), "0/%d" % c["planned"]] + ["—"] * (3 + len(budgets) + 2))
                continue
            final = at(c, steps)
            mu, sd = mean_sd(final)
            # against the uncompressed runs of the same seeds, so that a seed still
            # missing on one side does not count as a gap
            both = {x["seed"] for x in c["done"]} & {x["seed"] for x in base["done"]}
            gaps = []
            for s in budgets:
                ours = statistics.mean(runs[x["name"]]["curve"][s] for x in c["done"] if x["seed"] in both) if both else None
                ref = statistics.mean(runs[x["name"]]["curve"][s] for x in base["done"] if x["seed"] in both) if both else None
                gaps.append(None if ours is None else (ours - ref) / ref)
            # seed by seed at the whole budget: each seed's own validation batches on both sides
            mine = {int(x["seed"]): runs[x["name"]]["curve"][steps] for x in c["done"]}
            base_final = {int(x["seed"]): runs[x["name"]]["curve"][steps] for x in base["done"]}
            per_seed = {sd_: (mine[sd_] - base_final[sd_]) / base_final[sd_] for sd_ in sorted(mine)
                        if sd_ in base_final}
            fwd = wire_bytes(runs[c["done"][0]["name"]]["config"]["model"])[0]
            out.append([label(mode), "%d/%d" % (len(final), c["planned"]), "%.4f" % mu,
                        "—" if sd is None else "%.4f" % sd, "%.4f – %.4f" % (min(final), max(final))] +
                       ["—" if mode == "none" or g is None else "%+.2f%%" % (100 * g) for g in gaps] +
                       ["—" if mode == "none" or not per_seed else
                        ", ".join("%+.2f%% (%d)" % (100 * g, sd_) for sd_, g in per_seed.items()), str(fwd)])
            summary["configs"].append({"mode": mode, "P": P if mode != "none" else 1, "r": r if mode != "none" else 0,
                                       "seeds_done": [x["seed"] for x in c["done"]], "val_loss": final,
                                       "mean": mu, "std": sd, "gaps": dict(zip(map(str, budgets), gaps)),
                                       "forward_bytes": fwd})
            ranked.append([0.0 if mode == "none" else gaps[-1], label(mode), mine, per_seed, mode])
        md += table(head, align, out)
        md.append("")
        ranked = [x for x in ranked if x[0] is not None]
        # while seeds are missing, sort on the seeds every mode of the group has finished
        shared = set.intersection(*(set(x[3]) for x in ranked if x[4] != "none")) if len(ranked) > 1 else set()
        if shared:
            for x in ranked:
                if x[4] != "none":
                    x[0] = statistics.mean(x[3][k] for k in shared)
        ranked.sort(key=lambda x: x[0])
        text = ranked[0][1] if ranked else "—"
        for lo, hi in zip(ranked, ranked[1:]):
            # "<" only when the better mode ends lower on every seed both have, at least two
            common = sorted(set(lo[2]) & set(hi[2]))
            sep = "<" if len(common) > 1 and all(lo[2][k] < hi[2][k] for k in common) else "≲"
            text += " %s %s" % (sep, hi[1])
        orderings.append("- P = %d, r = %d: %s" % (P, r, text))
    md += ["### Orderings by the gap at the whole budget", "",
           "Sorted by the gap (while seeds are missing, over the seeds every mode of the group has "
           "finished). `<`: the left mode ends lower on every seed the two share (at least two; a seed's "
           "runs share their validation batches); `≲`: lower by the gap only (seeds disagree, or one "
           "seed in common).",
           ""] + orderings + [""]

    md += whole_split_table(results, configs, groups, order, summary)

    if not a.no_plots:
        def figure(modes, series, ylabel, what, name, alt, zero=False):
            """One panel a (P, r) group; series(mode, P, r) gives (steps, the seeds' values
            at each step) or None; a line for their mean, a band for their min–max."""
            plt, fig, axes, Ps, rs = panel_grid(groups)
            for i, P in enumerate(Ps):
                for j, r in enumerate(rs):
                    ax = axes[i][j]
                    if zero:
                        ax.axhline(0.0, color="black", linestyle="--", linewidth=1, label="uncompressed")
                    for mode in modes:
                        got = series(mode, P, r)
                        if not got:
                            continue
                        xs, ys = got
                        colour, ls = style(mode)
                        ax.plot(xs, [statistics.mean(y) for y in ys], color=colour, linestyle=ls,
                                label="%s (%d)" % (label(mode), len(ys[0])))
                        if len(ys[0]) > 1:
                            ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], color=colour, alpha=0.15)
                    ax.set_title("P = %d, r = %d (d/%d)" % (P, r, m0["d"] // r))
                    # a linear axis: at ten tokens a parameter the curves span a narrow range
                    ax.grid(alpha=0.3)
                    if i == len(Ps) - 1:
                        ax.set_xlabel("step (%d tokens each; %d = %s tokens/param)" % (tokens, steps, tpp[-1]))
                    if j == 0:
                        ax.set_ylabel(ylabel)
            axes[0][0].legend(fontsize=8, title="mode (seeds)", title_fontsize=8)
            # a mode drawn only in other panels (the anchor ablation's) gets a legend there
            shown_labels = set(axes[0][0].get_legend_handles_labels()[1])
            for ax in [ax for row in axes for ax in row][1:]:
                extra = [(h, l) for h, l in zip(*ax.get_legend_handles_labels()) if l not in shown_labels]
                if extra:
                    ax.legend(*zip(*extra), fontsize=8, title="mode (seeds)", title_fontsize=8)
            fig.suptitle("Boundary compression at %s tokens a parameter: %s%s" % (
                tpp[-1], what, " (partial)" if missing else ""))
            path = os.path.join(a.img_dir, name)
            save_fig(fig, path)
            return ["![%s](%s)" % (alt, shown(path, ROOT)), ""]

        def losses(mode, P, r):
            c = configs.get((mode, 1, 0) if mode == "none" else (mode, P, r))
            if not c or not c["done"]:
                return None
            xs = sorted(set.intersection(*(set(runs[x["name"]]["curve"]) for x in c["done"])))
            return xs, [at(c, s_) for s_ in xs]

        # the gap seed by seed: each seed's run against the uncompressed run of that seed,
        # which was scored on the same validation batches
        ref = {int(x["seed"]): runs[x["name"]]["curve"] for x in base["done"]}

        def gaps_by_seed(mode, P, r):
            c = configs.get((mode, P, r))
            pairs = [(runs[x["name"]]["curve"], ref[int(x["seed"])]) for x in (c["done"] if c else [])
                     if int(x["seed"]) in ref]
            if not pairs:
                return None
            xs = sorted(set.intersection(*(set(m_) & set(u_) for m_, u_ in pairs)))
            return xs, [[100.0 * (m_[s_] - u_[s_]) / u_[s_] for m_, u_ in pairs] for s_ in xs]

        md += figure(["none"] + order, losses, "validation loss", "mean over seeds, band min–max",
                     "compress_budget.png", "validation loss by mode, mean over seeds")
        md += figure(order, gaps_by_seed, "gap to uncompressed, same seed (%)",
                     "the gap seed by seed, mean and min–max", "compress_budget_gap.png",
                     "the gap to uncompressed seed by seed", zero=True)

    md += ["### Commands", "", "Every run of the matrix (`nice -n 19 tessera train …`); a run not "
           "started yet has none. Each is started with `--resume`, so the same command continues it.", ""]
    for r in rows:
        cmd = run_command(results, r["name"], ROOT)
        md.append("- %s: `%s`" % (r["name"], cmd) if cmd else "- %s: not started" % r["name"])
    md.append("")
    write_report(md, md_path, summary, json_path)


if __name__ == "__main__":
    run_main(main, "bench/compress_budget_report.py")
