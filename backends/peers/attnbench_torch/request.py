"""One request of the file protocol (docs/peers.md): read request.json and the
inputs, run the peer, write the outputs and result.json.

torch is imported only through torch_env.TorchEnv, when a request runs.
"""

import math
import os
import sys
import time
import warnings

from . import torch_env
from .peers import SdpaPeer, is_compile_resource_error, is_kernel_rejection, make_peer
from .problems import Problem
from .protocol import (PASSES, PROTOCOL, RequestError, Unsupported, load_json, need, traceback_summary,
                       write_json_atomic)
from .stopping import Policy
from .support import static_support
from .timing import StreamHold, time_pass


def bits_to_tensor(T, a, dt):
    """A host array read from a .npy file as a torch tensor of dtype `dt`: a uint16
    array holds the fp16 / bf16 bits of `dt` (docs/peers.md, "16-bit bits"), any
    other array holds values, converted (exactly: they are already in `dt`).
    Raises RequestError for uint16 bits of a dtype that is not 16 bits wide."""
    np, torch = T.np, T.torch
    a = np.ascontiguousarray(a)
    if a.dtype == np.uint16:
        if dt not in (torch.float16, torch.bfloat16):
            raise RequestError(f"uint16 (16-bit bits) given for a {dt} tensor")
        return torch.from_numpy(a.view(np.int16)).view(dt)
    return torch.from_numpy(a).to(dt)


def tensor_to_npy(T, t, dt):
    """The host array a worker saves for output `t`: the bits as uint16 when `t` has
    the problem's 16-bit dtype `dt` (half the bytes of float32, exact), else float32
    (float64 for a float64 tensor), both exact for fp32 / fp16 / bf16 results.
    `dt` None: never bits."""
    torch = T.torch
    t = t.detach()
    if t.dtype == dt and dt in (torch.float16, torch.bfloat16):
        return t.contiguous().to("cpu").view(torch.int16).numpy().view(T.np.uint16)
    wide = torch.float64 if t.dtype == torch.float64 else torch.float32
    return t.to("cpu", dtype=wide).contiguous().numpy()


