"""The reference models of docs/MODEL.md (GPT and LLaMA), written independently in plain PyTorch.

This is the oracle that tessera's serial reference is checked against: the same
model, optimizer and schedule, computed by different code (PyTorch autograd,
a full T x T attention matrix instead of tiled online softmax) in float32 and in
float64. Nothing here is shared with the C implementation except the documents.

Contents:
  - safetensors reading and writing (little-endian u64 header length, JSON
    header, raw data), by hand: there is no safetensors package here;
  - the configuration as tessera writes it (config.json, tolerant of layout);
  - Philox4x32-10 and ts_rng_uniform / ts_rng_normal, vectorised in numpy, so
    dropout masks and initial values can be regenerated from their keys;
  - the GPT and LLaMA forward passes (loss, logits) whose gradients come from
    autograd (LLaMA: RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases);
  - the K-step AdamW trajectory with clipping and the warm-up + cosine schedule
    (or the hybrid with Muon, Newton-Schulz or Polar Express, for the layers' matrices).
"""

import json
import math
import os
import struct
from collections import OrderedDict

import numpy as np
import torch


class OracleError(Exception):
    """A dump that cannot be read or does not describe a model we know."""


# ---------------------------------------------------------------------------
# safetensors

_ST_DTYPES = {
    "F32": np.dtype("<f4"), "F64": np.dtype("<f8"),
    "I32": np.dtype("<i4"), "I64": np.dtype("<i8"),
}


