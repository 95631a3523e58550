"""The persistent worker (docs/peers.md "Persistent workers"): one request.json path
per stdin line, one JSON answer line per request on stdout."""

import json
import os
import sys

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

