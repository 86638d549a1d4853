#!/usr/bin/python3
"""Tables and plots of bench/sp_scaling.sh: the sequence-parallel weak-scaling sweep, the
memory-per-rank sweep and the LSS paper's comparison with its baseline (the base sweep:
every mode's peak memory and step time beside megatron-2022's, the paper's ratio next to
ours), with parallel-efficiency tables for the weak and base sweeps (model FLOP/s over all
ranks, efficiency against N x the one-rank rate, communication and waiting apart).

    /usr/bin/python3 bench/sp_report.py --results bench/results/sp --img-dir docs/img

Reads RESULTS/manifest.tsv and the run logs it names (docs/RUN-LOG.md), prints one
markdown table per sweep (and the ratios to megatron where that mode ran), writes the
same text to RESULTS/report.md, the numbers to RESULTS/summary.json, and the plots
IMG_DIR/sp_weak_scaling.png and IMG_DIR/sp_memory_vs_T.png, and for the base sweep
IMG_DIR/sp_base_nN.png at each N that ran two or more T (memory and step time against T,
log scales).

Every figure is the median over the step records after the first (warm-up) step.
Communication counts are rank 0's (the log's), per step; "collectives per layer" is the
number of calls counted under layer 0, forward and backward together. A rank's compute
is its step_ms - comm_ms (comm_ms is the time inside collectives, waiting included); the
tables, ratios and plots use the busiest rank's (the step records' compute_ms_max), with
rank 0's beside it, and the largest rank's peak RSS (peak_rss_mb_max). The balance column,
busiest ÷ mean, is each step's compute_ms_max / compute_ms_mean (the mean over all ranks),
then the median over the steps. Logs of an older tessera without these fields still
render: compute is then rank 0's throughout, busiest ÷ mean is shown as —, and the
largest RSS is GNU time's (the .meta file's max_rss_kb), else rank 0's. A mode
the build refused ("na" in the manifest) is shown as not available; a run whose log is
missing or incomplete makes the report exit 1 with one line saying which.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (LOADED_CORES, ROOT, ReportError, arg_parser, flag,  # noqa: E402
                      fmt_bytes, fmt_ms, load_log, manifest_lines, median, model_name,
                      others_cores, output_paths, read_kv, run_command, run_main, save_fig,
                      setup_cores, shown, table, write_report)

MODE_ORDER = ["serial", "lss", "lss-zigzag", "lss-fused", "lss-basic", "megatron", "megatron-2022", "ulysses",
              "ring", "ring-fast"]
MODE_STYLE = {          # colour, marker
    "serial": ("black", "s"), "lss": ("tab:blue", "o"), "lss-fused": ("tab:orange", "^"),
    "lss-basic": ("tab:green", "v"), "megatron": ("tab:red", "D"),
    "lss-zigzag": ("tab:purple", "P"), "ulysses": ("tab:brown", "X"), "ring": ("tab:gray", "*"),
    "ring-fast": ("tab:olive", "x"), "megatron-2022": ("tab:pink", "d"),
}

# The LSS paper's ratios of its baseline (Nvidia sequence parallelism, our megatron-2022)
# to LSS, at the largest scale both ran (its Table 3, 36 GPUs, T 2088: 10.29 GB against
# 1.01 GB per GPU, 32 against 189 x 10^12 FLOP/s); the abstract's 5.6x is its Table 4's
# (144 GPUs, 4 data-parallel groups). Only LSS is in the paper's comparison.
PAPER_RATIO = {"lss": ("10.2×", "5.9×")}


def layer_sums(layer):
    calls = sum(v["calls"] for v in layer.values())
    nbytes = sum(v["bytes"] for v in layer.values())
    return calls, nbytes


def load_run(results, name, root):
    """One run's figures from its log and its meta file."""
    res = {"name": name, "command": run_command(results, name, root)}
    meta, cfg, steps = load_log(results, name)
    later = steps[1:]
    per_layer = []
    for r in later:
        layers = r.get("comm", {}).get("layers", {})
        per_layer.append(layer_sums(layers["0"]) if "0" in layers else (0, 0))
    total_bytes = [sum(v["bytes"] for k, v in r.get("comm", {}).items() if k != "layers") for r in later]
    layers_bytes = [sum(layer_sums(l)[1] for l in r.get("comm", {}).get("layers", {}).values()) for r in later]
    kinds = {}
    for k, v in later[-1].get("comm", {}).items():
        if k != "layers":
            kinds[k] = {"calls": v["calls"], "bytes": v["bytes"]}
    # the busiest rank's compute and the largest rank's peak RSS (step records of newer
    # builds); older logs lack them and fall back below
    busiest = [r["compute_ms_max"] for r in later if "compute_ms_max" in r]
    rss_max = [r["peak_rss_mb_max"] for r in steps if "peak_rss_mb_max" in r]
    compute_rank0 = median([r["step_ms"] - r.get("comm_ms", 0.0) for r in later])
    compute_busiest = median(busiest) if len(busiest) == len(later) else None
    # busiest ÷ mean per step (newer builds log the mean over the ranks); None: not logged
    spread = [r["compute_ms_max"] / r["compute_ms_mean"] for r in later
              if r.get("compute_ms_mean", 0) > 0 and "compute_ms_max" in r]
    balance = median(spread) if later and len(spread) == len(later) else None
    peak_rank0 = max(r["peak_rss_mb"] for r in steps)
    time_rss = (int(meta["max_rss_kb"]) / 1024.0) if meta.get("max_rss_kb", "0") not in ("", "0") else None
    if len(rss_max) == len(steps):
        peak_largest, rss_src = max(rss_max), "log"
    elif time_rss is not None:
        peak_largest, rss_src = time_rss, "time"
    else:
        peak_largest, rss_src = peak_rank0, "rank0"
    wall_s, others = others_cores(meta)
    # the efficiency columns: model FLOP/s over all ranks (the config's flops_per_token,
    # the same useful work whatever the layout: no recomputation, no masked products),
    # the time outside the busiest rank's compute (communication) and the busiest rank's
    # compute beyond rank 0's (waiting for it)
    fpt = cfg.get("flops_per_token")
    comm_only = [r["step_ms"] - r["compute_ms_max"] for r in later if "compute_ms_max" in r]
    wait = [max(0.0, r["compute_ms_max"] - (r["step_ms"] - r.get("comm_ms", 0.0)))  # 0.001 ms rounding
            for r in later if "compute_ms_max" in r]
    attn_peak = [max(r.get("mem_peak_bytes", {}).get(k, 0) for k in ("attn_fwd", "attn_bwd")) for r in steps]
    res.update({
        "flops_s": fpt * median([r["tokens_per_s"] for r in later]) if fpt else None,
        "comm_only_ms": median(comm_only) if len(comm_only) == len(later) else None,
        "wait_ms": median(wait) if len(wait) == len(later) else None,
        "attn_peak_bytes": max(attn_peak) if attn_peak else 0,
    })
    res.update({
        "params": cfg.get("params"),
        "layout": cfg.get("layout"),
        "world": cfg.get("world"),
        "n_layer": cfg.get("model", {}).get("n_layer"),
        "d": cfg.get("model", {}).get("d"),
        "steps": len(steps),
        "coll_per_layer": median([c for c, _ in per_layer]),
        "coll_per_layer_varies": len(set(per_layer)) > 1,
        "layer_bytes": median([b for _, b in per_layer]),
        "layers_bytes": median(layers_bytes),
        "bytes_step": median(total_bytes),
        "kinds": kinds,
        "compute_busiest_ms": compute_busiest,
        "busiest_over_mean": balance,
        "compute_rank0_ms": compute_rank0,
        "compute_ms": compute_rank0,        # what the tables and plots use; set in main()
        "comm_ms": median([r.get("comm_ms", 0.0) for r in later]),
        "wall_ms": median([r["step_ms"] for r in later]),
        "tokens_per_s": median([r["tokens_per_s"] for r in later]),
        "step_ms_all": [r["step_ms"] for r in steps],
        "peak_rss_mb": peak_rank0,
        "peak_rss_largest_mb": peak_largest,
        "peak_rss_largest_src": rss_src,   # log (peak_rss_mb_max), time (GNU time), rank0
        "max_rss_any_mb": time_rss,
        "run_wall_s": wall_s,
        "others_cores": others,
    })
    return res


