#!/usr/bin/python3
"""tessera checkpoints in PyTorch, and exported to the Hugging Face layouts.

Command line (python3 python/tessera_torch.py COMMAND --help for the flags):

    loss    --ckpt FILE [--data FILE] ...            the validation loss, as tessera eval
    export  --ckpt FILE --format gpt2|llama --out DIR    model.safetensors + config.json

As a module (the standard library and torch, nothing else):

    import tessera_torch
    model = tessera_torch.load("ck/step-00000200.safetensors")   # an nn.Module
    logits, loss = model(idx, targets)                # idx, targets: (B, T) int64

The module computes the model of docs/MODEL.md (GPT: learned positions, LayerNorm, tanh
GeLU, biases, tied or untied head; LLaMA: RMSNorm, RoPE on the pairs (2i, 2i+1),
grouped-query attention, SwiGLU, no biases) with PyTorch's own operations, and its
state_dict names are the checkpoint's. docs/CHECKPOINTS.md ("PyTorch and Hugging
Face") says what is mapped how; a checkpoint of a compressed model (--compress) is
refused, since its stage boundaries are no part of a plain transformer.
"""

import argparse
import json
import math
import os
import re
import stat
import struct
import sys
import zlib
from array import array
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

NORM_EPS = 1e-5                # LayerNorm and RMSNorm (docs/MODEL.md)
EVAL_STEP_BASE = 1 << 39       # the i-th validation batch is drawn as step 2^39 + i
RNG_DATA = 5                   # the generator's purpose for data windows
LLMC_MAGIC = 20240520          # llm.c's token files (docs/DATA.md)
DATA_FORMATS = ("bytes", "u16", "u32", "llmc")
# --compress codecs in the order of src/codecs.def: the config records the number
CODECS = ("none", "ssn", "mapl", "mapl-unconstrained", "mapl-vq", "mapl-frozen")


class TesseraError(Exception):
    """One line that names the file or flag at fault. usage: a usage error (exit 2)."""

    def __init__(self, message, usage=False):
        super().__init__(message)
        self.usage = usage


# ---------------------------------------------------------------------------
# safetensors: a little-endian u64 header length, a JSON header, the data

_DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "I32": (torch.int32, 4),
           "I64": (torch.int64, 8)}
MAX_HEADER = 100000000  # as the reference reader (and src/train/ckpt.c): no garbage-sized allocation
CHUNK = 1 << 22


class SafetensorsFile:
    """An open safetensors file: its header parsed and checked, the data left on disk.

    entries: name -> (dtype, shape, lo, hi), offsets into the data section; meta: the
    __metadata__ strings; header_bytes: the 8-byte length and the JSON, as stored.
    """

    def __init__(self, path):
        self.path = path
        try:
            self.f = open(path, "rb")
            size = os.fstat(self.f.fileno()).st_size
            head = self.f.read(8)
        except OSError as e:
            raise TesseraError(f"{path}: cannot read: {e.strerror}")
        if len(head) < 8:
            self.close()
            raise TesseraError(f"{path}: {size} bytes, shorter than the 8-byte header length")
        (hlen,) = struct.unpack("<Q", head)
        if hlen > min(size - 8, MAX_HEADER):
            self.close()
            raise TesseraError(f"{path}: header length {hlen} runs past the end of the file")
        self.header_bytes = head + self.f.read(hlen)
        self.data_start, self.data_len = 8 + hlen, size - 8 - hlen
        try:
            header = json.loads(self.header_bytes[8:].decode("utf-8"))
            if not isinstance(header, dict):
                raise ValueError("not an object")
            self.meta = header.pop("__metadata__", None) or {}
            self.entries = {name: self._entry(name, info) for name, info in header.items()}
        except (UnicodeDecodeError, ValueError) as e:
            self.close()
            raise TesseraError(f"{path}: the header is not a safetensors header ({e})")

    def _entry(self, name, info):
        try:
            dtype, size = _DTYPES[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            lo, hi = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"tensor {name}: a dtype this reader has not (F32, F64, I32, "
                             f"I64), or a bad shape or data_offsets")
        if min(shape, default=1) < 0 or not 0 <= lo <= hi <= self.data_len or \
                hi - lo != math.prod(shape) * size:
            raise ValueError(f"tensor {name}: data_offsets [{lo}, {hi}] do not hold its shape "
                             f"{list(shape)} inside the file")
        return dtype, shape, lo, hi

    def data_crc32(self):
        """zlib's CRC-32 of the data section, read in chunks."""
        self.f.seek(self.data_start)
        crc = 0
        while True:
            chunk = self.f.read(CHUNK)
            if not chunk:
                return crc
            crc = zlib.crc32(chunk, crc)

    def tensors(self, names):
        """name -> tensor for the given names, reading only the span that holds them."""
        if not names:
            return OrderedDict()
        lo = min(self.entries[n][2] for n in names)
        hi = max(self.entries[n][3] for n in names)
        self.f.seek(self.data_start + lo)
        buf = bytearray(self.f.read(hi - lo))  # writable, so torch.frombuffer shares it
        if len(buf) != hi - lo:
            raise TesseraError(f"{self.path}: shorter than its header says (changed while read?)")
        out = OrderedDict()
        for n in names:
            dtype, shape, a, b = self.entries[n]
            t = torch.frombuffer(buf, dtype=dtype, count=math.prod(shape), offset=a - lo) \
                if b > a else torch.empty(0, dtype=dtype)
            out[n] = t.reshape(shape)
        return out

    def close(self):
        self.f.close()


