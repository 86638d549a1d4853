#!/usr/bin/python3
"""Tables and a plot of bench/pp_schedule.sh: the pipeline's bubble fraction and its peak
number of microbatches in flight, GPipe against 1F1B, against the textbook figures.

    /usr/bin/python3 bench/pp_report.py --results bench/results/pp --img-dir docs/img

Reads RESULTS/manifest.tsv and the run logs it names (docs/RUN-LOG.md), prints markdown
tables, writes the same text to RESULTS/report.md, the numbers to RESULTS/summary.json,
and the plot IMG_DIR/pp_schedule.png.

Every figure is the median over the step records after the first (warm-up) step. Only
rank 0, the first stage, writes the log. Two measures of the bubble, per step:

  stage 0       comm_ms / step_ms: the first stage's time inside send/recv and the
                step's collectives, waiting for its neighbours included;
  busiest rank  1 - compute_ms_max / step_ms: the idle share of the rank that computed
                the most (compute = step_ms - comm_ms on each rank).

Both are set against (P-1)/(M+P-1) and against an event model of the schedules exactly
as src/dist/pipeline.c runs them (same order of forwards and backwards, same
recomputation of a microbatch's forward before its backward unless its activations are
still held), with a backward BWD times a forward (--bwd, default 2) and free messages.
Without recomputation the model gives the formula for both schedules (checked here).
Runs with more ranks than cores (‡) show only counts and bytes; a run whose log is
missing or incomplete makes the report exit 1 with one line saying which.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (LOADED_CORES, ROOT, ReportError, arg_parser, flag,  # noqa: E402
                      fmt_bytes, fmt_ms, load_log, manifest_lines, median, model_name,
                      others_cores, output_paths, read_kv, run_command, run_main, save_fig,
                      setup_cores, shown, table, write_report)

SCHED_ORDER = ["gpipe", "1f1b"]
SCHED_STYLE = {"gpipe": ("tab:blue", "o"), "1f1b": ("tab:red", "s")}   # colour, marker
FLOAT = 4


# ---- the schedules, as an event model -------------------------------------------------

def stage_ops(P, M, s, sched):
    """Stage s's forwards ("F", mu) and backwards ("B", mu) in the order pipeline.c runs them."""
    if sched == "gpipe":
        return [("F", mu) for mu in range(M)] + [("B", mu) for mu in range(M)]
    warm = min(P - s - 1, M)
    steady = M - warm
    ops = [("F", i) for i in range(warm)]
    for i in range(steady):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", steady + i) for i in range(warm)]


def simulate(P, M, sched, bwd=2.0, recompute=True):
    """Per-stage busy time and the makespan of one pass; a forward costs 1, a backward bwd,
    and a backward whose microbatch's activations are not held first recomputes its forward
    (pipeline.c: the forward of mu leaves mu held; a backward releases it). A stage's
    forward of mu waits for stage s-1's, its backward of mu for stage s+1's; messages are free."""
    ops = [stage_ops(P, M, s, sched) for s in range(P)]
    done = {}                     # (stage, kind, mu) -> finish time
    clock = [0.0] * P
    busy = [0.0] * P
    nxt = [0] * P
    holding = [-1] * P
    recomputed = [0] * P
    left = sum(len(o) for o in ops)
    while left:
        moved = False
        for s in range(P):
            if nxt[s] == len(ops[s]):
                continue
            kind, mu = ops[s][nxt[s]]
            dep = None
            if kind == "F" and s > 0:
                dep = (s - 1, "F", mu)
            elif kind == "B" and s < P - 1:
                dep = (s + 1, "B", mu)
            if dep is not None and dep not in done:
                continue
            start = max(clock[s], done[dep] if dep else 0.0)
            if kind == "F":
                cost = 1.0
                holding[s] = mu
            else:
                cost = bwd
                if holding[s] != mu and recompute:
                    cost += 1.0
                    recomputed[s] += 1
                holding[s] = -1
            clock[s] = start + cost
            busy[s] += cost
            done[(s, kind, mu)] = clock[s]
            nxt[s] += 1
            left -= 1
            moved = True
        if not moved:
            raise ReportError("event model: schedule %s P=%d M=%d deadlocks" % (sched, P, M))
    return busy, max(clock), recomputed


def formula(P, M):
    return (P - 1) / (M + P - 1)


def model_bubbles(P, M, sched, bwd):
    busy, span, rec = simulate(P, M, sched, bwd)
    return {"stage0": 1 - busy[0] / span, "busiest": 1 - max(busy) / span,
            "per_stage": [1 - b / span for b in busy], "recomputed": rec,
            "work_vs_no_recompute": [b / (M * (1 + bwd)) for b in busy]}


