"""--self-test: every peer on tiny problems through the full protocol (files in,
files out), compared with a dense float64 reference on the CPU under twice the
correctness rule (a plumbing check; attnbench applies the exact rule). First the
pure-Python semantics are checked against the C++ golden vectors (golden.py).

torch is reached through torch_env.TorchEnv, imported when the GPU part starts.
"""

import json
import math
import os
import shutil
import tempfile
import time

from . import golden, rng, torch_env
from .problems import Problem
from .protocol import PASSES, PEERS, PROTOCOL, Unsupported, write_json_atomic
from .request import bits_to_tensor, run_request, tensor_to_npy
from .torch_mask import TorchMask


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
    """The inputs attnbench would generate for p under `seed` (rng.py, the port of
    make_inputs()): float64 CPU tensors q, k, v, do (values in the dtype), bias
    (values in float32) and offset (int64) when the score mod has them."""
    torch = T.torch
    B, Hq, Hkv, Sq, Sk, D, Dv = p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim, p.head_dim_v
    shapes = {"q": (B, Hq, Sq, D), "k": (B, Hkv, Sk, D), "v": (B, Hkv, Sk, Dv), "do": (B, Hq, Sq, Dv)}
    if p.bias_shape() is not None:
        shapes["bias"] = p.bias_shape()
    if p.mod == "offset_bias":
        shapes["offset"] = (Sk,)
    inp = {}
    for name, shape in shapes.items():
        values = rng.make_inputs_head(p, name, math.prod(shape), seed=seed)
        dtype = torch.int64 if name == "offset" else torch.float64
        inp[name] = torch.tensor(values, dtype=dtype).view(*shape)
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


def _check_golden():
    """The golden vectors of the C++ side, when this is a source tree that has them."""
    gdir = golden.default_golden_dir()
    if not os.path.isdir(gdir):
        print(f"[self-test] golden vectors: {gdir} not found (not a source tree): skipped")
        return []
    failures = golden.check_golden(gdir)
    print(f"[self-test] masks / generator / stopping rule vs the C++ golden vectors: "
          f"{'ok' if not failures else 'FAILED'}")
    return failures


def _write_case(T, root, ci, cname, pj):
    """Problem file and seeded inputs of case ci under root; the mask compared
    (vectorised torch version vs the scalar port). Returns (case dir, p, inputs,
    allowed [B, 1, Sq, Sk], failures)."""
    torch, np = T.torch, T.np
    p = Problem(pj, cname)
    cdir = os.path.join(root, f"case{ci}")
    os.makedirs(cdir)
    write_json_atomic(os.path.join(cdir, "problem.json"), pj)
    inp = _make_inputs(T, p, 1000 + ci)
    for key, t in inp.items():
        a = t.numpy()
        if key in ("q", "k", "v", "do") and p.dtype in ("fp16", "bf16"):
            a = tensor_to_npy(T, t.to(T.dtype(p.dtype)), T.dtype(p.dtype))  # as attnbench writes them: 16-bit bits
        np.save(os.path.join(cdir, f"{key}.npy"), a, allow_pickle=False)
    failures = []
    dense_py = torch.tensor([[[p.allowed(b, i, j) for j in range(p.seq_k)] for i in range(p.seq_q)]
                             for b in range(p.batch)], dtype=torch.bool)
    if p.has_mask():
        dense_t = TorchMask(p, T).dense(T)[:, 0].cpu().expand(p.batch, p.seq_q, p.seq_k)
        ok = bool(torch.equal(dense_t, dense_py))
        print(f"[self-test] {cname:18s} mask torch == scalar: {'ok' if ok else 'MISMATCH'}")
        if not ok:
            failures.append(f"{cname}: vectorised mask differs from the scalar mask")
    return cdir, p, inp, dense_py.view(p.batch, 1, p.seq_q, p.seq_k), failures


