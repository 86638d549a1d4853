#!/usr/bin/env python3
"""The bookkeeping of bench/gpu.sh: whether a case still fits, and the report.

  gpu_report.py estimate --raw DIR --impl tessera|torch --model M --prec P --seq T
                         --steps N --left-s S [--mem-total-mib M]
      prints "run" or "skip REASON": REASON is "out of memory (...)" or "out of time
      (...)", judged from the runs of the same implementation, model and precision at
      smaller T already in DIR (none: "run").
  gpu_report.py report --raw DIR --out FILE
      writes the markdown report (table, commands, device, date) to FILE, through a
      temporary file renamed into place.

DIR holds, per run NAME (IMPL-MODEL-TT-PREC): NAME.meta ("key value" lines: impl, model,
seq, batch, prec, steps, status ok|failed|timeout|skipped, reason, rc, wall_s,
base_mib), NAME.cmd, NAME.out, NAME.err, NAME.jsonl (tessera's run log), NAME.mem
(memory.used in MiB, one nvidia-smi sample a line); and setup.txt, nvidia-smi-L.txt.
Standard library only.
"""
import argparse
import glob
import json
import os
import statistics
import sys

# H200 SXM dense peaks (NVIDIA's datasheet figures, without sparsity), FLOP/s
PEAK = {"bf16": 989e12, "fp32": 67e12, "fast": 67e12}  # fast: fp32 with --fast


def read_meta(path):
    meta = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition(" ")
            if k:
                meta[k] = v
    for k in ("seq", "batch", "steps", "rc"):
        if k in meta:
            try:
                meta[k] = int(meta[k])
            except ValueError:
                pass
    for k in ("wall_s", "base_mib"):
        try:
            meta[k] = float(meta[k])
        except (KeyError, ValueError):
            meta[k] = None
    return meta


def json_lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except OSError:
        pass
    return out


def peak_mib(base, meta):
    """Largest sampled memory.used minus the idle reading before the run, or None."""
    vals = []
    try:
        with open(base + ".mem") as f:
            for line in f:
                try:
                    vals.append(float(line.split(",")[0]))
                except ValueError:
                    pass
    except OSError:
        return None
    if not vals or meta.get("base_mib") is None:
        return None
    return max(0.0, max(vals) - meta["base_mib"])


def load_run(base):
    """One run's figures: status, tokens/s (median over steps 2..N), step times,
    flops/token, memory, and the model's L and d (for the time estimate)."""
    meta = read_meta(base + ".meta")
    r = {"meta": meta, "name": os.path.basename(base), "status": meta.get("status", "failed"),
         "reason": meta.get("reason", ""), "mem_mib": peak_mib(base, meta)}
    if meta.get("impl") == "tessera":
        recs = json_lines(base + ".jsonl")
        cfg = next((x for x in recs if x.get("type") == "config"), None)
        steps = [x for x in recs if x.get("type") == "step"]
        if cfg:
            r["fpt"] = cfg.get("flops_per_token")
            mod = cfg.get("model", {})
            r["L"], r["d"] = mod.get("n_layer"), mod.get("d")
        if len(steps) >= 2:
            r["tps"] = statistics.median(x["tokens_per_s"] for x in steps[1:])
            r["step_ms"] = [x.get("step_ms", 0.0) for x in steps]
        peaks = [x["device_peak_mb"] for x in steps if "device_peak_mb" in x]
        if peaks:
            r["alloc_mib"] = max(peaks)
    else:
        recs = json_lines(base + ".out")
        res = recs[-1] if recs else {}
        r["torch"] = res
        if "error" in res:
            r["error"] = res["error"]
        if "tokens_per_s" in res:
            r["tps"] = res["tokens_per_s"]
            r["step_ms"] = res.get("step_ms", [])
            r["fpt"] = res.get("flops_per_token")
            r["L"], r["d"] = res.get("layers"), res.get("d")
            r["alloc_mib"] = res.get("peak_mem_mb")
    if r["status"] == "ok" and "tps" not in r:
        r["status"], r["reason"] = "failed", "no step figures in its output"
    return r


def runs(raw):
    return [load_run(m[:-5]) for m in sorted(glob.glob(os.path.join(raw, "*.meta")))]