def check_model(Ps, Ms, bwd):
    """Without recomputation the model must reproduce (P-1)/(M+P-1) on every stage."""
    for P in Ps:
        for M in Ms:
            for sched in SCHED_ORDER:
                busy, span, _ = simulate(P, M, sched, bwd, recompute=False)
                for s, b in enumerate(busy):
                    if abs((1 - b / span) - formula(P, M)) > 1e-9:
                        raise ReportError("event model: %s P=%d M=%d stage %d: bubble %.4f without "
                                          "recomputation, the formula says %.4f" % (
                                              sched, P, M, s, 1 - b / span, formula(P, M)))


# ---- the runs -----------------------------------------------------------------------

def load_run(results, name, root):
    """One run's figures from its log and its meta file."""
    res = {"name": name, "command": run_command(results, name, root)}
    meta, cfg, steps = load_log(results, name)
    later = steps[1:]
    model = cfg.get("model", {})
    pipes = [r.get("pipeline") for r in steps]
    if cfg.get("world", 1) > 1 and not all(pipes):
        raise ReportError("%s: step records lack \"pipeline\" (a tessera without pipeline logging)" % name)
    if cfg.get("world", 1) > 1 and any("compute_ms_max" not in r for r in later):
        raise ReportError("%s: step records lack compute_ms_max (an older tessera)" % name)
    inflight = sorted({p["peak_inflight"] for p in pipes}) if all(pipes) else []
    boundary = [r.get("comm", {}).get("sendrecv", {"calls": 0, "bytes": 0}) for r in later]
    bcast = [r.get("comm", {}).get("bcast", {"calls": 0, "bytes": 0}) for r in later]
    wall_s, others = others_cores(meta)
    res.update({
        "params": cfg.get("params"),
        "layout": cfg.get("layout"),
        "world": cfg.get("world"),
        "n_layer": model.get("n_layer"),
        "d": model.get("d"),
        "seq": model.get("seq"),
        "batch": model.get("batch"),
        "steps": len(steps),
        "wall_ms": median([r["step_ms"] for r in later]),
        "comm_ms": median([r.get("comm_ms", 0.0) for r in later]),
        "compute_rank0_ms": median([r["step_ms"] - r.get("comm_ms", 0.0) for r in later]),
        "compute_busiest_ms": median([r["compute_ms_max"] for r in later]) if "compute_ms_max" in later[0] else None,
        "bubble_stage0": median([r.get("comm_ms", 0.0) / r["step_ms"] for r in later]),
        "bubble_busiest": (median([1 - r["compute_ms_max"] / r["step_ms"] for r in later])
                           if "compute_ms_max" in later[0] else None),
        "peak_inflight": inflight[-1] if inflight else None,
        "peak_inflight_varies": len(inflight) > 1,
        "boundary_calls": median([b["calls"] for b in boundary]),
        "boundary_bytes": median([b["bytes"] for b in boundary]),
        "bcast_calls": median([b["calls"] for b in bcast]),
        "bcast_bytes": median([b["bytes"] for b in bcast]),
        "step_ms_all": [r["step_ms"] for r in steps],
        "peak_rss_largest_mb": max(r.get("peak_rss_mb_max", r["peak_rss_mb"]) for r in steps),
        "run_wall_s": wall_s,
        "others_cores": others,
    })
    return res


def load_manifest(results):
    rows = []
    for f in manifest_lines(results, "bench/pp_schedule.sh", 5):
        if f[4] != "ok":
            raise ReportError("manifest.tsv: %s: unknown status %r" % (f[3], f[4]))
        rows.append({"P": int(f[0]), "M": int(f[1]), "schedule": f[2], "name": f[3], "status": f[4]})
    return rows


# ---- formatting -------------------------------------------------------------------

def fmt_frac(x):
    return "—" if x is None else "%.2f" % x


def sched_key(s):
    return SCHED_ORDER.index(s) if s in SCHED_ORDER else len(SCHED_ORDER)


def expected_inflight(P, M, sched):
    return M if sched == "gpipe" else min(P, M)