def load_manifest(results):
    rows = []
    for f in manifest_lines(results, "bench/sp_scaling.sh", 6):
        rows.append({"sweep": f[0], "N": int(f[1]), "T": int(f[2]), "mode": f[3], "name": f[4], "status": f[5]})
    return rows


# ---- formatting -------------------------------------------------------------------

def fmt_mb(x):
    return "—" if x is None else "%.0f" % x


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return "%.2f×" % (a / b)


def fmt_int(x):
    if x is None:
        return "—"
    return "%g" % x


def mode_key(mode):
    return MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)


RSS_MARK = {"time": " §", "rank0": " ¶"}
RSS_RANK = ["log", "time", "rank0"]


def rss_best(runs):
    """The best source of the largest-rank RSS that any run has."""
    srcs = {x["peak_rss_largest_src"] for x in runs.values()}
    return next((s for s in RSS_RANK if s in srcs), "log")


def rss_largest(x, best):
    """The largest rank's peak RSS, marked when it comes from a fallback other runs did not need."""
    src = x["peak_rss_largest_src"]
    return fmt_mb(x["peak_rss_largest_mb"]) + (RSS_MARK.get(src, "") if src != best else "")


def compute_heads(busiest):
    """Column headings of the compute figures: the busiest rank's and rank 0's, or rank 0's alone;
    then the balance, busiest ÷ mean."""
    return (["compute ms (busiest rank)"] if busiest else []) + ["compute ms (rank 0)", "busiest ÷ mean"]


