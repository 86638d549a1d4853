"""The report of bench/plan_papers.sh: tessera plan's numbers at the papers' settings beside
the figures the papers publish (docs/PERFORMANCE.md, "The papers' tables against the plan").

usage: /usr/bin/python3 bench/plan_papers_report.py RESULTS > RESULTS/report.md

Every plan number comes from RESULTS/NAME.json; the papers' figures are written below with
the table they come from. Nothing is fitted: where the two differ the report says by how much.
"""
import json
import os
import sys

R = sys.argv[1]
GiB = 2.0 ** 30


def load(name):
    with open(os.path.join(R, name + ".json")) as f:
        return json.load(f)


def row(name):
    return load(name)["rows"][0]


def ratio(plan, paper):
    return "%.2f" % (plan / paper) if paper else "—"


out = []
p = out.append
p("# tessera plan at the papers' settings\n")
p("Written by bench/plan_papers_report.py from the plans of bench/plan_papers.sh "
  "(commands: commands.txt). Ratios are plan ÷ paper.\n")

# ---- UPipe -------------------------------------------------------------------------------
p("## UPipe: Llama3-8B on 8 H100 80 GB (`--sp 8 --zero 3 --checkpoint --fused-ce --tiled-mlp`)\n")
p("| mode | paper: longest run (Table 8) | plan: longest T, exact rules | plan: longest T, --fast | ratio (--fast) |")
p("|---|---:|---:|---:|---:|")
paper_long = {"ulysses": 3 * 2 ** 20, "upipe": 5 * 2 ** 20}
for m in ("ulysses", "upipe"):
    e, f = load("upipe-%s-longest" % m)["longest_seq"], load("upipe-%s-longest-fast" % m)["longest_seq"]
    p("| %s | %d (%gM) | %d | %d | %s |" % (m, paper_long[m], paper_long[m] / 2 ** 20, e, f,
                                          ratio(f, paper_long[m])))
paper_mem = {  # Table 8, GiB (None: OOM or not run)
    "ulysses": [21.26, 23.02, 26.80, 34.35, 49.49, 64.55, None, None],
    "upipe": [21.10, 22.30, 24.70, 29.90, 40.50, 51.10, 61.70, 72.30]}
paper_time = {"ulysses": {2 ** 20: 275.06, 2 ** 21: 1068.00, 3 * 2 ** 20: 2419.14},  # Table 9, s
              "upipe": {2 ** 20: 276.39, 2 ** 21: 1063.23, 3 * 2 ** 20: 2361.24}}
Ts = [131072, 262144, 524288, 1048576, 2097152, 3145728, 4194304, 5242880]
cfg = {"L": 32, "d": 4096, "N": 8}
p("\nMemory of a GPU by T (GiB; the plan's largest rank, under --fast). *inputs* is the part "
  "of the plan's count that is the checkpointed layer inputs, L·(T/N)·d fp32 floats, which the "
  "paper offloads to the host; *rest* the plan's total without them.\n")
p("| T | mode | paper GiB | plan GiB | ratio | plan: inputs | plan: rest | paper step s (Table 9) | plan step s | ratio |")
p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for i, T in enumerate(Ts):
    for m in ("ulysses", "upipe"):
        r = row("upipe-%s-T%d" % (m, T))
        tot = r["memory_largest"]["total"] / GiB
        inputs = cfg["L"] * (T / cfg["N"]) * cfg["d"] * 4 / GiB
        pm = paper_mem[m][i]
        pt = paper_time[m].get(T)
        p("| %gM | %s | %s | %.1f | %s | %.1f | %.1f | %s | %.0f | %s |" % (
            T / 2 ** 20, m, "%.2f" % pm if pm else "OOM" if m == "ulysses" and T >= 4 * 2 ** 20 else "—",
            tot, ratio(tot, pm) if pm else "—", inputs, tot - inputs,
            "%.0f" % pt if pt else "—", r["step_s"], ratio(r["step_s"], pt) if pt else "—"))

# ---- LSS ---------------------------------------------------------------------------------
p("\n## LSS: the 20M GPT (`--model small`, batch 4), `--sp N lss`, T = 58·N, V100 16 GB, 6 a node\n")
p("Efficiency as the paper counts it: a GPU's model FLOP/s against the 6-GPU run's (the plan's "
  "model FLOP/s: compute_s × flops × efficiency / step_s). *comm* is the plan's share of the "
  "step that is communication (summed, no overlap); *overlapped*: the efficiency with the "
  "plan's other bound, the step as the larger of compute and communication.\n")