def write_safetensors(path, tensors, metadata):
    """Writes float32 tensors in the given order, atomically (temp file, fsync, rename)."""
    header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    blobs, off = [], 0
    for name, t in tensors.items():
        b = _f32_bytes(t)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data 8-byte aligned, as other writers keep it
    _write_atomically(path, [struct.pack("<Q", len(text)), text] + blobs)


def _f32_bytes(t):
    """A tensor's values as little-endian float32 bytes (torch and the standard library)."""
    a = array("f", bytes(4 * t.numel()))
    if t.numel():
        torch.frombuffer(a, dtype=torch.float32).copy_(t.detach().reshape(-1))
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def _write_atomically(path, chunks):
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise TesseraError(f"{path}: cannot write: {e.strerror}")


# ---------------------------------------------------------------------------
# a tessera checkpoint (docs/CHECKPOINTS.md)

class Shape:
    """The model's dimensions and settings, from the checkpoint's tessera.config."""

    def __init__(self, cfg, where):
        def num(key, kind=int):
            hexed = cfg.get(key + "_hex")
            v = cfg.get(key)
            if isinstance(hexed, str):
                return float.fromhex(hexed)  # %a: the float32 value bit for bit
            if isinstance(v, bool) or not isinstance(v, (int, float)) or kind is int and v != int(v):
                raise TesseraError(f"{where}: tessera.config has no usable \"{key}\"")
            return kind(v)

        self.variant = cfg.get("variant")
        if self.variant not in ("gpt", "llama"):
            raise TesseraError(f"{where}: tessera.config's variant {self.variant!r} is not "
                               f"gpt or llama")
        self.V, self.d, self.L = num("vocab"), num("d"), num("n_layer")
        self.H, self.F, self.T = num("n_head"), num("d_ff"), num("seq")
        self.tied = bool(num("tied"))
        self.batch, self.seed = num("batch"), num("seed")
        llama = self.variant == "llama"
        self.Hkv = (num("n_kv_head") or self.H) if llama else self.H
        self.rope_theta = num("rope_theta", float) if llama else None
        if min(self.V, self.d, self.L, self.H, self.F, self.T, self.Hkv) < 1 or \
                self.d % self.H or self.H % self.Hkv or llama and (self.d // self.H) % 2:
            raise TesseraError(f"{where}: tessera.config describes no model (d {self.d}, "
                               f"n_head {self.H}, n_kv_head {self.Hkv})")
        self.dh = self.d // self.H
        self.compress = int(cfg.get("compress", 0) or 0)

    def params(self):
        """(name, shape) of every parameter in the canonical order of docs/MODEL.md."""
        d, F_, Ckv = self.d, self.F, self.Hkv * self.dh
        out = [("wte", (self.V, d))]
        if self.variant == "gpt":
            out.append(("wpe", (self.T, d)))
            for l in range(self.L):
                h = f"h.{l}."
                out += [(h + "ln1.w", (d,)), (h + "ln1.b", (d,))]
                for p in "qkvo":
                    out += [(h + f"attn.w{p}", (d, d)), (h + f"attn.b{p}", (d,))]
                out += [(h + "ln2.w", (d,)), (h + "ln2.b", (d,)),
                        (h + "mlp.w1", (F_, d)), (h + "mlp.b1", (F_,)),
                        (h + "mlp.w2", (d, F_)), (h + "mlp.b2", (d,))]
            out += [("lnf.w", (d,)), ("lnf.b", (d,))]
        else:
            for l in range(self.L):
                h = f"h.{l}."
                out += [(h + "rms1.w", (d,)), (h + "attn.wq", (d, d)), (h + "attn.wk", (Ckv, d)),
                        (h + "attn.wv", (Ckv, d)), (h + "attn.wo", (d, d)), (h + "rms2.w", (d,)),
                        (h + "mlp.w1", (F_, d)), (h + "mlp.w3", (F_, d)), (h + "mlp.w2", (d, F_))]
            out.append(("rmsf.w", (d,)))
        if not self.tied:
            out.append(("lm_head", (self.V, d)))
        return out


class Checkpoint:
    """A checkpoint's parameters (name -> float32 tensor), configuration and step.

    Everything is checked before a parameter is read: tessera.format 2, both CRC-32s, the
    configuration, every parameter's name, dtype and shape. Only the parameters are read
    into memory, not the AdamW moments after them."""

    def __init__(self, path):
        self.path = path
        st = SafetensorsFile(path)
        try:
            self._check(st)
            self.params = st.tensors([name for name, _ in self.shape.params()])
        finally:
            st.close()

    def _check(self, st):
        path, meta = self.path, st.meta
        fmt = meta.get("tessera.format")
        if fmt not in ("2", "3"):
            raise TesseraError(
                f"{path}: no tessera.format: not a tessera checkpoint" if fmt is None else
                f"{path}: tessera.format {fmt} has no header checksum (docs/CHECKPOINTS.md)"
                if fmt == "1" else f"{path}: tessera.format {fmt} is not one this reader knows")
        if f"{st.data_crc32():08x}" != meta.get("tessera.data_crc32"):
            raise TesseraError(f"{path}: the data's CRC-32 is not tessera.data_crc32: "
                               f"a damaged file")
        # the header with its own 8 digits read as '0' (src/train/ckpt.c): format 2
        # with the length word; format 3 without it, without the trailing
        # spaces, and without the run member (',"tessera.run":"..."'), which
        # may differ between layouts of one run
        h = st.header_bytes
        m = re.search(rb'"tessera\.header_crc32":"([0-9a-f]{8})"', h)
        if m:
            summed = h[:m.start(1)] + b"00000000" + h[m.end(1):]
            if fmt == "3":
                summed = re.sub(rb',"tessera\.run":"(?:[^"\\]|\\.)*"', b"",
                                summed[8:].rstrip(b" "), count=1)
        if not m or zlib.crc32(summed) != int(m.group(1), 16):
            raise TesseraError(f"{path}: the header's CRC-32 is not tessera.header_crc32: "
                               f"a damaged file")
        try:
            self.config = json.loads(meta["tessera.config"])
            self.step = int(meta["tessera.step"])
            # format 3: the run's own settings (data_path, …) apart
            run = json.loads(meta.get("tessera.run", "{}"))
        except (KeyError, ValueError, TypeError):
            raise TesseraError(f"{path}: tessera.config or tessera.step is missing or not valid")
        if not isinstance(self.config, dict) or not isinstance(run, dict):
            raise TesseraError(f"{path}: tessera.config or tessera.run is not a JSON object")
        self.config.update(run)
        self.shape = s = Shape(self.config, path)
        if s.compress:
            name = CODECS[s.compress] if s.compress < len(CODECS) else str(s.compress)
            raise TesseraError(
                f"{path}: a compressed model (--compress {name}, "
                f"{self.config.get('compress_stages')} stages): its stage boundaries encode and "
                f"decode the residual stream, which a plain GPT or LLaMA module has no place for")
        for name, shape in s.params():
            e = st.entries.get(name)
            if e is None or e[0] != torch.float32 or e[1] != shape:
                have = "missing" if e is None else f"{e[0]} {list(e[1])}"
                raise TesseraError(f"{path}: parameter {name}: {have}, the configuration "
                                   f"needs float32 {list(shape)}")
        known = {name for name, _ in s.params()}
        extra = [n for n in st.entries if n not in known and not n.startswith("adam.")]
        if extra:
            raise TesseraError(f"{path}: tensors the {s.variant} model has not: "
                               f"{', '.join(extra[:4])}")


# ---------------------------------------------------------------------------
# the model (docs/MODEL.md), parameters named as in the checkpoint

class LayerNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))

    def forward(self, x):  # biased variance, rstd = 1/sqrt(var + 1e-5)
        return F.layer_norm(x, self.w.shape, self.w, self.b, NORM_EPS)


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x):  # rstd = 1/sqrt(mean(x^2) + 1e-5)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.w