def compute_cells(x, busiest, over):
    """The compute figures under compute_heads, then busiest ÷ mean (— where not logged)."""
    cells = [fmt_ms(x["compute_busiest_ms"]) + over] if busiest else []
    b = x["busiest_over_mean"]
    return cells + [fmt_ms(x["compute_rank0_ms"]) + over, "—" if b is None else "%.2f" % b]


def weak_table(rows, runs, cores, busiest):
    serial = next((runs[r["name"]] for r in rows if r["N"] == 1 and r["status"] == "ok"), None)
    best = rss_best(runs)
    ch = compute_heads(busiest)
    head = (["N", "T", "mode", "collectives / layer", "bytes / layer", "bytes / step"] + ch
            + ["compute vs N=1" + (" (busiest rank)" if busiest else ""), "comm ms (rank 0)", "wall ms",
               "tokens/s", "peak RSS MB (largest rank)", "peak RSS MB (rank 0)"])
    align = ["---:"] * 2 + ["---"] + ["---:"] * (len(head) - 3)
    body = []
    for r in sorted(rows, key=lambda r: (r["N"], mode_key(r["mode"]))):
        over = " ‡" if r["N"] > cores else ""
        if r["status"] != "ok":
            body.append([str(r["N"]), str(r["T"]), r["mode"], "not available"] + [""] * (len(head) - 4))
            continue
        x = runs[r["name"]]
        cpl = fmt_int(x["coll_per_layer"]) + ("*" if x["coll_per_layer_varies"] else "")
        body.append([str(r["N"]), str(r["T"]), r["mode"], cpl, fmt_bytes(x["layer_bytes"]),
                     fmt_bytes(x["bytes_step"])] + compute_cells(x, busiest, over) + [
                     fmt_ratio(x["compute_ms"], serial["compute_ms"]) if serial else "—",
                     fmt_ms(x["comm_ms"]), fmt_ms(x["wall_ms"]) + over + flag(x),
                     "%.0f" % x["tokens_per_s"] + over, rss_largest(x, best), fmt_mb(x["peak_rss_mb"])])
    return table(head, align, body)


