"""Checks python/tessera_torch.py: its loss against tessera's, its export against a model
written in Hugging Face's conventions (tests/interop.sh runs it).

usage: check.py CKPT DATA TESS_HEX DIR

The module's command line runs in this process (tessera_torch.main), as
`loss --ckpt CKPT` (the data the checkpoint records, which is DATA) and
`export --ckpt CKPT --out DIR`; both must exit 0.

loss    TESS_HEX is tessera eval's loss of CKPT on DATA (its %a); the module computes its
        own on the same validation windows in float32 (t32) and float64 (t64):
            |tess - t32| <= 1e-5 * |t64|;
        and the loss the `loss` command printed is t32 bit for bit (the same code).
export  DIR is what the `export` command wrote (model.safetensors, config.json). The
        model below reads it the way transformers' GPT2LMHeadModel / LlamaForCausalLM do
        (Conv1D's (in, out) weights, the fused c_attn split in q, k, v order, gelu_new,
        rotate_half RoPE with HF's float32 inv_freq, repeat_kv, the config's eps and
        tie_word_embeddings), every tensor of the file used and none missing. On the first
        two validation windows of DATA its logits must equal the tessera module's:
            max |hf - mod| <= 1e-5 * max |mod|   over all logits, and the losses
            |hf - mod| <= 1e-5 * |mod|.
        Why 1e-5: the two compute the same function with different float32 operations
        (one fused q/k/v product against three, addmm against linear, the heads' features
        in permuted order in every q.k, HF's RoPE angles taken in float32 against the
        float64 table rounded once); measured at most 5.2e-7 of the logits' scale. A
        wrong mapping is far outside: the negative controls below must fail the same
        bound (LLaMA: the export read with tessera's pair rotation instead of rotate_half;
        GPT-2: c_proj read as an nn.Linear (out, in) weight instead of Conv1D's (in, out)),
        and do so by 3e-2 or more.

Reading the export uses the oracle's safetensors reader (tests/oracle/model.py), written
independently of the module's writer. Exit 0 when every check passes, 1 otherwise, 2 when
an input cannot be read.
"""

import contextlib
import io
import json
import math
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import model as oracle  # noqa: E402  (the oracle's safetensors reader)
import tessera_torch  # noqa: E402

LOSS_RTOL = 1e-5
LOGIT_RTOL = 1e-5


