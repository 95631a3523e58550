#!/usr/bin/env python3
"""Time PyTorch's dense attention paths with triton.testing.do_bench, the way the
peers file (docs/peers/torch-2.11-h100.json) was measured, next to CUDA events
around a single pass with the stream held (the torch worker's way).

Answers whether a difference between attnbench's peer rows and the file comes from
the timing method or from the machine: run on the GPU machine,

    python3 tools/do_bench_dense.py [--seq 1024 --batch 16 --heads 16 --dim 128] [--causal]

and compare with ci/peers_table.py's rows. Inputs are contiguous [B, H, S, D]
bf16 tensors from torch.randn (seed 0). Prints one JSON line per (path, pass).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from two_ways import two_ways  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true", default=True)
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.manual_seed(0)
    shape = (a.batch, a.heads, a.seq, a.dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    flex = torch.compile(flex_attention, dynamic=False)
    bm = create_block_mask(lambda b, h, i, j: i >= j, None, None, a.seq, a.seq, device="cuda")
    paths = {
        "sdpa-cudnn": (SDPBackend.CUDNN_ATTENTION, None),
        "sdpa-flash": (SDPBackend.FLASH_ATTENTION, None),
        "sdpa-efficient": (SDPBackend.EFFICIENT_ATTENTION, None),
        "flex": (None, bm),
    }
    for name, (backend, mask) in paths.items():
        def fwd():
            if mask is not None:
                return flex(q, k, v, block_mask=mask)
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)

        def fwd_bwd():
            fwd().backward(do)

        for _ in range(3):
            fwd_bwd()
        torch.cuda.synchronize()
        for pname, body in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
            db, ev, host = two_ways(torch, body, [q, k, v], a.reps)
            print(json.dumps({"path": name, "pass": pname, "shape": list(shape), "do_bench_ms": round(db, 4),
                              "held_events_ms": round(ev, 4),
                              "host_enqueue_ms": round(host, 4)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
