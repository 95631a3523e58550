"""torch-sdpa-flash, torch-sdpa-cudnn, torch-sdpa-efficient:
F.scaled_dot_product_attention restricted to one backend with sdpa_kernel."""

from ..protocol import Unsupported
from .base import Peer


class SdpaPeer(Peer):
    """F.scaled_dot_product_attention restricted to one backend with sdpa_kernel."""

    def __init__(self, *a):
        super().__init__(*a)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.backend = {"torch-sdpa-flash": SDPBackend.FLASH_ATTENTION,
                        "torch-sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                        "torch-sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[self.name]
        self._sdpa_kernel = sdpa_kernel

    def context(self):
        return self._sdpa_kernel([self.backend])

    def setup(self):
        p = self.p
        only_causal = p.kinds == ["causal"]
        self.is_causal = False
        self.attn_mask = None
        if not p.has_mask():
            pass
        elif only_causal and (p.seq_q == p.seq_k or p.causal_align == "top_left"):
            self.is_causal = True
        elif self.name == "torch-sdpa-flash":
            raise Unsupported("the flash backend takes no attn_mask")  # static_support already said so
        else:
            self.attn_mask = self.mask.dense(self.T)
            self.notes.append("mask passed as a dense boolean attn_mask of shape "
                              f"{list(self.attn_mask.shape)} (F.scaled_dot_product_attention cannot express it "
                              "with is_causal); its build time is in setup_ms")
        q, k, v = self.inp["q"], self.inp["k"], self.inp["v"]
        self.q = q.detach().requires_grad_(True)
        self.k = k.detach().requires_grad_(True)
        self.v = v.detach().requires_grad_(True)
        self.leaves = [self.q, self.k, self.v]
        self.do = self.inp["do"]
        self.kwargs = {"attn_mask": self.attn_mask, "is_causal": self.is_causal, "scale": p.scale}
        if p.heads_q != p.heads_kv:
            self.kwargs["enable_gqa"] = True

    def forward(self):
        return self.T.F.scaled_dot_product_attention(self.q, self.k, self.v, **self.kwargs), None

    def to_logical(self, out, lse, grads):
        r = {"o": out.detach(), "lse": lse}
        if grads is not None:
            r["dq"], r["dk"], r["dv"] = grads
        return r

    def kernel_lse(self, o_public):
        """LSE from the private aten op that F.sdpa dispatches to (same kernel), or
        the side computation when that op cannot be called. Notes what was used."""
        torch, p = self.T.torch, self.p
        q, k, v = self.q.detach(), self.k.detach(), self.v.detach()
        G = p.heads_q // p.heads_kv
        if G > 1:
            k = k.repeat_interleave(G, dim=1)
            v = v.repeat_interleave(G, dim=1)
        bias = None
        if self.attn_mask is not None:
            Skp = -(-p.seq_k // 16) * 16  # 16-element aligned rows, as F.sdpa pads them
            store = torch.zeros(self.attn_mask.shape[:3] + (Skp,), dtype=q.dtype, device=self.T.dev)
            bias = store[..., :p.seq_k]
            bias.masked_fill_(~self.attn_mask, float("-inf"))
            bias = bias.expand(p.batch, p.heads_q, p.seq_q, p.seq_k)
        op_name = {"torch-sdpa-flash": "_scaled_dot_product_flash_attention",
                   "torch-sdpa-efficient": "_scaled_dot_product_efficient_attention",
                   "torch-sdpa-cudnn": "_scaled_dot_product_cudnn_attention"}[self.name]
        try:
            op = getattr(torch.ops.aten, op_name)
            with torch.no_grad():
                if self.name == "torch-sdpa-flash":
                    r = op(q, k, v, 0.0, self.is_causal, False, scale=p.scale)
                elif self.name == "torch-sdpa-efficient":
                    r = op(q, k, v, bias, True, 0.0, self.is_causal, scale=p.scale)
                else:
                    r = op(q, k, v, bias, True, 0.0, self.is_causal, False, scale=p.scale)
            o2, lse = r[0], r[1]
            lse = lse.float()
            while lse.dim() > 3 and lse.shape[-1] == 1:
                lse = lse.squeeze(-1)
            if lse.dim() != 3 or lse.shape[0] != p.batch or lse.shape[1] != p.heads_q or lse.shape[2] < p.seq_q:
                raise RuntimeError(f"unexpected logsumexp shape {tuple(r[1].shape)}")
            if lse.shape[2] != p.seq_q:
                self.notes.append(f"{op_name} returned logsumexp padded to {lse.shape[2]} rows; sliced to seq_q")
                lse = lse[:, :, :p.seq_q]
            same = bool(torch.equal(o2, o_public.detach()))
            self.lse_source = f"kernel: torch.ops.aten.{op_name} (a second, untimed call on the same inputs" + (
                "; k/v expanded to heads_q for that call" if G > 1 else "") + (
                "; its O equals F.sdpa's bitwise)" if same else "")
            if not same:
                diff = (o2.float() - o_public.detach().float()).abs().max().item()
                self.lse_source += f"; its O differs from F.sdpa's by up to {diff:.3g})"
            return lse.contiguous()
        except Exception as e:  # noqa: BLE001 - any failure falls back, with a note
            self.notes.append(f"private op {op_name} unusable for the LSE ({type(e).__name__}: {e}); "
                              "LSE from the side computation")
            return self.side_lse()