def read_safetensors(path):
    """Returns (OrderedDict name -> numpy array in file order, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise OracleError(f"{path}: shorter than the 8-byte header length")
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise OracleError(f"{path}: header length {hlen} runs past the end of the file")
    try:
        header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OracleError(f"{path}: header is not JSON ({e})")
    data = memoryview(raw)[8 + hlen:]
    meta = header.pop("__metadata__", {}) or {}
    entries = []
    for name, info in header.items():
        dt = info.get("dtype")
        if dt not in _ST_DTYPES:
            raise OracleError(f"{path}: tensor {name} has unsupported dtype {dt}")
        lo, hi = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        dtype = _ST_DTYPES[dt]
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if hi - lo != n * dtype.itemsize or hi > len(data) or lo < 0:
            raise OracleError(f"{path}: tensor {name} has data_offsets {lo},{hi} that do not "
                              f"fit its shape {list(shape)} or the file")
        arr = np.frombuffer(data[lo:hi], dtype=dtype).reshape(shape).copy()
        entries.append((lo, name, arr))
    entries.sort(key=lambda e: e[0])  # file order = the writer's order
    return OrderedDict((name, arr) for _, name, arr in entries), meta


def write_safetensors(path, tensors, meta=None):
    """Writes F32 tensors (an ordered mapping name -> array) in the given order."""
    header = {}
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    off = 0
    blobs = []
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * (-len(hj) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------------------
# configuration

def _parse_number(v):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        s = v.strip()
        try:
            if "0x" in s.lower() and ("p" in s.lower() or "." in s):
                return float.fromhex(s)
            return int(s, 0)
        except ValueError:
            try:
                return float(s)
            except ValueError:
                pass
    raise OracleError(f"config value {v!r} is not a number")


class Config:
    """Lookup in tessera's config.json, which is {"model": {...}}.

    Floats are also written in C's %a form; when a key has a hexadecimal twin
    (KEY_hex, or the value itself is a %a string) that exact value is used, so
    float32 settings such as beta2 = 0.95f arrive here bit for bit.
    """

    ALIASES = {
        "d": ("d", "d_model", "n_embd", "width"),
        "n_layer": ("n_layer", "layers", "L"),
        "n_head": ("n_head", "heads", "H"),
        "d_ff": ("d_ff", "ff", "d_mlp"),
        "seq": ("seq", "T", "block_size", "seq_len"),
        "vocab": ("vocab", "V", "vocab_size"),
        "batch": ("batch", "B"),
        "n_kv_head": ("n_kv_head", "n_kv_heads", "kv_heads", "n_head_kv"),
    }

    def __init__(self, obj, where="config.json"):
        self.where = where
        # "model" first, then the top level, then any other nested object
        self.scopes = []
        if isinstance(obj, dict):
            if isinstance(obj.get("model"), dict):
                self.scopes.append(obj["model"])
            self.scopes.append(obj)
            for k, v in obj.items():
                if k != "model" and isinstance(v, dict):
                    self.scopes.append(v)

    @classmethod
    def load(cls, path):
        try:
            with open(path) as f:
                return cls(json.load(f), path)
        except (OSError, json.JSONDecodeError) as e:
            raise OracleError(f"{path}: cannot read the configuration ({e})")

    def has(self, key):
        return self._raw(key) is not None

    def _raw(self, key):
        for name in self.ALIASES.get(key, (key,)):
            for s in self.scopes:
                if name + "_hex" in s:
                    return s[name + "_hex"]
                if name in s:
                    return s[name]
        return None

    def text(self, key, default=None):
        """A string setting (e.g. "variant"), or default when absent."""
        for s in self.scopes:
            if key in s:
                return str(s[key])
        return default

    def get(self, key, default=None, required=True):
        v = self._raw(key)
        if v is None:
            if default is not None or not required:
                return default
            raise OracleError(f"{self.where}: needed key \"{key}\" is missing")
        return _parse_number(v)

    def f32(self, key, default=None, required=True):
        """A float setting as the float32 tessera holds, returned as a Python float."""
        v = self.get(key, default, required)
        return None if v is None else float(np.float32(v))


# ---------------------------------------------------------------------------
# Philox4x32-10 and the counter-based draws of src/exact/rng.c (docs/MODEL.md keys)

RNG_INIT, RNG_DROPOUT_ATTN, RNG_DROPOUT_PROJ, RNG_DROPOUT_MLP, RNG_DATA = 1, 2, 3, 4, 5
_M32 = np.uint64(0xFFFFFFFF)


def philox_block(seed, purpose, step, index):
    """The four 32-bit output words for counters (index, step, purpose) under key seed.

    index is an array (any integer dtype, values < 2^64); the others are scalars.
    The counter packs the 64-bit index, 40 bits of step and 24 bits of purpose.
    Every word lives in a uint64 so the 32 x 32 -> 64 bit products are exact.
    """
    idx = np.asarray(index, dtype=np.uint64)
    c0 = idx & _M32
    c1 = idx >> np.uint64(32)
    c2 = np.full_like(c0, np.uint64(step & 0xFFFFFFFF))
    c3 = np.full_like(c0, np.uint64(((step >> 32) & 0xFF) | ((purpose & 0xFFFFFF) << 8)))
    k0 = seed & 0xFFFFFFFF
    k1 = (seed >> 32) & 0xFFFFFFFF
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    sh = np.uint64(32)
    for _ in range(10):
        p0 = c0 * m0
        p1 = c2 * m1
        n0 = (p1 >> sh) ^ c1 ^ np.uint64(k0)
        n2 = (p0 >> sh) ^ c3 ^ np.uint64(k1)
        c0, c1, c2, c3 = n0, p1 & _M32, n2, p0 & _M32
        k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
        k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return c0, c1, c2, c3


def rng_u32(seed, purpose, step, index):
    return philox_block(seed, purpose, step, index)[0].astype(np.uint32)


def rng_uniform(seed, purpose, step, index):
    """float32 in [0, 1): the top 24 bits of the first word times 2^-24 (exact)."""
    w = philox_block(seed, purpose, step, index)[0]
    return ((w >> np.uint64(8)).astype(np.float64) * 2.0 ** -24).astype(np.float32)


def rng_normal(seed, purpose, step, index):
    """Box-Muller on the first two words, in double, rounded once to float32."""
    w0, w1, _, _ = philox_block(seed, purpose, step, index)
    u1 = ((w0 >> np.uint64(8)).astype(np.float64) + 1.0) / 16777216.0
    u2 = (w1 >> np.uint64(8)).astype(np.float64) / 16777216.0
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)).astype(np.float32)


def dropout_keep(seed, purpose, step, base, shape, p):
    """Boolean keep-mask for global indices base + (row-major position in shape).

    Kept when ts_rng_uniform(...) >= p, both float32; the uniform is k·2^-24
    exactly, so comparing in float64 against float32(p) gives the same answer.
    Generated in chunks to bound the uint64 temporaries.
    """
    n = int(np.prod(shape, dtype=np.int64))
    out = np.empty(n, dtype=bool)
    pf = float(np.float32(p))
    chunk = 1 << 22
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        idx = np.arange(base + lo, base + hi, dtype=np.uint64)
        w = philox_block(seed, purpose, step, idx)[0]
        out[lo:hi] = (w >> np.uint64(8)).astype(np.float64) * 2.0 ** -24 >= pf
    return out.reshape(shape)


# ---------------------------------------------------------------------------
# the model

def param_specs(V, T, d, L, F, tied):
    """(name, shape, init std or 'one'/'zero') in the canonical order of docs/MODEL.md."""
    proj_std = 0.02 / math.sqrt(2 * L)
    specs = [("wte", (V, d), 0.02), ("wpe", (T, d), 0.02)]
    for l in range(L):
        h = f"h.{l}."
        specs += [
            (h + "ln1.w", (d,), "one"), (h + "ln1.b", (d,), "zero"),
            (h + "attn.wq", (d, d), 0.02), (h + "attn.bq", (d,), "zero"),
            (h + "attn.wk", (d, d), 0.02), (h + "attn.bk", (d,), "zero"),
            (h + "attn.wv", (d, d), 0.02), (h + "attn.bv", (d,), "zero"),
            (h + "attn.wo", (d, d), proj_std), (h + "attn.bo", (d,), "zero"),
            (h + "ln2.w", (d,), "one"), (h + "ln2.b", (d,), "zero"),
            (h + "mlp.w1", (F, d), 0.02), (h + "mlp.b1", (F,), "zero"),
            (h + "mlp.w2", (d, F), proj_std), (h + "mlp.b2", (d,), "zero"),
        ]
    specs += [("lnf.w", (d,), "one"), ("lnf.b", (d,), "zero")]
    if not tied:
        specs.append(("lm_head", (V, d), 0.02))
    return specs


def llama_param_specs(V, d, L, F, Ckv, tied):
    """The LLaMA variant's table of docs/MODEL.md: (name, shape, init) in canonical order.

    Ckv = Hkv * dh, the width of the key and value projections. No biases.
    """
    proj_std = 0.02 / math.sqrt(2 * L)
    specs = [("wte", (V, d), 0.02)]
    for l in range(L):
        h = f"h.{l}."
        specs += [
            (h + "rms1.w", (d,), "one"),
            (h + "attn.wq", (d, d), 0.02),
            (h + "attn.wk", (Ckv, d), 0.02),
            (h + "attn.wv", (Ckv, d), 0.02),
            (h + "attn.wo", (d, d), proj_std),
            (h + "rms2.w", (d,), "one"),
            (h + "mlp.w1", (F, d), 0.02),       # gate
            (h + "mlp.w3", (F, d), 0.02),       # up
            (h + "mlp.w2", (d, F), proj_std),   # down
        ]
    specs.append(("rmsf.w", (d,), "one"))
    if not tied:
        specs.append(("lm_head", (V, d), 0.02))
    return specs


def init_params(specs, seed):
    """The documented initialisation: std · ts_rng_normal(seed, INIT, k, i)."""
    out = OrderedDict()
    for k, (name, shape, init) in enumerate(specs):
        n = int(np.prod(shape))
        if init == "one":
            out[name] = np.ones(shape, np.float32)
        elif init == "zero":
            out[name] = np.zeros(shape, np.float32)
        else:
            z = rng_normal(seed, RNG_INIT, k, np.arange(n, dtype=np.uint64))
            out[name] = (np.float32(init) * z).reshape(shape)
    return out


VARIANTS = ("gpt", "llama")


class Shape:
    """The model's dimensions, taken from the tensors and cross-checked with the config.

    variant is config.json's "variant" ("gpt" or "llama"); without that key it is
    read off the tensors (RMSNorm weights mean LLaMA). For LLaMA: Hkv is "n_kv_head"
    (n_head when absent), T_max is "seq" (there is no position table), rope_theta is
    "rope_theta" (its %a twin when present; 10000, the documented default, when absent).
    """

    def __init__(self, cfg, weights):
        if "wte" not in weights:
            raise OracleError("weights.safetensors: wte missing")
        self.V, self.d = weights["wte"].shape
        variant = cfg.text("variant")
        if variant is None:
            variant = "llama" if ("h.0.rms1.w" in weights or "rmsf.w" in weights) else "gpt"
        if variant not in VARIANTS:
            raise OracleError(f"{cfg.where}: variant \"{variant}\" is not one of "
                              f"{', '.join(VARIANTS)}")
        self.variant = variant
        llama = variant == "llama"
        if llama:
            self.T_max = int(cfg.get("seq"))
        else:
            if "wpe" not in weights:
                raise OracleError("weights.safetensors: wte / wpe missing")
            self.T_max = weights["wpe"].shape[0]
        norm1 = "rms1.w" if llama else "ln1.w"
        self.L = 0
        while f"h.{self.L}.{norm1}" in weights:
            self.L += 1
        if self.L and "h.0.mlp.w1" not in weights:
            raise OracleError("weights.safetensors: h.0.mlp.w1 missing")
        self.F = weights["h.0.mlp.w1"].shape[0] if self.L else 4 * self.d
        self.tied = "lm_head" not in weights
        self.H = int(cfg.get("n_head"))
        for key, mine in (("d", self.d), ("n_layer", self.L), ("d_ff", self.F),
                          ("seq", self.T_max), ("vocab", self.V)):
            if cfg.has(key) and int(cfg.get(key)) != mine:
                raise OracleError(f"{cfg.where}: {key} = {cfg.get(key)} but the weights say {mine}")
        if cfg.has("tied") and bool(cfg.get("tied")) != self.tied:
            raise OracleError(f"{cfg.where}: tied = {cfg.get('tied')} but lm_head is "
                              f"{'absent' if self.tied else 'present'}")
        if self.d % self.H:
            raise OracleError(f"{cfg.where}: d = {self.d} is not a multiple of n_head = {self.H}")
        self.dh = self.d // self.H
        if llama:
            self.Hkv = int(cfg.get("n_kv_head", self.H))
            if self.Hkv < 1 or self.H % self.Hkv:
                raise OracleError(f"{cfg.where}: n_kv_head = {self.Hkv} does not divide "
                                  f"n_head = {self.H}")
            if self.dh % 2:
                raise OracleError(f"{cfg.where}: head width d / n_head = {self.dh} is odd "
                                  f"(RoPE rotates pairs)")
            self.G = self.H // self.Hkv
            self.Ckv = self.Hkv * self.dh
            if self.L and "h.0.attn.wk" in weights and weights["h.0.attn.wk"].shape[0] != self.Ckv:
                raise OracleError(f"{cfg.where}: n_kv_head = {self.Hkv} (n_head {self.H}) means "
                                  f"h.0.attn.wk has {self.Ckv} rows, the weights have "
                                  f"{weights['h.0.attn.wk'].shape[0]}")
            self.rope_theta = float(cfg.get("rope_theta", 10000.0))
            if not self.rope_theta > 0:
                raise OracleError(f"{cfg.where}: rope_theta = {self.rope_theta} is not positive")
            self.specs = llama_param_specs(self.V, self.d, self.L, self.F, self.Ckv, self.tied)
        else:
            self.Hkv, self.G, self.Ckv, self.rope_theta = self.H, 1, self.d, None
            self.specs = param_specs(self.V, self.T_max, self.d, self.L, self.F, self.tied)
        missing = [n for n, _, _ in self.specs if n not in weights]
        if missing:
            raise OracleError(f"weights.safetensors: missing {', '.join(missing[:5])}")
        for n, shp, _ in self.specs:
            if tuple(weights[n].shape) != tuple(shp):
                raise OracleError(f"weights.safetensors: {n} has shape {list(weights[n].shape)}, "
                                  f"expected {list(shp)}")
        known = {n for n, _, _ in self.specs}
        extra = [n for n in weights if n not in known and not n.startswith("batch.")]
        if extra:
            raise OracleError(f"weights.safetensors: tensors that the {variant} model does not "
                              f"have: {', '.join(extra[:5])}")


def _layernorm(x, w, b):
    # biased variance, eps 1e-5, as docs/MODEL.md
    mu = x.mean(dim=-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(dim=-1, keepdim=True)
    return xc * torch.rsqrt(var + 1e-5) * w + b


def _gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _rmsnorm(x, w):
    # rstd = 1/sqrt(mean(x^2) + 1e-5), as docs/MODEL.md
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-5) * w


def _silu(g):
    # g * sigmoid(g) = g / (1 + e^-g); sigmoid keeps the gradient finite for very negative g
    return g * torch.sigmoid(g)


def rope_table(T, dh, theta):
    """cos and sin of a = t * theta^(-2i/dh) for t < T, i < dh/2, in float64 (T, dh/2).

    Computed with the C library's pow, cos and sin (Python's math module), so that
    rounding them to float32 gives the table docs/MODEL.md describes.
    """
    inv = [math.pow(theta, -2.0 * i / dh) for i in range(dh // 2)]
    ang = [[t * f for f in inv] for t in range(T)]
    cos = np.array([[math.cos(a) for a in row] for row in ang], dtype=np.float64)
    sin = np.array([[math.sin(a) for a in row] for row in ang], dtype=np.float64)
    return cos.reshape(T, dh // 2), sin.reshape(T, dh // 2)


class GPT:
    """Parameters as explicit leaf tensors of one dtype; forward builds the autograd graph."""

    def __init__(self, shape, weights, dtype, dropout=0.0, seed=0):
        self.s = shape
        self.dtype = dtype
        self.p_drop = float(np.float32(dropout))
        self.seed = int(seed)
        self.params = OrderedDict()
        for name, _, _ in shape.specs:
            t = torch.tensor(np.asarray(weights[name], dtype=np.float32), dtype=torch.float32)
            self.params[name] = t.to(dtype).requires_grad_(True)

    def _drop(self, x, purpose, step, base):
        """x * keep / (1 - p) with the counter-keyed mask, or x when dropout is off."""
        if step is None or self.p_drop <= 0.0:
            return x
        keep = dropout_keep(self.seed, purpose, step, base, tuple(x.shape), self.p_drop)
        scale = 1.0 / (1.0 - self.p_drop)
        return x * (torch.from_numpy(keep).to(self.dtype) * scale)

    def forward(self, inputs, targets, step=None):
        """inputs, targets: (B, T) int64. step: 1-based optimizer step keying dropout,
        None for evaluation. Returns (mean loss, logits (B, T, V))."""
        P = self.params
        s = self.s
        B, T = inputs.shape
        d, H, dh = s.d, s.H, s.dh
        x = P["wte"][inputs] + P["wpe"][:T].unsqueeze(0)                 # (B, T, d)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        for l in range(s.L):
            h = f"h.{l}."
            a = _layernorm(x, P[h + "ln1.w"], P[h + "ln1.b"])
            q = a @ P[h + "attn.wq"].t() + P[h + "attn.bq"]
            k = a @ P[h + "attn.wk"].t() + P[h + "attn.bk"]
            v = a @ P[h + "attn.wv"].t() + P[h + "attn.bv"]
            # head hh owns features [hh·dh, (hh+1)·dh): (B, T, d) -> (B, H, T, dh)
            q, k, v = (t.view(B, T, H, dh).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))     # (B, H, T, T)
            att = att.masked_fill(~causal, float("-inf"))
            att = torch.softmax(att, dim=-1)
            att = self._drop(att, RNG_DROPOUT_ATTN, step, l * B * H * T * T)
            o = (att @ v).transpose(1, 2).reshape(B, T, d)
            y = o @ P[h + "attn.wo"].t() + P[h + "attn.bo"]
            x = x + self._drop(y, RNG_DROPOUT_PROJ, step, l * B * T * d)
            m = _layernorm(x, P[h + "ln2.w"], P[h + "ln2.b"])
            y = _gelu(m @ P[h + "mlp.w1"].t() + P[h + "mlp.b1"]) @ P[h + "mlp.w2"].t() \
                + P[h + "mlp.b2"]
            x = x + self._drop(y, RNG_DROPOUT_MLP, step, l * B * T * d)
        xf = _layernorm(x, P["lnf.w"], P["lnf.b"])
        W = P["wte"] if s.tied else P["lm_head"]
        logits = xf @ W.t()                                               # (B, T, V)
        logp = torch.log_softmax(logits, dim=-1)
        loss = -logp.gather(-1, targets.unsqueeze(-1)).mean()
        return loss, logits

    def loss_and_grads(self, inputs, targets, step=None):
        """Returns (loss float, logits ndarray, OrderedDict name -> grad ndarray)."""
        for p in self.params.values():
            p.grad = None
        loss, logits = self.forward(inputs, targets, step)
        loss.backward()
        grads = OrderedDict((n, p.grad.detach().numpy().copy()) for n, p in self.params.items())
        return float(loss.item()), logits.detach().numpy().copy(), grads


class LLaMA(GPT):
    """The LLaMA variant of docs/MODEL.md: RMSNorm, RoPE on q and k, grouped-query
    attention (query head h reads key/value head h // G), SwiGLU MLP, no biases.

    The RoPE table is cos/sin of t * theta^(-2i/dh) computed in float64; the float32
    model uses it rounded once to float32 (as tessera does), the float64 model keeps
    the float64 values, like every other constant of the float64 reference (1e-5,
    1/sqrt(dh)): it is the exact model that both float32 implementations approximate.
    """

    def __init__(self, shape, weights, dtype, dropout=0.0, seed=0):
        super().__init__(shape, weights, dtype, dropout, seed)
        cos, sin = rope_table(shape.T_max, shape.dh, shape.rope_theta)
        if dtype != torch.float64:
            cos, sin = cos.astype(np.float32), sin.astype(np.float32)
        self.cos = torch.from_numpy(cos).to(dtype)                       # (T_max, dh/2)
        self.sin = torch.from_numpy(sin).to(dtype)

    def _rms(self, x, w):
        return _rmsnorm(x, w)

    def _kv_heads(self, t):
        """(B, Hkv, T, dh) -> (B, H, T, dh): query head hh reads key/value head hh // G."""
        return t.repeat_interleave(self.s.G, dim=1) if self.s.G > 1 else t

    def _rope(self, x):
        """x: (B, heads, T, dh); rotates the pairs (2i, 2i+1) by t * theta^(-2i/dh)."""
        T = x.shape[2]
        c, s = self.cos[:T], self.sin[:T]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y0 = x0 * c - x1 * s
        y1 = x0 * s + x1 * c
        return torch.stack((y0, y1), dim=-1).flatten(-2)

    def forward(self, inputs, targets, step=None):
        """As GPT.forward, for the LLaMA variant."""
        P = self.params
        s = self.s
        B, T = inputs.shape
        d, H, Hkv, dh = s.d, s.H, s.Hkv, s.dh
        x = P["wte"][inputs]                                             # (B, T, d)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        for l in range(s.L):
            h = f"h.{l}."
            a = self._rms(x, P[h + "rms1.w"])
            q = (a @ P[h + "attn.wq"].t()).view(B, T, H, dh).transpose(1, 2)     # (B, H, T, dh)
            k = (a @ P[h + "attn.wk"].t()).view(B, T, Hkv, dh).transpose(1, 2)   # (B, Hkv, T, dh)
            v = (a @ P[h + "attn.wv"].t()).view(B, T, Hkv, dh).transpose(1, 2)
            q, k = self._rope(q), self._rope(k)
            k, v = self._kv_heads(k), self._kv_heads(v)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))     # (B, H, T, T)
            att = att.masked_fill(~causal, float("-inf"))
            att = torch.softmax(att, dim=-1)
            att = self._drop(att, RNG_DROPOUT_ATTN, step, l * B * H * T * T)
            o = (att @ v).transpose(1, 2).reshape(B, T, d)
            y = o @ P[h + "attn.wo"].t()
            x = x + self._drop(y, RNG_DROPOUT_PROJ, step, l * B * T * d)
            m = self._rms(x, P[h + "rms2.w"])
            y = (_silu(m @ P[h + "mlp.w1"].t()) * (m @ P[h + "mlp.w3"].t())) @ P[h + "mlp.w2"].t()
            x = x + self._drop(y, RNG_DROPOUT_MLP, step, l * B * T * d)
        xf = self._rms(x, P["rmsf.w"])
        W = P["wte"] if s.tied else P["lm_head"]
        logits = xf @ W.t()                                               # (B, T, V)
        logp = torch.log_softmax(logits, dim=-1)
        loss = -logp.gather(-1, targets.unsqueeze(-1)).mean()
        return loss, logits