def rope_table(T, dh, theta):
    """cos and sin of t·theta^(-2i/dh), (T, dh/2) each, in float64 with the C library's
    pow, cos and sin (Python's math module): rounded once to float32 they are tessera's
    table (src/cpu/rope.c)."""
    inv = [math.pow(theta, -2.0 * i / dh) for i in range(dh // 2)]
    cos = torch.tensor([[math.cos(t * f) for f in inv] for t in range(T)], dtype=torch.float64)
    sin = torch.tensor([[math.sin(t * f) for f in inv] for t in range(T)], dtype=torch.float64)
    return cos, sin


def rope_pairs(x, cos, sin):
    """x: (B, heads, T, dh). Rotates, in each head, the pairs (2i, 2i+1) by t·theta^(-2i/dh)."""
    T = x.shape[2]
    c, s = cos[:T].to(x.dtype), sin[:T].to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2)


def causal_attention(q, k, v):
    """q: (B, H, T, dh), k and v: (B, Hkv, T, dh); query head h reads key/value head h // G."""
    G = q.shape[1] // k.shape[1]
    if G > 1:
        k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    T = q.shape[2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])                # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


class Attention(nn.Module):
    """wq (d, d), wk and wv (Hkv·dh, d), wo (d, d); biases bq … bo for the GPT only."""

    def __init__(self, s):
        super().__init__()
        self.H, self.Hkv, self.dh = s.H, s.Hkv, s.dh
        self.bias = s.variant == "gpt"
        ckv = s.Hkv * s.dh
        for p, rows in (("q", s.d), ("k", ckv), ("v", ckv), ("o", s.d)):
            self.register_parameter("w" + p, nn.Parameter(torch.zeros(rows, s.d)))
            if self.bias:
                self.register_parameter("b" + p, nn.Parameter(torch.zeros(rows)))

    def _linear(self, x, p):
        return F.linear(x, getattr(self, "w" + p), getattr(self, "b" + p) if self.bias else None)

    def forward(self, x, rope=None):  # x: (B, T, d)
        B, T, _ = x.shape
        q = self._linear(x, "q").view(B, T, self.H, self.dh).transpose(1, 2)
        k = self._linear(x, "k").view(B, T, self.Hkv, self.dh).transpose(1, 2)
        v = self._linear(x, "v").view(B, T, self.Hkv, self.dh).transpose(1, 2)
        if rope is not None:
            q, k = rope_pairs(q, *rope), rope_pairs(k, *rope)
        o = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, self.H * self.dh)
        return self._linear(o, "o")