def _request(cdir, peer, inp, timed):
    """Write the request of `peer` for the case in cdir, run it; (result, wall s, dir)."""
    pdir = os.path.join(cdir, peer)
    os.makedirs(pdir)
    req = {"protocol": PROTOCOL, "peer": peer, "problem": "../problem.json",
           "inputs": {key: f"../{key}.npy" for key in inp},
           "backward": True, "passes": list(PASSES) if timed else [],
           "timing": {"cold": True, "warmup": 1, "min_samples": 3, "max_samples": 5,
                      "target_rel_stddev": 0.5, "max_seconds": 0.5},
           "determinism": True, "device": 0}
    write_json_atomic(os.path.join(pdir, "request.json"), req)
    t0 = time.perf_counter()
    run_request(os.path.join(pdir, "request.json"))
    wall = time.perf_counter() - t0
    with open(os.path.join(pdir, "result.json"), encoding="utf-8") as f:
        return json.load(f), wall, pdir


def _compare_outputs(T, p, res, pdir, gold, lpr, row_ok):
    """Each output of the peer vs gold under twice the rule. Returns (worst, bad):
    "key error/tolerance" strings and failures."""
    torch, np = T.torch, T.np
    worst, bad = [], []
    for key in ("o", "lse", "dq", "dk", "dv", "dbias"):
        if key not in gold:
            continue
        fname = res.get("outputs", {}).get(key)
        if not fname:
            bad.append(f"{key} missing")
            continue
        a = np.load(os.path.join(pdir, fname))
        got = bits_to_tensor(T, a, T.dtype(p.dtype)).double() if a.dtype == np.uint16 else torch.from_numpy(a)
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
    return worst, bad


def _timing_text(res, bad):
    """The fwd samples and stream hold of a timed case (appends to bad when samples
    are missing or not positive)."""
    ts = res.get("timings_ms", {})
    if any(not ts.get(x) or min(ts[x]) <= 0 for x in PASSES):
        bad.append(f"timing samples missing or not positive: {ts}")
    ti = res.get("timing_info", {}).get("fwd", {})
    host_ms = ti.get("host_enqueue_ms_median")
    return (" fwd " + ", ".join(f"{x:.3f}" for x in ts.get("fwd", [])) + " ms"
            + (f" (host enqueue {host_ms:.3f} ms" if isinstance(host_ms, float) else " (")
            + f", stream hold {'on' if ti.get('hold_stream') else 'off'})")


def _run_case(T, root, ci, case, peers, failures, findings):
    """Every peer on one case; failures and findings appended."""
    torch = T.torch
    cname, pj = case
    cdir, p, inp, allowed, mask_failures = _write_case(T, root, ci, cname, pj)
    failures += mask_failures
    gold = _reference(T, p, inp, allowed, lp=False)
    lpr = _reference(T, p, inp, allowed, lp=True)
    row_ok = allowed.any(dim=-1)[:, 0]  # [B, Sq]
    for peer in peers:
        torch._dynamo.reset()
        timed = ci == 0
        res, wall, pdir = _request(cdir, peer, inp, timed)
        tag = f"[self-test] {cname:18s} {peer:21s}"
        if res["status"] == "unsupported":
            print(f"{tag} unsupported: {res.get('reason')}")
            continue
        if res["status"] != "ok":
            print(f"{tag} ERROR: {res.get('message')}")
            failures.append(f"{cname}/{peer}: error {res.get('message')}")
            continue
        worst, bad = _compare_outputs(T, p, res, pdir, gold, lpr, row_ok)
        timing = _timing_text(res, bad) if timed else ""
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


def self_test(args):
    """Run every peer (args.peers: comma-separated, default all) on the self-test
    cases (args.quick: fewer) and compare with a float64 reference; args.keep keeps
    the files. Prints one line per (peer, case). Returns the exit code (0 = ok)."""
    failures = _check_golden()
    try:
        T = torch_env.TorchEnv(0)
    except Unsupported as e:
        print(f"[self-test] cannot run the GPU part: {e}")
        return 1
    print(f"[self-test] {json.dumps(torch_env.versions(T))}")
    peers = [x for x in (args.peers.split(",") if args.peers else PEERS) if x]
    for x in peers:
        if x not in PEERS:
            print(f"[self-test] unknown peer {x!r}")
            return 2
    root = tempfile.mkdtemp(prefix="attnbench-selftest-")
    findings = []
    try:
        for ci, case in enumerate(_self_test_cases(args.quick)):
            _run_case(T, root, ci, case, peers, failures, findings)
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
