"""The problem's mask (masks.Mask) as torch integer ops: FlexAttention's mask_mod,
dense boolean masks for SDPA and the fully-masked-row detection. torch is reached
through the TorchEnv `T` passed in; this module imports nothing of it itself.
"""

from .masks import BLOCK


class TorchMask:
    """The problem's mask as torch integer ops. mask_mod is a plain closure (what
    torch.compile traces best) that serves as a FlexAttention mask_mod (0-d index
    tensors under vmap) and, with broadcast index tensors, builds dense boolean
    masks. When a length is not a multiple of BLOCK, indices are clamped before
    gathers so that out-of-range positions of tail blocks never read outside the
    captured tables."""

    def __init__(self, p, T):
        torch = T.torch
        self.p = p
        dev = T.dev
        doc = torch.tensor(p.doc_ids, dtype=torch.int32, device=dev) if p.doc_ids is not None else None
        if p.seq_lens_q is not None:
            lq = torch.tensor(p.seq_lens_q, dtype=torch.int32, device=dev)
            lk = torch.tensor(p.seq_lens_k, dtype=torch.int32, device=dev)
        else:
            lq = lk = None
        kt = p.keep_table()
        keep = torch.tensor(kt, dtype=torch.bool, device=dev) if kt is not None else None
        upper_tl, upper_br, lower_br, prefix = p.upper_tl, p.upper_br, p.lower_br, p.prefix_len
        static_off = p.seq_k - p.seq_q
        last_q, last_k = p.seq_q - 1, p.seq_k - 1
        # FlexAttention evaluates mask_mod on whole 128-blocks, so indices reach past
        # the last row only when a length is not a multiple of BLOCK; the clamps cost
        # 10% of the packed Llama-3-8B forward and 13% of forward+backward on an H100
        # (tools/flex_variants.py), so they are left out where they cannot matter.
        clamp = p.seq_q % BLOCK != 0 or p.seq_k % BLOCK != 0

        def mask_mod(b, h, q_idx, kv_idx):
            conds = []
            off = static_off
            if lq is not None:
                sq = lq[b]
                sk = lk[b]
                conds.append(q_idx < sq)
                conds.append(kv_idx < sk)
                off = sk - sq
            d = kv_idx - q_idx
            if upper_tl is not None:
                conds.append(d <= upper_tl)
            if upper_br is not None:
                conds.append(d - off <= upper_br)
            if lower_br is not None:
                conds.append(d - off >= lower_br)
            if prefix is not None:
                conds.append((kv_idx < prefix) | (kv_idx <= q_idx))
            if doc is not None or keep is not None:
                qc = q_idx.clamp(0, last_q) if clamp else q_idx
                kc = kv_idx.clamp(0, last_k) if clamp else kv_idx
                if doc is not None:
                    di = doc[b, qc]
                    dj = doc[b, kc]
                    conds.append((di >= 0) & (di == dj))
                if keep is not None:
                    conds.append(keep[qc // BLOCK, kc // BLOCK])
            if not conds:
                return q_idx >= 0
            r = conds[0]
            for c in conds[1:]:
                r = r & c
            return r

        self.mask_mod = mask_mod

    def dense_rows(self, T, r0, r1):
        """Dense mask [B or 1, r1 - r0, Sk] (bool) for query rows r0..r1-1."""
        torch = T.torch
        p = self.p
        nb = p.batch if p.depends_on_batch() else 1
        b = torch.arange(nb, device=T.dev, dtype=torch.int64).view(nb, 1, 1)
        q = torch.arange(r0, r1, device=T.dev, dtype=torch.int64).view(1, r1 - r0, 1)
        kv = torch.arange(p.seq_k, device=T.dev, dtype=torch.int64).view(1, 1, p.seq_k)
        m = self.mask_mod(b, None, q, kv)
        return m.expand(nb, r1 - r0, p.seq_k)

    def dense(self, T, row_chunk=2048):
        """Dense mask [B or 1, 1, Sq, Sk] (bool), built in row chunks."""
        torch = T.torch
        p = self.p
        nb = p.batch if p.depends_on_batch() else 1
        out = torch.empty((nb, 1, p.seq_q, p.seq_k), dtype=torch.bool, device=T.dev)
        for r0 in range(0, p.seq_q, row_chunk):
            r1 = min(p.seq_q, r0 + row_chunk)
            out[:, 0, r0:r1, :] = self.dense_rows(T, r0, r1)
        return out

    def row_any(self, T, row_chunk=2048):
        """[B, Sq] bool: whether each query row has at least one allowed key."""
        torch = T.torch
        p = self.p
        out = torch.empty((p.batch, p.seq_q), dtype=torch.bool, device=T.dev)
        for r0 in range(0, p.seq_q, row_chunk):
            r1 = min(p.seq_q, r0 + row_chunk)
            out[:, r0:r1] = self.dense_rows(T, r0, r1).any(dim=-1).expand(p.batch, r1 - r0)
        return out