class GeluMLP(nn.Module):
    def __init__(self, d, F_):
        super().__init__()
        self.w1, self.b1 = nn.Parameter(torch.zeros(F_, d)), nn.Parameter(torch.zeros(F_))
        self.w2, self.b2 = nn.Parameter(torch.zeros(d, F_)), nn.Parameter(torch.zeros(d))

    def forward(self, x):  # the tanh form of GeLU
        return F.linear(F.gelu(F.linear(x, self.w1, self.b1), approximate="tanh"), self.w2, self.b2)


class SwiGLU(nn.Module):
    def __init__(self, d, F_):
        super().__init__()
        self.w1 = nn.Parameter(torch.zeros(F_, d))  # gate
        self.w3 = nn.Parameter(torch.zeros(F_, d))  # up
        self.w2 = nn.Parameter(torch.zeros(d, F_))  # down

    def forward(self, x):
        return F.linear(F.silu(F.linear(x, self.w1)) * F.linear(x, self.w3), self.w2)


class Block(nn.Module):
    """x + attn(norm1(x)), then + mlp(norm2(x)): ln1/ln2 (GPT) or rms1/rms2 (LLaMA)."""

    def __init__(self, s):
        super().__init__()
        gpt = s.variant == "gpt"
        self.names = ("ln1", "ln2") if gpt else ("rms1", "rms2")
        Norm = LayerNorm if gpt else RMSNorm
        self.add_module(self.names[0], Norm(s.d))
        self.attn = Attention(s)
        self.add_module(self.names[1], Norm(s.d))
        self.mlp = GeluMLP(s.d, s.F) if gpt else SwiGLU(s.d, s.F)

    def forward(self, x, rope=None):
        x = x + self.attn(getattr(self, self.names[0])(x), rope)
        return x + self.mlp(getattr(self, self.names[1])(x))


class TesseraLM(nn.Module):
    """The GPT or LLaMA model of docs/MODEL.md; state_dict() names are the checkpoint's.

    forward(idx, targets=None) -> (logits (B, T, V), mean cross-entropy or None).
    Evaluation only in the sense that there is no dropout: tessera evaluates without it.
    """

    def __init__(self, shape):
        super().__init__()
        s = self.shape = shape
        self.wte = nn.Parameter(torch.zeros(s.V, s.d))
        if s.variant == "gpt":
            self.wpe = nn.Parameter(torch.zeros(s.T, s.d))
        self.h = nn.ModuleList(Block(s) for _ in range(s.L))
        self.final = "lnf" if s.variant == "gpt" else "rmsf"
        self.add_module(self.final, (LayerNorm if s.variant == "gpt" else RMSNorm)(s.d))
        if not s.tied:
            self.lm_head = nn.Parameter(torch.zeros(s.V, s.d))
        if s.variant == "llama":  # float64; each forward rounds it once to the model's dtype
            cos, sin = rope_table(s.T, s.dh, s.rope_theta)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, idx, targets=None):
        s = self.shape
        T = idx.shape[1]
        if T > s.T:
            raise ValueError(f"sequence of {T} tokens, the model's seq is {s.T}")
        x = self.wte[idx]                                                      # (B, T, d)
        rope = None
        if s.variant == "gpt":
            x = x + self.wpe[:T]
        else:
            rope = (self.rope_cos, self.rope_sin)
        for block in self.h:
            x = block(x, rope)
        x = getattr(self, self.final)(x)
        logits = F.linear(x, self.wte if s.tied else self.lm_head)            # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, s.V), targets.reshape(-1))
        return logits, loss


