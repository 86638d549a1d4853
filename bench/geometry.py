#!/usr/bin/env python3
"""The geometry of the residual stream at stage boundaries (docs/COMPRESSION.md, "Geometry").

Reads the file `tessera eval --activations-out` writes (residual.<l>: the stream entering
layer l over the evaluated batches, rows x d; tokens: their ids) and, with --ckpt, the
checkpoint it came from: its embeddings, its boundary projectors (cmp.<p>.proj, d x r:
MAPL's A_p) and its layers' output projections. With the checkpoint every measure is of
X_res = X - wte[token] (- wpe[position] for GPT), the stream less its embedding, as the MAPL
paper analyses it (its section 3.1); without it, of X. Per layer:

  energy      the share of ||X||_F^2 in the top k singular directions, for k = r (the
              codec's rank, when compressed) and d/16, d/8, d/4, d/2; k95, the fewest
              directions holding 95% of it
  stable rank ||X||_F^2 / sigma_max^2;  effective rank exp(entropy of sigma^2 / sum)
and at each boundary with a projector A_p:
  angles      the principal angles between span(A_p) and the top-r right singular
              subspace of X: cos^2 mean and the largest angle (a random r-dimensional
              subspace of R^d has cos^2 mean about r/d)
  captured    ||X A_p||_F^2 / ||X||_F^2, beside the best any rank-r basis captures (the top-r
              energy share) and the mean of 8 random orthonormal bases (the paper's Fig 5b)
  cos r       Pearson correlation of cos(x_i A_p, x_j A_p) with cos(x_i, x_j) over sampled
              token pairs (whether A_p keeps the stream's angles; the paper's Fig 5c)
and across boundaries the mean principal angle between every two projectors (Fig 5a), and
per layer the stable rank of the output projections attn.wo and mlp.w2 (Fig 6).

Nothing is centred: what a stage hands on is the stream itself. A MAPL codec subtracts its
own anchor, not the embedding; the paper's measures subtract the embedding.

  bench/geometry.py --activations act.safetensors [--ckpt ck.safetensors]
                    [--json out.json] [--plot energy.png] [--pairs 4000] [--seed 0]
  bench/geometry.py --self-test     checks the measures on matrices whose answers are known
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tessera_torch import SafetensorsFile, TesseraError  # noqa: E402


def spectrum(x):
    """Singular values of x (rows x d), in float64, descending."""
    return torch.linalg.svdvals(x.double())


def energy_stats(s, ks):
    """Top-k energy shares, k95, stable and effective rank from singular values s."""
    e = s * s
    total = float(e.sum())
    if total == 0.0:
        return {"energy": {str(k): 0.0 for k in ks}, "k95": 0, "stable_rank": 0.0,
                "effective_rank": 0.0}
    cum = torch.cumsum(e, 0) / total
    p = e / total
    p = p[p > 0]
    return {
        "energy": {str(k): float(cum[min(k, len(cum)) - 1]) for k in ks},
        "k95": int((cum < 0.95).sum()) + 1,
        "stable_rank": total / float(e[0]),
        "effective_rank": float(torch.exp(-(p * p.log()).sum())),
    }


def mean_angle_deg(a, b):
    """The mean principal angle between span(a) and span(b) (d x r each), in degrees."""
    qa, _ = torch.linalg.qr(a.double())
    qb, _ = torch.linalg.qr(b.double())
    cos = torch.linalg.svdvals(qa.T @ qb).clamp(-1.0, 1.0)
    return math.degrees(float(torch.arccos(cos).mean()))


def projector_stats(x, a, top, pairs, gen):
    """How a projector a (d x r) sits against x (rows x d): angles, captured energy, cos r.

    top: x's right singular vectors (d x d, columns descending)."""
    x = x.double()
    q, _ = torch.linalg.qr(a.double())  # its span (A_p is orthonormal under MAPL; not always)
    r, d = q.shape[1], x.shape[1]
    cos = torch.linalg.svdvals(q.T @ top[:, :r]).clamp(max=1.0)
    total = float(x.pow(2).sum())
    share = (lambda b: float((x @ b).pow(2).sum()) / total) if total > 0 else (lambda b: 0.0)
    rand = [share(torch.linalg.qr(torch.randn(d, r, generator=gen, dtype=torch.float64))[0])
            for _ in range(8)]
    out = {
        "r": r,
        "cos2_mean": float((cos * cos).mean()),
        "max_angle_deg": math.degrees(math.acos(float(cos.min()))),
        "random_cos2_mean": r / d,
        "captured": share(q),
        "captured_best": share(top[:, :r]),
        "captured_random": sum(rand) / len(rand),
    }
    n = x.shape[0]
    if pairs > 0 and n >= 2:
        i = torch.randint(0, n, (pairs,), generator=gen)
        j = torch.randint(0, n, (pairs,), generator=gen)
        keep = i != j
        i, j = i[keep], j[keep]
        full = torch.nn.functional.cosine_similarity(x[i], x[j], dim=1)
        xa = x @ a.double()
        low = torch.nn.functional.cosine_similarity(xa[i], xa[j], dim=1)
        c = torch.corrcoef(torch.stack([full, low]))[0, 1]
        out["cos_pearson"] = float(c) if torch.isfinite(c) else float("nan")
        out["pairs"] = int(keep.sum())
    return out