def mem_table(rows, runs, cores, busiest):
    serial_at = {r["T"]: runs[r["name"]] for r in rows if r["N"] == 1 and r["status"] == "ok"}
    best = rss_best(runs)
    head = (["T", "N", "mode", "peak RSS MB (largest rank)", "peak RSS MB (rank 0)",
             "largest-rank RSS vs serial at this T", "collectives / layer", "bytes / step"]
            + compute_heads(busiest) + ["comm ms (rank 0)", "wall ms", "speed-up vs serial at this T"])
    align = ["---:"] * 2 + ["---"] + ["---:"] * (len(head) - 3)
    body = []
    for r in sorted(rows, key=lambda r: (r["T"], r["N"], mode_key(r["mode"]))):
        over = " ‡" if r["N"] > cores else ""
        if r["status"] != "ok":
            body.append([str(r["T"]), str(r["N"]), r["mode"], "not available"] + [""] * (len(head) - 4))
            continue
        x = runs[r["name"]]
        s = serial_at.get(r["T"])
        body.append([str(r["T"]), str(r["N"]), r["mode"], rss_largest(x, best), fmt_mb(x["peak_rss_mb"]),
                     fmt_ratio(x["peak_rss_largest_mb"], s["peak_rss_largest_mb"]) if s and r["N"] > 1 else "—",
                     fmt_int(x["coll_per_layer"]), fmt_bytes(x["bytes_step"])]
                    + compute_cells(x, busiest, over) + [
                     fmt_ms(x["comm_ms"]), fmt_ms(x["wall_ms"]) + over + flag(x),
                     fmt_ratio(s["wall_ms"], x["wall_ms"]) if s and r["N"] > 1 else "—"])
    return table(head, align, body)


def megatron_ratios(rows, runs, busiest):
    """Ratios of each mode to megatron at the same (N, T); None when megatron never ran."""
    meg = {(r["N"], r["T"]): runs[r["name"]] for r in rows if r["mode"] == "megatron" and r["status"] == "ok"}
    if not meg:
        return None
    head = ["N", "T", "mode", "collectives / layer", "bytes / step",
            "compute ms (busiest rank)" if busiest else "compute ms (rank 0)", "comm ms (rank 0)", "wall ms",
            "peak RSS (largest rank)"]
    align = ["---:"] * 2 + ["---"] + ["---:"] * (len(head) - 3)
    body = []
    for r in sorted(rows, key=lambda r: (r["N"], r["T"], mode_key(r["mode"]))):
        m = meg.get((r["N"], r["T"]))
        if m is None or r["mode"] in ("megatron", "serial") or r["status"] != "ok":
            continue
        x = runs[r["name"]]
        body.append([str(r["N"]), str(r["T"]), r["mode"],
                     fmt_ratio(x["coll_per_layer"], m["coll_per_layer"]), fmt_ratio(x["bytes_step"], m["bytes_step"]),
                     fmt_ratio(x["compute_ms"], m["compute_ms"]), fmt_ratio(x["comm_ms"], m["comm_ms"]),
                     fmt_ratio(x["wall_ms"], m["wall_ms"]),
                     fmt_ratio(x["peak_rss_largest_mb"], m["peak_rss_largest_mb"])])
    return table(head, align, body)


def one_rank_rates(rows, runs, by_T):
    """The one-rank model FLOP/s each row is measured against: the serial run at the same T
    (by_T), else the sweep's N = 1 run."""
    serial = {r["T"]: runs[r["name"]]["flops_s"] for r in rows if r["N"] == 1 and r["status"] == "ok"}
    first = serial[min(serial)] if serial else None
    return lambda r: serial.get(r["T"]) if by_T else first


def efficiency_table(rows, runs, cores, by_T):
    """Aggregate model FLOP/s, parallel efficiency against N x the one-rank rate, and the step
    split into the busiest rank's compute, communication and waiting."""
    rate1 = one_rank_rates(rows, runs, by_T)
    head = ["N", "T", "mode", "model GFLOP/s (all ranks)", "one-rank GFLOP/s", "efficiency",
            "step ms", "compute ms (busiest rank)", "comm ms (step − busiest compute)",
            "wait ms (busiest − rank 0 compute)"]
    align = ["---:"] * 2 + ["---"] + ["---:"] * (len(head) - 3)
    body = []
    for r in sorted(rows, key=lambda r: (r["T"] if by_T else 0, r["N"], mode_key(r["mode"]))):
        if r["status"] != "ok":
            continue
        x, one, over = runs[r["name"]], rate1(r), " ‡" if r["N"] > cores else ""
        eff = x["flops_s"] / (r["N"] * one) if x["flops_s"] and one else None
        body.append([str(r["N"]), str(r["T"]), r["mode"],
                     "—" if x["flops_s"] is None else "%.2f" % (x["flops_s"] / 1e9),
                     "—" if one is None else "%.2f" % (one / 1e9),
                     "—" if eff is None else "%.0f%%%s" % (100 * eff, over),
                     fmt_ms(x["wall_ms"]) + over + flag(x), fmt_ms(x["compute_busiest_ms"]),
                     fmt_ms(x["comm_only_ms"]) + over, fmt_ms(x["wait_ms"])])
    return table(head, align, body)