def load(path, dtype=torch.float32):
    """The checkpoint at path as a TesseraLM of the given dtype, in eval mode."""
    ck = Checkpoint(path)
    model = TesseraLM(ck.shape)
    model.load_state_dict(ck.params, strict=True)
    model.step = ck.step
    return model.to(dtype).eval()


# ---------------------------------------------------------------------------
# token files and validation windows (docs/DATA.md)

def philox4x32_10(seed, purpose, step, index):
    """The four words of Philox4x32-10 for counter (index, step, purpose) under key seed:
    64 bits of index, 40 of step, 24 of purpose (src/exact/philox.h)."""
    M = 0xFFFFFFFF
    c = [index & M, index >> 32 & M, step & M, (step >> 32 & 0xFF) | (purpose & 0xFFFFFF) << 8]
    k0, k1 = seed & M, seed >> 32 & M
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M, (p0 >> 32) ^ c[3] ^ k1, p0 & M]
        k0, k1 = (k0 + 0x9E3779B9) & M, (k1 + 0xBB67AE85) & M
    return c


def window_start(seed, step, index, choices):
    """ts_rng_below(seed, DATA, step, index, choices): the first two words as one u64."""
    w = philox4x32_10(seed, RNG_DATA, step, index)
    return (w[1] << 32 | w[0]) % choices


def detect_format(path, head):
    """What the file says: llm.c's magic, else bytes unless the name ends in .bin."""
    if len(head) >= 4 and struct.unpack_from("<I", head)[0] == LLMC_MAGIC:
        return "llmc"
    return None if path.endswith(".bin") else "bytes"


def _read_regular(path, flag):
    """A regular file's bytes, as tessera reads its inputs: opened without blocking (a FIFO
    would wait for its writer forever) and refused unless it is a regular file (a device
    such as /dev/zero would be read until memory runs out)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise TesseraError(f"{flag} {path}: cannot open: {e.strerror}")
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TesseraError(f"{flag} {path}: cannot open: not a regular file")
        os.set_blocking(fd, True)
        try:
            return f.read()
        except OSError as e:
            raise TesseraError(f"{flag} {path}: cannot read: {e.strerror}")


def read_tokens(path, fmt, vocab, flag="--data", raw_ids=None):
    """All token ids of a file (int64), checked below vocab. fmt None: what the file says;
    a .bin that says nothing is read as raw_ids ("u16" or "u32") when given."""
    raw = _read_regular(path, flag)
    fmt = fmt or detect_format(path, raw[:4]) or raw_ids
    if fmt is None:
        raise TesseraError(f"{flag} {path}: a .bin without llm.c's header does not say whether "
                           f"its token ids are uint16 or uint32: name the format with "
                           f"--data-format u16, u32 (or bytes)", usage=True)
    skip = 0
    if fmt == "llmc":
        if len(raw) < 1024 or struct.unpack_from("<i", raw)[0] != LLMC_MAGIC:
            raise TesseraError(f"{path}: not llm.c's token file (no 1024-byte header with "
                               f"magic {LLMC_MAGIC})")
        version, count = struct.unpack_from("<ii", raw, 4)
        if version != 1 or count != (len(raw) - 1024) / 2:
            raise TesseraError(f"{path}: llm.c header says version {version}, {count} tokens; "
                               f"this reader takes version 1 with its {(len(raw) - 1024) / 2:g} tokens")
        skip = 1024
    width = {"bytes": 1, "u16": 2, "llmc": 2, "u32": 4}[fmt]
    body = raw[skip:]
    if not body or len(body) % width:
        raise TesseraError(f"{path}: {len(body)} bytes is no whole, non-empty number of "
                           f"{width}-byte tokens")
    a = array({1: "B", 2: "H", 4: "I"}[width])
    a.frombytes(body)
    if sys.byteorder != "little":
        a.byteswap()
    kind = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[width]
    ids = torch.frombuffer(a, dtype=kind).to(torch.int64) & ((1 << 8 * width) - 1)
    bad = (ids >= vocab).nonzero()
    if len(bad):
        i = int(bad[0])
        raise TesseraError(f"{path}: token id {int(ids[i])} at byte offset {skip + i * width} is "
                           f"out of range for vocab {vocab} (ids 0..{vocab - 1})")
    return ids, fmt


def validation_split(shape, data, val_data=None, data_format=None, val_frac=0.1, raw_ids=None):
    """The validation tokens: all of val_data, else the last floor(n·val_frac) of data
    (val_frac taken as the float32 tessera holds)."""
    if val_data:
        return read_tokens(val_data, data_format, shape.V, "--val-data", raw_ids)[0]
    ids, _ = read_tokens(data, data_format, shape.V, "--data", raw_ids)
    frac = struct.unpack("<f", struct.pack("<f", val_frac))[0]
    return ids[len(ids) - math.floor(len(ids) * frac):]


def validation_batches(shape, split, batches):
    """tessera's validation batches: batch i holds windows j < batch of step 2^39 + i,
    each (inputs, targets) of (batch, T) int64."""
    T = shape.T
    if len(split) <= T:
        raise TesseraError(f"the validation split has {len(split)} tokens, a window of seq {T} "
                           f"needs {T + 1}")
    out = []
    for i in range(batches):
        starts = [window_start(shape.seed, EVAL_STEP_BASE + i, j, len(split) - T)
                  for j in range(shape.batch)]
        w = torch.stack([split[s:s + T + 1] for s in starts])                  # (B, T+1)
        out.append((w[:, :-1], w[:, 1:]))
    return out


def tiled_batches(shape, split):
    """tessera eval --whole-split's batches: the split tiled from its start, window k
    from token k·T, batch i holding windows [i·B, (i+1)·B), as many whole batches as it
    holds (at most B·T of its tokens unscored)."""
    T, B = shape.T, shape.batch
    n = (len(split) - 1) // T // B if len(split) >= 1 else 0
    out = []
    for i in range(n):
        w = torch.stack([split[(i * B + j) * T:(i * B + j) * T + T + 1] for j in range(B)])
        out.append((w[:, :-1], w[:, 1:]))
    return out


@torch.no_grad()
def mean_loss(model, batches):
    """The mean over batches of each batch's mean loss, as tessera eval reports it."""
    total = 0.0
    for inputs, targets in batches:
        total += float(model(inputs, targets)[1])
    return total / len(batches)