def bubble_table(rows, runs, serial, bwd):
    head = ["P", "M", "schedule", "step ms", "vs serial", "stage 0: comm ms", "compute ms (stage 0)",
            "compute ms (busiest rank)", "bubble, stage 0 (comm/step)", "bubble, busiest rank (1 − compute max/step)",
            "(P−1)/(M+P−1)", "model with recompute: stage 0", "model: busiest stage"]
    align = ["---:"] * 2 + ["---"] + ["---:"] * (len(head) - 3)
    body = []
    for r in rows:
        x = runs[r["name"]]
        mdl = model_bubbles(r["P"], r["M"], r["schedule"], bwd)
        body.append([str(r["P"]), str(r["M"]), r["schedule"], fmt_ms(x["wall_ms"]) + flag(x),
                     ("%.2f×" % (x["wall_ms"] / serial["wall_ms"])) if serial else "—",
                     fmt_ms(x["comm_ms"]), fmt_ms(x["compute_rank0_ms"]), fmt_ms(x["compute_busiest_ms"]),
                     fmt_frac(x["bubble_stage0"]), fmt_frac(x["bubble_busiest"]),
                     fmt_frac(formula(r["P"], r["M"])), fmt_frac(mdl["stage0"]), fmt_frac(mdl["busiest"])])
    return table(head, align, body)


