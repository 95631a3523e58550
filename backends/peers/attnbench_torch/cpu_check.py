#!/usr/bin/env python3
"""Run the worker (attnbench_torch) on the CPU with stand-in kernels, to test it without a GPU.

The worker is PyTorch code that only runs for real on a CUDA machine. This
script imports it unchanged and swaps out what needs the GPU or a recent PyTorch:

  - the CUDA surface the worker touches (device, events, memory statistics,
    device properties, the spin kernel of the stream hold) for CPU equivalents
    (events read time.perf_counter; the stream hold reports itself unavailable);
  - torch.compile for the identity;
  - F.scaled_dot_product_attention, torch.nn.attention (SDPBackend, sdpa_kernel),
    torch.nn.attention.flex_attention (create_block_mask, flex_attention,
    AuxRequest) and torch.nn.attention.varlen (varlen_attn, AuxRequest) for
    stand-ins that compute the same maths densely in float32 (the mask from the
    worker's own mask_mod / is_causal / attn_mask / window_size, score_mod applied
    to broadcast index tensors, fully masked rows O = 0 and LSE = -inf).

Everything else is the worker's own code: problem parsing, masks, input layouts,
packing for varlen, gradient plumbing (learnable biases included), LSE handling
(the SDPA private ops are absent here, so its side computation runs), result files,
determinism, the timing loop and the self-test's float64 comparison. The kernels
are stand-ins, so this checks plumbing, never PyTorch's numbers.

Usage (needs torch >= 1.13 and numpy; any CPU build):
  python3 backends/peers/attnbench_torch/cpu_check.py --self-test --quick
  ATTNBENCH_PYTHON=python3 ATTNBENCH_TORCH_WORKER=backends/peers/attnbench_torch/cpu_check.py \\
      attnbench run SCENARIO --backends torch-sdpa-efficient,torch-varlen
It accepts every argument of the worker. --probe reports torch-flex
unavailable without triton and torch-sdpa-cudnn without cuDNN, as the real worker
would; requests themselves do not need either.
"""

import contextlib
import enum
import os
import sys
import time
import types

if __package__ in (None, ""):
    # Run as a file: import the package by its name, never its modules as top-level ones.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [x for x in sys.path if os.path.abspath(x or ".") != _here]
    sys.path.insert(0, os.path.dirname(_here))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attnbench_torch import cli, torch_env  # noqa: E402


class _Event:
    """torch.cuda.Event stand-in on the host clock."""

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


class _CpuTorch:
    """torch_env.TorchEnv on the CPU."""

    def __init__(self, device_index=0):
        import numpy as np
        self.torch, self.np, self.F = torch, np, F
        self.dev = torch.device("cpu")

    def dtype(self, name):
        return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]

    def sync(self):
        pass


def dense_attention(q, k, v, allowed, scale, score_mod=None):
    """Reference maths in float32: O (in q's dtype) and LSE [B, H, Sq] (float32)."""
    B, Hq, Sq, _ = q.shape
    G = Hq // k.shape[1]
    kk = k.repeat_interleave(G, 1).float()
    vv = v.repeat_interleave(G, 1).float()
    s = (q.float() @ kk.transpose(-1, -2)) * scale
    if score_mod is not None:
        s = score_mod(s, torch.arange(B).view(B, 1, 1, 1), torch.arange(Hq).view(1, Hq, 1, 1),
                      torch.arange(Sq).view(1, 1, Sq, 1), torch.arange(k.shape[2]).view(1, 1, 1, -1))
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - safe[..., None])  # fully masked rows: all zero, no NaN
    return (p @ vv).to(q.dtype), lse


class SDPBackend(enum.Enum):
    """torch.nn.attention.SDPBackend stand-in."""

    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3


def sdpa_kernel(backends):
    """torch.nn.attention.sdpa_kernel stand-in (one implementation serves all)."""
    return contextlib.nullcontext()


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """F.scaled_dot_product_attention stand-in: is_causal is top-left, attn_mask boolean."""
    Sq, Sk = query.shape[2], key.shape[2]
    allowed = torch.ones(1, 1, Sq, Sk, dtype=torch.bool)
    if is_causal:
        allowed = torch.ones(Sq, Sk, dtype=torch.bool).tril().view(1, 1, Sq, Sk)
    if attn_mask is not None:
        allowed = allowed & attn_mask
    return dense_attention(query, key, value, allowed, scale)[0]


