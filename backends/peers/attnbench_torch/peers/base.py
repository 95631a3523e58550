"""One PyTorch attention path per peer: the base class and the error heuristics.

torch is reached through the TorchEnv passed in (torch_env.py).
"""

import contextlib
import inspect

from ..torch_mask import TorchMask


def is_kernel_rejection(exc):
    """Heuristic: a PyTorch error that says the kernel cannot take these inputs
    (unsupported) rather than a failure (error)."""
    if isinstance(exc, NotImplementedError):
        return True
    msg = str(exc)
    keys = ("No available kernel", "not supported", "does not support", "only supports", "Only support",
            "unsupported", "NYI")
    return isinstance(exc, (RuntimeError, ValueError, TypeError)) and any(k in msg for k in keys)


def is_compile_resource_error(exc):
    """A compile-time resource limit (Triton's OutOfResources: "out of resource:
    shared memory" / registers; CUDA's "too many resources requested for launch"):
    the kernel cannot be built for this problem (unsupported), unlike device memory
    exhaustion (oom). Mirrors classify_peer_error() in peer_errors.cpp."""
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
        self.options = {}  # the variant's options (request.json "options"), set before setup()
        self.mask = TorchMask(p, T) if p.has_mask() else None
        self.lse_source = "kernel"

    def context(self):
        """Context manager the whole request runs in (SDPA: the backend selection)."""
        return contextlib.nullcontext()

    def setup(self):
        """Untimed preparation (masks, BlockMask, packing, leaves; in setup_ms).
        Raises Unsupported for what the path cannot express."""
        raise NotImplementedError

    def forward(self):
        """One forward pass: (out, lse or None) in the path's own layout."""
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




def parameters(fn):
    """The parameters of fn's signature (empty when it has none to inspect)."""
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