def base_table(rows, runs, cores):
    """The LSS paper's comparison: every mode's peak memory and step time at each (T, N), and
    megatron-2022's ÷ the mode's (how many times less memory, how many times faster), the
    paper's ratio beside ours."""
    status = {(r["N"], r["T"], r["mode"]): r for r in rows}
    head = ["T", "N", "mode", "peak RSS MB (largest rank)", "attention peak MB (tracked)", "step ms",
            "compute ms (busiest rank)", "memory: megatron-2022 ÷ mode", "paper", "time: megatron-2022 ÷ mode",
            "paper"]
    align = ["---:"] * 2 + ["---"] + ["---:"] * (len(head) - 3)
    body = []
    for r in sorted(rows, key=lambda r: (r["T"], r["N"], mode_key(r["mode"]))):
        if r["N"] == 1:
            continue
        if r["status"] != "ok":
            what = "out of memory" if r["status"] == "oom" else "not available"
            body.append([str(r["T"]), str(r["N"]), r["mode"], what] + [""] * (len(head) - 4))
            continue
        x, over = runs[r["name"]], " ‡" if r["N"] > cores else ""
        b = status.get((r["N"], r["T"], "megatron-2022"))
        base = runs[b["name"]] if b and b["status"] == "ok" else None
        mine = r["mode"] == "megatron-2022"
        paper = PAPER_RATIO.get(r["mode"], ("—", "—"))
        body.append([str(r["T"]), str(r["N"]), r["mode"], fmt_mb(x["peak_rss_largest_mb"]),
                     "%.1f" % (x["attn_peak_bytes"] / 1e6) if x["attn_peak_bytes"] else "—",
                     fmt_ms(x["wall_ms"]) + over + flag(x), fmt_ms(x["compute_busiest_ms"]),
                     "—" if mine or not base else fmt_ratio(base["peak_rss_largest_mb"], x["peak_rss_largest_mb"]),
                     paper[0], "—" if mine or not base else fmt_ratio(base["wall_ms"], x["wall_ms"]) + over,
                     paper[1]])
    return table(head, align, body)


# ---- plots --------------------------------------------------------------------------

def series(rows, runs, mode, xkey, include_serial):
    """(x, run) pairs of one mode, sorted by x; the serial run starts every mode's line."""
    pts = []
    for r in rows:
        if r["status"] != "ok":
            continue
        if r["mode"] == mode or (include_serial and r["N"] == 1):
            pts.append((r[xkey], runs[r["name"]]))
    return sorted(pts, key=lambda p: p[0])


