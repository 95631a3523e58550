#!/usr/bin/env python3
"""attnbench peer worker: PyTorch's attention backends behind the peer protocol.

attnbench (backends/peers/peer_backend.cpp) writes a work directory with
problem.json, q/k/v/do.npy (float64, logical [B, H, S, D] layout, values already
rounded to the problem dtype), bias/offset.npy for learnable score mods and
request.json, then runs

    python3 torch_worker.py --request DIR/request.json

This worker answers with o/lse/dq/dk/dv(/dbias).npy (float64, logical layout) and
result.json (status ok | unsupported | error, raw timing samples in ms, compile and
setup time, bitwise determinism, versions, notes). The protocol is specified in
docs/peers.md; backends/peers/README.md describes this worker.

Peers (one attnbench backend each):
  torch-sdpa-flash      F.scaled_dot_product_attention restricted to FLASH_ATTENTION
  torch-sdpa-cudnn      ... restricted to CUDNN_ATTENTION
  torch-sdpa-efficient  ... restricted to EFFICIENT_ATTENTION
  torch-flex            flex_attention under torch.compile(dynamic=False), BlockMask
                        from create_block_mask, score_mod for softcap/alibi/biases
  torch-varlen          torch.nn.attention.varlen.varlen_attn on packed sequences

Other modes:
  --serve                     persistent: one request.json path per stdin line, one
                              JSON answer line per request on stdout (docs/peers.md
                              "Persistent workers"); exits at EOF
  --probe                     availability as one JSON line (exit 0 usable, 1 not)
  --self-test [--peers a,b] [--quick] [--keep]
                              every peer on tiny problems against float64 (exit 0 = ok)
  --dump-mask PROBLEM.json... each mask as one JSON line of '0'/'1' rows (stdlib only)
  --support PEER|all PROBLEM.json...
                              static support verdicts, one JSON line per problem (stdlib only)

Exit codes: 0 result.json written (whatever its status) / probe usable / self-test
passed; 1 probe not usable / self-test failures; 2 bad usage or unreadable request;
3 internal error (result.json could not be written).

Only the standard library is imported at module level: torch and numpy are
imported when a request runs, so --dump-mask, --support and --probe's failure
path work on machines without them.
"""

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import warnings

PROTOCOL = 1
PEERS = ("torch-sdpa-flash", "torch-sdpa-cudnn", "torch-sdpa-efficient", "torch-flex", "torch-varlen")
SDPA_PEERS = PEERS[:3]
PASSES = ("fwd", "bwd", "fwd_bwd")
BLOCK = 128  # block_sparse block and BlockMask tile (docs/semantics.md sections 3 and 6)
MASK64 = (1 << 64) - 1


class Unsupported(Exception):
    """The peer cannot run this problem; the message is the reason (status unsupported)."""


class RequestError(Exception):
    """The request or the problem file is malformed (status error, exit code 2)."""


# --------------------------------------------------------------------------- problem model
# Mirrors harness/model/problem.hpp and harness/model/mask_desc.hpp (docs/semantics.md sections 1-4).