def load_inputs(T, req_dir, req, p):
    """Logical host arrays (float32 / float64 values, or uint16 bits of the problem's
    16-bit dtype) -> device tensors of the problem dtype.
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
        bits = "b" in kinds and a.dtype == np.uint16 and p.dtype in ("fp16", "bf16")
        if a.dtype.kind not in kinds.replace("b", "") and not bits:
            raise RequestError(f"{path}: dtype {a.dtype} not accepted for {name}")
        if tuple(a.shape) != tuple(shape):
            if a.size == math.prod(shape):
                a = a.reshape(shape)
            else:
                raise RequestError(f"{path}: shape {tuple(a.shape)}, expected {tuple(shape)}")
        return a

    B, Hq, Hkv, Sq, Sk, D, Dv = p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim, p.head_dim_v

    def place(a):
        t = bits_to_tensor(T, a, dt)
        if p.layout == "bshd":
            t = t.permute(0, 2, 1, 3).contiguous().to(T.dev).permute(0, 2, 1, 3)
        else:
            t = t.contiguous().to(T.dev)
        return t.detach()

    out = {"q": place(load("q", (B, Hq, Sq, D), "fb")), "k": place(load("k", (B, Hkv, Sk, D), "fb")),
           "v": place(load("v", (B, Hkv, Sk, Dv), "fb")), "do": place(load("do", (B, Hq, Sq, Dv), "fb"))}
    bshape = p.bias_shape()
    if bshape is not None:
        out["bias"] = torch.from_numpy(load("bias", bshape).astype(np.float32)).to(T.dev)
    if p.mod == "offset_bias":
        off = load("offset", (Sk,), kinds="iu").astype(np.int64)
        if off.size and (off.min() < 0 or off.max() >= p.bias_size):
            raise RequestError(f"offset values must lie in [0, {p.bias_size})")
        out["offset"] = torch.from_numpy(off).to(T.dev)
    return out


def _bitwise_equal(T, a, b):
    """Whether tensors a and b (or both None) are equal bit for bit."""
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


def _save_outputs(T, req_dir, res, want_grads, dt):
    np = T.np
    files = {}
    for key in ("o", "lse", "dq", "dk", "dv", "dbias"):
        t = res.get(key)
        if t is None:
            continue
        if key in ("dq", "dk", "dv", "dbias") and not want_grads:
            continue
        name = f"{key}.npy"
        bits_dt = dt if key in ("o", "dq", "dk", "dv") else None  # LSE and dbias travel as float32
        np.save(os.path.join(req_dir, name), tensor_to_npy(T, t, bits_dt), allow_pickle=False)
        files[key] = name
    return files


LAST_STATUS = {"status": None}  # status of the last run_request (serve mode answers with it)


def _load_request(req_path, result):
    """Parse request.json (an object of this protocol naming a peer, recorded in
    result["peer"]). Raises RequestError."""
    req = load_json(req_path, "request")
    if not isinstance(req, dict):
        raise RequestError(f"{req_path}: expected a JSON object")
    if req.get("protocol", PROTOCOL) != PROTOCOL:
        raise RequestError(f"{req_path}: protocol {req.get('protocol')!r} (this worker speaks {PROTOCOL})")
    peer_name = need(req, "peer", "str", "request.json")
    result["peer"] = peer_name
    return req


def _read_problem(req, req_dir):
    """The request's problem, checked against the static rules, and its passes.
    Returns (p, want_grads, passes, policy). Raises RequestError / Unsupported."""
    peer_name = req["peer"]
    prob_rel = req.get("problem", "problem.json")
    p = Problem(load_json(os.path.join(req_dir, prob_rel), "problem"), prob_rel)
    ok, reason = static_support(peer_name, p)
    if not ok:
        raise Unsupported(reason)
    want_grads = bool(req.get("backward", True))
    passes = req.get("passes", list(PASSES) if want_grads else ["fwd"])
    for x in passes:
        if x not in PASSES or (x != "fwd" and not want_grads):
            raise RequestError(f"request.json/passes: {x!r} is not one of {PASSES} (bwd passes need backward)")
    return p, want_grads, passes, Policy(req.get("timing"))


def _collect(peer, want_grads):
    """One forward (and backward): the logical outputs, LSE filled in when the
    kernel gives none."""
    out, lse = peer.forward()
    grads = peer.backward(out) if want_grads else None
    res = peer.to_logical(out, lse, grads)
    if res["lse"] is None:
        res["lse"] = peer.kernel_lse(out) if isinstance(peer, SdpaPeer) else peer.side_lse()
    return res


def _first_run(T, peer, want_grads, caught):
    """The first (compiling) run, its errors classified: a compile-time resource
    limit or a kernel rejection becomes Unsupported (with the warnings caught)."""
    try:
        res = _collect(peer, want_grads)
        T.sync()
        return res
    except Exception as e:  # noqa: BLE001
        if isinstance(e, Unsupported):
            raise
        if is_compile_resource_error(e):
            raise Unsupported(f"compile-time resource limit: {type(e).__name__}: {str(e)[:800]}") from None
        if is_kernel_rejection(e):
            why = "; ".join(sorted({str(w.message).strip() for w in caught}))[:1500]
            raise Unsupported(f"PyTorch rejected the problem: {type(e).__name__}: {str(e)[:800]}"
                              + (f" (warnings: {why})" if why else "")) from None
        raise


def _time_passes(T, peer, passes, policy, notes):
    """Samples and timing_info of each pass in `passes` (cold: a flush buffer of
    flush_bytes, default 2x the L2 size, zeroed before each sample)."""
    torch = T.torch
    timings, info = {}, {}
    if not passes:
        return timings, info
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
    return timings, info


def _run_peer(T, peer, req, req_dir, want_grads, passes, policy, result):
    """Set up, run, save, check determinism and time `peer`, filling `result`."""
    torch, notes = T.torch, result["notes"]
    with peer.context(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        peer.setup()
        T.sync()
        result["setup_ms"] = (time.perf_counter() - t0) * 1e3
        torch.cuda.reset_peak_memory_stats(T.dev)
        alloc = torch.cuda.memory_allocated(T.dev)
        t0 = time.perf_counter()
        res = _first_run(T, peer, want_grads, caught)
        first_ms = (time.perf_counter() - t0) * 1e3
        result["compile_ms"] = first_ms if peer.compiled else None
        result["first_call_ms"] = first_ms
        result["lse_source"] = peer.lse_source
        row_any = peer.mask.row_any(T) if peer.mask is not None else None
        _masked_row_notes(T, peer, res, row_any, notes)
        result["outputs"] = _save_outputs(T, req_dir, res, want_grads, T.dtype(peer.p.dtype))
        result["memory"] = {"allocated_bytes": int(alloc),
                            "peak_bytes": int(torch.cuda.max_memory_allocated(T.dev))}
        if req.get("determinism", True):
            res2 = _collect(peer, want_grads)
            T.sync()
            result["deterministic"] = all(_bitwise_equal(T, res.get(k), res2.get(k)) for k in res)
            del res2
        else:
            result["deterministic"] = None
        del res
        result["timings_ms"], result["timing_info"] = _time_passes(T, peer, passes, policy, notes)
        for w in caught:
            text = f"warning: {w.category.__name__}: {str(w.message).strip()}"
            if text not in notes and len(notes) < 40:
                notes.append(text[:600])


def run_request(req_path):
    """Run one request and write result.json next to it (or the request's "result"
    name). Every failure becomes status unsupported or error. Returns the exit
    code: 0 written, 2 bad request, 3 result.json could not be written."""
    req_path = os.path.abspath(req_path)
    req_dir = os.path.dirname(req_path)
    result = {"protocol": PROTOCOL, "peer": None, "status": "error", "notes": []}
    t_start = time.perf_counter()
    code = 0
    result_path = os.path.join(req_dir, "result.json")
    T = None
    try:
        req = _load_request(req_path, result)
        if req.get("result"):
            result_path = os.path.join(req_dir, req["result"])
        p, want_grads, passes, policy = _read_problem(req, req_dir)
        T = torch_env.TorchEnv(int(req.get("device", 0)))
        result["versions"] = torch_env.versions(T)
        inputs = load_inputs(T, req_dir, req, p)
        peer = make_peer(result["peer"], p, T, inputs, result["notes"])
        options = req.get("options", {})
        if not isinstance(options, dict) or not all(isinstance(v, (bool, int, str)) for v in options.values()):
            raise RequestError(f"request.json/options: expected an object of booleans, integers and strings, got {options!r}")
        peer.options = options
        _run_peer(T, peer, req, req_dir, want_grads, passes, policy, result)
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
        result["message"] = traceback_summary(e)
    finally:
        code = _finish(T, result, result_path, t_start, code)
    if result["status"] == "error":
        print(f"attnbench_torch: {result.get('message')}", file=sys.stderr)
    return code


def _finish(T, result, result_path, t_start, code):
    """Synchronize, record the wall time and write result.json; the exit code."""
    if T is not None:
        try:
            T.sync()
        except Exception as e:  # noqa: BLE001
            result["notes"].append(f"CUDA synchronize after the request failed: {type(e).__name__}: {e}")
    result["worker_wall_s"] = time.perf_counter() - t_start
    LAST_STATUS["status"] = result["status"]
    result["notes"] = list(dict.fromkeys(result["notes"]))
    try:
        write_json_atomic(result_path, result)
    except OSError as e:
        print(f"attnbench_torch: cannot write {result_path}: {e}", file=sys.stderr)
        code = 3
    return code