def build_model(shape, weights, dtype, dropout=0.0, seed=0):
    """The oracle model of shape.variant (GPT or LLaMA) with the given weights."""
    cls = LLaMA if shape.variant == "llama" else GPT
    return cls(shape, weights, dtype, dropout, seed)


# ---------------------------------------------------------------------------
# optimizer, clipping and schedule (docs/MODEL.md)

class TrainSettings:
    def __init__(self, cfg):
        self.lr = cfg.f32("lr")
        self.min_lr_frac = cfg.f32("min_lr_frac")
        self.weight_decay = cfg.f32("weight_decay")
        self.beta1 = cfg.f32("beta1")
        self.beta2 = cfg.f32("beta2")
        self.eps = cfg.f32("eps")
        self.grad_clip = cfg.f32("grad_clip")
        self.warmup = int(cfg.get("warmup"))
        # 0 AdamW, 1 Muon (Newton-Schulz), 2 Muon (Polar Express) for the layers' matrices
        self.optimizer = int(cfg.get("optimizer", 0))
        self.muon_lr = cfg.f32("muon_lr", 0.0)


# ---- Muon for the layers' 2-D weights (docs/MODEL.md, docs/ALGORITHMS.md §8), written
# from the formulas with torch matrix products: independent of src/cpu/orthogonal.c.