def plot_weak(rows, runs, cores, path, title, busiest):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = sorted({r["mode"] for r in rows if r["N"] > 1}, key=mode_key)
    ns = sorted({r["N"] for r in rows})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    fig.subplots_adjust(wspace=0.32)
    panels = [("peak_rss_largest_mb", None, "peak RSS per rank (MB, largest rank)"),
              ("compute_ms", "compute_rank0_ms" if busiest else None,
               "compute per step, busiest rank (ms)\n= step_ms - comm_ms; dotted: rank 0's" if busiest
               else "compute per step, rank 0 (ms)\n= step_ms - comm_ms"),
              ("wall_ms", "comm_ms", "step time (ms); dotted: rank 0's time\nin collectives, waiting included")]
    for ax, (key, key2, label) in zip(axes, panels):
        for mode in modes:
            pts = series(rows, runs, mode, "N", include_serial=True)
            if not any(n > 1 for n, _ in pts):
                continue
            col, mk = MODE_STYLE.get(mode, ("gray", "x"))
            ax.plot([n for n, _ in pts], [x[key] for _, x in pts], marker=mk, color=col, label=mode)
            if key2:
                ax.plot([n for n, _ in pts], [x[key2] for _, x in pts], marker=mk, color=col,
                        linestyle=":", alpha=0.7, markerfacecolor="none")
        na = [r["mode"] for r in rows if r["status"] == "na"]
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels(["%d\nT=%d" % (n, next(r["T"] for r in rows if r["N"] == n)) for n in ns])
        ax.set_xlabel("ranks N (sequence length T)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if any(n > cores for n in ns):
            lo = min(n for n in ns if n > cores)
            ax.axvspan(lo / 2 ** 0.5, max(ns) * 2 ** 0.5, color="0.9", zorder=0)
            ax.text(lo, 0.02, "ranks > %d cores:\ntime-shared" % cores, transform=ax.get_xaxis_transform(),
                    va="bottom", ha="center", fontsize=8, color="0.35")
        ax.set_xlim(min(ns) / 2 ** 0.5, max(ns) * 2 ** 0.5)
    axes[0].legend(title="mode (N=1: serial)", fontsize=8)
    if na:
        fig.text(0.5, -0.02, "not available in this build: " + ", ".join(sorted(set(na), key=mode_key)),
                 ha="center", fontsize=9)
    fig.suptitle(title)
    save_fig(fig, path)
    plt.close(fig)


def plot_mem(rows, runs, cores, path, title, busiest, logy=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = sorted({r["mode"] for r in rows}, key=mode_key)
    ts = sorted({r["T"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    fig.subplots_adjust(wspace=0.28)
    for ax, (key, key2, label) in zip(axes, [
            ("peak_rss_largest_mb", None, "peak RSS per rank (MB, largest rank)"),
            ("wall_ms", "compute_ms", "step time (ms); dotted: %s compute"
             % ("the busiest rank's" if busiest else "rank 0's"))]):
        for mode in modes:
            pts = series(rows, runs, mode, "T", include_serial=False)
            if not pts:
                continue
            n = next(r["N"] for r in rows if r["mode"] == mode)
            col, mk = MODE_STYLE.get(mode, ("gray", "x"))
            lab = "serial (1 process)" if mode == "serial" else "%s, N=%d" % (mode, n)
            ax.plot([t for t, _ in pts], [x[key] for _, x in pts], marker=mk, color=col, label=lab,
                    linestyle="--" if mode == "serial" else "-")
            if key2 and mode != "serial":
                ax.plot([t for t, _ in pts], [x[key2] for _, x in pts], marker=mk, color=col,
                        linestyle=":", alpha=0.7, markerfacecolor="none")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ts)
        ax.set_xticklabels([str(t) for t in ts])
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(label)
        if logy:    # the baseline's T² terms: a linear axis would flatten every other mode
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3, which="both" if logy else "major")
    axes[0].legend(fontsize=8)
    na = sorted({r["mode"] for r in rows if r["status"] == "na"}, key=mode_key)
    if na:
        fig.text(0.5, -0.02, "not available in this build: " + ", ".join(na), ha="center", fontsize=9)
    fig.suptitle(title)
    save_fig(fig, path)
    plt.close(fig)


# ---- main ---------------------------------------------------------------------------

def main():
    a = arg_parser(__doc__, "bench/results/sp").parse_args()
    root = ROOT
    results, md_path, json_path = output_paths(a)

    rows = load_manifest(results)
    setup = read_kv(os.path.join(results, "setup.txt"))
    cores = setup_cores(setup)
    runs = {}
    for r in rows:
        if r["status"] == "ok" and r["name"] not in runs:
            runs[r["name"]] = load_run(results, r["name"], root)
        elif r["status"] not in ("ok", "na", "oom"):
            raise ReportError("manifest.tsv: %s: unknown status %r" % (r["name"], r["status"]))
    weak = [r for r in rows if r["sweep"] == "weak"]
    mem = [r for r in rows if r["sweep"] == "mem"]
    base = [r for r in rows if r["sweep"] == "base"]
    any_run = next(iter(runs.values()), None)
    # The busiest rank's compute when every log has it (compute_ms_max), else rank 0's
    # throughout: one column never mixes the two.
    lacking = sorted(n for n, x in runs.items() if x["compute_busiest_ms"] is None)
    busiest = bool(runs) and not lacking
    for x in runs.values():
        x["compute_ms"] = x["compute_busiest_ms"] if busiest else x["compute_rank0_ms"]
        x["compute_ms_of"] = "busiest rank" if busiest else "rank 0"
    best = rss_best(runs)
    fallback = sorted({x["peak_rss_largest_src"] for x in runs.values()} - {best}, key=RSS_RANK.index)

    model = model_name(setup)
    md = ["## Sequence parallelism: weak scaling and memory per rank", ""]
    md.append("- Date: %s (UTC); tessera %s; %s cores; MPI: `%s`" % (
        setup.get("date", "?"), setup.get("rev", "?"), cores, setup.get("mpiexec", "?")))
    if any_run:
        md.append("- Model: `%s` (d %s, %s layers), batch 1, `--threads %s` per rank; %s steps per run, "
                  "every figure the median over steps 2..%s" % (
                      model, any_run["d"], any_run["n_layer"], setup.get("threads", "?"),
                      setup.get("steps", "?"), setup.get("steps", "?")))
    md.append("- Counts are rank 0's, per optimizer step; *collectives / layer* are the calls counted "
              "under layer 0 (forward + backward); *bytes* are sent + received by rank 0; *bytes / step* "
              "includes the gradient all-reduce and the loss all-gather. A rank's compute is its "
              "`step_ms - comm_ms`; *comm ms* is rank 0's `comm_ms`, which includes waiting for the "
              "slowest rank.")
    if busiest:
        md.append("- *compute ms (busiest rank)* is, in each step, the largest compute of any rank (the "
                  "log's `compute_ms_max`), then the median over the steps; *compute ms (rank 0)* is rank "
                  "0's own. Every rank waits for the others in the step's collectives, so the busiest "
                  "rank bounds the step: *compute vs N=1*, the ratios to megatron and the compute in the "
                  "plots are the busiest rank's.")
    else:
        md.append("- %s lack `compute_ms_max` (written by an older tessera), so every compute figure "
                  "is rank 0's, in the ratios and the plots too. Under the LSS modes rank 0 is the "
                  "lightest rank, so this understates the compute of the busiest rank, which bounds the "
                  "step; a rerun with a newer build reports the busiest rank." % (
                      "These run logs" if len(lacking) == len(runs)
                      else "%d of the %d run logs (%s)" % (len(lacking), len(runs), ", ".join(lacking))))
    nobal = sorted(n for n, x in runs.items() if x["busiest_over_mean"] is None)
    md.append("- *busiest ÷ mean* is, in each step, the busiest rank's compute over the mean of all "
              "ranks' (the log's `compute_ms_max / compute_ms_mean`), then the median over the steps: "
              "1.00 when every rank computes alike.%s" % (
                  "" if not nobal else " — where the log lacks `compute_ms_mean` (written by an older "
                  "tessera): %s." % ("all of these runs" if len(nobal) == len(runs)
                                     else ", ".join(nobal))))
    md.append("- Rank 0 holds the first segment of the sequence. Under the LSS modes causal attention "
              "gives it the least attention work (its queries see the fewest keys), so its compute is "
              "the lightest rank's and its `comm_ms` is mostly waiting for the heavier ranks; the wall "
              "time (rank 0's `step_ms`, that wait included) is the slowest rank's. megatron splits "
              "heads, not positions, so its ranks are balanced and rank 0 stands for all of them.")
    rss_from = {
        "log": "from the log's `peak_rss_mb_max`",
        "time": "from GNU time's maximum resident set size of the run's largest process (these logs predate "
                "`peak_rss_mb_max`)",
        "rank0": "here rank 0's, as neither `peak_rss_mb_max` nor GNU time's figure was recorded",
    }
    rss_mark_why = {
        "time": "GNU time's maximum resident set size, as this run's log lacks `peak_rss_mb_max`",
        "rank0": "rank 0's, as this run recorded no larger-rank figure",
    }
    md.append("- *peak RSS MB (largest rank)* is the largest peak resident set size of any rank, %s; "
              "*peak RSS MB (rank 0)* is rank 0's own. The RSS ratios and the memory plots use the "
              "largest rank.%s" % (rss_from[best], "".join(
                  " %s: %s." % (RSS_MARK[f].strip(), rss_mark_why[f]) for f in fallback)))
    md.append("- ‡ more ranks than the %d cores: ranks share cores and waiting ranks busy-poll, so this "
              "time measures the scheduler as much as tessera; † other processes took > %.1f cores "
              "on average during the run." % (cores, LOADED_CORES))
    md.append("- Efficiency tables: *model GFLOP/s* is the config's `flops_per_token` × the step's "
              "tokens/s, the useful work of the model over all ranks (a layout's recomputation and "
              "masked products are not counted, so every layout is credited with the same work); "
              "*efficiency* is that rate over N × the one-rank rate (the serial run: at the same T in "
              "the baseline sweep, the N = 1 run in the weak sweep), as the LSS paper's tables put "
              "it. The step splits into the busiest rank's compute, *comm* = step − busiest compute "
              "(time in collectives that no rank's compute covers) and *wait* = busiest − rank 0's "
              "compute (rank 0's time waiting for the busiest rank inside the collectives). Caveat, "
              "once for every table: with more ranks than cores (‡) the ranks share cores, so "
              "compute, comm and wait there are the scheduler's split of the cores, and an "
              "efficiency far below 100%% says the cores were shared, not that the layout is slow; "
              "compare bytes and memory there instead.")
    md.append("")
    summary = {"setup": setup, "runs": runs, "manifest": rows}
    if weak:
        md += ["### Weak scaling (T = %d × N)" % min(r["T"] for r in weak if r["N"] == min(x["N"] for x in weak)), ""]
        md += weak_table(weak, runs, cores, busiest)
        md.append("")
        rat = megatron_ratios(weak, runs, busiest)
        if rat:
            md += ["Ratios to megatron at the same N and T (below 1 = less than megatron):", ""] + rat + [""]
        else:
            md += ["megatron: not available in this build, so no ratios to it.", ""]
    if mem:
        nmem = max(r["N"] for r in mem)
        md += ["### Memory per rank as T grows (N = %d)" % nmem, ""]
        md += mem_table(mem, runs, cores, busiest)
        md.append("")
        rat = megatron_ratios(mem, runs, busiest)
        if rat:
            md += ["Ratios to megatron at the same N and T:", ""] + rat + [""]
        else:
            md += ["megatron: not available in this build, so no ratios to it.", ""]
    if weak:
        md += ["### Weak scaling: parallel efficiency", ""] + efficiency_table(weak, runs, cores, False) + [""]
    if base:
        md += ["### The LSS paper's comparison with its baseline (megatron-2022)", ""]
        md += base_table(base, runs, cores) + [""]
        md += ["Parallel efficiency at each T (one-rank rate: the serial run at that T):", ""]
        md += efficiency_table(base, runs, cores, True) + [""]
    md += ["### Commands", "", "```sh"]
    seen = set()
    for r in rows:
        if r["status"] == "ok" and r["name"] not in seen:
            seen.add(r["name"])
            md.append(runs[r["name"]]["command"])
        elif r["status"] in ("na", "oom") and r["name"] not in seen:
            seen.add(r["name"])
            md.append(run_command(results, r["name"], root) + (
                "   # exit 2: not available" if r["status"] == "na" else "   # exit 1: out of memory"))
    md += ["```", ""]

    if not a.no_plots:
        if weak:
            p = os.path.join(a.img_dir, "sp_weak_scaling.png")
            plot_weak(weak, runs, cores, p, "tessera sequence parallelism, weak scaling: %s, T = %d·N" % (
                model, min(r["T"] for r in weak)), busiest)
            md.append("Plot: `%s`" % shown(p, root))
        if mem:
            p = os.path.join(a.img_dir, "sp_memory_vs_T.png")
            plot_mem(mem, runs, cores, p, "tessera: peak memory per rank vs sequence length, %s" % model, busiest)
            md.append("Plot: `%s`" % shown(p, root))
        # the base sweep at each N that ran more than one T, beside the serial runs
        for n in sorted({r["N"] for r in base if r["N"] > 1}):
            if len({r["T"] for r in base if r["N"] == n and r["status"] == "ok"}) < 2:
                continue
            p = os.path.join(a.img_dir, "sp_base_n%d.png" % n)
            plot_mem([r for r in base if r["N"] in (1, n)], runs, cores, p,
                     "the LSS paper's baseline (megatron-2022) against tessera's modes: %s, N = %d"
                     % (model, n), True, logy=True)
            md.append("Plot: `%s`" % shown(p, root))
        md.append("")

    write_report(md, md_path, summary, json_path)
    return 0


if __name__ == "__main__":
    run_main(main, "bench/sp_report.py")