# ---------------------------------------------------------------------------
# Hugging Face layouts

def rope_pairs_to_halves(w, heads):
    """Rows of a q or k projection (heads·dh, d), reordered in each head from tessera's
    rotated pairs (2i, 2i+1) to the halves (i, i + dh/2) that HF's rotate_half turns:
    row i of a head becomes its row 2i, row dh/2 + i its row 2i + 1. Query and key get
    the same order, so every q·k, and so the attention, is unchanged."""
    rows, cols = w.shape
    dh = rows // heads
    return w.reshape(heads, dh // 2, 2, cols).transpose(1, 2).reshape(rows, cols).contiguous()


def hf_gpt2(ck):
    """(tensors, config.json) of GPT2LMHeadModel. Conv1D stores (in, out): transposed;
    q, k and v are fused in c_attn in that order."""
    s, p = ck.shape, ck.params
    t = OrderedDict([("transformer.wte.weight", p["wte"]), ("transformer.wpe.weight", p["wpe"])])
    for l in range(s.L):
        h, o = f"h.{l}.", f"transformer.h.{l}."
        t[o + "ln_1.weight"], t[o + "ln_1.bias"] = p[h + "ln1.w"], p[h + "ln1.b"]
        t[o + "attn.c_attn.weight"] = torch.cat([p[h + f"attn.w{x}"] for x in "qkv"]).t()
        t[o + "attn.c_attn.bias"] = torch.cat([p[h + f"attn.b{x}"] for x in "qkv"])
        t[o + "attn.c_proj.weight"], t[o + "attn.c_proj.bias"] = p[h + "attn.wo"].t(), p[h + "attn.bo"]
        t[o + "ln_2.weight"], t[o + "ln_2.bias"] = p[h + "ln2.w"], p[h + "ln2.b"]
        t[o + "mlp.c_fc.weight"], t[o + "mlp.c_fc.bias"] = p[h + "mlp.w1"].t(), p[h + "mlp.b1"]
        t[o + "mlp.c_proj.weight"], t[o + "mlp.c_proj.bias"] = p[h + "mlp.w2"].t(), p[h + "mlp.b2"]
    t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = p["lnf.w"], p["lnf.b"]
    if not s.tied:
        t["lm_head.weight"] = p["lm_head"]
    drop = float(ck.config.get("dropout", 0.0))
    cfg = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": s.V, "n_positions": s.T, "n_ctx": s.T, "n_embd": s.d,
        "n_layer": s.L, "n_head": s.H, "n_inner": s.F,
        "activation_function": "gelu_new",   # the tanh form, tessera's GeLU
        "layer_norm_epsilon": NORM_EPS,
        "resid_pdrop": drop, "embd_pdrop": 0.0, "attn_pdrop": drop,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": s.tied,
        "bos_token_id": None, "eos_token_id": None,  # tessera's vocabularies have none
        "torch_dtype": "float32",
    }
    return t, cfg