NS_ABC = (3.4445, -4.7750, 2.0315)
PE_TABLE = [
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
]


def orthogonalise(G, polar_express, steps=5):
    """The polar factor's approximation of G (float32): quintic Newton-Schulz on
    G/(|G|_F + 1e-7), or Polar Express on G/(|G|_F*1.01 + 1e-7) with every published
    triple but the last divided by (1.01, 1.01^3, 1.01^5); the wide orientation."""
    X = G.clone()
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.T
    X = X / (X.norm() * (1.01 if polar_express else 1.0) + 1e-7)
    for k in range(steps):
        if polar_express:
            a, b, c = PE_TABLE[k] if k < len(PE_TABLE) - 1 else PE_TABLE[-1]
            if k < len(PE_TABLE) - 1:
                a, b, c = a / 1.01, b / 1.01 ** 3, c / 1.01 ** 5
            else:
                a, b, c = 1.875, -1.25, 0.375
        else:
            a, b, c = NS_ABC
        A = X @ X.T
        X = a * X + (b * A + c * (A @ A)) @ X
    return X.T if tall else X


def muon_step(p, g, buf, lr, wd, polar_express, beta=0.95):
    """One Muon update in place: Nesterov momentum, orthogonalised, shape-scaled."""
    buf.mul_(beta).add_(g, alpha=1.0 - beta)
    u = orthogonalise((1.0 - beta) * g + beta * buf, polar_express)
    scale = math.sqrt(max(1.0, p.shape[0] / p.shape[1]))
    p.mul_(1.0 - lr * wd).sub_(lr * scale * u)


