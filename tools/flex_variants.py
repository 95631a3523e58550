#!/usr/bin/env python3
"""Why does torch-flex read slower in attnbench than in the peers file? A diagnostic.

Takes a peer work dir that attnbench kept (ATTNBENCH_PEER_KEEP=1: problem.json and
the .npy inputs) and times flex_attention on that problem four ways, each timed
two ways:

  variants  bshd-generic    the worker's inputs (a [B, S, H, D] buffer viewed as
                            [B, H, S, D]) and its generic mask_mod (TorchMask; it
                            clamped indices until the results of this script
                            showed their cost, see docs/results/)
            bhsd-generic    contiguous [B, H, S, D] copies, generic mask_mod
            bshd-minimal    worker inputs, the two-comparison document-causal
                            mask_mod (doc[b,q] == doc[b,kv] & doc >= 0 & q >= kv)
            bhsd-minimal    both
  timers    do_bench        triton.testing.do_bench median (how the peers file was
                            measured: host enqueue included, L2 flushed by do_bench)
            events          CUDA events around the pass with the stream held by a
                            spin kernel (as the worker's StreamHold): GPU time only
                            (both in tools/two_ways.py)

Prints one JSON line per (variant, pass) and exits 0. Usage (on the GPU machine):
  python3 tools/flex_variants.py /tmp/attnbench-peer-XXXX [--reps 50]
Only document(+causal) masks get the minimal mask_mod; other masks are skipped
with a note.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "backends", "peers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from attnbench_torch import masks, protocol, problems, request, torch_env, torch_mask  # noqa: E402
from two_ways import two_ways  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work_dir")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    req = protocol.load_json(os.path.join(args.work_dir, "request.json"), "request")
    p = problems.Problem(protocol.load_json(os.path.join(args.work_dir, "problem.json"), "problem"))
    T = torch_env.TorchEnv(0)
    torch = T.torch
    from torch.nn.attention import flex_attention as fa

    inp = request.load_inputs(T, args.work_dir, req, p)
    generic = torch_mask.TorchMask(p, T).mask_mod
    doc = torch.tensor(p.doc_ids, dtype=torch.int32, device=T.dev) if p.doc_ids is not None else None

    def minimal(b, h, q_idx, kv_idx):
        d = doc[b, q_idx]
        return (d == doc[b, kv_idx]) & (d >= 0) & (q_idx >= kv_idx)

    variants = [("bshd-generic", False, generic), ("bhsd-generic", True, generic)]
    if doc is not None and p.seq_q == p.seq_k and p.seq_q % masks.BLOCK == 0:
        variants += [("bshd-minimal", False, minimal), ("bhsd-minimal", True, minimal)]
    else:
        print(json.dumps({"note": "minimal mask_mod needs a document mask and S % 128 == 0: skipped"}))
    fn = torch.compile(fa.flex_attention, dynamic=False)
    for name, contiguous, mod in variants:
        t0 = time.perf_counter()
        bm = fa.create_block_mask(mod, p.batch, None, p.seq_q, p.seq_k, device=T.dev, BLOCK_SIZE=masks.BLOCK)
        torch.cuda.synchronize()
        mask_ms = (time.perf_counter() - t0) * 1e3

        def leaf(t):
            t = t.contiguous() if contiguous else t
            return t.detach().requires_grad_(True)

        q, k, v = leaf(inp["q"]), leaf(inp["k"]), leaf(inp["v"])
        do = inp["do"].contiguous() if contiguous else inp["do"]
        kw = {"block_mask": bm, "scale": p.scale, "enable_gqa": p.heads_q != p.heads_kv}

        def fwd():
            return fn(q, k, v, **kw)

        def fwd_bwd():
            o = fn(q, k, v, **kw)
            o.backward(do)

        for _ in range(3):
            fwd_bwd()
        torch.cuda.synchronize()
        for pname, body in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
            db, ev, host = two_ways(torch, body, [q, k, v], args.reps)
            print(json.dumps({"variant": name, "pass": pname, "do_bench_ms": round(db, 4),
                              "events_ms": round(ev, 4),
                              "host_enqueue_ms": round(host, 4),
                              "mask_build_ms": round(mask_ms, 2), "sparsity": round(float(bm.sparsity()), 3)}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