class AuxRequest:
    """AuxRequest stand-in (flex_attention and varlen_attn)."""

    def __init__(self, lse=False, max_scores=False):
        self.lse = lse


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cuda", BLOCK_SIZE=128, _compile=False):
    """create_block_mask stand-in: keeps the mask_mod."""
    return types.SimpleNamespace(mask_mod=mask_mod, B=B, H=H, seq_lengths=(Q_LEN, KV_LEN))


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, return_aux=None):
    """flex_attention stand-in: the mask_mod and score_mod on broadcast indices."""
    B, _, Sq, _ = query.shape
    Sk = key.shape[2]
    if block_mask is None:
        allowed = torch.ones(1, 1, Sq, Sk, dtype=torch.bool)
    else:
        allowed = block_mask.mask_mod(torch.arange(B).view(B, 1, 1, 1), None,
                                      torch.arange(Sq).view(1, 1, Sq, 1), torch.arange(Sk).view(1, 1, 1, Sk))
    o, lse = dense_attention(query, key, value, allowed, scale, score_mod)
    if return_aux is not None:
        return o, types.SimpleNamespace(lse=lse if return_aux.lse else None)
    return (o, lse) if return_lse else o


def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                window_size=(-1, -1)):
    """varlen_attn stand-in: per sequence, FlashAttention's bottom-right window; LSE [H, T]."""
    outs, lses = [], []
    for i in range(cu_seq_q.numel() - 1):
        a, b = int(cu_seq_q[i]), int(cu_seq_q[i + 1])
        c, d = int(cu_seq_k[i]), int(cu_seq_k[i + 1])
        q = query[a:b].transpose(0, 1)[None]
        k = key[c:d].transpose(0, 1)[None]
        v = value[c:d].transpose(0, 1)[None]
        lq, lk = b - a, d - c
        diag = torch.arange(lk).view(1, -1) - torch.arange(lq).view(-1, 1) - (lk - lq)
        allowed = torch.ones(lq, lk, dtype=torch.bool)
        if window_size[1] >= 0:
            allowed &= diag <= window_size[1]
        if window_size[0] >= 0:
            allowed &= diag >= -window_size[0]
        o, lse = dense_attention(q, k, v, allowed.view(1, 1, lq, lk), scale)
        outs.append(o[0].transpose(0, 1))
        lses.append(lse[0])
    out, lse = torch.cat(outs, 0), torch.cat(lses, 1)
    return (out, lse) if return_aux is not None and return_aux.lse else out


def _no_sleep(cycles):
    raise RuntimeError("no GPU spin kernel in the CPU check")


def install():
    """Patch torch and the worker's TorchEnv (this process only)."""
    cuda = torch.cuda
    cuda.Event = _Event
    cuda._sleep = _no_sleep
    cuda.synchronize = lambda *a, **k: None
    cuda.reset_peak_memory_stats = lambda *a, **k: None
    cuda.memory_allocated = lambda *a, **k: 0
    cuda.max_memory_allocated = lambda *a, **k: 0
    cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(
        name="cpu stand-in", major=0, minor=0, multi_processor_count=os.cpu_count() or 1, L2_cache_size=1 << 20)
    torch.compile = lambda fn, dynamic=False, **kw: fn
    if not hasattr(torch, "_dynamo"):
        torch._dynamo = types.SimpleNamespace(reset=lambda: None)
    F.scaled_dot_product_attention = scaled_dot_product_attention

    att = types.ModuleType("torch.nn.attention")
    att.SDPBackend, att.sdpa_kernel = SDPBackend, sdpa_kernel
    fx = types.ModuleType("torch.nn.attention.flex_attention")
    fx.AuxRequest, fx.create_block_mask, fx.flex_attention = AuxRequest, create_block_mask, flex_attention
    vl = types.ModuleType("torch.nn.attention.varlen")
    vl.AuxRequest, vl.varlen_attn = AuxRequest, varlen_attn
    att.flex_attention, att.varlen = fx, vl
    sys.modules["torch.nn.attention"] = att
    sys.modules["torch.nn.attention.flex_attention"] = fx
    sys.modules["torch.nn.attention.varlen"] = vl
    torch.nn.attention = att
    torch_env.TorchEnv = _CpuTorch


if __name__ == "__main__":
    install()
    sys.exit(cli.main(sys.argv[1:]))