def splitmix64(x):
    """splitmix64 finaliser on a 64-bit unsigned int (harness/model/mask_desc.hpp)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def block_sparse_keep(seed, qb, kb, density):
    """Whether block (qb, kb) of block_sparse{density, seed} is kept (mask_desc.hpp)."""
    inner = splitmix64((qb * 0x100000001B3 + kb) & MASK64)
    h = splitmix64((seed ^ inner) & MASK64)
    u = (h >> 11) * (1.0 / 9007199254740992.0)  # 2^-53
    return u < density


def _need(obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj:
        raise RequestError(f"{where}: missing field \"{key}\"")
    v = obj[key]
    if kind == "int" and (isinstance(v, bool) or not isinstance(v, int)):
        raise RequestError(f"{where}/{key}: expected an integer, got {v!r}")
    if kind == "num" and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise RequestError(f"{where}/{key}: expected a number, got {v!r}")
    if kind == "str" and not isinstance(v, str):
        raise RequestError(f"{where}/{key}: expected a string, got {v!r}")
    if kind == "list" and not isinstance(v, list):
        raise RequestError(f"{where}/{key}: expected a list, got {v!r}")
    return v


class Problem:
    """One attention problem parsed from a problem file (docs/semantics.md section 10).

    Besides the fields, holds the flattened mask of harness/model/mask_desc.hpp:
    upper_tl / upper_br / lower_br bounds on j - i (None = unbounded), prefix_len,
    doc_ids [B][Sq] (-1 = padding), seq_lens_q / seq_lens_k [B], block (density, seed).
    """

    def __init__(self, obj, where="problem.json"):
        if not isinstance(obj, dict):
            raise RequestError(f"{where}: expected a JSON object")
        self.raw = obj
        self.batch = _need(obj, "batch", "int", where)
        self.heads_q = _need(obj, "heads_q", "int", where)
        self.heads_kv = _need(obj, "heads_kv", "int", where)
        self.seq_q = _need(obj, "seq_q", "int", where)
        self.seq_k = _need(obj, "seq_k", "int", where)
        self.head_dim = _need(obj, "head_dim", "int", where)
        self.head_dim_v = obj.get("head_dim_v", self.head_dim)
        for name in ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim", "head_dim_v"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise RequestError(f"{where}/{name}: expected a positive integer, got {v!r}")
        if self.heads_q % self.heads_kv:
            raise RequestError(f"{where}/heads_kv: heads_q ({self.heads_q}) is not a multiple of heads_kv ({self.heads_kv})")
        self.dtype = obj.get("dtype", "bf16")
        if self.dtype not in ("fp32", "fp16", "bf16"):
            raise RequestError(f"{where}/dtype: expected fp32, fp16 or bf16, got {self.dtype!r}")
        s = obj.get("scale")
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float))):
            raise RequestError(f"{where}/scale: expected a number or null, got {s!r}")
        self.scale = float(s) if s is not None else 1.0 / math.sqrt(self.head_dim)
        self.layout = obj.get("layout", "bshd")
        if self.layout not in ("bshd", "bhsd", "thd"):
            raise RequestError(f"{where}/layout: expected bshd, bhsd or thd, got {self.layout!r}")
        mask = obj.get("mask", [])
        if isinstance(mask, dict):
            mask = [mask]
        if not isinstance(mask, list):
            raise RequestError(f"{where}/mask: expected a list of mask objects")
        self.mask = mask
        sm = obj.get("score_mod", {"kind": "none"})
        if isinstance(sm, str):
            sm = {"kind": sm}
        if sm is None:
            sm = {"kind": "none"}
        self.score_mod = sm
        self.mod = sm.get("kind", "none")
        if self.mod not in ("none", "softcap", "alibi", "rel_bias", "offset_bias"):
            raise RequestError(f"{where}/score_mod/kind: unknown score mod {self.mod!r}")
        self.cap = float(sm.get("cap", 0.0)) if self.mod == "softcap" else 0.0
        self.max_distance = int(sm.get("max_distance", 0)) if self.mod == "rel_bias" else 0
        self.bias_size = int(sm.get("size", 0)) if self.mod == "offset_bias" else 0
        self.seed = obj.get("seed", 0)
        self._flatten(where)

    def _flatten(self, where):
        self.upper_tl = None
        self.upper_br = None
        self.lower_br = None
        self.prefix_len = None
        self.doc_ids = None
        self.seq_lens_q = None
        self.seq_lens_k = None
        self.block = None
        self.kinds = []
        self.causal_align = None
        self.window = None

        def tighten_upper(cur, v):
            return v if cur is None else min(cur, v)

        for n, term in enumerate(self.mask):
            p = f"{where}/mask/{n}"
            kind = _need(term, "kind", "str", p)
            if kind in self.kinds:
                raise RequestError(f"{p}/kind: mask kind {kind!r} given twice")
            self.kinds.append(kind)
            if kind == "causal":
                align = term.get("align", "bottom_right")
                if align not in ("top_left", "bottom_right"):
                    raise RequestError(f"{p}/align: expected top_left or bottom_right, got {align!r}")
                self.causal_align = align
                if align == "top_left":
                    self.upper_tl = tighten_upper(self.upper_tl, 0)
                else:
                    self.upper_br = tighten_upper(self.upper_br, 0)
            elif kind == "sliding_window":
                left = term.get("left", -1)
                right = term.get("right", -1)
                self.window = (left, right)
                if right >= 0:
                    self.upper_br = tighten_upper(self.upper_br, right)
                if left >= 0:
                    self.lower_br = -left if self.lower_br is None else max(self.lower_br, -left)
            elif kind == "document":
                if "doc_ids" in term:
                    ids = term["doc_ids"]
                elif "doc_lengths" in term:
                    ids = []
                    for row in term["doc_lengths"]:
                        r = []
                        for d, length in enumerate(row):
                            r.extend([d] * int(length))
                        if len(r) > self.seq_q:
                            raise RequestError(f"{p}/doc_lengths: a row sums to {len(r)} > seq_q {self.seq_q}")
                        r.extend([-1] * (self.seq_q - len(r)))
                        ids.append(r)
                else:
                    raise RequestError(f"{p}: document mask needs doc_ids or doc_lengths")
                if len(ids) != self.batch or any(len(r) != self.seq_q for r in ids):
                    raise RequestError(f"{p}/doc_ids: expected [{self.batch}][{self.seq_q}] ids")
                if self.seq_q != self.seq_k:
                    raise RequestError(f"{p}: document masks need seq_q == seq_k")
                self.doc_ids = [[int(x) for x in r] for r in ids]
            elif kind == "prefix_lm":
                self.prefix_len = int(_need(term, "prefix_len", "int", p))
            elif kind == "padding":
                self.seq_lens_q = [int(x) for x in _need(term, "seq_lens_q", "list", p)]
                self.seq_lens_k = [int(x) for x in _need(term, "seq_lens_k", "list", p)]
                if len(self.seq_lens_q) != self.batch or len(self.seq_lens_k) != self.batch:
                    raise RequestError(f"{p}: padding lengths need {self.batch} entries")
            elif kind == "block_sparse":
                self.block = (float(term.get("density", 1.0)), int(term.get("seed", 0)) & MASK64)
            else:
                raise RequestError(f"{p}/kind: unknown mask kind {kind!r}")

    # -- sizes
    def valid_q(self, b):
        """Valid query length of batch row b."""
        return self.seq_lens_q[b] if self.seq_lens_q is not None else self.seq_q

    def valid_k(self, b):
        """Valid key length of batch row b."""
        return self.seq_lens_k[b] if self.seq_lens_k is not None else self.seq_k

    def bias_shape(self):
        """Shape of the learnable bias, or None."""
        if self.mod == "rel_bias":
            return (self.heads_q, 2 * self.max_distance + 1)
        if self.mod == "offset_bias":
            return (self.bias_size,)
        return None

    def has_mask(self):
        """True when some (b, i, j) may be masked out."""
        return any(x is not None for x in (self.upper_tl, self.upper_br, self.lower_br, self.prefix_len,
                                          self.doc_ids, self.seq_lens_q, self.block))

    def depends_on_batch(self):
        """True when the mask differs between batch rows."""
        return self.doc_ids is not None or self.seq_lens_q is not None

    def allowed(self, b, i, j):
        """mask(b, h, i, j) of docs/semantics.md section 3, scalar (port of mask_allowed())."""
        sq, sk = self.seq_q, self.seq_k
        if self.seq_lens_q is not None:
            sq, sk = self.seq_lens_q[b], self.seq_lens_k[b]
            if i >= sq or j >= sk:
                return False
        d = j - i
        off = sk - sq
        if self.upper_tl is not None and d > self.upper_tl:
            return False
        if self.upper_br is not None and d - off > self.upper_br:
            return False
        if self.lower_br is not None and d - off < self.lower_br:
            return False
        if self.prefix_len is not None and not (j < self.prefix_len or j <= i):
            return False
        if self.doc_ids is not None:
            di = self.doc_ids[b][i]
            if di < 0 or di != self.doc_ids[b][j]:
                return False
        if self.block is not None and not block_sparse_keep(self.block[1], i // BLOCK, j // BLOCK, self.block[0]):
            return False
        return True

    def keep_table(self):
        """block_sparse keep table [ceil(Sq/128)][ceil(Sk/128)] of bools, or None."""
        if self.block is None:
            return None
        density, seed = self.block
        nq = -(-self.seq_q // BLOCK)
        nk = -(-self.seq_k // BLOCK)
        return [[block_sparse_keep(seed, qb, kb, density) for kb in range(nk)] for qb in range(nq)]

    def document_runs(self):
        """Per row, the documents as (start, length) runs, or None when some id is
        not one contiguous run. Padding (-1) is skipped."""
        out = []
        for row in self.doc_ids:
            runs, seen = [], set()
            t = 0
            while t < len(row):
                d = row[t]
                e = t
                while e < len(row) and row[e] == d:
                    e += 1
                if d >= 0:
                    if d in seen:
                        return None
                    seen.add(d)
                    runs.append((t, e - t))
                t = e
            out.append(runs)
        return out


def static_support(peer, p):
    """(ok, reason) of the rules known without running PyTorch. The C++ side
    (torch_peer_supports in peer_backend.cpp) applies the same rules; PyTorch may
    still reject a problem at run time (then the status is unsupported too)."""
    if peer not in PEERS:
        return False, f"unknown peer {peer!r} (known: {', '.join(PEERS)})"
    if peer != "torch-varlen" and p.layout == "thd":
        return False, f"{peer} runs on padded [B, H, S, D] tensors; the thd layout is served by torch-varlen"
    if peer in ("torch-sdpa-flash", "torch-sdpa-cudnn", "torch-varlen") and p.dtype == "fp32":
        return False, f"{peer} supports fp16 and bf16 only (got fp32)"
    if peer != "torch-flex" and p.mod != "none":
        return False, (f"score_mod {p.mod} needs torch-flex: F.scaled_dot_product_attention and varlen_attn "
                       "take no score_mod")
    if peer in ("torch-sdpa-flash", "torch-varlen") and p.head_dim != p.head_dim_v:
        return False, f"{peer} (FlashAttention) needs head_dim == head_dim_v (got {p.head_dim} and {p.head_dim_v})"
    if peer == "torch-sdpa-flash":
        others = [k for k in p.kinds if k != "causal"]
        if others:
            return False, ("the flash backend of F.scaled_dot_product_attention takes no attn_mask, only is_causal "
                           f"(mask has {', '.join(others)})")
        if p.causal_align == "bottom_right" and p.seq_q != p.seq_k:
            return False, ("bottom-right causal with seq_q != seq_k: F.scaled_dot_product_attention's is_causal is "
                           "top-left and the flash backend takes no attn_mask")
    if peer == "torch-varlen":
        bad = [k for k in p.kinds if k in ("prefix_lm", "block_sparse")]
        if bad:
            return False, f"varlen_attn supports causal, sliding_window, document and padding masks only (mask has {', '.join(bad)})"
        if p.doc_ids is not None and p.seq_lens_q is not None:
            return False, "varlen_attn: a document mask together with a padding mask is not supported"
        if p.doc_ids is not None and p.document_runs() is None:
            return False, "document ids are not contiguous runs: varlen_attn needs one sequence per document"
        if p.causal_align == "top_left" and p.doc_ids is None:
            if any(p.valid_q(b) != p.valid_k(b) for b in range(p.batch)):
                return False, ("top-left causal with query length != key length: varlen_attn (FlashAttention) "
                               "aligns the causal diagonal bottom-right")
    return True, ""


# --------------------------------------------------------------------------- small utilities


def _load_json(path, what):
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise RequestError(f"cannot read {what} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise RequestError(f"{path}: malformed JSON ({e})") from None


def _jsonable(x):
    """A copy that strict JSON can carry: non-finite floats become strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _write_json_atomic(path, obj):
    """Write strict JSON (no NaN literals) to path via a temporary file and rename."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(_jsonable(obj), f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def _traceback_summary(exc, limit=6):
    frames = traceback.extract_tb(exc.__traceback__)[-limit:]
    where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{type(exc).__name__}: {exc}" + (f" [at {where}]" if where else "")


class _Torch:
    """Lazily imported torch, numpy and the CUDA device."""

    def __init__(self, device_index=0):
        try:
            import torch
        except Exception as e:  # ImportError, or a broken install raising anything
            raise Unsupported(f"cannot import torch: {type(e).__name__}: {e}") from None
        if not torch.cuda.is_available():
            raise Unsupported(f"torch {torch.__version__} is installed but CUDA is not available "
                              f"(torch.version.cuda={torch.version.cuda}, devices={torch.cuda.device_count()})")
        if device_index >= torch.cuda.device_count():
            raise Unsupported(f"CUDA device {device_index} requested, {torch.cuda.device_count()} present")
        try:
            import numpy as np
        except Exception as e:
            raise Unsupported(f"cannot import numpy: {type(e).__name__}: {e}") from None
        import torch.nn.functional as F

        torch.cuda.set_device(device_index)
        self.torch, self.np, self.F = torch, np, F
        self.dev = torch.device("cuda", device_index)

    def dtype(self, name):
        t = self.torch
        return {"fp32": t.float32, "fp16": t.float16, "bf16": t.bfloat16}[name]

    def sync(self):
        self.torch.cuda.synchronize()


def versions(T):
    """Versions of everything that shapes the numbers."""
    torch = T.torch
    v = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
         "numpy": T.np.__version__}
    try:
        v["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        v["cudnn"] = None
    try:
        import triton  # noqa: F401
        v["triton"] = triton.__version__
    except Exception:
        v["triton"] = None
    props = torch.cuda.get_device_properties(T.dev)
    v["device"] = props.name
    v["capability"] = f"{props.major}.{props.minor}"
    v["sm_count"] = props.multi_processor_count
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            v["allow_tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
    except Exception:  # noqa: BLE001 - the flag moved in some versions
        v["allow_tf32_matmul"] = None
    return v


# --------------------------------------------------------------------------- masks in torch


class TorchMask:
    """The problem's mask as torch integer ops. mask_mod is a plain closure (what
    torch.compile traces best) that serves as a FlexAttention mask_mod (0-d index
    tensors under vmap) and, with broadcast index tensors, builds dense boolean
    masks. When a length is not a multiple of BLOCK, indices are clamped before
    gathers so that out-of-range positions of tail blocks never read outside the
    captured tables."""

    def __init__(self, p, T):
        torch = T.torch
        self.p = p
        dev = T.dev
        doc = torch.tensor(p.doc_ids, dtype=torch.int32, device=dev) if p.doc_ids is not None else None
        if p.seq_lens_q is not None:
            lq = torch.tensor(p.seq_lens_q, dtype=torch.int32, device=dev)
            lk = torch.tensor(p.seq_lens_k, dtype=torch.int32, device=dev)
        else:
            lq = lk = None
        kt = p.keep_table()
        keep = torch.tensor(kt, dtype=torch.bool, device=dev) if kt is not None else None
        upper_tl, upper_br, lower_br, prefix = p.upper_tl, p.upper_br, p.lower_br, p.prefix_len
        static_off = p.seq_k - p.seq_q
        last_q, last_k = p.seq_q - 1, p.seq_k - 1
        # FlexAttention evaluates mask_mod on whole 128-blocks, so indices reach past
        # the last row only when a length is not a multiple of BLOCK; the clamps cost
        # 10% of the packed Llama-3-8B forward and 13% of forward+backward on an H100
        # (ci/flex_variants.py), so they are left out where they cannot matter.
        clamp = p.seq_q % BLOCK != 0 or p.seq_k % BLOCK != 0

        def mask_mod(b, h, q_idx, kv_idx):
            conds = []
            off = static_off
            if lq is not None:
                sq = lq[b]
                sk = lk[b]
                conds.append(q_idx < sq)
                conds.append(kv_idx < sk)
                off = sk - sq
            d = kv_idx - q_idx
            if upper_tl is not None:
                conds.append(d <= upper_tl)
            if upper_br is not None:
                conds.append(d - off <= upper_br)
            if lower_br is not None:
                conds.append(d - off >= lower_br)
            if prefix is not None:
                conds.append((kv_idx < prefix) | (kv_idx <= q_idx))
            if doc is not None or keep is not None:
                qc = q_idx.clamp(0, last_q) if clamp else q_idx
                kc = kv_idx.clamp(0, last_k) if clamp else kv_idx
                if doc is not None:
                    di = doc[b, qc]
                    dj = doc[b, kc]
                    conds.append((di >= 0) & (di == dj))
                if keep is not None:
                    conds.append(keep[qc // BLOCK, kc // BLOCK])
            if not conds:
                return q_idx >= 0
            r = conds[0]
            for c in conds[1:]:
                r = r & c
            return r

        self.mask_mod = mask_mod

    def dense_rows(self, T, r0, r1):
        """Dense mask [B or 1, r1 - r0, Sk] (bool) for query rows r0..r1-1."""
        torch = T.torch
        p = self.p
        nb = p.batch if p.depends_on_batch() else 1
        b = torch.arange(nb, device=T.dev, dtype=torch.int64).view(nb, 1, 1)
        q = torch.arange(r0, r1, device=T.dev, dtype=torch.int64).view(1, r1 - r0, 1)
        kv = torch.arange(p.seq_k, device=T.dev, dtype=torch.int64).view(1, 1, p.seq_k)
        m = self.mask_mod(b, None, q, kv)
        return m.expand(nb, r1 - r0, p.seq_k)

    def dense(self, T, row_chunk=2048):
        """Dense mask [B or 1, 1, Sq, Sk] (bool), built in row chunks."""
        torch = T.torch
        p = self.p
        nb = p.batch if p.depends_on_batch() else 1
        out = torch.empty((nb, 1, p.seq_q, p.seq_k), dtype=torch.bool, device=T.dev)
        for r0 in range(0, p.seq_q, row_chunk):
            r1 = min(p.seq_q, r0 + row_chunk)
            out[:, 0, r0:r1, :] = self.dense_rows(T, r0, r1)
        return out

    def row_any(self, T, row_chunk=2048):
        """[B, Sq] bool: whether each query row has at least one allowed key."""
        torch = T.torch
        p = self.p
        out = torch.empty((p.batch, p.seq_q), dtype=torch.bool, device=T.dev)
        for r0 in range(0, p.seq_q, row_chunk):
            r1 = min(p.seq_q, r0 + row_chunk)
            out[:, r0:r1] = self.dense_rows(T, r0, r1).any(dim=-1).expand(p.batch, r1 - r0)
        return out


# --------------------------------------------------------------------------- inputs


def load_inputs(T, req_dir, req, p):
    """Logical float64 host arrays -> device tensors of the problem dtype.
    Returns a dict with logical [B, H, S, D] device tensors q, k, v, do (strides of
    the problem's physical layout), and bias (float32) / offset (int64) if used."""
    np, torch = T.np, T.torch
    files = req.get("inputs") or {}
    dt = T.dtype(p.dtype)

    def path_of(name):
        rel = files.get(name, f"{name}.npy")
        return rel if os.path.isabs(rel) else os.path.join(req_dir, rel)

    def load(name, shape, kinds="f"):
        path = path_of(name)
        try:
            a = np.load(path, allow_pickle=False)
        except OSError as e:
            raise RequestError(f"cannot read input {name}: {path}: {e}") from None
        except ValueError as e:
            raise RequestError(f"{path}: not a readable .npy file ({e})") from None
        if a.dtype.kind not in kinds:
            raise RequestError(f"{path}: dtype {a.dtype} not accepted for {name}")
        if tuple(a.shape) != tuple(shape):
            if a.size == math.prod(shape):
                a = a.reshape(shape)
            else:
                raise RequestError(f"{path}: shape {tuple(a.shape)}, expected {tuple(shape)}")
        return a

    B, Hq, Hkv, Sq, Sk, D, Dv = p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim, p.head_dim_v

    def place(a):
        t = torch.from_numpy(np.ascontiguousarray(a)).to(dt)  # exact: values are already in the dtype
        if p.layout == "bshd":
            t = t.permute(0, 2, 1, 3).contiguous().to(T.dev).permute(0, 2, 1, 3)
        else:
            t = t.contiguous().to(T.dev)
        return t.detach()

    out = {"q": place(load("q", (B, Hq, Sq, D))), "k": place(load("k", (B, Hkv, Sk, D))),
           "v": place(load("v", (B, Hkv, Sk, Dv))), "do": place(load("do", (B, Hq, Sq, Dv)))}
    bshape = p.bias_shape()
    if bshape is not None:
        out["bias"] = torch.from_numpy(load("bias", bshape).astype(np.float32)).to(T.dev)
    if p.mod == "offset_bias":
        off = load("offset", (Sk,), kinds="iu").astype(np.int64)
        if off.size and (off.min() < 0 or off.max() >= p.bias_size):
            raise RequestError(f"offset values must lie in [0, {p.bias_size})")
        out["offset"] = torch.from_numpy(off).to(T.dev)
    return out


# --------------------------------------------------------------------------- peers


def _is_kernel_rejection(exc):
    """Heuristic: a PyTorch error that says the kernel cannot take these inputs
    (unsupported) rather than a failure (error)."""
    if isinstance(exc, NotImplementedError):
        return True
    msg = str(exc)
    keys = ("No available kernel", "not supported", "does not support", "only supports", "Only support",
            "unsupported", "NYI")
    return isinstance(exc, (RuntimeError, ValueError, TypeError)) and any(k in msg for k in keys)


def _is_compile_resource_error(exc):
    """A compile-time resource limit (Triton's OutOfResources: "out of resource:
    shared memory" / registers; CUDA's "too many resources requested for launch"):
    the kernel cannot be built for this problem (unsupported), unlike device memory
    exhaustion (oom). Mirrors classify_peer_error() in peer_backend.cpp."""
    text = f"{type(exc).__name__}: {exc}"
    return any(k in text for k in ("out of resource", "OutOfResources", "too many resources requested for launch",
                                   "cudaErrorLaunchOutOfResources"))


class Peer:
    """One PyTorch attention path. Subclasses set up leaves (the tensors gradients
    are taken of), forward() -> (out, lse or None), and map results back to the
    logical layout."""

    compiled = False

    def __init__(self, name, p, T, inputs, notes):
        self.name, self.p, self.T, self.inp, self.notes = name, p, T, inputs, notes
        self.mask = TorchMask(p, T) if p.has_mask() else None
        self.lse_source = "kernel"

    def context(self):
        return contextlib.nullcontext()

    def setup(self):
        raise NotImplementedError

    def forward(self):
        raise NotImplementedError

    def backward(self, out):
        """Gradients of the leaves for dO (torch.autograd.grad)."""
        return self.T.torch.autograd.grad(out, self.leaves, grad_outputs=self.do)

    def to_logical(self, out, lse, grads):
        """dict of logical tensors: o, lse (float32 [B,Hq,Sq]) and dq/dk/dv(/dbias)."""
        raise NotImplementedError

    def side_lse(self):
        """LSE computed from the inputs in float32 (no score_mod): the fallback when
        the kernel does not return it."""
        torch, p = self.T.torch, self.p
        q, k = self.inp["q"], self.inp["k"]
        G = p.heads_q // p.heads_kv
        out = torch.empty((p.batch, p.heads_q, p.seq_q), dtype=torch.float32, device=self.T.dev)
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            rows = 1024
            for r0 in range(0, p.seq_q, rows):
                r1 = min(p.seq_q, r0 + rows)
                m = self.mask.dense_rows(self.T, r0, r1) if self.mask is not None else None
                for b in range(p.batch):
                    for h in range(p.heads_q):
                        s = (q[b, h, r0:r1].float() @ k[b, h // G].float().T) * p.scale
                        if m is not None:
                            s = s.masked_fill(~m[b if m.shape[0] > 1 else 0], float("-inf"))
                        out[b, h, r0:r1] = torch.logsumexp(s, dim=-1)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        self.lse_source = "side computation: float32 logsumexp of the masked scaled scores (the kernel returns none)"
        return out


class SdpaPeer(Peer):
    """F.scaled_dot_product_attention restricted to one backend with sdpa_kernel."""

    def __init__(self, *a):
        super().__init__(*a)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.backend = {"torch-sdpa-flash": SDPBackend.FLASH_ATTENTION,
                        "torch-sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                        "torch-sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[self.name]
        self._sdpa_kernel = sdpa_kernel

    def context(self):
        return self._sdpa_kernel([self.backend])

    def setup(self):
        p = self.p
        only_causal = p.kinds == ["causal"]
        self.is_causal = False
        self.attn_mask = None
        if not p.has_mask():
            pass
        elif only_causal and (p.seq_q == p.seq_k or p.causal_align == "top_left"):
            self.is_causal = True
        elif self.name == "torch-sdpa-flash":
            raise Unsupported("the flash backend takes no attn_mask")  # static_support already said so
        else:
            self.attn_mask = self.mask.dense(self.T)
            self.notes.append("mask passed as a dense boolean attn_mask of shape "
                              f"{list(self.attn_mask.shape)} (F.scaled_dot_product_attention cannot express it "
                              "with is_causal); its build time is in setup_ms")
        q, k, v = self.inp["q"], self.inp["k"], self.inp["v"]
        self.q = q.detach().requires_grad_(True)
        self.k = k.detach().requires_grad_(True)
        self.v = v.detach().requires_grad_(True)
        self.leaves = [self.q, self.k, self.v]
        self.do = self.inp["do"]
        self.kwargs = {"attn_mask": self.attn_mask, "is_causal": self.is_causal, "scale": p.scale}
        if p.heads_q != p.heads_kv:
            self.kwargs["enable_gqa"] = True

    def forward(self):
        return self.T.F.scaled_dot_product_attention(self.q, self.k, self.v, **self.kwargs), None

    def to_logical(self, out, lse, grads):
        r = {"o": out.detach(), "lse": lse}
        if grads is not None:
            r["dq"], r["dk"], r["dv"] = grads
        return r

    def kernel_lse(self, o_public):
        """LSE from the private aten op that F.sdpa dispatches to (same kernel), or
        the side computation when that op cannot be called. Notes what was used."""
        torch, p = self.T.torch, self.p
        q, k, v = self.q.detach(), self.k.detach(), self.v.detach()
        G = p.heads_q // p.heads_kv
        if G > 1:
            k = k.repeat_interleave(G, dim=1)
            v = v.repeat_interleave(G, dim=1)
        bias = None
        if self.attn_mask is not None:
            Skp = -(-p.seq_k // 16) * 16  # 16-element aligned rows, as F.sdpa pads them
            store = torch.zeros(self.attn_mask.shape[:3] + (Skp,), dtype=q.dtype, device=self.T.dev)
            bias = store[..., :p.seq_k]
            bias.masked_fill_(~self.attn_mask, float("-inf"))
            bias = bias.expand(p.batch, p.heads_q, p.seq_q, p.seq_k)
        op_name = {"torch-sdpa-flash": "_scaled_dot_product_flash_attention",
                   "torch-sdpa-efficient": "_scaled_dot_product_efficient_attention",
                   "torch-sdpa-cudnn": "_scaled_dot_product_cudnn_attention"}[self.name]
        try:
            op = getattr(torch.ops.aten, op_name)
            with torch.no_grad():
                if self.name == "torch-sdpa-flash":
                    r = op(q, k, v, 0.0, self.is_causal, False, scale=p.scale)
                elif self.name == "torch-sdpa-efficient":
                    r = op(q, k, v, bias, True, 0.0, self.is_causal, scale=p.scale)
                else:
                    r = op(q, k, v, bias, True, 0.0, self.is_causal, False, scale=p.scale)
            o2, lse = r[0], r[1]
            lse = lse.float()
            while lse.dim() > 3 and lse.shape[-1] == 1:
                lse = lse.squeeze(-1)
            if lse.dim() != 3 or lse.shape[0] != p.batch or lse.shape[1] != p.heads_q or lse.shape[2] < p.seq_q:
                raise RuntimeError(f"unexpected logsumexp shape {tuple(r[1].shape)}")
            if lse.shape[2] != p.seq_q:
                self.notes.append(f"{op_name} returned logsumexp padded to {lse.shape[2]} rows; sliced to seq_q")
                lse = lse[:, :, :p.seq_q]
            same = bool(torch.equal(o2, o_public.detach()))
            self.lse_source = f"kernel: torch.ops.aten.{op_name} (a second, untimed call on the same inputs" + (
                "; k/v expanded to heads_q for that call" if G > 1 else "") + (
                "; its O equals F.sdpa's bitwise)" if same else "")
            if not same:
                diff = (o2.float() - o_public.detach().float()).abs().max().item()
                self.lse_source += f"; its O differs from F.sdpa's by up to {diff:.3g})"
            return lse.contiguous()
        except Exception as e:  # noqa: BLE001 - any failure falls back, with a note
            self.notes.append(f"private op {op_name} unusable for the LSE ({type(e).__name__}: {e}); "
                              "LSE from the side computation")
            return self.side_lse()


class FlexPeer(Peer):
    """flex_attention under torch.compile(dynamic=False) with a BlockMask."""

    compiled = True

    def setup(self):
        torch, p, T = self.T.torch, self.p, self.T
        from torch.nn.attention import flex_attention as fa
        self.fa = fa
        self.block_mask = None
        if self.mask is not None:
            nb = p.batch if p.depends_on_batch() else None
            self.block_mask = fa.create_block_mask(self.mask.mask_mod, nb, None, p.seq_q, p.seq_k, device=T.dev,
                                                   BLOCK_SIZE=BLOCK)
        self.q = self.inp["q"].detach().requires_grad_(True)
        self.k = self.inp["k"].detach().requires_grad_(True)
        self.v = self.inp["v"].detach().requires_grad_(True)
        self.leaves = [self.q, self.k, self.v]
        self.do = self.inp["do"]
        self.bias = None
        score_mod = None
        if p.mod == "softcap":
            cap = p.cap

            def score_mod(score, b, h, q_idx, kv_idx):
                return cap * torch.tanh(score / cap)
        elif p.mod == "alibi":
            hh = torch.arange(p.heads_q, dtype=torch.float64, device=T.dev)
            slopes = torch.exp2(-8.0 * (hh + 1) / p.heads_q).to(torch.float32)

            def score_mod(score, b, h, q_idx, kv_idx):
                return score - slopes[h] * (q_idx - kv_idx).abs()
        elif p.mod == "rel_bias":
            m = p.max_distance
            self.bias = self.inp["bias"].detach().clone().requires_grad_(True)
            bias = self.bias

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + bias[h, (q_idx - kv_idx).clamp(-m, m) + m]
        elif p.mod == "offset_bias":
            self.bias = self.inp["bias"].detach().clone().requires_grad_(True)
            bias, offset, last = self.bias, self.inp["offset"], p.seq_k - 1

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + bias[offset[kv_idx.clamp(0, last)]]
        if self.bias is not None:
            self.leaves.append(self.bias)
        self.score_mod = score_mod
        _raise_recompile_limit()
        self.fn = torch.compile(fa.flex_attention, dynamic=False)
        params = _parameters(fa.flex_attention)
        self.kwargs = {"score_mod": score_mod, "block_mask": self.block_mask, "scale": p.scale}
        if p.heads_q != p.heads_kv:
            self.kwargs["enable_gqa"] = True
        self.use_aux = "return_aux" in params and hasattr(fa, "AuxRequest")
        if self.use_aux:
            self.kwargs["return_aux"] = fa.AuxRequest(lse=True)
        else:
            self.kwargs["return_lse"] = True

    def forward(self):
        r = self.fn(self.q, self.k, self.v, **self.kwargs)
        if self.use_aux:
            out, aux = r
            return out, aux.lse
        return r

    def to_logical(self, out, lse, grads):
        r = {"o": out.detach(), "lse": lse.detach().float() if lse is not None else None}
        if grads is not None:
            r["dq"], r["dk"], r["dv"] = grads[:3]
            if self.bias is not None:
                r["dbias"] = grads[3]
        return r


class VarlenPeer(Peer):
    """varlen_attn on packed [T, H, D] sequences: one per document (document mask),
    else one per batch row (valid lengths of a padding mask)."""

    def setup(self):
        torch, p, T = self.T.torch, self.p, self.T
        from torch.nn.attention import varlen as vl
        self.vl = vl
        params = _parameters(vl.varlen_attn)
        seqs = []  # (q_start, q_len, k_start, k_len) as flat token indices
        if p.doc_ids is not None:
            runs = p.document_runs()
            if runs is None:
                raise Unsupported("document ids are not contiguous runs: varlen_attn needs one sequence per document")
            for b, row in enumerate(runs):
                for start, length in row:
                    seqs.append((b * p.seq_q + start, length, b * p.seq_k + start, length))
        else:
            for b in range(p.batch):
                lq, lk = p.valid_q(b), p.valid_k(b)
                if lq > 0:
                    seqs.append((b * p.seq_q, lq, b * p.seq_k, lk))
        if not seqs:
            raise Unsupported("no query tokens: every row is padding")
        if any(lq != lk for _, lq, _, lk in seqs) and p.upper_tl is not None:
            raise Unsupported("top-left causal with query length != key length: varlen_attn aligns bottom-right")
        right = p.upper_br
        if p.upper_tl is not None:
            right = 0 if right is None else min(right, 0)  # per sequence Lq == Lk here: same diagonal
        left = -p.lower_br if p.lower_br is not None else -1
        right = right if right is not None else -1
        self.window = (left, right)
        kwargs = {}
        if "window_size" in params:
            kwargs["window_size"] = self.window
        elif "is_causal" in params:
            if self.window == (-1, 0):
                kwargs["is_causal"] = True
            elif self.window != (-1, -1):
                raise Unsupported("this varlen_attn has no window_size parameter")
        elif self.window != (-1, -1):
            raise Unsupported("this varlen_attn takes neither window_size nor is_causal")
        if "scale" in params:
            kwargs["scale"] = p.scale
        elif abs(p.scale - 1.0 / math.sqrt(p.head_dim)) > 1e-12 * p.scale:
            raise Unsupported("this varlen_attn has no scale parameter")
        if p.heads_q != p.heads_kv and "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        self.use_aux = "return_aux" in params and hasattr(vl, "AuxRequest")
        if self.use_aux:
            kwargs["return_aux"] = vl.AuxRequest(lse=True)
        self.kwargs = kwargs

        dev = T.dev
        self.idx_q = torch.cat([torch.arange(s, s + n, device=dev) for s, n, _, _ in seqs])
        self.idx_k = torch.cat([torch.arange(s, s + n, device=dev) for _, _, s, n in seqs])
        lens_q = torch.tensor([n for _, n, _, _ in seqs], dtype=torch.int32, device=dev)
        lens_k = torch.tensor([n for _, _, _, n in seqs], dtype=torch.int32, device=dev)
        self.cu_q = torch.zeros(len(seqs) + 1, dtype=torch.int32, device=dev)
        self.cu_k = torch.zeros(len(seqs) + 1, dtype=torch.int32, device=dev)
        self.cu_q[1:] = torch.cumsum(lens_q, 0)
        self.cu_k[1:] = torch.cumsum(lens_k, 0)
        self.max_q = max(n for _, n, _, _ in seqs)
        self.max_k = max(n for _, _, _, n in seqs)

        def pack(t, idx):  # logical [B, H, S, D] -> packed [T, H, D] contiguous
            B, H, S, D = t.shape
            return t.permute(0, 2, 1, 3).reshape(B * S, H, D)[idx].contiguous()

        self.q = pack(self.inp["q"], self.idx_q).requires_grad_(True)
        self.k = pack(self.inp["k"], self.idx_k).requires_grad_(True)
        self.v = pack(self.inp["v"], self.idx_k).requires_grad_(True)
        self.do = pack(self.inp["do"], self.idx_q)
        self.leaves = [self.q, self.k, self.v]
        self.notes.append(f"{len(seqs)} sequences, {self.idx_q.numel()} query tokens packed [T, H, D] "
                          f"(gathered untimed), window_size={self.window}; tokens outside every sequence "
                          "(padding) are not computed: their O is 0, LSE -inf and gradients 0 by construction")

    def forward(self):
        r = self.vl.varlen_attn(self.q, self.k, self.v, self.cu_q, self.cu_k, self.max_q, self.max_k, **self.kwargs)
        if self.use_aux:
            return r[0], r[1]
        return r, None

    def _unpack(self, t, idx, B, S, fill):
        torch = self.T.torch
        H, D = t.shape[1], t.shape[2]
        full = torch.full((B * S, H, D), fill, dtype=t.dtype, device=t.device)
        full[idx] = t
        return full.view(B, S, H, D).permute(0, 2, 1, 3)

    def to_logical(self, out, lse, grads):
        torch, p = self.T.torch, self.p
        r = {"o": self._unpack(out.detach(), self.idx_q, p.batch, p.seq_q, 0.0)}
        if lse is not None:
            tq = self.idx_q.numel()
            lse = lse.detach().float()
            if lse.dim() == 2 and lse.shape == (p.heads_q, tq):
                lse = lse.t()
            elif not (lse.dim() == 2 and lse.shape == (tq, p.heads_q)):
                raise RuntimeError(f"varlen_attn returned an LSE of shape {tuple(lse.shape)}; expected "
                                   f"({p.heads_q}, {tq}) or ({tq}, {p.heads_q})")
            full = torch.full((p.batch * p.seq_q, p.heads_q), float("-inf"), dtype=torch.float32, device=lse.device)
            full[self.idx_q] = lse
            r["lse"] = full.view(p.batch, p.seq_q, p.heads_q).permute(0, 2, 1)
        else:
            r["lse"] = None
        if grads is not None:
            r["dq"] = self._unpack(grads[0], self.idx_q, p.batch, p.seq_q, 0.0)
            r["dk"] = self._unpack(grads[1], self.idx_k, p.batch, p.seq_k, 0.0)
            r["dv"] = self._unpack(grads[2], self.idx_k, p.batch, p.seq_k, 0.0)
        return r


def _parameters(fn):
    import inspect
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def make_peer(name, p, T, inputs, notes):
    if name in SDPA_PEERS:
        return SdpaPeer(name, p, T, inputs, notes)
    if name == "torch-flex":
        return FlexPeer(name, p, T, inputs, notes)
    if name == "torch-varlen":
        return VarlenPeer(name, p, T, inputs, notes)
    raise Unsupported(f"unknown peer {name!r}")


# --------------------------------------------------------------------------- running


class Policy:
    """Timing policy of the request (harness/measure/measure.hpp TimingPolicy)."""

    def __init__(self, obj):
        obj = obj or {}
        self.cold = bool(obj.get("cold", True))
        self.warmup = int(obj.get("warmup", 2))
        self.min_samples = int(obj.get("min_samples", 5))
        self.max_samples = int(obj.get("max_samples", 1000))
        self.target_rel_stddev = float(obj.get("target_rel_stddev", 0.02))
        self.max_seconds = float(obj.get("max_seconds", 2.0))
        self.flush_bytes = obj.get("flush_bytes")
        self.hold_stream = bool(obj.get("hold_stream", True))
        if self.warmup < 0 or self.min_samples < 1 or self.max_samples < self.min_samples \
                or not self.target_rel_stddev >= 0 or not self.max_seconds > 0:
            raise RequestError(f"request.json/timing: invalid policy {obj!r}")


def sample_until_stable(policy, take):
    """The stopping rule of harness/measure/measure.cpp sample_until_stable: stop once n >=
    min_samples and stddev/mean <= target (converged), at max_samples, or when the
    sampling wall time reaches max_seconds. Returns (samples, stop_reason, wall_s)."""
    samples = []
    mean = m2 = 0.0
    t0 = time.perf_counter()
    while True:
        x = take()
        samples.append(x)
        n = len(samples)
        d = x - mean
        mean += d / n
        m2 += d * (x - mean)
        rel = math.sqrt(m2 / (n - 1)) / mean if n > 1 and mean > 0 else 0.0
        if n >= policy.min_samples and rel <= policy.target_rel_stddev:
            reason = "converged"
            break
        if n >= policy.max_samples:
            reason = "max_samples"
            break
        if time.perf_counter() - t0 >= policy.max_seconds:
            reason = "time_cap"
            break
    return samples, reason, time.perf_counter() - t0


class StreamHold:
    """Holds the stream with a spin kernel (torch.cuda._sleep) while the host enqueues
    a timed pass, so that the CUDA events measure the GPU work and not Python and
    dispatcher time (nvbench's blocking-kernel idea; a training loop hides that host
    time too, by running ahead of the GPU). The spin is calibrated once in cycles per
    ms and sized to twice the largest host enqueue time seen so far (at least 0.2 ms).
    Samples whose enqueue outlasted the spin are counted as host_gaps."""

    def __init__(self, T, notes, enabled):
        self.T, self.ok, self.cycles_per_ms = T, False, 0.0
        if not enabled:
            return
        torch = T.torch
        try:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)  # load the kernel
            a.record()
            torch.cuda._sleep(2_000_000)
            b.record()
            b.synchronize()
            ms = float(a.elapsed_time(b))
            if ms > 0:
                self.cycles_per_ms, self.ok = 2_000_000 / ms, True
        except Exception as e:  # noqa: BLE001 - optional refinement
            notes.append(f"stream hold unavailable ({type(e).__name__}: {e}): host enqueue time is inside the samples")

    def hold(self, ms):
        """Enqueue a spin of about `ms` milliseconds (no-op when unavailable)."""
        if self.ok:
            self.T.torch.cuda._sleep(int(self.cycles_per_ms * ms))


def time_pass(T, peer, pass_name, policy, flush, hold):
    """Raw CUDA-event samples (ms) of one pass. bwd: an untimed forward first; cold:
    the flush buffer is written between the untimed part and the timed events; then
    the stream hold (StreamHold) and the timed region."""
    torch = T.torch
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def untimed():
        if pass_name == "bwd":
            return peer.forward()[0]
        return None

    def body(state):
        if pass_name == "fwd":
            return peer.forward()
        if pass_name == "bwd":
            return peer.backward(state)
        out, _ = peer.forward()
        return peer.backward(out)

    host = []  # host enqueue time of body(), ms
    for _ in range(policy.warmup):
        state = untimed()
        t0 = time.perf_counter()
        r = body(state)
        host.append((time.perf_counter() - t0) * 1e3)
        del r
    T.sync()
    hold_ms = max(0.2, 2.0 * host[-1]) if host else 5.0
    host.clear()
    gaps = 0

    def take():
        nonlocal hold_ms, gaps
        state = untimed()
        if flush is not None:
            flush.zero_()
        hold.hold(hold_ms)
        start.record()
        t0 = time.perf_counter()
        r = body(state)
        h = (time.perf_counter() - t0) * 1e3
        end.record()
        end.synchronize()
        del r
        host.append(h)
        if hold.ok and h > hold_ms:
            gaps += 1
        hold_ms = min(max(hold_ms, 2.0 * h), 100.0)
        return float(start.elapsed_time(end))

    samples, reason, wall = sample_until_stable(policy, take)
    host_sorted = sorted(host)
    info = {"stop_reason": reason, "timer": "cuda_events", "cold": flush is not None, "warmup": policy.warmup,
            "wall_seconds": wall, "flush_bytes": int(flush.numel()) if flush is not None else 0,
            "hold_stream": hold.ok, "hold_ms": hold_ms if hold.ok else 0.0,
            "host_enqueue_ms_median": host_sorted[len(host_sorted) // 2] if host_sorted else None,
            "host_gaps": gaps}
    return samples, info


def _bitwise_equal(T, a, b):
    torch = T.torch
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)))


def _masked_row_notes(T, peer, res, row_any, notes):
    """Say what the peer gives on fully masked rows and whether NaN appears elsewhere."""
    if row_any is not None:
        masked = ~row_any  # [B, Sq]
        n = int(masked.sum().item())
        if n:
            o = res["o"].permute(0, 2, 1, 3)[masked]  # [n, Hq, Dv]
            lse = res["lse"].permute(0, 2, 1)[masked] if res["lse"] is not None else None
            o_desc = "0" if bool((o == 0).all()) else ("NaN" if bool(o.isnan().any()) else "nonzero values")
            lse_desc = "n/a"
            if lse is not None:
                kinds = []
                if bool((lse == float("-inf")).any()):
                    kinds.append("-inf")
                if bool((lse == float("inf")).any()):
                    kinds.append("+inf")
                if bool(lse.isnan().any()):
                    kinds.append("NaN")
                if bool(lse.isfinite().any()):
                    kinds.append("finite")
                lse_desc = "/".join(kinds)
            msg = (f"{n} fully masked (b, i) query rows (x {peer.p.heads_q} heads): the peer gives O = {o_desc}, "
                   f"LSE = {lse_desc}")
            if o_desc != "0" or lse_desc not in ("-inf", "n/a"):
                msg += " (docs/semantics.md section 5 wants O = 0 and LSE = -inf; reported as given, not fixed)"
            notes.append(msg)
    for key in ("o", "lse", "dq", "dk", "dv", "dbias"):
        t = res.get(key)
        if t is None:
            continue
        nan = t.isnan()
        if row_any is not None and key in ("o", "dq"):
            nan = nan & row_any[:, None, :, None]
        if row_any is not None and key == "lse":
            nan = nan & row_any[:, None, :]
        nn = int(nan.sum().item())
        if nn:
            notes.append(f"{key}: {nn} NaN values outside fully masked rows")


def _save_outputs(T, req_dir, res, want_grads):
    np = T.np
    files = {}
    for key in ("o", "lse", "dq", "dk", "dv", "dbias"):
        t = res.get(key)
        if t is None:
            continue
        if key in ("dq", "dk", "dv", "dbias") and not want_grads:
            continue
        a = t.detach().to("cpu", dtype=T.torch.float64).contiguous().numpy()
        name = f"{key}.npy"
        np.save(os.path.join(req_dir, name), a, allow_pickle=False)
        files[key] = name
    return files


LAST_STATUS = {"status": None}  # status of the last run_request (serve mode answers with it)


def run_request(req_path):
    """Run one request and write result.json next to it. Returns the exit code."""
    req_path = os.path.abspath(req_path)
    req_dir = os.path.dirname(req_path)
    result = {"protocol": PROTOCOL, "peer": None, "status": "error", "notes": []}
    notes = result["notes"]
    t_start = time.perf_counter()
    code = 0
    result_path = os.path.join(req_dir, "result.json")
    T = None
    try:
        req = _load_json(req_path, "request")
        if not isinstance(req, dict):
            raise RequestError(f"{req_path}: expected a JSON object")
        if req.get("protocol", PROTOCOL) != PROTOCOL:
            raise RequestError(f"{req_path}: protocol {req.get('protocol')!r} (this worker speaks {PROTOCOL})")
        peer_name = _need(req, "peer", "str", "request.json")
        result["peer"] = peer_name
        if req.get("result"):
            result_path = os.path.join(req_dir, req["result"])
        prob_rel = req.get("problem", "problem.json")
        p = Problem(_load_json(os.path.join(req_dir, prob_rel), "problem"), prob_rel)
        ok, reason = static_support(peer_name, p)
        if not ok:
            raise Unsupported(reason)
        want_grads = bool(req.get("backward", True))
        passes = req.get("passes", list(PASSES) if want_grads else ["fwd"])
        for x in passes:
            if x not in PASSES or (x != "fwd" and not want_grads):
                raise RequestError(f"request.json/passes: {x!r} is not one of {PASSES} (bwd passes need backward)")
        policy = Policy(req.get("timing"))
        T = _Torch(int(req.get("device", 0)))
        torch = T.torch
        result["versions"] = versions(T)
        inputs = load_inputs(T, req_dir, req, p)
        peer = make_peer(peer_name, p, T, inputs, notes)
        with peer.context(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            peer.setup()
            T.sync()
            result["setup_ms"] = (time.perf_counter() - t0) * 1e3
            torch.cuda.reset_peak_memory_stats(T.dev)
            alloc = torch.cuda.memory_allocated(T.dev)

            def collect():
                out, lse = peer.forward()
                grads = peer.backward(out) if want_grads else None
                res = peer.to_logical(out, lse, grads)
                if res["lse"] is None:
                    res["lse"] = peer.kernel_lse(out) if isinstance(peer, SdpaPeer) else peer.side_lse()
                return res

            t0 = time.perf_counter()
            try:
                res = collect()
                T.sync()
            except Exception as e:  # noqa: BLE001
                if isinstance(e, Unsupported):
                    raise
                if _is_compile_resource_error(e):
                    raise Unsupported(f"compile-time resource limit: {type(e).__name__}: {str(e)[:800]}") from None
                if _is_kernel_rejection(e):
                    why = "; ".join(sorted({str(w.message).strip() for w in caught}))[:1500]
                    raise Unsupported(f"PyTorch rejected the problem: {type(e).__name__}: {str(e)[:800]}"
                                      + (f" (warnings: {why})" if why else "")) from None
                raise
            first_ms = (time.perf_counter() - t0) * 1e3
            result["compile_ms"] = first_ms if peer.compiled else None
            result["first_call_ms"] = first_ms
            result["lse_source"] = peer.lse_source
            row_any = peer.mask.row_any(T) if peer.mask is not None else None
            _masked_row_notes(T, peer, res, row_any, notes)
            result["outputs"] = _save_outputs(T, req_dir, res, want_grads)
            result["memory"] = {"allocated_bytes": int(alloc),
                                "peak_bytes": int(torch.cuda.max_memory_allocated(T.dev))}
            if req.get("determinism", True):
                res2 = collect()
                T.sync()
                result["deterministic"] = all(_bitwise_equal(T, res.get(k), res2.get(k)) for k in res)
                del res2
            else:
                result["deterministic"] = None
            del res
            timings, info = {}, {}
            if passes:
                flush = None
                if policy.cold:
                    nbytes = policy.flush_bytes
                    if not nbytes:
                        l2 = getattr(torch.cuda.get_device_properties(T.dev), "L2_cache_size", 0) or (50 << 20)
                        nbytes = 2 * int(l2)
                    flush = torch.empty(int(nbytes), dtype=torch.uint8, device=T.dev)
                hold = StreamHold(T, notes, policy.hold_stream)
                for x in passes:
                    timings[x], info[x] = time_pass(T, peer, x, policy, flush, hold)
                del flush
            result["timings_ms"] = timings
            result["timing_info"] = info
            for w in caught:
                text = f"warning: {w.category.__name__}: {str(w.message).strip()}"
                if text not in notes and len(notes) < 40:
                    notes.append(text[:600])
        result["status"] = "ok"
    except Unsupported as e:
        result["status"] = "unsupported"
        result["reason"] = str(e)
    except RequestError as e:
        result["status"] = "error"
        result["message"] = f"bad request: {e}"
        code = 2
    except Exception as e:  # noqa: BLE001 - every failure becomes status error
        result["status"] = "error"
        result["message"] = _traceback_summary(e)
    finally:
        if T is not None:
            try:
                T.sync()
            except Exception as e:  # noqa: BLE001
                notes.append(f"CUDA synchronize after the request failed: {type(e).__name__}: {e}")
        result["worker_wall_s"] = time.perf_counter() - t_start
        LAST_STATUS["status"] = result["status"]
        result["notes"] = list(dict.fromkeys(notes))
        try:
            _write_json_atomic(result_path, result)
        except OSError as e:
            print(f"torch_worker: cannot write {result_path}: {e}", file=sys.stderr)
            code = 3
    if result["status"] == "error":
        print(f"torch_worker: {result.get('message')}", file=sys.stderr)
    return code


# --------------------------------------------------------------------------- serve


def _between_requests():
    """Leave the process as a fresh one would be for the next request, except for
    what is worth keeping (imported modules, the CUDA context, compiled kernels):
    free Python garbage and the CUDA caching allocator's unused blocks, so the
    idle worker holds no memory that attnbench's own backends could use."""
    import gc
    gc.collect()
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    initialized = getattr(cuda, "is_initialized", None)
    if callable(initialized) and initialized():
        torch = sys.modules["torch"]
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _raise_recompile_limit():
    """torch.compile keeps a bounded number of specialisations per function (8 by
    default) and falls back to eager execution beyond it; a persistent worker that
    serves many shapes must not silently time eager flex_attention."""
    cfg = getattr(getattr(sys.modules.get("torch"), "_dynamo", None), "config", None)
    if cfg is None:
        return
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            with contextlib.suppress(Exception):
                setattr(cfg, name, max(int(getattr(cfg, name)), 4096))


def serve(stdin=None):
    """Persistent mode: read one request.json path per line, run it (run_request),
    answer one JSON line {"request", "exit_code", "status", "restart", "served"} on
    the original stdout, which carries nothing else (anything printed goes to
    stderr). After a request whose status is error the worker answers with
    restart: true and exits, so a CUDA error cannot poison the next request.
    Returns 0 at EOF."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # C-level and Python prints of libraries go to stderr from now on
    sys.stdout = sys.stderr
    stdin = stdin or sys.stdin
    served = 0
    while True:
        line = stdin.readline()
        if not line:
            return 0
        path = line.strip()
        if not path:
            continue
        LAST_STATUS["status"] = None
        try:
            code = run_request(path)
        except BaseException as e:  # noqa: BLE001 - run_request catches everything else
            print(f"torch_worker --serve: {type(e).__name__}: {e}", file=sys.stderr)
            code = 3
        served += 1
        status = LAST_STATUS["status"]
        restart = status == "error" or code not in (0,)
        if not restart:
            try:
                _between_requests()
            except Exception as e:  # noqa: BLE001 - a broken CUDA context: start afresh
                print(f"torch_worker --serve: cleanup failed ({type(e).__name__}: {e}); restarting",
                      file=sys.stderr)
                restart = True
        proto.write(json.dumps({"request": path, "exit_code": code, "status": status, "restart": restart,
                                "served": served}) + "\n")
        proto.flush()
        if restart:
            return 0


# --------------------------------------------------------------------------- probe


def probe():
    """Availability of every peer on this machine. Returns (ok, report dict)."""
    rep = {"protocol": PROTOCOL, "ok": False, "reason": "", "serve": True, "peers": {},
           "versions": {"python": platform.python_version()}}
    try:
        T = _Torch(0)
    except Unsupported as e:
        rep["reason"] = str(e)
        for name in PEERS:
            rep["peers"][name] = {"ok": False, "reason": str(e)}
        return False, rep
    except Exception as e:  # noqa: BLE001
        rep["reason"] = f"torch/CUDA initialisation failed: {type(e).__name__}: {e}"
        for name in PEERS:
            rep["peers"][name] = {"ok": False, "reason": rep["reason"]}
        return False, rep
    try:
        rep["versions"] = versions(T)
    except Exception as e:  # noqa: BLE001
        rep["versions"]["error"] = str(e)
    torch = T.torch

    def check(name, fn):
        try:
            fn()
            rep["peers"][name] = {"ok": True, "reason": ""}
        except Exception as e:  # noqa: BLE001
            rep["peers"][name] = {"ok": False, "reason": f"{type(e).__name__}: {e}"}

    def sdpa(backend_name):
        def f():
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
            getattr(SDPBackend, backend_name)
            if backend_name == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
                raise RuntimeError("cuDNN is not available in this torch build")
        return f

    def flex():
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
        import triton  # noqa: F401  (torch.compile's GPU code generator)

    def varlen():
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401

    check("torch-sdpa-flash", sdpa("FLASH_ATTENTION"))
    check("torch-sdpa-cudnn", sdpa("CUDNN_ATTENTION"))
    check("torch-sdpa-efficient", sdpa("EFFICIENT_ATTENTION"))
    check("torch-flex", flex)
    check("torch-varlen", varlen)
    rep["ok"] = True
    return True, rep


# --------------------------------------------------------------------------- self-test


SPLITMIX_VECTORS = [(0, 16294208416658607535), (1, 10451216379200822465),
                    (12345678901234567, 13463060612230490842), (MASK64, 16490336266968443936)]
KEEP_ROW_SEED7 = "1110101100010000"  # block_sparse_keep(7, 0, kb, 0.5), kb = 0..15, from the C++ harness


def _self_test_cases(quick):
    """(name, problem dict) of the self-test: every mask kind and score mod, GQA,
    odd lengths, Sq != Sk, fully masked rows."""
    def prob(**kw):
        p = {"batch": 2, "heads_q": 4, "heads_kv": 2, "seq_q": 200, "seq_k": 200, "head_dim": 64,
             "head_dim_v": 64, "dtype": "bf16", "scale": None, "layout": "bshd", "mask": [],
             "score_mod": {"kind": "none"}, "seed": 5}
        p.update(kw)
        return p

    docs = {"kind": "document", "doc_lengths": [[90, 40, 50], [150, 50]]}
    cases = [
        ("dense-gqa", prob()),
        ("causal-bhsd", prob(heads_kv=4, layout="bhsd", mask=[{"kind": "causal", "align": "bottom_right"}])),
        ("causal-tl-sq<sk", prob(seq_q=130, seq_k=260, mask=[{"kind": "causal", "align": "top_left"}])),
        ("causal-br-sq<sk", prob(seq_q=100, seq_k=260, mask=[{"kind": "causal", "align": "bottom_right"}])),
        ("doc-causal-pad", prob(seq_q=300, seq_k=300, mask=[{"kind": "causal", "align": "bottom_right"},
                                                            {"kind": "document",
                                                             "doc_ids": [[0] * 100 + [1] * 60 + [2] * 110 + [-1] * 30,
                                                                         [0] * 200 + [1] * 100]}])),
        ("window-64-0", prob(seq_q=300, seq_k=300, mask=[{"kind": "sliding_window", "left": 64, "right": 0}])),
        ("padding-causal", prob(mask=[{"kind": "causal", "align": "bottom_right"},
                                      {"kind": "padding", "seq_lens_q": [150, 200], "seq_lens_k": [180, 200]}])),
        ("prefix-lm", prob(mask=[{"kind": "prefix_lm", "prefix_len": 50}])),
        ("block-sparse", prob(seq_q=384, seq_k=384, mask=[{"kind": "block_sparse", "density": 0.5, "seed": 3}])),
        ("softcap-causal", prob(mask=[{"kind": "causal", "align": "bottom_right"}],
                                score_mod={"kind": "softcap", "cap": 2.0})),
        ("alibi", prob(score_mod={"kind": "alibi"}, mask=[docs])),
        ("rel-bias", prob(score_mod={"kind": "rel_bias", "max_distance": 9},
                          mask=[{"kind": "causal", "align": "bottom_right"}])),
        ("offset-bias", prob(score_mod={"kind": "offset_bias", "size": 7})),
    ]
    if quick:
        keep = {"dense-gqa", "doc-causal-pad", "block-sparse", "rel-bias", "causal-br-sq<sk"}
        cases = [c for c in cases if c[0] in keep]
    return cases


def _make_inputs(T, p, seed):
    """Seeded normal inputs rounded to the dtype (float64 CPU tensors) and bias/offset."""
    torch = T.torch
    g = torch.Generator().manual_seed(seed)
    dt = T.dtype(p.dtype)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dt).to(torch.float64)

    B, Hq, Hkv, Sq, Sk, D, Dv = p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim, p.head_dim_v
    inp = {"q": rnd(B, Hq, Sq, D), "k": rnd(B, Hkv, Sk, D), "v": rnd(B, Hkv, Sk, Dv), "do": rnd(B, Hq, Sq, Dv)}
    if p.bias_shape() is not None:
        inp["bias"] = torch.randn(*p.bias_shape(), generator=g, dtype=torch.float64).to(torch.float32).to(torch.float64)
    if p.mod == "offset_bias":
        inp["offset"] = torch.randint(0, p.bias_size, (Sk,), generator=g, dtype=torch.int64)
    return inp


def _reference(T, p, inp, allowed, lp):
    """Dense reference on the CPU: float64 (gold) or float32 with rounding to the
    dtype after S, score_mod, P and O and, through autograd's casts, after each
    backward product (lp, docs/semantics.md section 7). Returns logical float64 tensors."""
    torch = T.torch
    ct = torch.float32 if lp else torch.float64
    low = T.dtype(p.dtype)

    def rnd(x):
        return x.to(low).to(ct) if lp else x

    G = p.heads_q // p.heads_kv
    q = inp["q"].to(ct).requires_grad_(True)
    k = inp["k"].to(ct).requires_grad_(True)
    v = inp["v"].to(ct).requires_grad_(True)
    leaves = [q, k, v]
    kk = k.repeat_interleave(G, dim=1)
    vv = v.repeat_interleave(G, dim=1)
    s = rnd(q @ kk.transpose(-1, -2) * p.scale)
    i = torch.arange(p.seq_q).view(-1, 1)
    j = torch.arange(p.seq_k).view(1, -1)
    h = torch.arange(p.heads_q).view(-1, 1, 1)
    bias = None
    if p.mod == "softcap":
        s = rnd(p.cap * torch.tanh(s / p.cap))
    elif p.mod == "alibi":
        slopes = torch.exp2(-8.0 * (torch.arange(p.heads_q, dtype=torch.float64) + 1) / p.heads_q).to(ct)
        s = rnd(s - slopes.view(-1, 1, 1) * (i - j).abs().to(ct))
    elif p.mod == "rel_bias":
        bias = inp["bias"].to(ct).requires_grad_(True)
        m = p.max_distance
        s = rnd(s + bias[h, (i - j).clamp(-m, m) + m])
    elif p.mod == "offset_bias":
        bias = inp["bias"].to(ct).requires_grad_(True)
        s = rnd(s + bias[inp["offset"]].view(1, 1, 1, -1))
    if bias is not None:
        leaves.append(bias)
    s = s.masked_fill(~allowed, float("-inf"))
    row = allowed.any(dim=-1, keepdim=True).expand(p.batch, p.heads_q, p.seq_q, 1)
    mx = torch.where(row, s.amax(dim=-1, keepdim=True), torch.zeros_like(s[..., :1])).detach()
    e = torch.exp(s - mx)
    l = e.sum(dim=-1, keepdim=True)
    prob = rnd(e / torch.where(row, l, torch.ones_like(l)))
    o = rnd(prob @ vv)
    lse = torch.where(row, mx + torch.log(l), torch.full_like(l, float("-inf"))).squeeze(-1)
    grads = torch.autograd.grad(o, leaves, grad_outputs=inp["do"].to(ct))
    r = {"o": o.detach(), "lse": lse.detach().to(torch.float32), "dq": grads[0], "dk": grads[1], "dv": grads[2]}
    if bias is not None:
        r["dbias"] = grads[3]
    return {key: t.detach().to(torch.float64) for key, t in r.items()}


def _ulp(dtype_name, x):
    bits = {"bf16": 7, "fp16": 10, "fp32": 23}[dtype_name]
    if x <= 0 or not math.isfinite(x):
        return 0.0
    return 2.0 ** (math.floor(math.log2(x)) - bits)


def self_test(args):
    """Run every peer on tiny problems through the full protocol (files in, files
    out) and compare with a float64 reference. Prints one line per (peer, case)."""
    failures = []
    # 1. Pure-Python parts (no torch needed).
    for x, want in SPLITMIX_VECTORS:
        if splitmix64(x) != want:
            failures.append(f"splitmix64({x}) = {splitmix64(x)}, expected {want}")
    row = "".join("1" if block_sparse_keep(7, 0, kb, 0.5) else "0" for kb in range(16))
    if row != KEEP_ROW_SEED7:
        failures.append(f"block_sparse_keep row {row}, expected {KEEP_ROW_SEED7}")
    print(f"[self-test] splitmix64 / block_sparse_keep port: {'ok' if not failures else 'FAILED'}")
    try:
        T = _Torch(0)
    except Unsupported as e:
        print(f"[self-test] cannot run the GPU part: {e}")
        return 1
    torch = T.torch
    print(f"[self-test] {json.dumps(versions(T))}")
    peers = [x for x in (args.peers.split(",") if args.peers else PEERS) if x]
    for x in peers:
        if x not in PEERS:
            print(f"[self-test] unknown peer {x!r}")
            return 2
    root = tempfile.mkdtemp(prefix="attnbench-selftest-")
    np = T.np
    findings = []
    try:
        cases = _self_test_cases(args.quick)
        for ci, (cname, pj) in enumerate(cases):
            p = Problem(pj, cname)
            cdir = os.path.join(root, f"case{ci}")
            os.makedirs(cdir)
            _write_json_atomic(os.path.join(cdir, "problem.json"), pj)
            inp = _make_inputs(T, p, 1000 + ci)
            for key, t in inp.items():
                np.save(os.path.join(cdir, f"{key}.npy"), t.numpy(), allow_pickle=False)
            # Mask: vectorised torch version vs the scalar port of mask_allowed().
            dense_py = torch.tensor([[[p.allowed(b, i, j) for j in range(p.seq_k)] for i in range(p.seq_q)]
                                     for b in range(p.batch)], dtype=torch.bool)
            if p.has_mask():
                dense_t = TorchMask(p, T).dense(T)[:, 0].cpu().expand(p.batch, p.seq_q, p.seq_k)
                ok = bool(torch.equal(dense_t, dense_py))
                print(f"[self-test] {cname:18s} mask torch == scalar: {'ok' if ok else 'MISMATCH'}")
                if not ok:
                    failures.append(f"{cname}: vectorised mask differs from the scalar mask")
            allowed = dense_py.view(p.batch, 1, p.seq_q, p.seq_k)
            gold = _reference(T, p, inp, allowed, lp=False)
            lpr = _reference(T, p, inp, allowed, lp=True)
            row_ok = allowed.any(dim=-1)[:, 0]  # [B, Sq]
            for peer in peers:
                torch._dynamo.reset()
                pdir = os.path.join(cdir, peer)
                os.makedirs(pdir)
                timed = ci == 0
                req = {"protocol": PROTOCOL, "peer": peer, "problem": "../problem.json",
                       "inputs": {key: f"../{key}.npy" for key in inp},
                       "backward": True, "passes": list(PASSES) if timed else [],
                       "timing": {"cold": True, "warmup": 1, "min_samples": 3, "max_samples": 5,
                                  "target_rel_stddev": 0.5, "max_seconds": 0.5},
                       "determinism": True, "device": 0}
                _write_json_atomic(os.path.join(pdir, "request.json"), req)
                t0 = time.perf_counter()
                run_request(os.path.join(pdir, "request.json"))
                wall = time.perf_counter() - t0
                with open(os.path.join(pdir, "result.json"), encoding="utf-8") as f:
                    res = json.load(f)
                tag = f"[self-test] {cname:18s} {peer:21s}"
                if res["status"] == "unsupported":
                    print(f"{tag} unsupported: {res.get('reason')}")
                    continue
                if res["status"] != "ok":
                    print(f"{tag} ERROR: {res.get('message')}")
                    failures.append(f"{cname}/{peer}: error {res.get('message')}")
                    continue
                worst, bad = [], []
                for key in ("o", "lse", "dq", "dk", "dv", "dbias"):
                    if key not in gold:
                        continue
                    fname = res.get("outputs", {}).get(key)
                    if not fname:
                        bad.append(f"{key} missing")
                        continue
                    got = torch.from_numpy(np.load(os.path.join(pdir, fname)))
                    g, lp_ = gold[key], lpr[key]
                    if key in ("o", "dq"):
                        sel = row_ok[:, None, :, None].expand_as(g)
                    elif key == "lse":
                        sel = row_ok[:, None, :].expand_as(g)
                    else:
                        sel = torch.ones_like(g, dtype=torch.bool)
                    if got.shape != g.shape:
                        bad.append(f"{key} shape {tuple(got.shape)} != {tuple(g.shape)}")
                        continue
                    e = (got - g).abs()[sel]
                    e_lp = (lp_ - g).abs()[sel]
                    if e.numel() == 0:
                        continue
                    if bool(e.isnan().any()):
                        bad.append(f"{key} has NaN")
                        continue
                    r = 2.0 if key in ("o", "lse") else 3.0
                    gmax = float(g[sel].abs().max())
                    ulp = _ulp("fp32" if key in ("lse", "dbias") else p.dtype, gmax)
                    tol = 2.0 * (r * float(e_lp.max()) + ulp)  # 2x the correctness rule: plumbing check
                    err = float(e.max())
                    worst.append(f"{key} {err:.2e}/{tol:.2e}")
                    if not err <= tol:
                        bad.append(f"{key} error {err:.3g} > {tol:.3g}")
                timing = ""
                if timed:
                    ts = res.get("timings_ms", {})
                    if any(not ts.get(x) or min(ts[x]) <= 0 for x in PASSES):
                        bad.append(f"timing samples missing or not positive: {ts}")
                    ti = res.get("timing_info", {}).get("fwd", {})
                    host_ms = ti.get("host_enqueue_ms_median")
                    timing = (" fwd " + ", ".join(f"{x:.3f}" for x in ts.get("fwd", [])) + " ms"
                              + (f" (host enqueue {host_ms:.3f} ms" if isinstance(host_ms, float) else " (")
                              + f", stream hold {'on' if ti.get('hold_stream') else 'off'})")
                if bad and not bool(row_ok.all()) and all("NaN" in b for b in bad):
                    # NaN that a peer's fully-masked-row convention spreads: a finding about
                    # the peer (attnbench's check reports it), not a defect of this worker.
                    findings.append(f"{cname}/{peer}: {'; '.join(bad)} (problem has fully masked rows)")
                    bad = []
                verdict = "ok" if not bad else "FAIL " + "; ".join(bad)
                print(f"{tag} {verdict} [{', '.join(worst)}]{timing} ({wall:.1f}s, det={res.get('deterministic')})")
                for n in res.get("notes", []):
                    if "fully masked" in n and "reported as given" in n:
                        findings.append(f"{cname}/{peer}: {n}")
                if bad:
                    failures.append(f"{cname}/{peer}: {'; '.join(bad)}")
    finally:
        if args.keep:
            print(f"[self-test] files kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    for f in findings:
        print(f"[self-test] finding: {f}")
    if failures:
        print(f"[self-test] {len(failures)} FAILURE(S):")
        for f in failures:
            print(f"  - {f}")
        return 1
    print("[self-test] all supported (peer, case) pairs agree with float64 within 2x the correctness rule")
    return 0


# --------------------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(description="attnbench peer worker for PyTorch attention backends "
                                             "(protocol: docs/peers.md)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--request", metavar="REQUEST_JSON", help="run one request (writes result.json next to it)")
    g.add_argument("--serve", action="store_true",
                   help="persistent: request.json paths on stdin, one JSON answer line each on stdout")
    g.add_argument("--probe", action="store_true", help="print availability as JSON; exit 0 if usable")
    g.add_argument("--self-test", action="store_true", help="check every peer against float64 on tiny problems")
    g.add_argument("--dump-mask", nargs="+", metavar="PROBLEM_JSON",
                   help="print each problem's mask as one JSON line (stdlib only)")
    g.add_argument("--support", nargs="+", metavar="PEER_OR_all PROBLEM_JSON",
                   help="PEER|all PROBLEM_JSON...: print the static support verdicts, one JSON line per "
                        "problem (stdlib only)")
    ap.add_argument("--peers", help="self-test: comma-separated peers (default: all)")
    ap.add_argument("--quick", action="store_true", help="self-test: fewer cases")
    ap.add_argument("--keep", action="store_true", help="self-test: keep the work files")
    args = ap.parse_args(argv)
    try:
        if args.request:
            if not os.path.isdir(os.path.dirname(os.path.abspath(args.request))):
                print(f"torch_worker: no such directory for {args.request}", file=sys.stderr)
                return 2
            return run_request(args.request)
        if args.serve:
            return serve()
        if args.probe:
            ok, rep = probe()
            print(json.dumps(rep))
            return 0 if ok else 1
        if args.self_test:
            return self_test(args)
        if args.dump_mask:
            for path in args.dump_mask:
                p = Problem(_load_json(path, "problem"), path)
                rows = ["".join("1" if p.allowed(b, i, j) else "0" for j in range(p.seq_k))
                        for b in range(p.batch) for i in range(p.seq_q)]
                print(json.dumps({"problem": path, "batch": p.batch, "seq_q": p.seq_q, "seq_k": p.seq_k,
                                  "rows": rows}))
            return 0
        if args.support:
            if len(args.support) < 2:
                ap.error("--support needs PEER (or all) and at least one PROBLEM_JSON")
            peers = PEERS if args.support[0] == "all" else (args.support[0],)
            for path in args.support[1:]:
                p = Problem(_load_json(path, "problem"), path)
                verdicts = {}
                for name in peers:
                    ok, reason = static_support(name, p)
                    verdicts[name] = {"ok": ok, "reason": reason}
                print(json.dumps({"problem": path, "verdicts": verdicts}))
            return 0
    except RequestError as e:
        print(f"torch_worker: {e}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