paper3 = {6: (0.54, 8, 100), 36: (1.01, 189, 165), 108: (2.05, 881, 174), 324: (5.94, 3000, 173),
          864: (13.58, 8245, 151)}  # Table 3a: GB/GPU, 1e12 FLOP/s, efficiency %
paper_comm = {36: 27, 864: 40}  # Figure 4(c): communication's share of the runtime, %
p("| data groups | GPUs | T | paper GB/GPU | plan GB/GPU | ratio | plan bytes/step/GPU | plan comm % | paper comm % | paper PFLOP/s | plan PFLOP/s | paper eff % | plan eff % | plan eff %, overlapped |")
p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for dp in (1, 4):
    base = base_o = None
    for N in (6, 36, 108, 324, 864):
        d = load("lss-small-dp%d-N%d" % (dp, N))
        r = d["rows"][0]
        rate = r["compute_s"] * d["flops"] * d["efficiency"] / r["step_s"]  # model FLOP/s a GPU
        base = base or rate
        rate_o = r["compute_s"] / r["step_overlap_s"]  # the overlap bound's compute share
        base_o = base_o or rate_o
        gb = r["memory_largest"]["total"] / 1e9
        byt = sum(v["bytes"] for v in r["comm_step"].values())
        pg, pf, pe = paper3[N]
        if dp == 4:
            pf = 32784 if N == 864 else None
            pe = 161 if N == 864 else None
        p("| %d | %d | %d | %.2f | %.3f | %s | %.3g | %.0f | %s | %s | %.3g | %s | %.0f | %.0f |" % (
            dp, dp * N, 58 * N, pg, gb, ratio(gb, pg), byt, 100 * r["comm_s"] / r["step_s"],
            paper_comm.get(N, "—") if dp == 1 else "—", "%.3g" % (pf / 1000) if pf else "—",
            rate * dp * N / 1e15, pe or "—", 100 * rate / base, 100 * rate_o / base_o))
p("\nThe 1.5B GPT (`--model large`, batch 1), 32 GB V100s, T ~ √N (Table 6a):\n")
p("| GPUs | T | paper GB/GPU | plan GB/GPU | ratio | plan comm % | paper eff % | plan eff % |")
p("|---:|---:|---:|---:|---:|---:|---:|---:|")
paper6 = {6: (366, 21.67, 100), 36: (900, 22.48, 94), 108: (1512, 23.34, 92)}
base = None
for N, (T, pg, pe) in paper6.items():
    d = load("lss-large-N%d" % N)
    r = d["rows"][0]
    rate = r["compute_s"] * d["flops"] * d["efficiency"] / r["step_s"]
    base = base or rate
    gb = r["memory_largest"]["total"] / 1e9
    p("| %d | %d | %.2f | %.2f | %s | %.0f | %d | %.0f |" % (
        N, T, pg, gb, ratio(gb, pg), 100 * r["comm_s"] / r["step_s"], pe, 100 * rate / base))

# ---- MAPL --------------------------------------------------------------------------------
p("\n## MAPL: bytes a boundary carries per step (stage 0, both ways, M = 512 microbatches of "
  "one 2048-token sequence) and the bubble\n")
p("| model | P | uncompressed MB | mapl r 256 MB | ratio | paper ratio (Table 1) | mapl-vq MB | ratio | paper ratio |")
p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
paper_ratio = {"mapl-150m": ("4×", "—"), "mapl-500m": ("6×", "—"), "mapl-1b": ("8×", "16×")}
for shape in ("mapl-150m", "mapl-500m", "mapl-1b"):
    for P in (4, 8):
        b = {c: row("mapl-%s-P%d-%s-M512" % (shape, P, c))["comm_step"]["sendrecv"]["bytes"]
             for c in ("none", "mapl", "mapl-vq")}
        p("| %s | %d | %.1f | %.1f | %.2f× | %s | %.1f | %.2f× | %s |" % (
            shape, P, b["none"] / 1e6, b["mapl"] / 1e6, b["none"] / b["mapl"],
            paper_ratio[shape][0], b["mapl-vq"] / 1e6, b["none"] / b["mapl-vq"], paper_ratio[shape][1]))
p("\nThe plan's bubble, (P − 1)/(M + P − 1) of a stage's time idle, and its step (mapl-1b, "
  "uncompressed; the paper states neither its microbatches nor a bubble):\n")
p("| P | M | idle share | plan step s | plan comm s |")
p("|---:|---:|---:|---:|---:|")
for P in (4, 8):
    for M in (P, 4 * P, 512):
        r = row("mapl-mapl-1b-P%d-none-M%d" % (P, M))
        p("| %d | %d | %.3f | %.2f | %.3f |" % (P, M, (P - 1) / (M + P - 1), r["step_s"], r["comm_s"]))
print("\n".join(out))
