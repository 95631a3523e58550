"""The persistent worker (docs/peers.md "Persistent workers"): one request.json path
per stdin line, one JSON answer line per request on stdout."""

import json
import os
import sys
import time

from .request import LAST_STATUS, run_request


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



def preload(peer):
    """Import what the first request of `peer` (its backend name, e.g. torch-flex)
    needs, on the CPU only: PyTorch and, for torch-flex, flex_attention with the
    torch.compile stack (dynamo, inductor). No CUDA context and no kernel, so
    nothing reaches the GPU timing other processes run meanwhile. Failures are
    left to the request, which meets them again and reports them."""
    t0 = time.perf_counter()
    try:
        import torch  # noqa: F401
        if peer == "torch-flex":
            import torch._dynamo  # noqa: F401
            import torch._inductor.compile_fx  # noqa: F401
            from torch.nn.attention import flex_attention  # noqa: F401
    except Exception as e:  # noqa: BLE001 - the request reports it
        print(f"attnbench_torch --serve: preload {peer}: {type(e).__name__}: {e}", file=sys.stderr)
        return
    print(f"attnbench_torch --serve: preloaded {peer} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def serve(stdin=None):
    """Persistent mode: read one request.json path per line, run it (run_request),
    answer one JSON line {"request", "exit_code", "status", "restart", "served"} on
    the original stdout, which carries nothing else (anything printed goes to
    stderr). After a request whose status is error the worker answers with
    restart: true and exits, so a CUDA error cannot poison the next request.
    A line "#preload PEER" (attnbench's serve_prestart) runs preload(PEER) and
    gets no answer. Returns 0 at EOF."""
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
        if path.startswith("#preload "):
            preload(path[len("#preload "):].strip())
            continue
        LAST_STATUS["status"] = None
        try:
            code = run_request(path)
        except BaseException as e:  # noqa: BLE001 - run_request catches everything else
            print(f"attnbench_torch --serve: {type(e).__name__}: {e}", file=sys.stderr)
            code = 3
        served += 1
        status = LAST_STATUS["status"]
        restart = status == "error" or code not in (0,)
        if not restart:
            try:
                _between_requests()
            except Exception as e:  # noqa: BLE001 - a broken CUDA context: start afresh
                print(f"attnbench_torch --serve: cleanup failed ({type(e).__name__}: {e}); restarting",
                      file=sys.stderr)
                restart = True
        proto.write(json.dumps({"request": path, "exit_code": code, "status": status, "restart": restart,
                                "served": served}) + "\n")
        proto.flush()
        if restart:
            return 0