def lr_at(t, s, steps):
    """Learning rate for 0-based step s of a run of `steps` steps."""
    if s < t.warmup:
        return t.lr * (s + 1) / t.warmup
    lr_min = t.lr * t.min_lr_frac
    frac = (s - t.warmup) / max(1, steps - t.warmup)
    return lr_min + 0.5 * (t.lr - lr_min) * (1.0 + math.cos(math.pi * frac))


def train_trajectory(model, settings, inputs, targets, steps, use_dropout):
    """Runs `steps` optimizer steps on one batch; returns the loss before each update."""
    params = list(model.params.values())
    muon = [p for n, p in model.params.items()
            if settings.optimizer and p.dim() == 2 and n.startswith("h.")]
    bufs = [torch.zeros_like(p) for p in muon]
    rest = [p for p in params if not any(p is q for q in muon)]
    decay = [p for p in rest if p.dim() >= 2]
    no_decay = [p for p in rest if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.lr, betas=(settings.beta1, settings.beta2), eps=settings.eps)
    losses = []
    for s in range(steps):
        for p in params:        # the Muon tensors are not the AdamW object's: all of them
            p.grad = None
        loss, _ = model.forward(inputs, targets, (s + 1) if use_dropout else None)
        loss.backward()
        losses.append(float(loss.item()))
        if settings.grad_clip > 0:
            with torch.no_grad():
                n = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
                if n > settings.grad_clip:
                    c = settings.grad_clip / (n + 1e-6)
                    for p in params:
                        p.grad.mul_(c)
        lr = lr_at(settings, s, steps)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        with torch.no_grad():   # Muon at --muon-lr on AdamW's schedule
            mlr = settings.muon_lr * (lr / settings.lr)
            for p, b in zip(muon, bufs):
                muon_step(p, p.grad, b, mlr, settings.weight_decay, settings.optimizer == 2)
    return losses