# ---------------------------------------------------------------------------
def estimate(a):
    same = [r for r in runs(a.raw)
            if r["meta"].get("impl") == a.impl and r["meta"].get("model") == a.model
            and r["meta"].get("prec") == a.prec and isinstance(r["meta"].get("seq"), int)
            and r["meta"]["seq"] < a.seq and r["status"] != "skipped"]
    if not same:
        return "run"
    same.sort(key=lambda r: r["meta"]["seq"])
    last = same[-1]
    T0 = last["meta"]["seq"]
    if last["status"] == "timeout":
        return f"skip out of time (T={T0} already ran past its time cap)"
    if last["status"] != "ok":
        why = (last.get("error") or last["reason"]).lower()
        if "out of memory" in why:
            return f"skip out of memory (T={T0} already did not fit)"
        return "run"  # a failure of another kind says nothing about size
    # time: start-up as measured, steps scaled by the FLOPs of a step
    # (B T (6N + 6 L T d)), so linear at short T and quadratic where attention dominates
    steps_s = sum(last.get("step_ms") or []) / 1e3
    n0 = max(1, len(last.get("step_ms") or []))
    wall = last["meta"].get("wall_s") or steps_s
    startup = max(0.0, wall - steps_s)
    fpt0, L, d = last.get("fpt"), last.get("L"), last.get("d")
    if fpt0 and L and d:
        ratio = a.seq * (fpt0 + 6.0 * L * d * (a.seq - T0)) / (T0 * fpt0)
    else:
        ratio = (a.seq / T0) ** 2
    est_s = startup + steps_s / n0 * a.steps * ratio
    # memory: linear in T (both keep O(T d) activations), or the exponent two earlier
    # runs show, between 1 and 2
    est_mib = None
    if last["mem_mib"] is not None:
        expo = 1.0
        prev = [r for r in same[:-1] if r["status"] == "ok" and r["mem_mib"]]
        if prev and prev[-1]["mem_mib"] > 0 and last["mem_mib"] > 0:
            import math
            t1, m1 = prev[-1]["meta"]["seq"], prev[-1]["mem_mib"]
            expo = math.log(last["mem_mib"] / m1) / math.log(T0 / t1)
            expo = min(2.0, max(1.0, expo))
        est_mib = last["mem_mib"] * (a.seq / T0) ** expo
    if a.mem_total_mib and est_mib is not None and est_mib > 0.95 * a.mem_total_mib:
        return (f"skip out of memory (estimated {est_mib / 1024:.0f} GiB of "
                f"{a.mem_total_mib / 1024:.0f} GiB, from T={T0})")
    if est_s > a.left_s:
        return f"skip out of time (estimated {est_s:.0f} s, {a.left_s:.0f} s left)"
    return "run"


# ---------------------------------------------------------------------------
def fmt_int(x):
    return f"{x:,.0f}" if x is not None else "–"


def fmt_mib(x):
    if x is None:
        return "–"
    return f"{x / 1024:.2f} GiB" if x >= 1024 else f"{x:.0f} MiB"


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "–"


def cell(r, what):
    """A table cell: the figure, or why there is none."""
    if r is None:
        return "not run"
    if r["status"] != "ok":
        why = r.get("error") or r["reason"] or r["status"]
        word = "skipped" if r["status"] == "skipped" else r["status"]
        return f"{word}: {why}" if not why.startswith(word) else why
    return what(r)


def mfu(r, prec):
    if r is None or r["status"] != "ok" or not r.get("fpt") or not r.get("tps"):
        return None
    return r["fpt"] * r["tps"] / PEAK[prec]