def hf_llama(ck):
    """(tensors, config.json) of LlamaForCausalLM; wq and wk rows permuted for rotate_half."""
    s, p = ck.shape, ck.params
    t = OrderedDict([("model.embed_tokens.weight", p["wte"])])
    for l in range(s.L):
        h, o = f"h.{l}.", f"model.layers.{l}."
        t[o + "input_layernorm.weight"] = p[h + "rms1.w"]
        t[o + "self_attn.q_proj.weight"] = rope_pairs_to_halves(p[h + "attn.wq"], s.H)
        t[o + "self_attn.k_proj.weight"] = rope_pairs_to_halves(p[h + "attn.wk"], s.Hkv)
        t[o + "self_attn.v_proj.weight"] = p[h + "attn.wv"]
        t[o + "self_attn.o_proj.weight"] = p[h + "attn.wo"]
        t[o + "post_attention_layernorm.weight"] = p[h + "rms2.w"]
        t[o + "mlp.gate_proj.weight"] = p[h + "mlp.w1"]
        t[o + "mlp.up_proj.weight"] = p[h + "mlp.w3"]
        t[o + "mlp.down_proj.weight"] = p[h + "mlp.w2"]
    t["model.norm.weight"] = p["rmsf.w"]
    if not s.tied:
        t["lm_head.weight"] = p["lm_head"]
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": s.V, "hidden_size": s.d, "intermediate_size": s.F,
        "num_hidden_layers": s.L, "num_attention_heads": s.H, "num_key_value_heads": s.Hkv,
        "head_dim": s.dh, "max_position_embeddings": s.T,
        "hidden_act": "silu", "rms_norm_eps": NORM_EPS,
        "rope_theta": s.rope_theta, "rope_scaling": None,
        "attention_bias": False, "mlp_bias": False,
        "attention_dropout": float(ck.config.get("dropout", 0.0)),
        "tie_word_embeddings": s.tied, "pretraining_tp": 1,
        "bos_token_id": None, "eos_token_id": None,
        "torch_dtype": "float32",
    }
    return t, cfg


HF_FORMATS = {"gpt2": ("gpt", hf_gpt2), "llama": ("llama", hf_llama)}


def export_hf(ck, fmt, out_dir):
    """Writes out_dir/model.safetensors and out_dir/config.json; returns their paths."""
    variant, convert = HF_FORMATS[fmt]
    if ck.shape.variant != variant:
        other = [f for f, (v, _) in HF_FORMATS.items() if v == ck.shape.variant][0]
        raise TesseraError(f"--format {fmt}: {ck.path} holds a {ck.shape.variant} model; "
                           f"export it with --format {other}", usage=True)
    tensors, cfg = convert(ck)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise TesseraError(f"--out {out_dir}: cannot make the directory: {e.strerror}")
    weights = os.path.join(out_dir, "model.safetensors")
    config = os.path.join(out_dir, "config.json")
    write_safetensors(weights, tensors, {"format": "pt"})  # HF's loader requires "format"
    _write_atomically(config, [(json.dumps(cfg, indent=2) + "\n").encode()])
    return weights, config


# ---------------------------------------------------------------------------
# command line

class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, like tessera's, exit 2."""

    def error(self, message):
        self.exit(2, f"tessera_torch: {message} (see --help)\n")


def _parser():
    ap = _Parser(
        prog="tessera_torch.py", allow_abbrev=False,
        description="tessera checkpoints in PyTorch: the validation loss of the checkpoint's "
                    "model computed by torch, and export to the Hugging Face GPT-2 and LLaMA "
                    "layouts (docs/CHECKPOINTS.md).")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    lo = sub.add_parser(
        "loss", allow_abbrev=False, help="validation loss of a checkpoint, on tessera eval's windows",
        description="The mean validation loss over tessera's validation windows (those of "
                    "tessera eval and of the run's own evaluation), computed by the PyTorch "
                    "module. The data flags default to what the checkpoint records.")
    lo.add_argument("--ckpt", required=True, metavar="FILE", help="tessera checkpoint (.safetensors)")
    lo.add_argument("--data", metavar="FILE",
                    help="token file whose tail is the validation split (default: the "
                         "checkpoint's data_path)")
    lo.add_argument("--val-data", metavar="FILE",
                    help="a separate validation file, read whole (default: the checkpoint's "
                         "val_path, if any, unless --data is given)")
    lo.add_argument("--data-format", choices=DATA_FORMATS,
                    help="how the file holds its tokens (default: what the file says, else the "
                         "checkpoint's data_format)")
    lo.add_argument("--val-frac", type=float, metavar="F",
                    help="tail of --data held out, in (0, 1) (default: the checkpoint's val_frac)")
    lo.add_argument("--eval-batches", type=int, metavar="N",
                    help="validation batches (default: the checkpoint's eval_batches)")
    lo.add_argument("--whole-split", action="store_true",
                    help="score the whole validation split tiled in consecutive windows, as "
                         "tessera eval --whole-split (not with --eval-batches)")
    lo.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                    help="the module's precision (default float32)")
    ex = sub.add_parser(
        "export", allow_abbrev=False, help="write the Hugging Face layout: model.safetensors and config.json",
        description="Writes DIR/model.safetensors and DIR/config.json in the layout of "
                    "transformers' GPT2LMHeadModel or LlamaForCausalLM.")
    ex.add_argument("--ckpt", required=True, metavar="FILE", help="tessera checkpoint (.safetensors)")
    ex.add_argument("--format", choices=tuple(HF_FORMATS),
                    help="gpt2 (GPT checkpoints) or llama (LLaMA checkpoints) (default: the "
                         "checkpoint's variant)")
    ex.add_argument("--out", required=True, metavar="DIR", help="output directory (made if absent)")
    return ap


