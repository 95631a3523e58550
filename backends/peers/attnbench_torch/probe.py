"""--probe: which peers this machine can run (versions, per-peer availability)."""

import platform

from . import torch_env
from .protocol import PEERS, PROTOCOL, Unsupported


def probe():
    """Availability of every peer on this machine. Returns (ok, report dict)."""
    rep = {"protocol": PROTOCOL, "ok": False, "reason": "", "serve": True, "peers": {},
           "versions": {"python": platform.python_version()}}
    try:
        T = torch_env.TorchEnv(0)
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
        rep["versions"] = torch_env.versions(T)
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