def inflight_table(rows, runs, cores):
    head = ["P", "M", "schedule", "peak in flight (stage 0)", "expected", "stored inputs (stage 0)",
            "whole batch's stage input", "boundary messages / step", "boundary bytes / step",
            "bcast bytes / step", "peak RSS MB (largest rank)"]
    align = ["---:"] * 2 + ["---"] + ["---:"] * (len(head) - 3)
    body = []
    for r in rows:
        x = runs[r["name"]]
        P, M = r["P"], r["M"]
        over = " ‡" if P > cores else ""
        exp = expected_inflight(P, M, r["schedule"])
        mb_bytes = (x["batch"] // M) * x["seq"] * x["d"] * FLOAT
        got = x["peak_inflight"]
        mark = "" if got == exp else " ✗"
        body.append([str(P) + over + flag(x), str(M), r["schedule"],
                     "%s%s%s" % (got, "*" if x["peak_inflight_varies"] else "", mark),
                     "%d (%s)" % (exp, "M" if r["schedule"] == "gpipe" else "min(P, M)"),
                     fmt_bytes(got * mb_bytes), fmt_bytes(x["batch"] * x["seq"] * x["d"] * FLOAT),
                     "%g" % x["boundary_calls"], fmt_bytes(x["boundary_bytes"]), fmt_bytes(x["bcast_bytes"]),
                     "%.0f" % x["peak_rss_largest_mb"]])
    return table(head, align, body)


def recompute_table(Ps, Ms, bwd):
    """The model's recomputations per stage and its bubbles, every P and M."""
    head = ["P", "M", "schedule", "forwards recomputed per stage (0 … P−1)",
            "work per stage vs no recompute", "model bubble per stage", "(P−1)/(M+P−1)"]
    align = ["---:"] * 2 + ["---"] + ["---:"] * (len(head) - 3)
    body = []
    for P in Ps:
        for M in Ms:
            for sched in SCHED_ORDER:
                m = model_bubbles(P, M, sched, bwd)
                body.append([str(P), str(M), sched, ", ".join(str(c) for c in m["recomputed"]),
                             ", ".join("%.2f" % w for w in m["work_vs_no_recompute"]),
                             ", ".join("%.2f" % b for b in m["per_stage"]), fmt_frac(formula(P, M))])
    return table(head, align, body)


# ---- plot ---------------------------------------------------------------------------

def plot(rows, runs, cores, bwd, path, title):
    try:
        import matplotlib
    except ImportError:
        raise ReportError("matplotlib is missing from %s (--no-plots skips the plot)" % sys.executable)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    fig.subplots_adjust(wspace=0.3)
    Ms = sorted({r["M"] for r in rows})
    fine = [2 ** (i / 8) for i in range(0, 8 * (max(Ms).bit_length() - 1) + 1)] if max(Ms) > 1 else [1]
    timed = sorted({r["P"] for r in rows if r["P"] <= cores})
    scheds = sorted({r["schedule"] for r in rows}, key=sched_key)

    ax = axes[0]
    for P in timed:
        ax.plot(fine, [formula(P, m) for m in fine], color="black", linewidth=1.2,
                label="(P−1)/(M+P−1), P=%d" % P)
        for sched in scheds:
            col, mk = SCHED_STYLE.get(sched, ("gray", "x"))
            pts = sorted((r["M"], runs[r["name"]]) for r in rows if r["P"] == P and r["schedule"] == sched)
            if not pts:
                continue
            ms = [m for m, _ in pts]
            ax.plot(ms, [x["bubble_stage0"] for _, x in pts], marker=mk, color=col,
                    label="%s: stage 0, comm/step" % sched)
            ax.plot(ms, [x["bubble_busiest"] for _, x in pts], marker=mk, color=col, linestyle=":",
                    markerfacecolor="none", label="%s: busiest rank, 1 − compute/step" % sched)
            mod = [model_bubbles(P, m, sched, bwd)["stage0"] for m in ms]
            same = all(abs(b - formula(P, m)) < 1e-9 for m, b in zip(ms, mod))
            ax.plot(ms, mod, color=col, linestyle="--", zorder=3, alpha=0.5, linewidth=1,
                    label="%s: model with recompute, stage 0%s" % (sched, " (= formula)" if same else ""))
    ax.set_xscale("log", base=2)
    ax.set_xticks(Ms)
    ax.set_xticklabels([str(m) for m in Ms])
    ax.set_xlabel("microbatches M")
    ax.set_ylabel("bubble fraction of the step")
    ax.set_ylim(0, max(0.6, ax.get_ylim()[1]))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    ax.set_title("bubble, P = %s (ranks ≤ %d cores)" % (", ".join(str(p) for p in timed) or "—", cores),
                 fontsize=10)

    Ps = sorted({r["P"] for r in rows})
    styles = ["-", "--", "-.", ":"]
    # equal counts of different P would hide each other: each P a little apart along x
    shift = {P: 2 ** (0.06 * (i - (len(Ps) - 1) / 2)) for i, P in enumerate(Ps)}
    for ax, key, label in ((axes[1], "count", "peak microbatches in flight, stage 0"),
                           (axes[2], "bytes", "stored stage inputs, stage 0 (MB)")):
        for i, P in enumerate(Ps):
            for sched in scheds:
                col, mk = SCHED_STYLE.get(sched, ("gray", "x"))
                pts = sorted((r["M"], runs[r["name"]]) for r in rows if r["P"] == P and r["schedule"] == sched)
                if not pts:
                    continue
                ms = [m for m, _ in pts]

                def val(m, n, x):
                    return n if key == "count" else n * (x["batch"] // m) * x["seq"] * x["d"] * FLOAT / 1e6
                xs = [m * shift[P] for m in ms]
                ax.plot(xs, [val(m, x["peak_inflight"], x) for m, x in pts], marker=mk, color=col,
                        linestyle=styles[i % len(styles)], markerfacecolor=col if i == 0 else "none",
                        label="%s, P=%d%s" % (sched, P, " ‡" if P > cores else ""))
                ax.plot(xs, [val(m, expected_inflight(P, m, sched), x) for m, x in pts], color="black",
                        marker="x", linestyle="none", markersize=9, alpha=0.6)
        ax.plot([], [], color="black", marker="x", linestyle="none", alpha=0.6,
                label="expected: M (GPipe), min(P, M) (1F1B)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ms)
        ax.set_xticklabels([str(m) for m in Ms])
        ax.set_xlabel("microbatches M")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    axes[1].set_title("in flight (count)", fontsize=10)
    axes[2].set_title("in flight (bytes: count × B/M·T·d floats)", fontsize=10)
    fig.suptitle(title)
    save_fig(fig, path)
    plt.close(fig)


# ---- main ---------------------------------------------------------------------------

def main():
    ap = arg_parser(__doc__, "bench/results/pp")
    ap.add_argument("--bwd", type=float, default=2.0,
                    help="the event model's backward cost in forwards (default 2: two matmuls per one)")
    a = ap.parse_args()
    if not a.bwd > 0:
        raise ReportError("--bwd %g: must be positive" % a.bwd)
    root = ROOT
    results, md_path, json_path = output_paths(a)

    rows = load_manifest(results)
    setup = read_kv(os.path.join(results, "setup.txt"))
    cores = setup_cores(setup)
    runs = {r["name"]: load_run(results, r["name"], root) for r in rows}
    serial = next((runs[r["name"]] for r in rows if r["P"] == 1), None)
    pipe = sorted((r for r in rows if r["P"] > 1), key=lambda r: (r["P"], r["M"], sched_key(r["schedule"])))
    if not pipe:
        raise ReportError("manifest.tsv: no pipeline runs")
    Ps = sorted({r["P"] for r in pipe})
    Ms = sorted({r["M"] for r in pipe})
    check_model(Ps, Ms, a.bwd)
    timed = [r for r in pipe if r["P"] <= cores]
    wrong = [r["name"] for r in pipe
             if runs[r["name"]]["peak_inflight"] != expected_inflight(r["P"], r["M"], r["schedule"])]

    x0 = runs[pipe[0]["name"]]
    model = model_name(setup)
    md = ["## Pipeline schedules: bubble and microbatches in flight", ""]
    md.append("- Date: %s (UTC); tessera %s (binary `%s`, sha256 %s…); %s cores; MPI: `%s`" % (
        setup.get("date", "?"), setup.get("rev", "?"), shown(setup.get("binary", "?"), root),
        setup.get("binary_sha256", "?"), cores, setup.get("mpiexec", "?")))
    md.append("- Model: `%s` (d %s, %s layers, %s parameters), T %s, batch B %s, `--threads %s` per rank; "
              "%s steps per run, every figure the median over steps 2..%s" % (
                  model, x0["d"], x0["n_layer"], x0["params"], x0["seq"], x0["batch"], setup.get("threads", "?"),
                  setup.get("steps", "?"), setup.get("steps", "?")))
    md.append("- Only rank 0, the first stage, logs. *bubble, stage 0* is its `comm_ms / step_ms`: time in "
              "send/recv (waiting for a neighbour) and in the step's broadcasts (the loss, and every stage's "
              "gradient slice to all), over the whole step, the optimizer included. *bubble, busiest rank* is "
              "`1 − compute_ms_max / step_ms`, the idle share of the rank that computed the most (each rank's "
              "compute is its `step_ms − comm_ms`); it is the bubble of the stage that bounds the step.")
    md.append("- *(P−1)/(M+P−1)* assumes equal stages whose backward is a plain backward. *model* is an event "
              "model of the schedules as `src/dist/pipeline.c` runs them: a forward costs 1, a backward "
              "%g, and a backward whose microbatch's activations are no longer held first recomputes the "
              "forward (+1); messages, the embedding, the head and the optimizer are free. Without the "
              "recomputation the model gives the formula on every stage, both schedules (checked)." % a.bwd)
    md.append("- ‡ more ranks than the %d cores: timings measure the scheduler, so only counts and bytes are "
              "shown; † other processes took > %.1f cores on average during the run (counts and bytes do "
              "not depend on it, timings do)." % (cores, LOADED_CORES))
    md.append("")
    summary = {"setup": setup, "runs": runs, "manifest": rows, "bwd": a.bwd,
               "model": {"%d-%d-%s" % (P, M, s): model_bubbles(P, M, s, a.bwd)
                         for P in Ps for M in Ms for s in SCHED_ORDER}}
    if timed:
        md += ["### Bubble (P ≤ %d cores)" % cores, ""]
        if serial:
            md.append("Serial run of the same model: %s ms per step%s (no pipeline, no recomputation)." % (
                fmt_ms(serial["wall_ms"]), flag(serial)))
            md.append("")
        md += bubble_table(timed, runs, serial, a.bwd) + [""]
    else:
        md += ["No run with P ≤ %d cores: no bubble is measured." % cores, ""]
    md += ["### Microbatches in flight on stage 0", ""]
    md.append("*stored inputs* = peak in flight × one microbatch's stage input (B/M · T · d floats): what a "
              "stage keeps between a microbatch's forward and its backward (the activations themselves are "
              "recomputed). *boundary* = the `sendrecv` counts of stage 0 (its M activations out and M "
              "gradients in); *bcast* = the loss and the gradient slices. ✗ marks a count that differs from "
              "the expected one%s." % (", * one that varies between steps" if any(
                  runs[r["name"]]["peak_inflight_varies"] for r in pipe) else ""))
    md += [""] + inflight_table(pipe, runs, cores) + [""]
    if wrong:
        md += ["**Unexpected in-flight counts:** %s." % ", ".join(wrong), ""]
    md += ["### The event model per stage (backward = %g forwards)" % a.bwd, ""]
    md += recompute_table(Ps, Ms, a.bwd) + [""]
    md += ["### Commands", "", "```sh"]
    for r in rows:
        md.append(runs[r["name"]]["command"])
    md += ["```", ""]

    if not a.no_plots:
        p = os.path.join(a.img_dir, "pp_schedule.png")
        plot(pipe, runs, cores, a.bwd, p, "tessera pipeline schedules: %s, T %s, B %s" % (
            model, x0["seq"], x0["batch"]))
        md += ["Plot: `%s`" % shown(p, root), ""]

    write_report(md, md_path, summary, json_path)
    return 0


if __name__ == "__main__":
    run_main(main, "bench/pp_report.py")
