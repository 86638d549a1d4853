#!/usr/bin/python3
"""Tables and a plot of bench/maxlen.sh: peak memory per rank as T grows for the serial
run and each sequence-parallel strategy (memory options on), the fits, the predicted
longest trainable T on this machine, communication per layer, step time relative to
ulysses, and eager PyTorch's peak memory and predicted longest T for the same model.

    /usr/bin/python3 bench/maxlen_report.py --results bench/results/maxlen --img-dir docs/img

Reads RESULTS/manifest.tsv and the files it names, prints markdown, writes the same text
to RESULTS/report.md, the numbers to RESULTS/summary.json and the plot to
IMG_DIR/maxlen_memory.png (every file to a temporary name first, then renamed).

Memory. The fitted figure is the one-step peak: the largest rank's peak RSS at the end of
the first step (the run log's peak_rss_mb_max of step 1; ru_maxrss only grows, so it covers
start-up and one whole step), i.e. "one full step fits". Each process's lifetime peak
(GNU time around every rank, RESULTS/NAME.rankR.rss: all steps and the final evaluation)
and the sum over the ranks are shown beside it, and the optional growth runs show whether
the peak grows from step to step. "Fits" means the SUM over the ranks of their peaks stays
within the usable memory, (1 - --margin) x MemTotal: the N-rank prediction solves
N x (a + b·T) = usable with a + b·T fitted to the largest rank; the serial and PyTorch
predictions solve their one process's fit = usable. tessera is fitted with a + b·T (its
activations are linear in T), PyTorch with a + b·T + c·T² (it keeps T×T attention
scores). The predicted T is rounded down to the nearest T the layout accepts.

Times: the median over the steps after the first; with more ranks than cores they measure
the scheduler as much as tessera (‡), and a run during which other processes took more
than 0.1 cores on average is marked †.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (LOADED_CORES, ReportError, fmt_bytes, fmt_ms, median,  # noqa: E402
                      read, read_kv, save_fig, table)

MIB = 1024.0 * 1024.0
MODE_ORDER = ["serial", "lss", "lss-fused", "lss-basic", "ulysses", "upipe", "ring", "pytorch"]
MODE_STYLE = {   # colour, marker
    "serial": ("black", "s"), "lss": ("tab:blue", "o"), "lss-fused": ("tab:cyan", "<"),
    "lss-basic": ("tab:olive", ">"), "ulysses": ("tab:green", "^"), "upipe": ("tab:purple", "v"),
    "ring": ("tab:orange", "D"), "pytorch": ("tab:red", "P"),
}





def base_mode(mode):
    return mode.split("-u")[0] if mode.startswith("upipe") else mode


def mode_key(mode):
    b = base_mode(mode)
    return (MODE_ORDER.index(b) if b in MODE_ORDER else len(MODE_ORDER), mode)


def others_cores(meta):
    wall = float(meta.get("wall_s", 0) or 0)
    if wall <= 0 or "machine_busy_s" not in meta or "own_cpu_s" not in meta:
        return None
    return round(max(0.0, float(meta["machine_busy_s"]) - float(meta["own_cpu_s"])) / wall, 2)


def load_manifest(results):
    text = read(os.path.join(results, "manifest.tsv"))
    if text is None:
        raise ReportError("%s/manifest.tsv: missing (run bench/maxlen.sh first)" % results)
    rows = []
    for line in text.splitlines()[1:]:
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) != 6:
            raise ReportError("manifest.tsv: bad line %r" % line)
        rows.append({"kind": f[0], "N": int(f[1]), "T": int(f[2]), "mode": f[3], "name": f[4], "status": f[5]})
    return rows


def load_tessera(results, row, root):
    name = row["name"]
    base = os.path.join(results, name)
    meta = read_kv(base + ".meta")
    if meta.get("rc", "0") != "0":
        raise ReportError("%s: exit status %s" % (name, meta.get("rc")))
    text = read(base + ".jsonl")
    if text is None:
        raise ReportError("%s: no run log (%s.jsonl)" % (name, base))
    try:
        recs = [json.loads(l) for l in text.splitlines() if l.strip()]
    except ValueError as e:
        raise ReportError("%s: unreadable run log: %s" % (name, e))
    cfg = next((r for r in recs if r.get("type") == "config"), None)
    steps = [r for r in recs if r.get("type") == "step"]
    if cfg is None or len(steps) < 2 or not any(r.get("type") == "final" for r in recs):
        raise ReportError("%s: incomplete run log (%d step records, need 2 or more and a final record)"
                          % (name, len(steps)))
    ranks = {}
    for p in glob.glob(base + ".rank*.rss"):
        m = re.search(r"\.rank(\d+)\.rss$", p)
        txt = (read(p, "") or "").split()
        if m and txt:
            ranks[int(m.group(1))] = int(txt[-1]) / 1024.0
    if sorted(ranks) != list(range(row["N"])):
        raise ReportError("%s: per-rank RSS files for ranks %s, expected 0..%d" % (name, sorted(ranks), row["N"] - 1))
    later = steps[1:]
    layer0 = []
    for r in later:
        lay = r.get("comm", {}).get("layers", {}).get("0", {})
        layer0.append((sum(v["calls"] for v in lay.values()), sum(v["bytes"] for v in lay.values()),
                       {k: v["bytes"] for k, v in lay.items()}))
    step_bytes = [sum(v["bytes"] for k, v in r.get("comm", {}).items() if k != "layers") for r in later]
    mem_peak = {}
    for r in steps:
        for k, v in (r.get("mem_peak_bytes") or {}).items():
            mem_peak[k] = max(mem_peak.get(k, 0), v)
    model = cfg.get("model", {})
    return {
        "name": name, "kind": row["kind"], "mode": row["mode"], "N": row["N"], "T": row["T"],
        "command": (read(base + ".cmd", "") or "").strip(),
        "params": cfg.get("params"), "d": model.get("d"), "n_layer": model.get("n_layer"),
        "n_head": model.get("n_head"), "d_ff": model.get("d_ff"), "vocab": model.get("vocab"),
        "tile": model.get("tile"), "leaf": model.get("leaf"), "threads": model.get("threads"),
        "memory_flags": [f for f in ("checkpoint", "fused_ce", "tiled_mlp") if model.get(f)],
        "rank_rss_mb": [ranks[i] for i in range(row["N"])],
        "rss_max_mb": max(ranks.values()),
        "rss_sum_mb": sum(ranks.values()),
        # after step s the log's peaks cover start-up and s whole steps (ru_maxrss only grows)
        "step_rss_max_mb": [r.get("peak_rss_mb_max", r["peak_rss_mb"]) for r in steps],
        "step_rss_rank0_mb": [r["peak_rss_mb"] for r in steps],
        "one_step_mb": steps[0].get("peak_rss_mb_max", steps[0]["peak_rss_mb"]),
        "one_step_rank0_mb": steps[0]["peak_rss_mb"],
        "layers_bytes_step": median([sum(sum(v["bytes"] for v in lay.values())
                                         for lay in r.get("comm", {}).get("layers", {}).values()) for r in later]),
        "attn_mem_peak_bytes": mem_peak or None,
        "layer_calls": median([c for c, _, _ in layer0]),
        "layer_bytes": median([b for _, b, _ in layer0]),
        "layer_kinds": layer0[-1][2],
        "step_bytes": median(step_bytes),
        "step_ms": median([r["step_ms"] for r in later]),
        "comm_ms": median([r.get("comm_ms", 0.0) for r in later]),
        "compute_ms_max": median([r["compute_ms_max"] for r in later]) if all("compute_ms_max" in r for r in later)
        else None,
        "step_ms_all": [r["step_ms"] for r in steps],
        "run_wall_s": float(meta.get("wall_s", 0) or 0),
        "others_cores": others_cores(meta),
    }


def load_torch(results, row):
    name = row["name"]
    base = os.path.join(results, name)
    meta = read_kv(base + ".meta")
    if meta.get("rc", "0") != "0":
        raise ReportError("%s: exit status %s" % (name, meta.get("rc")))
    text = (read(base + ".json", "") or "").strip().splitlines()
    try:
        j = json.loads(text[-1])
    except (ValueError, IndexError):
        raise ReportError("%s: no JSON line in %s.json" % (name, base))
    return {
        "name": name, "kind": "torch", "mode": "pytorch", "N": 1, "T": row["T"],
        "command": (read(base + ".cmd", "") or "").strip(),
        "params": j.get("params"), "torch": j.get("torch"), "threads": j.get("threads"),
        "rss_max_mb": j["peak_rss_mb"], "rss_sum_mb": j["peak_rss_mb"], "rank_rss_mb": [j["peak_rss_mb"]],
        "one_step_mb": j["peak_rss_mb"],
        "time_rss_mb": int(meta["max_rss_kb"]) / 1024.0 if meta.get("max_rss_kb", "0") not in ("", "0") else None,
        "step_ms": j["median_step_ms"], "step_ms_all": j["step_ms"],
        "run_wall_s": float(meta.get("wall_s", 0) or 0), "others_cores": others_cores(meta),
    }


def load_probe(results, row):
    base = os.path.join(results, row["name"])
    err = read(base + ".err", "") or ""
    m = re.search(r"needs about ([0-9.]+) GiB .* machine has ([0-9.]+) GiB", err)
    return {"name": row["name"], "N": row["N"], "T": row["T"], "status": row["status"],
            "command": (read(base + ".cmd", "") or "").strip(),
            "need_gib": float(m.group(1)) if m else None, "have_gib": float(m.group(2)) if m else None}


# ---- fits ---------------------------------------------------------------------------

def polyfit(xs, ys, deg):
    """Least squares y = sum c_k x^k (k = 0..deg), in units of x/1000 for conditioning;
    returns the coefficients in the units of x."""
    import numpy as np
    s = 1000.0
    x = np.asarray(xs, dtype=float) / s
    A = np.vander(x, deg + 1, increasing=True)
    c, *_ = np.linalg.lstsq(A, np.asarray(ys, dtype=float), rcond=None)
    return [float(c[k]) / s ** k for k in range(deg + 1)]


def poly(c, x):
    return sum(ck * x ** k for k, ck in enumerate(c))


def solve(c, y):
    """The x > 0 at which the fit reaches y (the larger root of a quadratic); None if never."""
    if len(c) == 2:
        return (y - c[0]) / c[1] if c[1] > 0 else None
    a0, b, q = c[0] - y, c[1], c[2]
    if q <= 0:
        return -a0 / b if b > 0 else None
    disc = b * b - 4 * q * a0
    return (-b + math.sqrt(disc)) / (2 * q) if disc >= 0 else None


def fit_series(pts, deg):
    """pts: [(T, y)]; returns the fit, its residuals and the relative residuals."""
    if len(pts) < deg + 1:
        return None
    c = polyfit([t for t, _ in pts], [y for _, y in pts], deg)
    res = [y - poly(c, t) for t, y in pts]
    return {"coef": c, "resid_mb": res, "max_abs_resid_mb": max(abs(r) for r in res),
            "max_rel_resid": max(abs(r) / y for r, (_, y) in zip(res, pts)),
            "dof": len(pts) - (deg + 1)}


def pow2_floor(x):
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def tile_leaf(T):
    tile = pow2_floor(max(1, min(64, T // 8)))
    leaf = max(tile, pow2_floor(max(1, min(256, T // 8))))
    return tile, leaf


def valid_T(T, N):
    """The exactness layout rules of src/config/config.c and src/config/layout.c (default tile and leaf, batch 1)."""
    if T < 8:
        return False
    tile, leaf = tile_leaf(T)
    if T % tile or T % leaf:
        return False
    if N == 1:
        return True
    if T % N:
        return False
    tl = T // N
    if tl % tile or tl % leaf:
        return False
    return (tl // tile) & (tl // tile - 1) == 0 and (tl // leaf) & (tl // leaf - 1) == 0


def largest_valid(tmax, N):
    if tmax is None or tmax < 8:
        return None
    t = int(tmax)
    if N > 1:   # T/N must be a power of two number of leaves: only N x 2^k can pass
        t = N * pow2_floor(max(1, t // N))
        while t >= 8 and not valid_T(t, N):
            t //= 2
        return t if t >= 8 else None
    t -= t % 8
    while t >= 8 and not valid_T(t, N):
        t -= 8
    return t if t >= 8 else None


# ---- formatting ---------------------------------------------------------------------

def fmt_mb(x):
    return "—" if x is None else ("%.0f" % x if x >= 10 else "%.1f" % x)




def fmt_T(t):
    if t is None:
        return "—"
    t = int(t)
    if t >= 1024 and t % 1024 == 0:
        return "%d (%dK)" % (t, t // 1024)
    return "%d" % t


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return "%.2f×" % (a / b)



def label(mode, N):
    return "serial (1 process)" if mode == "serial" else ("PyTorch eager" if mode == "pytorch" else
                                                           "%s, N=%d" % (mode, N))


def tflag(x, cores):
    f = " ‡" if x.get("N", 1) > cores else ""
    if x.get("others_cores") is not None and x["others_cores"] > LOADED_CORES:
        f += " †"
    return f


# ---- plot ---------------------------------------------------------------------------


def plot(series, preds, usable_mb, N, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(9.5, 6))
    tmin = min(t for s in series.values() for t, _ in s["pts"])
    tmax_pred = max([p["T_cont"] for p in preds.values() if p.get("T_cont")] + [1])
    xs_hi = max(tmax_pred * 1.5, 4 * max(t for s in series.values() for t, _ in s["pts"]))
    for mode in sorted(series, key=mode_key):
        s = series[mode]
        col, mk = MODE_STYLE.get(base_mode(mode), ("gray", "x"))
        ts = [t for t, _ in s["pts"]]
        ax.plot(ts, [y for _, y in s["pts"]], linestyle="none", marker=mk, color=col,
                label=label(mode, s["N"]) + " (measured)")
        life = dict(s.get("lifetime") or [])
        if any(abs(life.get(t, y) - y) > 0.05 * y for t, y in s["pts"]):
            ax.plot(sorted(life), [life[t] for t in sorted(life)], linestyle="none", marker=mk, color=col,
                    markerfacecolor="none", markersize=9, label=label(mode, s["N"]) + ", lifetime peak")
        if s.get("fit"):
            x = np.geomspace(tmin / 1.3, xs_hi, 200)
            y = [poly(s["fit"]["coef"], v) for v in x]
            meas_hi = max(ts)
            ax.plot([v for v in x if v <= meas_hi], [yy for v, yy in zip(x, y) if v <= meas_hi], color=col,
                    linestyle="-" if mode != "serial" else "--", linewidth=1.2)
            ext = [(v, yy) for v, yy in zip(x, y) if v >= meas_hi and yy <= 2 * usable_mb]
            ax.plot([v for v, _ in ext], [yy for _, yy in ext], color=col, linestyle=":", linewidth=1.2)
        p = preds.get(mode)
        if p and p.get("T_cont"):
            budget = usable_mb if s["N"] == 1 else usable_mb / s["N"]
            ax.plot([p["T_cont"]], [budget], marker="|", markersize=16, color=col, markeredgewidth=2)
    ax.axhline(usable_mb, color="0.3", linestyle="-.", linewidth=1)
    ax.text(tmin / 1.25, usable_mb * 1.05, "usable memory, one process (%.1f GiB)" % (usable_mb / 1024),
            fontsize=8, color="0.3")
    ax.axhline(usable_mb / N, color="0.5", linestyle="-.", linewidth=1)
    ax.text(tmin / 1.25, usable_mb / N * 1.05, "per-rank budget, N=%d ranks sharing it (%.1f GiB)"
            % (N, usable_mb / N / 1024), fontsize=8, color="0.5")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(tmin / 1.3, xs_hi)
    ax.set_ylim(top=2.5 * usable_mb)
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("one-step peak RSS per process (MiB; N ranks: the largest rank)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title + "\nsolid: fit over the measured range; dotted: extrapolated; "
                 "bars: predicted longest T (where the fit meets its budget)", fontsize=10)
    save_fig(fig, path)
    plt.close(fig)


# ---- main ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="bench/results/maxlen")
    ap.add_argument("--img-dir", default="docs/img")
    ap.add_argument("--margin", type=float, default=0.15,
                    help="fraction of MemTotal kept free (the OS, page cache, other users) [0.15]")
    ap.add_argument("--md", help="markdown output (default RESULTS/report.md)")
    ap.add_argument("--json", help="summary output (default RESULTS/summary.json)")
    ap.add_argument("--no-plots", action="store_true")
    a = ap.parse_args()
    if not 0 <= a.margin < 1:
        ap.error("--margin must be in [0, 1)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results = os.path.abspath(a.results)
    md_path = a.md or os.path.join(results, "report.md")
    json_path = a.json or os.path.join(results, "summary.json")

    rows = load_manifest(results)
    setup = read_kv(os.path.join(results, "setup.txt"))
    cores = int(setup.get("cores") or os.cpu_count() or 1)
    mem_total_mb = int(setup["mem_total_kb"]) / 1024.0 if "mem_total_kb" in setup else None
    if mem_total_mb is None:
        raise ReportError("setup.txt: no mem_total_kb")
    usable_mb = (1 - a.margin) * mem_total_mb
    N = int(setup.get("n", "4"))
    runs, probes = [], []
    for r in rows:
        if r["kind"] in ("tessera", "growth"):
            runs.append(load_tessera(results, r, root))
        elif r["kind"] == "torch":
            runs.append(load_torch(results, r))
        elif r["kind"] == "probe":
            probes.append(load_probe(results, r))
        else:
            raise ReportError("manifest.tsv: unknown kind %r" % r["kind"])
    tess = [x for x in runs if x["kind"] == "tessera"]
    growth = [x for x in runs if x["kind"] == "growth"]
    torch_runs = sorted([x for x in runs if x["kind"] == "torch"], key=lambda x: x["T"])
    if not tess:
        raise ReportError("no tessera runs in the manifest")
    modes = sorted({x["mode"] for x in tess}, key=mode_key)
    by = {(x["mode"], x["T"]): x for x in tess}
    Ts = sorted({x["T"] for x in tess})
    x0 = tess[0]
    d, L, F, V = x0["d"], x0["n_layer"], x0["d_ff"], x0["vocab"]

    # fits and predictions
    series, preds = {}, {}
    for mode in modes:
        pts = sorted((x["T"], x["one_step_mb"]) for x in tess if x["mode"] == mode)
        n = next(x["N"] for x in tess if x["mode"] == mode)
        fit = fit_series(pts, 1)
        # the least rank's lifetime peak: for the head-parallel modes, whose ranks do the same
        # work, a rank whose peak did not grow from step to step (see the growth runs)
        fit0 = fit_series(sorted((x["T"], min(x["rank_rss_mb"])) for x in tess if x["mode"] == mode), 1)
        series[mode] = {"N": n, "pts": pts, "fit": fit,
                        "lifetime": sorted((x["T"], x["rss_max_mb"]) for x in tess if x["mode"] == mode)}
        p = {"N": n, "fit_max": fit, "fit_least": fit0}
        if fit:
            budget = usable_mb / n
            p["T_cont"] = solve(fit["coef"], budget)
            p["T_max"] = largest_valid(p["T_cont"], n)
            p["T_cont_least"] = solve(fit0["coef"], budget) if fit0 else None
            p["T_max_least"] = largest_valid(p["T_cont_least"], n)
            p["extrapolation"] = p["T_cont"] / max(t for t, _ in pts) if p["T_cont"] else None
            if p["T_max"]:
                p["rss_at_T_max_mb"] = poly(fit["coef"], p["T_max"])
                p["total_at_T_max_mb"] = n * p["rss_at_T_max_mb"]
        preds[mode] = p
    if torch_runs:
        pts = [(x["T"], x["rss_max_mb"]) for x in torch_runs]
        fit = fit_series(pts, 2) if len(pts) >= 3 else None
        series["pytorch"] = {"N": 1, "pts": pts, "fit": fit}
        p = {"N": 1, "fit_max": fit}
        if fit:
            p["T_cont"] = solve(fit["coef"], usable_mb)
            p["T_max"] = int(p["T_cont"]) // 64 * 64 if p["T_cont"] else None
            p["extrapolation"] = p["T_cont"] / max(t for t, _ in pts) if p["T_cont"] else None
            if p["T_max"]:
                p["rss_at_T_max_mb"] = p["total_at_T_max_mb"] = poly(fit["coef"], p["T_max"])
        preds["pytorch"] = p
    torch_max = preds.get("pytorch", {}).get("T_max")

    # tessera's own estimate: the refusal message of ts_model_create prints it (GiB, one
    # decimal); it is linear in T, so two refused probes give it at every T
    have_gib = next((p["have_gib"] for p in probes if p["have_gib"]), None)
    refused = sorted((p["T"], p["need_gib"]) for p in probes if p["need_gib"] is not None)
    est = None
    if len(refused) >= 2 and have_gib:
        (t1, g1), (t2, g2) = refused[0], refused[-1]
        if t2 > t1:
            beta = (g2 - g1) / (t2 - t1)
            alpha = g1 - beta * t1
            t_acc = (0.9 * have_gib - alpha) / beta if beta > 0 else None
            est = {"alpha_gib": alpha, "beta_gib_per_token": beta, "T_accept": t_acc,
                   "T_accept_valid": largest_valid(t_acc, 1), "at_T": {}}
            for x in tess:
                if x["N"] == 1:
                    est["at_T"][x["T"]] = {"estimate_gib": alpha + beta * x["T"], "measured_gib": x["one_step_mb"] / 1024}
            for p in probes:
                p["line_gib"] = alpha + beta * p["T"]

    # ---- markdown -------------------------------------------------------------------
    md = ["## Longest trainable sequence on this machine", ""]
    md.append("- Date: %s (UTC); tessera %s; %d cores; MemTotal %.1f GiB; MPI: `%s`" % (
        setup.get("date", "?"), setup.get("rev", "?"), cores, mem_total_mb / 1024, setup.get("mpiexec", "?")))
    md.append("- Model `%s` (d %d, %d layers, %d heads, d_ff %d, vocab %d; %.1f M parameters at T=%d, "
              "of which the position table is T×d), batch 1, `--checkpoint --fused-ce --tiled-mlp`; "
              "serial `--threads %s`, N = %d ranks `--threads %s` each; %s steps per run, times the median "
              "over steps 2..%s." % (setup.get("model", "?"), d, L, x0["n_head"], F, V, x0["params"] / 1e6,
                                     x0["T"], setup.get("serial_threads", "?"), N, setup.get("threads", "?"),
                                     setup.get("steps", "?"), setup.get("steps", "?")))
    md.append("- Usable memory: (1 − %.2f) × MemTotal = **%.1f GiB** (%.0f%% kept for the OS, the page cache "
              "and other users). One process may use all of it; N = %d ranks on this machine share it, so "
              "their per-rank budget is %.2f GiB and \"fits\" means the sum of the ranks' peaks stays under "
              "%.1f GiB." % (a.margin, usable_mb / 1024, 100 * a.margin, N, usable_mb / N / 1024,
                             usable_mb / 1024))
    md.append("- **One-step peak** (what is fitted, the criterion \"one full step fits\"): the largest rank's "
              "peak RSS after the first step, from the run log (`peak_rss_mb_max` of step 1; `ru_maxrss` "
              "only grows, so it covers start-up and one whole step). **Lifetime peak**: each process's "
              "maximum RSS over the whole run (%s steps and the final one-batch evaluation), from GNU time "
              "around every rank. RSS counts shared pages (libraries, MPI shared memory) once per rank, so "
              "sums over ranks are slight overestimates." % setup.get("steps", "?"))
    md.append("")

    # measured points
    md += ["### Measured peak memory per rank (MiB)", "",
           "One-step peak of the largest rank (fitted below):", ""]
    head = ["T"] + [label(m, preds[m]["N"]) for m in modes]
    body = [[str(t)] + [fmt_mb(by[(m, t)]["one_step_mb"]) if (m, t) in by else "—" for m in modes] for t in Ts]
    md += table(head, ["---:"] * len(head), body) + [""]
    md += ["Lifetime peak, largest rank / sum over the ranks (N × the one-step peak, for comparison):", ""]
    body = []
    for t in Ts:
        cells = [str(t)]
        for m in modes:
            x = by.get((m, t))
            if x is None:
                cells.append("—")
            elif x["N"] == 1:
                cells.append(fmt_mb(x["rss_max_mb"]))
            else:
                cells.append("%s / %s (%s)" % (fmt_mb(x["rss_max_mb"]), fmt_mb(x["rss_sum_mb"]),
                                               fmt_mb(x["N"] * x["one_step_mb"])))
        body.append(cells)
    md += table(head, ["---:"] * len(head), body) + [""]
    md.append("Lifetime peak of every rank (MiB, rank 0 first): " + "; ".join(
        "%s T=%d: %s" % (x["mode"], x["T"], ", ".join(fmt_mb(v) for v in x["rank_rss_mb"]))
        for x in sorted(tess, key=lambda x: (mode_key(x["mode"]), x["T"])) if x["N"] > 1) + ".")
    md.append("")
    grow = [(x, x["step_rss_max_mb"][-1] - x["step_rss_max_mb"][0]) for x in tess]
    grew = [(x, g) for x, g in grow if g > max(8.0, 0.02 * x["one_step_mb"])]
    if grew:
        md.append("Between the end of step 1 and the end of step %s the largest rank's peak grew in: %s; in the "
                  "other runs by at most %.0f MiB." % (
                      setup.get("steps", "?"), ", ".join("%s T=%d +%.0f MiB" % (x["mode"], x["T"], g)
                                                        for x, g in sorted(grew, key=lambda p: (mode_key(p[0]["mode"]), p[0]["T"]))),
                      max([g for x, g in grow if (x, g) not in grew] + [0.0])))
    else:
        md.append("From step 1 to step %s no run's largest-rank peak grew by more than %.0f MiB." % (
            setup.get("steps", "?"), max([g for _, g in grow] + [0.0])))
    md.append("")
    if any(x.get("attn_mem_peak_bytes") for x in tess):
        md += ["Attention block, tracked allocator (`mem_peak_bytes`, rank 0), MiB forward / backward, and in "
               "units of one local shard (T/N·d floats):", ""]
        hm = [m for m in modes if any(by.get((m, t), {}).get("attn_mem_peak_bytes") for t in Ts)]
        head = ["T"] + hm
        body = []
        for t in Ts:
            cells = [str(t)]
            for m in hm:
                x = by.get((m, t))
                mp = x.get("attn_mem_peak_bytes") if x else None
                if not mp:
                    cells.append("—")
                    continue
                shard = t / x["N"] * d * 4.0
                cells.append("%s / %s (%.2f / %.2f)" % (fmt_mb(mp.get("attn_fwd", 0) / MIB),
                                                       fmt_mb(mp.get("attn_bwd", 0) / MIB),
                                                       mp.get("attn_fwd", 0) / shard, mp.get("attn_bwd", 0) / shard))
            body.append(cells)
        md += table(head, ["---:"] * len(head), body) + [""]

    # fits and predictions
    md += ["### Fits and predicted longest T", ""]
    head = ["", "fit (MiB; T in tokens)", "largest residual", "budget", "predicted T (continuous)",
            "longest valid T", "× PyTorch's", "N × peak there", "extrapolated ×", "from the least rank's lifetime peaks"]
    body = []
    for m in modes + (["pytorch"] if "pytorch" in preds else []):
        p = preds[m]
        f = p.get("fit_max")
        if not f:
            body.append([label(m, p["N"]), "too few points"] + [""] * (len(head) - 2))
            continue
        c = f["coef"]
        ftxt = "%.1f + %.4f·T" % (c[0], c[1]) if len(c) == 2 else "%.1f + %.4f·T + %.3g·T²" % (c[0], c[1], c[2])
        res = "%.1f MiB (%.2f%%)%s" % (f["max_abs_resid_mb"], 100 * f["max_rel_resid"],
                                        "" if f["dof"] > 0 else ", exact fit")
        budget = usable_mb / p["N"]
        body.append([label(m, p["N"]), ftxt, res, "%.2f GiB" % (budget / 1024),
                     fmt_T(round(p["T_cont"])) if p.get("T_cont") else "—", "**%s**" % fmt_T(p.get("T_max")),
                     fmt_ratio(p.get("T_max"), torch_max) if m != "pytorch" else "1×",
                     "%.1f GiB" % (p["total_at_T_max_mb"] / 1024) if p.get("total_at_T_max_mb") else "—",
                     "%.0f×" % p["extrapolation"] if p.get("extrapolation") else "—",
                     "%s (%s; largest residual %.1f MiB)" % (
                         fmt_T(p.get("T_max_least")), fmt_T(round(p["T_cont_least"])) if p.get("T_cont_least") else "—",
                         p["fit_least"]["max_abs_resid_mb"]) if p["N"] > 1 and p.get("fit_least") else "—"])
    md += table(head, ["---"] + ["---:"] * (len(head) - 1), body) + [""]
    md.append("- *fit*: the one-step peak of the largest rank (one process: its peak; PyTorch: its peak over "
              "its %s steps) against T, least squares; tessera linear, PyTorch quadratic. *largest residual*: "
              "the largest distance of a measured point from the fit. *longest valid T*: the largest T at or "
              "below the prediction that the layout accepts (N = %d: T/N a power-of-two number of tiles and "
              "leaves, so T is a power of two; serial: a multiple of the leaf; PyTorch: a multiple of 64). "
              "*N × peak there*: the fit at that T times the ranks. *extrapolated ×*: the prediction over the "
              "longest T measured. *from the least rank's lifetime peaks*: the longest valid T (and the "
              "continuous prediction) from a fit of the smallest lifetime peak of any rank, the "
              "estimate for a strategy whose ranks do the same work when some of them grow from step to "
              "step and others do not (see the growth runs below)." % (setup.get("steps", "?"), N))
    md.append("- The slope b is, per token of the whole sequence, what one rank adds: the position table "
              "and its gradient and AdamW state (16·d = %d bytes a token, %.4f MiB, in the serial run; "
              "under sequence parallelism each rank holds only its segment's rows, 1/N of that) "
              "plus the rank's activations." % (16 * d, 16.0 * d / MIB))
    md.append("")

    # tessera's own estimate
    if probes:
        md += ["### tessera's own estimate (the refusal of `ts_model_create`, one process)", ""]
        head = ["probe", "printed estimate", "status"]
        body = [["serial T=%s" % fmt_T(p["T"]), "%.1f GiB" % p["need_gib"] if p["need_gib"] else "—", p["status"]]
                for p in probes]
        md += table(head, ["---", "---:", "---"], body) + [""]
        if est:
            md.append("- The estimate is linear in T; through the probes: %.3f GiB + %.2f KiB·T. The process "
                      "is refused above 90%% of %.1f GiB, i.e. above T ≈ %s (longest valid T there: %s)." % (
                          est["alpha_gib"], est["beta_gib_per_token"] * 2 ** 20, have_gib,
                          fmt_T(round(est["T_accept"])) if est["T_accept"] else "—", fmt_T(est["T_accept_valid"])))
            # the printed values are rounded to 0.05 GiB either way: the slope is well
            # determined by probes far apart, the intercept much less
            t1, t2 = refused[0][0], refused[-1][0]
            d_alpha = 0.05 * (t1 + t2) / (t2 - t1)
            sp = preds.get("serial", {})
            if sp.get("fit_max"):
                b_meas = sp["fit_max"]["coef"][1] * 1024   # KiB per token
                md.append("- Its slope, %.2f KiB a token, against the measured serial peaks' %.2f KiB a token "
                          "(%s); the intercept is only known to ±%.2f GiB from rounded printouts." % (
                              est["beta_gib_per_token"] * 2 ** 20, b_meas,
                              fmt_ratio(est["beta_gib_per_token"] * 2 ** 20, b_meas), d_alpha))
                tm = max(est["at_T"]) if est["at_T"] else None
                if tm:
                    v = est["at_T"][tm]
                    md.append("- At T = %d it estimates %.2f ± %.2f GiB; the process measured %.2f GiB." % (
                        tm, v["estimate_gib"], d_alpha, v["measured_gib"]))
                t90 = solve(sp["fit_max"]["coef"], 0.9 * have_gib * 1024)
                if t90 and est["T_accept"]:
                    md.append("- The measured fit reaches the same 90%% of the machine at T ≈ %s, so tessera's "
                              "own check admits %s of the T that would really fit there." % (
                                  fmt_T(round(t90)), fmt_ratio(est["T_accept"], t90)))
        md.append("- Under sequence parallelism each rank makes the same check for its own share of the work "
                  "against its share of the machine: the memory divided by the ranks on the machine "
                  "(src/model/params.c), so N ranks together are admitted up to 90% of it. N ranks were not probed "
                  "here: each needs the parameters' address space before the check, N times over.")
        md.append("")

    # memory growth from step to step
    if growth:
        gs = sorted(growth, key=lambda x: mode_key(x["mode"]))
        md += ["### Peak memory from step to step (T = %d, N = %d, %d steps)" % (
            gs[0]["T"], gs[0]["N"], len(gs[0]["step_rss_max_mb"])), ""]
        head = ["strategy", "largest rank after each step (MiB)", "growth per step, steps 2..%d"
                % len(gs[0]["step_rss_max_mb"]), "rank 0 after each step (MiB)",
                "bytes received per step by rank 0 in the layers' collectives (≈ half of sent + received)"]
        body = []
        for x in gs:
            ys = x["step_rss_max_mb"]
            g = polyfit(list(range(2, len(ys) + 1)), ys[1:], 1)[1] if len(ys) >= 3 else None
            g = 0.0 if g is not None and abs(g) < 0.05 else g   # no "-0.0"
            x["growth_mb_per_step"] = g
            body.append([label(x["mode"], x["N"]), ", ".join(fmt_mb(v) for v in ys),
                         "%+.1f MiB" % g if g is not None else "—",
                         ", ".join(fmt_mb(v) for v in x["step_rss_rank0_mb"]),
                         "%.1f MiB" % (x["layers_bytes_step"] / 2 / MIB)])
        md += table(head, ["---", "---", "---:", "---", "---:"], body) + [""]
        leak = [x for x in gs if x.get("growth_mb_per_step") and x["growth_mb_per_step"] > 1.0]
        if leak:
            md.append("- Growing from step to step: %s. A run of many steps then needs more than the "
                      "one-step peak fitted above, by about the growth per step times the steps." % ", ".join(
                          "%s (%+.1f MiB a step on its largest rank)" % (x["mode"], x["growth_mb_per_step"])
                          for x in leak))
        md.append("")

    # communication per layer
    tc = max((t for t in Ts if all((m, t) in by for m in modes)), default=None)
    if tc:
        md += ["### Communication per layer (T = %d, N = %d)" % (tc, N), ""]
        head = ["strategy", "collectives / layer", "bytes / layer (rank 0)", "in local shards (T/N·d·4 B)",
                "by kind", "bytes / step (rank 0)"]
        body = []
        for m in modes:
            x = by[(m, tc)]
            if x["N"] == 1:
                body.append([label(m, 1), "0", "0", "0", "—", "0"])
                continue
            shard = tc / x["N"] * d * 4.0
            kinds = ", ".join("%s %s" % (k, fmt_bytes(v)) for k, v in sorted(x["layer_kinds"].items()))
            body.append([label(m, x["N"]), "%g" % x["layer_calls"], fmt_bytes(x["layer_bytes"]),
                         "%.2f" % (x["layer_bytes"] / shard), kinds, fmt_bytes(x["step_bytes"])])
        md += table(head, ["---"] + ["---:"] * 3 + ["---", "---:"], body) + [""]
        md.append("- Bytes are rank 0's, sent + received, in one optimizer step under layer 0: forward, the "
                  "forward again that `--checkpoint` recomputes in backward, and backward. *bytes / step* "
                  "adds the gradient all-reduce and the loss all-gather (the same for every strategy).")
        scal = []
        for m in modes:
            if preds[m]["N"] == 1:
                continue
            pts = sorted((t, by[(m, t)]["layer_bytes"]) for t in Ts if (m, t) in by)
            if len(pts) > 1:
                scal.append("%s %.2f×" % (m, (pts[-1][1] / pts[0][1]) / (pts[-1][0] / pts[0][0])))
        if scal:
            md.append("- Bytes per layer grow linearly in T: from T = %d to %d the ratio (bytes ratio over T "
                      "ratio) is %s." % (Ts[0], Ts[-1], ", ".join(scal)))
        md.append("")

        # step time relative to ulysses
        ref = next((m for m in modes if m == "ulysses"), None)
        md += ["### Step time at T = %d relative to ulysses" % tc, ""]
        head = ["strategy", "step ms", "vs ulysses", "compute ms (busiest rank)", "vs ulysses",
                "comm ms (rank 0)", "other load (cores)"]
        body = []
        for m in modes:
            x = by[(m, tc)]
            r = by.get((ref, tc)) if ref else None
            fl = tflag(x, cores)
            comp = x["compute_ms_max"] if x["N"] > 1 else x["step_ms"]
            rcomp = r["compute_ms_max"] if r else None
            body.append([label(m, x["N"]), fmt_ms(x["step_ms"]) + fl, fmt_ratio(x["step_ms"], r["step_ms"] if r else None),
                         fmt_ms(comp) + fl, fmt_ratio(comp, rcomp), fmt_ms(x.get("comm_ms")) if x["N"] > 1 else "—",
                         "%.2f" % x["others_cores"] if x.get("others_cores") is not None else "—"])
        md += table(head, ["---"] + ["---:"] * (len(head) - 1), body) + [""]
        md.append("- ‡ N = %d ranks on %d cores: ranks share cores and waiting ranks busy-poll, so these times "
                  "measure the scheduler as much as tessera; the busiest rank's compute (`compute_ms_max`) "
                  "is the fairer comparison, and it is inflated by time-sharing too. The serial run has "
                  "the machine to itself (`--threads %s`), its compute is its step. † other processes took "
                  "more than %.1f cores on average during the run." % (
                      N, cores, setup.get("serial_threads", "?"), LOADED_CORES))
        md.append("")
        md += ["Step times (ms) at every T, and in brackets over ulysses's at that T:", ""]
        head = ["T"] + [label(m, preds[m]["N"]) for m in modes]

        def cell(m, t):
            x = by.get((m, t))
            if x is None:
                return "—"
            r = by.get((ref, t)) if ref else None
            rat = " (%s)" % fmt_ratio(x["step_ms"], r["step_ms"]) if r else ""
            return fmt_ms(x["step_ms"]) + rat + tflag(x, cores)
        body = [[str(t)] + [cell(m, t) for m in modes] for t in Ts]
        md += table(head, ["---:"] * len(head), body) + [""]

    if torch_runs:
        md += ["### PyTorch (eager, explicit T×T attention, %s threads, batch 1)" % torch_runs[0]["threads"], ""]
        head = ["T", "peak RSS MiB", "fit", "residual MiB", "step ms", "other load (cores)"]
        f = preds["pytorch"].get("fit_max")
        body = []
        for i, x in enumerate(torch_runs):
            body.append([str(x["T"]), fmt_mb(x["rss_max_mb"]),
                         fmt_mb(poly(f["coef"], x["T"])) if f else "—",
                         "%+.1f" % f["resid_mb"][i] if f else "—", fmt_ms(x["step_ms"]) + tflag(x, cores),
                         "%.2f" % x["others_cores"] if x.get("others_cores") is not None else "—"])
        md += table(head, ["---:"] * len(head), body) + [""]
        tes_at = {t: by[("serial", t)]["rss_max_mb"] for t in Ts if ("serial", t) in by}
        common = sorted(set(tes_at) & {x["T"] for x in torch_runs})
        if common:
            md.append("- At the same T, tessera serial (memory options on) over PyTorch: " + ", ".join(
                "T=%d %s" % (t, fmt_ratio(tes_at[t], next(x["rss_max_mb"] for x in torch_runs if x["T"] == t)))
                for t in common) + ".")
            md.append("")

    md += ["### Commands", "", "```sh"]
    for x in sorted(runs, key=lambda x: (x["kind"], x["T"], mode_key(x["mode"]))):
        md.append(x["command"])
    for p in probes:
        md.append(p["command"] + "   # RANDOM_FILE: random bytes, twice the longest probe")
    md += ["```", ""]

    if not a.no_plots:
        p = os.path.join(a.img_dir, "maxlen_memory.png")
        plot(series, preds, usable_mb, N, p, "Peak memory per process vs T, %s model, memory options on "
             "(tessera) — measured and fitted" % setup.get("model", "?"))
        pp = os.path.abspath(p)
        md.append("Plot: `%s`" % (os.path.relpath(pp, root) if pp.startswith(root + os.sep) else pp))
        md.append("")

    text = "\n".join(md)
    print(text)
    summary = {"setup": setup, "usable_mb": usable_mb, "margin": a.margin, "runs": runs, "probes": probes,
               "predictions": preds, "tessera_estimate": est}
    for path, content in ((md_path, text + "\n"), (json_path, json.dumps(summary, indent=1) + "\n")):
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(content)
        os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ReportError as e:
        print("bench/maxlen_report.py: %s" % e, file=sys.stderr)
        sys.exit(1)