def report(a):
    rs = runs(a.raw)
    setup = {}
    try:
        for line in open(os.path.join(a.raw, "setup.txt")):
            k, _, v = line.rstrip("\n").partition(" ")
            setup[k] = v
    except OSError:
        pass
    cases = []
    for r in rs:
        m = r["meta"]
        key = (m.get("model", "?"), m.get("seq", 0), m.get("prec", "?"))
        if key not in cases:
            cases.append(key)
    order = {"fp32": 0, "fast": 1, "bf16": 2}
    cases.sort(key=lambda k: (k[0], k[1] if isinstance(k[1], int) else 0, order.get(k[2], 9)))

    def find(impl, key):
        for r in rs:
            m = r["meta"]
            if m.get("impl") == impl and (m.get("model"), m.get("seq"), m.get("prec")) == key:
                return r
        return None

    torch_missing = setup.get("torch_error")
    L = []
    L.append("# GPU benchmark: tessera against PyTorch")
    L.append("")
    L.append(f"- Date: {setup.get('date', '?')} (UTC)")
    L.append(f"- Device: {setup.get('gpu', '?')}")
    L.append(f"- tessera: {setup.get('tessera', '?')}")
    L.append(f"- PyTorch: {setup.get('torch', '?')}")
    L.append(f"- Steps per run: {setup.get('steps', '?')}; tokens/s is the median over steps "
             "2..N (step 1 is warm-up); batch 1")
    L.append("- MFU = FLOPs/token × tokens/s ÷ the H200's dense peak: **989 TFLOP/s for bf16, "
             "67 TFLOP/s for fp32** (datasheet, no sparsity); FLOPs/token = 6 × non-embedding "
             "parameters + 6·L·T·d (docs/PERFORMANCE.md), the same for both. tessera's own "
             "logged `mfu` is against its CPU sgemm roof and is not used here.")
    L.append("- Peak memory is **sampled**: `nvidia-smi --query-gpu=memory.used` every 0.2 s "
             "during the run, the largest sample minus the idle reading taken just before it "
             "(so it includes the CUDA context and any allocator cache, and can miss a peak "
             "shorter than 0.2 s). Each side's own allocator peak is shown beside it: "
             "tessera's `device_peak_mb` (its run log) and PyTorch's "
             "`torch.cuda.max_memory_allocated`.")
    L.append(f"- Time budget: {setup.get('budget_s', '?')} s for all runs; a case that earlier "
             "cases show will not fit in the time left or in the device memory is skipped "
             "and says so.")
    if torch_missing:
        L.append(f"- **PyTorch with CUDA not available on this machine** ({torch_missing}): "
                 "no PyTorch figures.")
    L.append("")
    L.append("| model | T | precision | tessera tokens/s | PyTorch tokens/s | speed ratio "
             "| tessera MFU | PyTorch MFU | tessera peak mem (sampled) | PyTorch peak mem "
             "(sampled) | memory ratio | tessera allocator peak | PyTorch allocator peak |")
    L.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in cases:
        model, T, prec = key
        # PyTorch's fp32 run stands beside tessera's exact (fp32) and fast tiers
        ts, pt = find("tessera", key), find("torch", (model, T, "fp32" if prec == "fast" else prec))
        ok_ts = ts is not None and ts["status"] == "ok"
        ok_pt = pt is not None and pt["status"] == "ok"
        if torch_missing and not ok_pt:
            pt_cells = ["PyTorch with CUDA not available on this machine"] + ["–"] * 3
        else:
            pt_cells = [cell(pt, lambda r: fmt_int(r["tps"])), None,
                        fmt_mib(pt["mem_mib"]) if ok_pt else "–",
                        fmt_mib(pt.get("alloc_mib")) if ok_pt else "–"]
        m_ts, m_pt = mfu(ts, prec), mfu(pt, prec)
        label = {"fp32": "fp32 (exact)", "fast": "fp32 --fast"}.get(prec, prec)
        row = [model, f"{T:,}" if isinstance(T, int) else str(T), label,
               cell(ts, lambda r: fmt_int(r["tps"])), pt_cells[0],
               ratio(ts["tps"], pt["tps"]) if ok_ts and ok_pt else "–",
               f"{100 * m_ts:.1f}%" if m_ts is not None else "–",
               f"{100 * m_pt:.1f}%" if m_pt is not None else "–",
               fmt_mib(ts["mem_mib"]) if ok_ts else "–", pt_cells[2],
               ratio(ts["mem_mib"], pt["mem_mib"]) if ok_ts and ok_pt else "–",
               fmt_mib(ts.get("alloc_mib")) if ok_ts else "–", pt_cells[3]]
        L.append("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
    L.append("")
    L.append("Ratios are tessera ÷ PyTorch: a speed ratio above 1 means tessera is faster, a "
             "memory ratio below 1 that it needs less.")
    L.append("")
    L.append("## Commands")
    L.append("")
    L.append("```")
    for r in rs:
        try:
            cmd = open(os.path.join(a.raw, r["name"] + ".cmd")).read().strip()
        except OSError:
            continue
        L.append(f"# {r['name']}: {r['status']}" + (f" ({r['reason']})" if r["reason"] else "")
                 + (f", {r['meta']['wall_s']:.1f} s" if r["meta"].get("wall_s") else ""))
        L.append(cmd)
    L.append("```")
    L.append("")
    L.append("## Device")
    L.append("")
    L.append("```")
    try:
        L.append(open(os.path.join(a.raw, "nvidia-smi-L.txt")).read().rstrip())
    except OSError:
        L.append("(nvidia-smi -L: not recorded)")
    L.append("```")
    text = "\n".join(L) + "\n"
    tmp = f"{a.out}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, a.out)
    ok = sum(1 for r in rs if r["meta"].get("impl") == "tessera" and r["status"] == "ok")
    print(f"gpu_report: {len(cases)} case(s), {ok} tessera run(s) measured; wrote {a.out}",
          file=sys.stderr)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("estimate")
    e.add_argument("--raw", required=True)
    e.add_argument("--impl", required=True, choices=("tessera", "torch"))
    e.add_argument("--model", required=True)
    e.add_argument("--prec", required=True)
    e.add_argument("--seq", type=int, required=True)
    e.add_argument("--steps", type=int, required=True)
    e.add_argument("--left-s", type=float, required=True)
    e.add_argument("--mem-total-mib", type=float, default=0.0)
    r = sub.add_parser("report")
    r.add_argument("--raw", required=True)
    r.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "estimate":
        print(estimate(a))
        return 0
    return report(a)


if __name__ == "__main__":
    sys.exit(main())