# ---------------------------------------------------------------------------
# a dump directory (docs/GOLDEN.md)

class Dump:
    def __init__(self, path):
        self.path = path
        j = lambda n: os.path.join(path, n)
        self.cfg = Config.load(j("config.json"))
        self.weights, self.wmeta = read_safetensors(j("weights.safetensors"))
        self.grads, self.gmeta = read_safetensors(j("grads.safetensors"))
        try:
            with open(j("result.json")) as f:
                self.result = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise OracleError(f"{j('result.json')}: cannot read ({e})")
        for n in ("batch.inputs", "batch.targets"):
            if n not in self.weights:
                raise OracleError(f"{j('weights.safetensors')}: {n} missing")
        self.inputs = self._tokens(self.weights["batch.inputs"], "batch.inputs")
        self.targets = self._tokens(self.weights["batch.targets"], "batch.targets")
        if self.inputs.shape != self.targets.shape or self.inputs.ndim != 2:
            raise OracleError(f"{path}: batch.inputs / batch.targets must both be (B, T)")
        self.shape = Shape(self.cfg, self.weights)
        B, T = self.inputs.shape
        if T > self.shape.T_max:
            raise OracleError(f"{path}: batch has T = {T} > seq = {self.shape.T_max}")
        if int(self.targets.max()) >= self.shape.V or int(self.inputs.max()) >= self.shape.V:
            raise OracleError(f"{path}: a token id is >= vocab = {self.shape.V}")
        self.dropout = self.cfg.f32("dropout", 0.0) if self.cfg.has("dropout") else 0.0
        self.seed = int(self.cfg.get("seed")) if self.dropout > 0 or self.cfg.has("seed") else 0

    @staticmethod
    def _tokens(a, name):
        if np.any(a != np.round(a)) or np.any(a < 0):
            raise OracleError(f"weights.safetensors: {name} holds non-token values")
        return torch.from_numpy(a.astype(np.int64))

    def hexfloat(self, obj, key):
        """obj[key + '_hex'] when present (exact), else obj[key]."""
        if key + "_hex" in obj:
            return float.fromhex(obj[key + "_hex"])
        if key in obj:
            return float(_parse_number(obj[key]))
        raise OracleError(f"{self.path}/result.json: \"{key}\" missing")
