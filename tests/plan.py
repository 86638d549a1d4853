"""tessera plan against a run (tests/plan.sh).

usage: python3 tests/plan.py PLAN.json RUN.jsonl DP SP MODE PP ZERO CKPT [--expect-differ]

Finds the layout in the plan's JSON and the first step record of the run's
log, and compares what the run measured on its rank 0 (the first stage's):

- a layer's collectives (the log's comm.layers["0"]) equal to the plan's
  comm_layer, calls and bytes, exactly;
- the step's all-reduce and all-to-all, all-gather and reduce-scatter bytes
  equal to the plan's comm_step exactly; its broadcast and send/recv bytes,
  where the plan has some (--zero 1's shards, a pipeline's activations, ring
  attention's blocks), within 1 KiB: the run's control messages (the
  gradient norm's fold along the owners' runs, owners.c, the agreement on a
  step's outcome) are not planned. Where the plan has none they are reported,
  not compared (megatron's fold crosses ranks at every block: 17 KiB for
  tiny);
- the memory by kind (state_bytes) within 5%: params (with the copies),
  grads, optimizer, activations (with the memory options' leaves and the
  strategy's). The plan sizes with the fit check's arithmetic (whole
  parameters per shard, 1/S of them), the run holds its owners' runs
  (ts_zero_held: whole tensors, not an even split), so under --zero the two
  differ by up to a tensor's share; 5% covers the small models here;
- what the fit check counts beyond state_bytes, within 5% of the step
  record's: the attention calls' own buffers at their most (incall_bytes:
  the tracked allocator's peak, strategy.h `incall`) and the communicators'
  packing buffers (comm_buffer_bytes);
- and the plan must state all its bytes (no `*`).

Prints one line per check ("ok: ..." or "FAIL: ...") and exits 1 on a
failure. With --expect-differ it exits 0 only when some check FAILS: the
test's proof that a wrong layout's numbers are told apart.
"""
import json
import sys

KINDS_EXACT = ("allreduce", "alltoall", "allgather", "reduce_scatter")
KINDS_NEAR = ("bcast", "sendrecv")


def find(plan, dp, sp, mode, pp, zero, ckpt):
    for r in plan["rows"]:
        if (r["dp"], r["sp"], r["pp"], r["zero"], r["checkpoint"]) == (dp, sp, pp, zero, ckpt) and (
            sp == 1 or r["sp_mode"] == mode
        ):
            return r
    sys.exit("no layout dp%d sp%d %s pp%d z%d ckpt%d in the plan" % (dp, sp, mode, pp, zero, ckpt))


def checks(row, rec):
    out = []
    if "refused" in row:
        return [(False, "the plan refused it: " + row["refused"])]
    if not row["stated"]:
        out.append((False, "the plan does not state all of its bytes"))
    comm = rec.get("comm", {})
    got_layer = comm.get("layers", {}).get("0", {})
    want_layer = row["comm_layer"]
    for k in sorted(set(got_layer) | set(want_layer)):
        g, w = got_layer.get(k, {}), want_layer.get(k, {})
        ok = g.get("calls", 0) == w.get("calls", 0) and g.get("bytes", 0) == w.get("bytes", 0)
        out.append((ok, "layer 0 %s: run %s, plan %s" % (k, g, w)))
    step = row["comm_step"]
    for k in KINDS_EXACT + KINDS_NEAR:
        g, w = comm.get(k, {}).get("bytes", 0), step.get(k, {}).get("bytes", 0)
        if k in KINDS_NEAR and w == 0:  # the plan claims none: control messages only
            if g:
                out.append((True, "step %s bytes: run %d, not planned (control)" % (k, g)))
            continue
        ok = g == w if k in KINDS_EXACT else abs(g - w) <= 1024
        if g or w:
            out.append((ok, "step %s bytes: run %d, plan %d" % (k, g, w)))
    sb, mem = rec["state_bytes"], row["memory_first"]
    pairs = {
        "params": (sb["params"], mem["params"] + mem["copies"]),
        "grads": (sb["grads"], mem["grads"]),
        "optimizer": (sb["optimizer"], mem["optimizer"]),
        "activations": (
            sb["activations"],
            mem["activations"] + mem["scratch"] + mem["strategy"] + mem["strategy_state"],
        ),
    }
    pairs["incall"] = (rec.get("incall_bytes", -1), mem["incall"])
    pairs["comm_buffers"] = (rec.get("comm_buffer_bytes", -1), mem["comm_buffers"])
    for k, (g, w) in pairs.items():
        ok = abs(g - w) <= 0.05 * max(g, w, 1)
        out.append((ok, "memory %s: run %d, plan %d (%+.2f%%)" % (k, g, w, 100.0 * (w - g) / max(g, 1))))
    return out


def main():
    args = sys.argv[1:]
    differ = "--expect-differ" in args
    args = [a for a in args if a != "--expect-differ"]
    plan = json.load(open(args[0]))
    recs = [json.loads(l) for l in open(args[1]) if l.strip()]
    rec = next(r for r in recs if "state_bytes" in r)
    dp, sp, mode, pp, zero, ckpt = int(args[2]), int(args[3]), args[4], int(args[5]), int(args[6]), int(args[7])
    res = checks(find(plan, dp, sp, mode, pp, zero, ckpt), rec)
    failed = [m for ok, m in res if not ok]
    for ok, m in res:
        print(("ok: " if ok else ("differs: " if differ else "FAIL: ")) + m)
    if differ:
        print("ok: the plan of another layout differs (%d checks)" % len(failed) if failed else
              "FAIL: the plan of another layout matches the run")
        sys.exit(0 if failed else 1)
    sys.exit(1 if failed else 0)


main()
