"""torch-flex: flex_attention under torch.compile(dynamic=False) with a BlockMask
from create_block_mask, score_mod for softcap / alibi / learnable biases. Option
compile_mode (request.json "options"): torch.compile's mode, default / max-autotune /
max-autotune-no-cudagraphs."""

from ..masks import BLOCK
from ..torch_env import raise_recompile_limit
from .base import Peer, parameters


class FlexPeer(Peer):
    """flex_attention under torch.compile(dynamic=False) with a BlockMask."""

    compiled = True

    def setup(self):
        torch, p, T = self.T.torch, self.p, self.T
        from torch.nn.attention import flex_attention as fa
        self.fa = fa
        self.block_mask = None
        if self.mask is not None:
            nb = p.batch if p.depends_on_batch() else None
            self.block_mask = fa.create_block_mask(self.mask.mask_mod, nb, None, p.seq_q, p.seq_k, device=T.dev,
                                                   BLOCK_SIZE=BLOCK)
        self.q = self.inp["q"].detach().requires_grad_(True)
        self.k = self.inp["k"].detach().requires_grad_(True)
        self.v = self.inp["v"].detach().requires_grad_(True)
        self.leaves = [self.q, self.k, self.v]
        self.do = self.inp["do"]
        self.bias = None
        score_mod = None
        if p.mod == "softcap":
            cap = p.cap

            def score_mod(score, b, h, q_idx, kv_idx):
                return cap * torch.tanh(score / cap)
        elif p.mod == "alibi":
            hh = torch.arange(p.heads_q, dtype=torch.float64, device=T.dev)
            slopes = torch.exp2(-8.0 * (hh + 1) / p.heads_q).to(torch.float32)

            def score_mod(score, b, h, q_idx, kv_idx):
                return score - slopes[h] * (q_idx - kv_idx).abs()
        elif p.mod == "rel_bias":
            m = p.max_distance
            self.bias = self.inp["bias"].detach().clone().requires_grad_(True)
            bias = self.bias

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + bias[h, (q_idx - kv_idx).clamp(-m, m) + m]
        elif p.mod == "offset_bias":
            self.bias = self.inp["bias"].detach().clone().requires_grad_(True)
            bias, offset, last = self.bias, self.inp["offset"], p.seq_k - 1

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + bias[offset[kv_idx.clamp(0, last)]]
        if self.bias is not None:
            self.leaves.append(self.bias)
        self.score_mod = score_mod
        raise_recompile_limit()
        mode = self.options.get("compile_mode", "default")  # the backend option compile_mode
        self.fn = torch.compile(fa.flex_attention, dynamic=False, mode=None if mode == "default" else mode)
        params = parameters(fa.flex_attention)
        self.kwargs = {"score_mod": score_mod, "block_mask": self.block_mask, "scale": p.scale}
        if p.heads_q != p.heads_kv:
            self.kwargs["enable_gqa"] = True
        self.use_aux = "return_aux" in params and hasattr(fa, "AuxRequest")
        if self.use_aux:
            self.kwargs["return_aux"] = fa.AuxRequest(lse=True)
        else:
            self.kwargs["return_lse"] = True

    def forward(self):
        r = self.fn(self.q, self.k, self.v, **self.kwargs)
        if self.use_aux:
            out, aux = r
            return out, aux.lse
        return r

    def to_logical(self, out, lse, grads):
        r = {"o": out.detach(), "lse": lse.detach().float() if lse is not None else None}
        if grads is not None:
            r["dq"], r["dk"], r["dv"] = grads[:3]
            if self.bias is not None:
                r["dbias"] = grads[3]
        return r