def boundaries(config):
    """{layer l: boundary p} of the checkpoint's compression (empty without one)."""
    stages = int(config.get("compress_stages", 0) or 0)
    if not int(config.get("compress", 0) or 0) or stages < 2:
        return {}
    L = int(config["n_layer"])
    return {(p + 1) * L // stages: p for p in range(stages - 1)}


def stable_rank(w):
    s = torch.linalg.svdvals(w.double())
    return float((s * s).sum() / (s[0] * s[0])) if float(s[0]) > 0 else 0.0


def analyse(act_path, ckpt_path, pairs, seed):
    act = SafetensorsFile(act_path)
    try:
        config = json.loads(act.meta.get("tessera.config", "{}"))
    except ValueError:
        raise TesseraError(f"{act_path}: tessera.config is not JSON")
    names = sorted((n for n in act.entries if n.startswith("residual.")),
                   key=lambda n: int(n.split(".")[1]))
    if not names:
        raise TesseraError(f"{act_path}: no residual.<l> tensors (write it with tessera eval "
                           f"--activations-out)")
    xs = act.tensors(names + (["tokens"] if "tokens" in act.entries else []))
    act.close()
    bmap = boundaries(config)
    projs, emb, weights = {}, None, {}
    if ckpt_path:
        ck = SafetensorsFile(ckpt_path)
        want = [f"cmp.{p}.proj" for p in bmap.values() if f"cmp.{p}.proj" in ck.entries]
        projs = ck.tensors(want)
        L = int(config.get("n_layer", 0) or 0)
        wnames = [f"h.{l}.{w}" for l in range(L) for w in ("attn.wo", "mlp.w2")
                  if f"h.{l}.{w}" in ck.entries]
        weights = ck.tensors(wnames)
        if "tokens" in xs and "wte" in ck.entries:
            t = ck.tensors(["wte"] + (["wpe"] if "wpe" in ck.entries else []))
            ids = xs["tokens"].long()
            if int(ids.min()) < 0 or int(ids.max()) >= t["wte"].shape[0]:
                raise TesseraError(f"{act_path}: token ids outside {ckpt_path}'s vocabulary "
                                   f"(not the checkpoint it was written from?)")
            emb = t["wte"][ids].double()
            if "wpe" in t:  # rows are sequences of seq positions in order
                T = int(config["seq"])
                emb += t["wpe"].double()[torch.arange(len(ids)) % T]
        ck.close()
    rank = int(config.get("compress_rank", 0) or 0)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for n in names:
        l = int(n.split(".")[1])
        x = xs[n].double()
        if emb is not None:
            if emb.shape != x.shape:
                raise TesseraError(f"{act_path}: {n} is {list(x.shape)}, the embeddings "
                                   f"{list(emb.shape)} (not the checkpoint it was written from?)")
            x = x - emb
        d = x.shape[1]
        ks = sorted({k for k in (rank, d // 16, d // 8, d // 4, d // 2) if k > 0})
        _, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
        row = {"layer": l, "rows": x.shape[0], "d": d, **energy_stats(s, ks)}
        p = bmap.get(l)
        if p is not None:
            row["boundary"] = p
            a = projs.get(f"cmp.{p}.proj")
            if a is not None:
                row["projector"] = projector_stats(x, a, vh.T, pairs, gen)
        rows.append(row)
    order = sorted(projs, key=lambda n: int(n.split(".")[1]))
    angles = [[mean_angle_deg(projs[a], projs[b]) for b in order] for a in order]
    wsr = [{"layer": l, "attn.wo": stable_rank(weights[f"h.{l}.attn.wo"]),
            "mlp.w2": stable_rank(weights[f"h.{l}.mlp.w2"])}
           for l in range(int(config.get("n_layer", 0) or 0))
           if f"h.{l}.attn.wo" in weights and f"h.{l}.mlp.w2" in weights]
    return {"activations": act_path, "checkpoint": ckpt_path, "step": act.meta.get("tessera.step"),
            "compress_rank": rank, "minus_embedding": emb is not None, "layers": rows,
            "projector_angles_deg": {"boundaries": [int(n.split(".")[1]) for n in order],
                                     "mean": angles},
            "weight_stable_rank": wsr}


def table(res):
    lines = []
    ks = list(res["layers"][0]["energy"].keys())
    what = "X - embedding" if res["minus_embedding"] else "X"
    lines.append(f"energy, ranks and projectors of {what}:")
    lines.append("")
    head = ["layer", "boundary"] + [f"top {k}" for k in ks] + \
        ["k95", "stable rank", "eff. rank", "cos^2 (random)", "max angle",
         "captured (best, random)", "cos r"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in res["layers"]:
        pr = r.get("projector")
        cells = [str(r["layer"]), str(r.get("boundary", ""))]
        cells += [f"{r['energy'][k]:.3f}" for k in ks]
        cells += [str(r["k95"]), f"{r['stable_rank']:.2f}", f"{r['effective_rank']:.1f}"]
        if pr:
            cells += [f"{pr['cos2_mean']:.3f} ({pr['random_cos2_mean']:.3f})",
                      f"{pr['max_angle_deg']:.1f}°",
                      f"{pr['captured']:.3f} ({pr['captured_best']:.3f}, "
                      f"{pr['captured_random']:.3f})",
                      f"{pr.get('cos_pearson', float('nan')):.3f}"]
        else:
            cells += ["", "", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    pa = res["projector_angles_deg"]
    if len(pa["boundaries"]) > 1:
        lines += ["", "mean principal angle between the boundaries' projectors (degrees):", ""]
        lines.append("| | " + " | ".join(f"A_{p}" for p in pa["boundaries"]) + " |")
        lines.append("|" + "---|" * (len(pa["boundaries"]) + 1))
        for p, row in zip(pa["boundaries"], pa["mean"]):
            lines.append(f"| A_{p} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    if res["weight_stable_rank"]:
        lines += ["", "stable rank of the output projections:", "",
                  "| layer | attn.wo | mlp.w2 |", "|---|---|---|"]
        lines += [f"| {w['layer']} | {w['attn.wo']:.2f} | {w['mlp.w2']:.2f} |"
                  for w in res["weight_stable_rank"]]
    return "\n".join(lines)


def plot(res, xs_path, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    act = SafetensorsFile(xs_path)
    names = [f"residual.{r['layer']}" for r in res["layers"]]
    xs = act.tensors(names)
    act.close()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r, n in zip(res["layers"], names):
        s = spectrum(xs[n])
        cum = (torch.cumsum(s * s, 0) / (s * s).sum()).numpy()
        bold = "boundary" in r
        ax.plot(range(1, len(cum) + 1), cum, lw=2.2 if bold else 0.8,
                label=f"layer {r['layer']}" + (f" (boundary {r['boundary']})" if bold else ""))
    if res["compress_rank"]:
        ax.axvline(res["compress_rank"], color="grey", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("singular directions k")
    ax.set_ylabel("share of ||X||_F^2 in the top k")
    ax.set_title("energy of the residual stream entering each layer")
    ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = png + ".tmp.png"
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, png)


def self_test():
    """The measures on matrices whose answers are known; returns the failures."""
    gen = torch.Generator().manual_seed(1)
    fails = []

    def check(what, got, want, tol):
        if not abs(got - want) <= tol:
            fails.append(f"{what}: {got} (want {want} within {tol})")

    n, d, k = 400, 32, 4
    # rank k with equal singular values: all energy in k directions, stable rank k
    u, _ = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(d, k, generator=gen, dtype=torch.float64))
    x = (u @ v.T) * 3.0
    st = energy_stats(spectrum(x), [k, 2 * k])
    check("rank-k energy in top k", st["energy"][str(k)], 1.0, 1e-9)
    check("rank-k stable rank", st["stable_rank"], float(k), 1e-9)
    check("rank-k effective rank", st["effective_rank"], float(k), 1e-9)
    check("rank-k k95", st["k95"], k, 0)
    # singular values 2, 1: stable rank (4 + 1) / 4
    y = torch.zeros(3, d, dtype=torch.float64)
    y[0, 0], y[1, 1] = 2.0, 1.0
    check("stable rank of diag(2, 1)", energy_stats(spectrum(y), [1])["stable_rank"], 1.25, 1e-12)
    check("energy of diag(2, 1) in top 1", energy_stats(spectrum(y), [1])["energy"]["1"], 0.8,
          1e-12)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    top = torch.linalg.svd(x, full_matrices=True)[2].T
    # a projector spanning the top subspace: angles 0, all energy captured, angles kept
    pr = projector_stats(x, v.float(), top, 2000, gen)
    check("aligned cos^2", pr["cos2_mean"], 1.0, 1e-6)
    check("aligned captured", pr["captured"], 1.0, 1e-6)
    check("aligned cos r", pr["cos_pearson"], 1.0, 1e-5)
    # a projector orthogonal to it: cos^2 0, nothing captured
    w, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    orth = w[:, :k] - v @ (v.T @ w[:, :k])
    orth, _ = torch.linalg.qr(orth)
    pr = projector_stats(x, orth.float(), top, 0, gen)
    check("orthogonal cos^2", pr["cos2_mean"], 0.0, 1e-6)
    check("orthogonal max angle", pr["max_angle_deg"], 90.0, 1e-3)
    check("orthogonal captured", pr["captured"], 0.0, 1e-6)
    check("orthogonal captured_best", pr["captured_best"], 1.0, 1e-6)
    check("mean angle of a span with itself", mean_angle_deg(v, v @ torch.linalg.qr(
        torch.randn(k, k, generator=gen, dtype=torch.float64))[0]), 0.0, 1e-4)
    check("mean angle of orthogonal spans", mean_angle_deg(v, orth), 90.0, 1e-4)
    check("stable rank of a rank-k matrix with equal values", stable_rank(x), float(k), 1e-9)
    # full-rank isotropic data against a random r-subspace: cos^2 mean near r/d
    z = torch.randn(20000, d, generator=gen, dtype=torch.float64)
    topz = torch.linalg.svd(z, full_matrices=True)[2].T
    ms = [projector_stats(z, torch.linalg.qr(torch.randn(d, 8, generator=gen))[0], topz, 0,
                          gen)["cos2_mean"] for _ in range(20)]
    check("random subspace cos^2 mean", sum(ms) / len(ms), 8 / d, 0.05)
    return fails


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="bench/geometry.py", allow_abbrev=False,
        description="Singular-value energy, stable rank and projector angles of the residual "
                    "stream that tessera eval --activations-out wrote.")
    ap.add_argument("--activations", metavar="FILE", help="tessera eval --activations-out's file")
    ap.add_argument("--ckpt", metavar="FILE", help="the checkpoint it came from (its projectors)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--plot", metavar="PNG", help="also draw the energy curves")
    ap.add_argument("--pairs", type=int, default=4000, help="token pairs for cos r (default 4000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the pair sample (default 0)")
    ap.add_argument("--self-test", action="store_true", help="check the measures and exit")
    a = ap.parse_args(argv)
    if a.self_test:
        fails = self_test()
        for f in fails:
            print(f"geometry self-test: {f}", file=sys.stderr)
        print("geometry self-test: " + ("FAILED" if fails else "ok"))
        return 1 if fails else 0
    if not a.activations:
        ap.error("--activations FILE is required (or --self-test)")
    if a.pairs < 0:
        ap.error(f"--pairs {a.pairs}: must be >= 0")
    try:
        res = analyse(a.activations, a.ckpt, a.pairs, a.seed)
    except (TesseraError, OSError) as e:
        print(f"bench/geometry.py: {e}", file=sys.stderr)
        return 1
    print(table(res))
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, a.json)
    if a.plot:
        plot(res, a.activations, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
