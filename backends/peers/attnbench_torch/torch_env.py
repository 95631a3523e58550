"""torch, numpy and the CUDA device, imported lazily (never at module level).

TorchEnv is the one place that imports torch for a request; the CPU stand-ins
(cpu_check.py) replace it with a CPU version by assigning torch_env.TorchEnv, so
callers refer to it as torch_env.TorchEnv.
"""

import contextlib
import platform
import sys
import warnings

from .protocol import Unsupported


class TorchEnv:
    """Lazily imported torch, numpy and the CUDA device `device_index`. Raises
    Unsupported (with the reason) when torch, CUDA, the device or numpy is missing."""

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
        """The torch dtype of "fp32", "fp16" or "bf16"."""
        t = self.torch
        return {"fp32": t.float32, "fp16": t.float16, "bf16": t.bfloat16}[name]

    def sync(self):
        """Wait for the device."""
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



def raise_recompile_limit():
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
