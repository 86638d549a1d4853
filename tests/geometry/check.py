"""tests/geometry.sh's checks of `tessera eval --activations-out` against the PyTorch model.

  check.py residual CKPT ACT DATA   tokens are the windows' ids, in row order, and
                                    each residual.<l> equals the stream entering layer l of
                                    python/tessera_torch.py's model on the same validation
                                    windows, within the bound below; and, as a negative
                                    control, does not equal the stream entering layer l + 1
  check.py report JSON LAYER P      bench/geometry.py's JSON marks layer LAYER as boundary P
                                    and gives its projector's statistics in range

Bound: max |tessera - torch| <= 1e-5 x max |torch| over a layer's rows. Both compute in
float32; their products and sums differ only in order (tessera's fma chains and trees,
torch's BLAS), a few ulps a product of the model's width, far below 1e-5 of the stream's
scale after a few layers of a tiny model; a wrong row order or layer is of the scale itself.
"""
import json
import sys

import torch

sys.path.insert(0, sys.argv[-1])  # python/
import tessera_torch  # noqa: E402
sys.path.pop(0)


def residual(ckpt, act, data):
    ck = tessera_torch.Checkpoint(ckpt)
    model = tessera_torch.load(ckpt)
    split = tessera_torch.validation_split(ck.shape, data, data_format=ck.config.get("data_format"))
    st = tessera_torch.SafetensorsFile(act)
    names = sorted((n for n in st.entries if n.startswith("residual.")),
                   key=lambda n: int(n.split(".")[1]))
    got = st.tensors(names + ["tokens"])
    batches = tessera_torch.validation_batches(ck.shape, split, got[names[0]].shape[0] //
                                               (ck.shape.batch * ck.shape.T))
    L = len(model.h)
    want = {l: [] for l in range(1, L + 1)}
    with torch.no_grad():
        for inputs, _ in batches:
            x = model.wte[inputs] + model.wpe[:inputs.shape[1]]
            for l, block in enumerate(model.h):
                x = block(x)
                want[l + 1].append(x.reshape(-1, x.shape[-1]))
    want = {l: torch.cat(v) for l, v in want.items()}
    ids = torch.cat([inputs.reshape(-1) for inputs, _ in batches]).float()
    fails = 0
    ok = torch.equal(got["tokens"], ids)
    print(f"{'ok  ' if ok else 'FAIL'} tokens: the validation windows' ids in row order")
    fails += not ok
    for n in names:
        l = int(n.split(".")[1])
        scale = float(want[l].abs().max())
        err = float((got[n] - want[l]).abs().max())
        ok = err <= 1e-5 * scale
        print(f"{'ok  ' if ok else 'FAIL'} {n}: max error {err:.3g}, bound {1e-5 * scale:.3g}")
        fails += not ok
        other = float((got[n] - want[l + 1]).abs().max())  # the next layer's: must fail
        bad = other > 1e-5 * scale
        print(f"{'ok  ' if bad else 'FAIL'} {n} against layer {l + 1}'s stream: error "
              f"{other:.3g} (must exceed the bound)")
        fails += not bad
    return fails


def report(path, layer, p):
    res = json.load(open(path))
    rows = {r["layer"]: r for r in res["layers"]}
    r = rows.get(layer)
    fails = 0
    checks = [
        (r is not None and r.get("boundary") == p, f"layer {layer} is boundary {p}"),
        (r is not None and "projector" in r, "the boundary has its projector's statistics"),
    ]
    if r is not None and "projector" in r:
        pr = r["projector"]
        checks += [
            (0.0 <= pr["cos2_mean"] <= 1.0 + 1e-9, f"cos^2 mean {pr['cos2_mean']} in [0, 1]"),
            (0.0 <= pr["captured"] <= 1.0 + 1e-9, f"captured {pr['captured']} in [0, 1]"),
            (r["stable_rank"] >= 1.0 and r["k95"] >= 1, "stable rank >= 1, k95 >= 1"),
            (pr["r"] == res["compress_rank"], "the projector's rank is the codec's"),
            (res["minus_embedding"], "the measures are of the stream less its embedding"),
            (pr["captured"] <= pr["captured_best"] + 1e-9,
             f"A_p captures {pr['captured']} <= the best rank-r share {pr['captured_best']}"),
            (len(res["weight_stable_rank"]) == 2, "stable ranks of both layers' projections"),
        ]
    for ok, what in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        fails += not ok
    return fails


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "residual":
        sys.exit(1 if residual(*sys.argv[2:5]) else 0)
    sys.exit(1 if report(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])) else 0)