class HFModel(torch.nn.Module):
    """GPT2LMHeadModel or LlamaForCausalLM's forward from config.json and the state dict,
    in the conventions of transformers' modeling_gpt2.py and modeling_llama.py."""

    def __init__(self, directory, rope="halves", c_proj="conv1d"):
        super().__init__()
        with open(os.path.join(directory, "config.json")) as f:
            self.cfg = json.load(f)
        tensors, meta = oracle.read_safetensors(os.path.join(directory, "model.safetensors"))
        if meta.get("format") != "pt":
            raise ValueError("model.safetensors: metadata format is not \"pt\" (HF refuses it)")
        self.sd = {k: torch.from_numpy(v) for k, v in tensors.items()}
        self.used = set()
        self.rope, self.c_proj = rope, c_proj
        self.kind = self.cfg["model_type"]

    def w(self, name):
        self.used.add(name)
        return self.sd[name]

    def unused(self):
        return sorted(set(self.sd) - self.used)

    # ---- GPT-2 -----------------------------------------------------------------------
    def conv1d(self, x, prefix, as_linear=False):
        W, b = self.w(prefix + ".weight"), self.w(prefix + ".bias")
        if as_linear:  # the negative control: (out, in) as nn.Linear would hold it
            return x @ W.t() + b
        return torch.addmm(b, x.reshape(-1, x.shape[-1]), W).view(*x.shape[:-1], W.shape[1])

    def gpt2(self, idx):
        c = self.cfg
        B, T = idx.shape
        d, H = c["n_embd"], c["n_head"]
        dh, eps = d // H, c["layer_norm_epsilon"]
        assert c["activation_function"] == "gelu_new"
        ln = lambda x, p: torch.nn.functional.layer_norm(x, (d,), self.w(p + ".weight"),
                                                         self.w(p + ".bias"), eps)
        x = self.w("transformer.wte.weight")[idx] + self.w("transformer.wpe.weight")[torch.arange(T)]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for l in range(c["n_layer"]):
            p = f"transformer.h.{l}."
            a = self.conv1d(ln(x, p + "ln_1"), p + "attn.c_attn")
            q, k, v = (t.view(B, T, H, dh).permute(0, 2, 1, 3) for t in a.split(d, dim=2))
            att = torch.matmul(q, k.transpose(-1, -2)) / torch.tensor(dh ** 0.5)
            att = torch.where(causal, att, torch.tensor(torch.finfo(att.dtype).min))
            o = torch.matmul(att.softmax(dim=-1), v).permute(0, 2, 1, 3).reshape(B, T, d)
            x = x + self.conv1d(o, p + "attn.c_proj", self.c_proj == "linear")
            h = self.conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
            x = x + self.conv1d(h, p + "mlp.c_proj")
        x = ln(x, "transformer.ln_f")
        tied = c.get("tie_word_embeddings", True)  # GPT2Config's default
        return x @ self.w("transformer.wte.weight" if tied else "lm_head.weight").t()

    # ---- LLaMA -----------------------------------------------------------------------
    def llama(self, idx):
        c = self.cfg
        B, T = idx.shape
        d, H, Hkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        dh = c.get("head_dim") or d // H
        eps = c["rms_norm_eps"]
        assert c["hidden_act"] == "silu" and not c.get("attention_bias") and not c.get("mlp_bias")

        def rms(x, name):
            var = x.pow(2).mean(-1, keepdim=True)
            return self.w(name) * (x * torch.rsqrt(var + eps))

        lin = lambda x, name: x @ self.w(name).t()
        inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, dh, 2).float() / dh))
        freqs = torch.outer(torch.arange(T).float(), inv_freq)                    # (T, dh/2)
        if self.rope == "halves":  # LlamaRotaryEmbedding + apply_rotary_pos_emb
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()

            def rot(x):
                x1, x2 = x[..., :dh // 2], x[..., dh // 2:]
                return x * cos + torch.cat((-x2, x1), dim=-1) * sin
        else:  # the negative control: tessera's pairs (2i, 2i+1) on HF's rows
            cos, sin = freqs.cos(), freqs.sin()

            def rot(x):
                e, o = x[..., 0::2], x[..., 1::2]
                return torch.stack((e * cos - o * sin, e * sin + o * cos), -1).flatten(-2)
        x = self.w("model.embed_tokens.weight")[idx]
        mask = torch.full((T, T), torch.finfo(torch.float32).min).triu(1)
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            a = rms(x, p + "input_layernorm.weight")
            q = lin(a, p + "self_attn.q_proj.weight").view(B, T, H, dh).transpose(1, 2)
            k = lin(a, p + "self_attn.k_proj.weight").view(B, T, Hkv, dh).transpose(1, 2)
            v = lin(a, p + "self_attn.v_proj.weight").view(B, T, Hkv, dh).transpose(1, 2)
            q, k = rot(q), rot(k)
            rep = H // Hkv  # repeat_kv
            k = k[:, :, None].expand(B, Hkv, rep, T, dh).reshape(B, H, T, dh)
            v = v[:, :, None].expand(B, Hkv, rep, T, dh).reshape(B, H, T, dh)
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(dh) + mask
            att = torch.softmax(att, dim=-1, dtype=torch.float32)
            o = torch.matmul(att, v).transpose(1, 2).reshape(B, T, H * dh)
            x = x + lin(o, p + "self_attn.o_proj.weight")
            m = rms(x, p + "post_attention_layernorm.weight")
            g = torch.nn.functional.silu(lin(m, p + "mlp.gate_proj.weight"))
            x = x + lin(g * lin(m, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight")
        x = rms(x, "model.norm.weight")
        tied = c.get("tie_word_embeddings", False)  # LlamaConfig's default
        return x @ self.w("model.embed_tokens.weight" if tied else "lm_head.weight").t()

    def forward(self, idx):
        return self.gpt2(idx) if self.kind == "gpt2" else self.llama(idx)


def row(ok, text):
    print(f"  {text}  {'PASS' if ok else 'FAIL'}")
    return ok


def cli(*args):
    """(exit status, stdout) of the module's command line, run in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            rc = tessera_torch.main(list(args))
        except SystemExit as e:  # argparse's usage errors
            rc = e.code
    return rc, out.getvalue()


def check_loss(ckpt, data, tess_hex):
    ck = tessera_torch.Checkpoint(ckpt)
    split = tessera_torch.validation_split(ck.shape, data, data_format=ck.config.get("data_format"))
    batches = tessera_torch.validation_batches(ck.shape, split, int(ck.config["eval_batches"]))
    t32, t64 = (tessera_torch.mean_loss(tessera_torch.load(ckpt, dt), batches)
                for dt in (torch.float32, torch.float64))
    tess = float.fromhex(tess_hex)
    rel = abs(tess - t32) / abs(t64)
    good = row(rel <= LOSS_RTOL, f"loss: tessera {tess:.7f} torch32 {t32:.7f} torch64 {t64:.7f}: "
                                 f"|tess - t32| / |t64| = {rel:.2e} <= {LOSS_RTOL:.0e}")
    rc, out = cli("loss", "--ckpt", ckpt)
    m = re.search(r"val loss \S+ \(([^)]*)\)", out) if rc == 0 else None
    printed = m.group(1) if m else None
    good &= row(printed is not None and float.fromhex(printed) == t32,
                f"`loss --ckpt` exits {rc} and prints {printed}, t32 is {t32.hex()}")
    return good


def compare(hf, mod_logits, mod_loss, targets, label):
    """(within bounds, text) for one HF-convention forward against the module's."""
    logits = hf
    V = logits.shape[-1]
    loss = float(torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)))
    scale = float(mod_logits.abs().max())
    err = float((logits - mod_logits).abs().max()) / scale
    lerr = abs(loss - mod_loss) / abs(mod_loss)
    ok = err <= LOGIT_RTOL and lerr <= LOSS_RTOL
    return ok, (f"{label}: max|hf - mod| / max|mod| = {err:.2e}, loss {loss:.7f} vs "
                f"{mod_loss:.7f} ({lerr:.2e}); bound {LOGIT_RTOL:.0e}")


@torch.no_grad()
def check_export(ckpt, directory, data):
    ck = tessera_torch.Checkpoint(ckpt)
    mod = tessera_torch.load(ckpt)
    split = tessera_torch.validation_split(ck.shape, data, data_format=ck.config.get("data_format"))
    inputs, targets = tessera_torch.validation_batches(ck.shape, split, 1)[0]
    inputs, targets = inputs[:2], targets[:2]
    mod_logits, mod_loss = mod(inputs, targets)
    mod_loss = float(mod_loss)
    rc, out = cli("export", "--ckpt", ckpt, "--out", directory)
    if not row(rc == 0, f"`export --ckpt {os.path.basename(ckpt)} --out DIR` exits {rc}"):
        return False
    hf = HFModel(directory)
    ok, text = compare(hf(inputs), mod_logits, mod_loss, targets, f"{hf.kind} export")
    good = row(ok, text)
    good &= row(not hf.unused(), f"every tensor of model.safetensors used (unused: {hf.unused()})")
    control = HFModel(directory, rope="pairs") if hf.kind == "llama" else \
        HFModel(directory, c_proj="linear")
    what = "tessera's RoPE pairs" if hf.kind == "llama" else "c_proj as nn.Linear"
    ok, text = compare(control(inputs), mod_logits, mod_loss, targets, f"control ({what})")
    good &= row(not ok, text + " -- must fail")
    return good


def main(argv):
    if len(argv) != 4:
        sys.stderr.write("usage: check.py CKPT DATA TESS_HEX DIR\n")
        return 2
    ckpt, data, tess_hex, directory = argv
    try:
        print(f"interop: {ckpt}")
        good = check_loss(ckpt, data, tess_hex)
        good &= check_export(ckpt, directory, data)
        return 0 if good else 1
    except (OSError, ValueError, KeyError, tessera_torch.TesseraError, oracle.OracleError) as e:
        print(f"check.py: {type(e).__name__}: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
