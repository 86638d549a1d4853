#!/usr/bin/env python3
"""Writes llm.c's GPT-2 checkpoint (train_gpt2.c's gpt2_build_from_checkpoint: a header of
256 int32 -- magic 20240326, version 3 (fp32), maxT, V, L, NH, C, Vp -- then the parameters
as 16 tensors in its order) from a tessera GPT's weights, the weights.safetensors that
`tessera dump` writes (the initial parameters of a configuration). maxT is the run's T
(tessera's position table has T rows) and Vp = V, so both trainers compute the same
shapes; llm.c's [wq; wk; wv] and (out, in) matrices are tessera's layout already.

    /usr/bin/python3 bench/llmc_ckpt.py DUMP/weights.safetensors gpt2.bin
"""
import json
import struct
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: llmc_ckpt.py WEIGHTS.safetensors OUT.bin")
    src = open(sys.argv[1], "rb")
    n = struct.unpack("<Q", src.read(8))[0]
    head = json.loads(src.read(n))
    base = 8 + n
    cfg = json.loads(head["__metadata__"]["tessera.config"])
    V, C, L, H, T, F = cfg["vocab"], cfg["d"], cfg["n_layer"], cfg["n_head"], cfg["seq"], cfg["d_ff"]
    if cfg.get("variant") != "gpt" or not cfg.get("tied") or F != 4 * C:
        sys.exit("llmc_ckpt.py: llm.c's GPT-2 needs the GPT variant, a tied head and d_ff = 4 d")

    def raw(name, shape):
        e = head[name]
        if e["dtype"] != "F32" or e["shape"] != shape:
            sys.exit("llmc_ckpt.py: %s is %s %s, expected F32 %s" % (name, e["dtype"], e["shape"], shape))
        a, b = e["data_offsets"]
        src.seek(base + a)
        return src.read(b - a)

    def layers(*parts):  # one tensor (L, ...) from each layer's parts, concatenated
        return b"".join(raw("h.%d.%s" % (l, p), s) for l in range(L) for p, s in parts)

    with open(sys.argv[2], "wb") as out:
        out.write(struct.pack("<256i", 20240326, 3, T, V, L, H, C, V, *([0] * 248)))
        out.write(raw("wte", [V, C]))
        out.write(raw("wpe", [T, C]))
        out.write(layers(("ln1.w", [C])))
        out.write(layers(("ln1.b", [C])))
        out.write(layers(("attn.wq", [C, C]), ("attn.wk", [C, C]), ("attn.wv", [C, C])))
        out.write(layers(("attn.bq", [C]), ("attn.bk", [C]), ("attn.bv", [C])))
        out.write(layers(("attn.wo", [C, C])))
        out.write(layers(("attn.bo", [C])))
        out.write(layers(("ln2.w", [C])))
        out.write(layers(("ln2.b", [C])))
        out.write(layers(("mlp.w1", [F, C])))
        out.write(layers(("mlp.b1", [F])))
        out.write(layers(("mlp.w2", [C, F])))
        out.write(layers(("mlp.b2", [C])))
        out.write(raw("lnf.w", [C]))
        out.write(raw("lnf.b", [C]))
    print("%s: T %d, V %d, L %d, H %d, d %d" % (sys.argv[2], T, V, L, H, C))


if __name__ == "__main__":
    main()
