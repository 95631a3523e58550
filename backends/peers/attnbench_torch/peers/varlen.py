"""torch-varlen: torch.nn.attention.varlen.varlen_attn on packed [T, H, D] sequences."""

import math

from ..protocol import Unsupported
from .base import Peer, parameters


class VarlenPeer(Peer):
    """varlen_attn on packed [T, H, D] sequences: one per document (document mask),
    else one per batch row (valid lengths of a padding mask)."""

    def setup(self):
        torch, p, T = self.T.torch, self.p, self.T
        from torch.nn.attention import varlen as vl
        self.vl = vl
        params = parameters(vl.varlen_attn)
        seqs = []  # (q_start, q_len, k_start, k_len) as flat token indices
        if p.doc_ids is not None:
            runs = p.document_runs()
            if runs is None:
                raise Unsupported("document ids are not contiguous runs: varlen_attn needs one sequence per document")
            for b, row in enumerate(runs):
                for start, length in row:
                    seqs.append((b * p.seq_q + start, length, b * p.seq_k + start, length))
        else:
            for b in range(p.batch):
                lq, lk = p.valid_q(b), p.valid_k(b)
                if lq > 0:
                    seqs.append((b * p.seq_q, lq, b * p.seq_k, lk))
        if not seqs:
            raise Unsupported("no query tokens: every row is padding")
        if any(lq != lk for _, lq, _, lk in seqs) and p.upper_tl is not None:
            raise Unsupported("top-left causal with query length != key length: varlen_attn aligns bottom-right")
        right = p.upper_br
        if p.upper_tl is not None:
            right = 0 if right is None else min(right, 0)  # per sequence Lq == Lk here: same diagonal
        left = -p.lower_br if p.lower_br is not None else -1
        right = right if right is not None else -1
        self.window = (left, right)
        kwargs = {}
        if "window_size" in params:
            kwargs["window_size"] = self.window
        elif "is_causal" in params:
            if self.window == (-1, 0):
                kwargs["is_causal"] = True
            elif self.window != (-1, -1):
                raise Unsupported("this varlen_attn has no window_size parameter")
        elif self.window != (-1, -1):
            raise Unsupported("this varlen_attn takes neither window_size nor is_causal")
        if "scale" in params:
            kwargs["scale"] = p.scale
        elif abs(p.scale - 1.0 / math.sqrt(p.head_dim)) > 1e-12 * p.scale:
            raise Unsupported("this varlen_attn has no scale parameter")
        if p.heads_q != p.heads_kv and "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        self.use_aux = "return_aux" in params and hasattr(vl, "AuxRequest")
        if self.use_aux:
            kwargs["return_aux"] = vl.AuxRequest(lse=True)
        self.kwargs = kwargs

        dev = T.dev
        self.idx_q = torch.cat([torch.arange(s, s + n, device=dev) for s, n, _, _ in seqs])
        self.idx_k = torch.cat([torch.arange(s, s + n, device=dev) for _, _, s, n in seqs])
        lens_q = torch.tensor([n for _, n, _, _ in seqs], dtype=torch.int32, device=dev)
        lens_k = torch.tensor([n for _, _, _, n in seqs], dtype=torch.int32, device=dev)
        self.cu_q = torch.zeros(len(seqs) + 1, dtype=torch.int32, device=dev)
        self.cu_k = torch.zeros(len(seqs) + 1, dtype=torch.int32, device=dev)
        self.cu_q[1:] = torch.cumsum(lens_q, 0)
        self.cu_k[1:] = torch.cumsum(lens_k, 0)
        self.max_q = max(n for _, n, _, _ in seqs)
        self.max_k = max(n for _, _, _, n in seqs)

        def pack(t, idx):  # logical [B, H, S, D] -> packed [T, H, D] contiguous
            B, H, S, D = t.shape
            return t.permute(0, 2, 1, 3).reshape(B * S, H, D)[idx].contiguous()

        self.q = pack(self.inp["q"], self.idx_q).requires_grad_(True)
        self.k = pack(self.inp["k"], self.idx_k).requires_grad_(True)
        self.v = pack(self.inp["v"], self.idx_k).requires_grad_(True)
        self.do = pack(self.inp["do"], self.idx_q)
        self.leaves = [self.q, self.k, self.v]
        self.notes.append(f"{len(seqs)} sequences, {self.idx_q.numel()} query tokens packed [T, H, D] "
                          f"(gathered untimed), window_size={self.window}; tokens outside every sequence "
                          "(padding) are not computed: their O is 0, LSE -inf and gradients 0 by construction")

    def forward(self):
        r = self.vl.varlen_attn(self.q, self.k, self.v, self.cu_q, self.cu_k, self.max_q, self.max_k, **self.kwargs)
        if self.use_aux:
            return r[0], r[1]
        return r, None

    def _unpack(self, t, idx, B, S, fill):
        torch = self.T.torch
        H, D = t.shape[1], t.shape[2]
        full = torch.full((B * S, H, D), fill, dtype=t.dtype, device=t.device)
        full[idx] = t
        return full.view(B, S, H, D).permute(0, 2, 1, 3)

    def to_logical(self, out, lse, grads):
        torch, p = self.T.torch, self.p
        r = {"o": self._unpack(out.detach(), self.idx_q, p.batch, p.seq_q, 0.0)}
        if lse is not None:
            tq = self.idx_q.numel()
            lse = lse.detach().float()
            if lse.dim() == 2 and lse.shape == (p.heads_q, tq):
                lse = lse.t()
            elif not (lse.dim() == 2 and lse.shape == (tq, p.heads_q)):
                raise RuntimeError(f"varlen_attn returned an LSE of shape {tuple(lse.shape)}; expected "
                                   f"({p.heads_q}, {tq}) or ({tq}, {p.heads_q})")
            full = torch.full((p.batch * p.seq_q, p.heads_q), float("-inf"), dtype=torch.float32, device=lse.device)
            full[self.idx_q] = lse
            r["lse"] = full.view(p.batch, p.seq_q, p.heads_q).permute(0, 2, 1)
        else:
            r["lse"] = None
        if grads is not None:
            r["dq"] = self._unpack(grads[0], self.idx_q, p.batch, p.seq_q, 0.0)
            r["dk"] = self._unpack(grads[1], self.idx_k, p.batch, p.seq_k, 0.0)
            r["dv"] = self._unpack(grads[2], self.idx_k, p.batch, p.seq_k, 0.0)
        return r