def _recorded(ck, key, kind, default):
    """A member of the checkpoint's configuration, of the kind its writer gives it: a
    member of another kind is the file's fault, said in one line."""
    v = ck.config.get(key, default)
    try:
        if kind == "hex":
            return float.fromhex(v)
        if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
            return v
        if kind == "path" and isinstance(v, str):
            return v
    except (TypeError, ValueError):
        pass
    want = {"hex": "a float in hexadecimal", "int": "a whole number", "path": "a path"}[kind]
    raise TesseraError(f"{ck.path}: its configuration's {key} is {json.dumps(v)[:60]}, not {want}")


INT_MAX = 2**31 - 1  # tessera's integer flags are C ints


def _loss_command(a):
    # tessera's rules first, before anything is read
    if a.val_data is not None and a.val_frac is not None:
        raise TesseraError("--val-frac: not with --val-data (that file is the validation split "
                           "and all of --data trains)", usage=True)
    if a.whole_split and a.eval_batches is not None:
        raise TesseraError("--eval-batches: not with --whole-split (the split's length sets "
                           "the batches)", usage=True)
    if a.eval_batches is not None and a.eval_batches > INT_MAX:
        raise TesseraError(f"--eval-batches {a.eval_batches}: out of range", usage=True)
    for flag, path in (("--data", a.data), ("--val-data", a.val_data)):
        if path == "":
            raise TesseraError(f"{flag}: empty value (leave the flag out for its default)",
                               usage=True)
    ck = Checkpoint(a.ckpt)
    data = a.data or _recorded(ck, "data_path", "path", "") or ""
    val_data = a.val_data if a.val_data is not None else \
        (None if a.data else _recorded(ck, "val_path", "path", ""))
    val_frac = a.val_frac if a.val_frac is not None else \
        _recorded(ck, "val_frac_hex", "hex", "0x1.99999ap-4")
    batches = a.eval_batches if a.eval_batches is not None else \
        _recorded(ck, "eval_batches", "int", 4)
    if not 0.0 < val_frac < 1.0:
        raise TesseraError(f"--val-frac {val_frac:g}: must be in (0, 1)", usage=True)
    if not 1 <= batches <= INT_MAX:
        raise TesseraError(f"--eval-batches {batches}: must be >= 1", usage=True)
    if not val_data and not data:
        raise TesseraError("--data: the checkpoint records no data_path; name the file", usage=True)
    # a raw .bin says nothing: it holds the checkpoint's raw ids if it trained on such
    recorded_format = ck.config.get("data_format")
    raw_ids = recorded_format if recorded_format in ("u16", "u32") else None
    dtype = getattr(torch, a.dtype)
    model = TesseraLM(ck.shape)
    model.load_state_dict(ck.params, strict=True)
    model.to(dtype).eval()
    split = validation_split(ck.shape, data, val_data, a.data_format, val_frac, raw_ids)
    whole = ""
    if a.whole_split:
        got = tiled_batches(ck.shape, split)
        B, T = ck.shape.batch, ck.shape.T
        if not got:
            raise TesseraError(f"--whole-split: the validation split of {val_data or data} has "
                               f"{len(split)} tokens, fewer than one batch of {B} windows of "
                               f"{T} ({B * T + 1} tokens)", usage=True)
        batches = len(got)
        whole = (f" (the whole validation split, tiled: {batches * B * T} of its {len(split)} "
                 f"tokens scored)")
    else:
        got = validation_batches(ck.shape, split, batches)
    loss = mean_loss(model, got)
    print(f"checkpoint {a.ckpt} (step {ck.step}): val loss {loss:.6f} ({loss.hex()}) over "
          f"{batches} batches of {ck.shape.batch}x{ck.shape.T}{whole} ({a.dtype}, PyTorch)")


def main(argv=None):
    a = _parser().parse_args(argv)
    try:
        if a.command == "loss":
            _loss_command(a)
        else:
            ck = Checkpoint(a.ckpt)
            fmt = a.format or {"gpt": "gpt2", "llama": "llama"}[ck.shape.variant]
            for path in export_hf(ck, fmt, a.out):
                print(path)
    except TesseraError as e:
        sys.stderr.write(f"tessera_torch: {e}\n")
        return 2 if e.usage else 1
    except OSError as e:  # a data file that vanished between the checks, say
        sys.stderr.write(f"tessera_torch: {e.filename or ''}: {e.strerror}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
