"""The peers' static support rules: what is known without running PyTorch.

Standard library only. The C++ side (torch_peer_supports in
backends/peers/torch_peer_rules.cpp) applies the same rules; tests/test_peers.cpp runs
the worker's --support mode and requires the same verdict and reason.
"""

from .protocol import PEERS


def static_support(peer, p):
    """(ok, reason) of the rules known without running PyTorch. The C++ side
    (torch_peer_supports in torch_peer_rules.cpp) applies the same rules; PyTorch may
    still reject a problem at run time (then the status is unsupported too)."""
    if peer not in PEERS:
        return False, f"unknown peer {peer!r} (known: {', '.join(PEERS)})"
    if peer != "torch-varlen" and p.layout == "thd":
        return False, f"{peer} runs on padded [B, H, S, D] tensors; the thd layout is served by torch-varlen"
    if peer in ("torch-sdpa-flash", "torch-sdpa-cudnn", "torch-varlen") and p.dtype == "fp32":
        return False, f"{peer} supports fp16 and bf16 only (got fp32)"
    if peer != "torch-flex" and p.mod != "none":
        return False, (f"score_mod {p.mod} needs torch-flex: F.scaled_dot_product_attention and varlen_attn "
                       "take no score_mod")
    if peer in ("torch-sdpa-flash", "torch-varlen") and p.head_dim != p.head_dim_v:
        return False, f"{peer} (FlashAttention) needs head_dim == head_dim_v (got {p.head_dim} and {p.head_dim_v})"
    if peer == "torch-sdpa-flash":
        others = [k for k in p.kinds if k != "causal"]
        if others:
            return False, ("the flash backend of F.scaled_dot_product_attention takes no attn_mask, only is_causal "
                           f"(mask has {', '.join(others)})")
        if p.causal_align == "bottom_right" and p.seq_q != p.seq_k:
            return False, ("bottom-right causal with seq_q != seq_k: F.scaled_dot_product_attention's is_causal is "
                           "top-left and the flash backend takes no attn_mask")
    if peer == "torch-varlen":
        bad = [k for k in p.kinds if k in ("prefix_lm", "block_sparse")]
        if bad:
            return False, f"varlen_attn supports causal, sliding_window, document and padding masks only (mask has {', '.join(bad)})"
        if p.doc_ids is not None and p.seq_lens_q is not None:
            return False, "varlen_attn: a document mask together with a padding mask is not supported"
        if p.doc_ids is not None and p.document_runs() is None:
            return False, "document ids are not contiguous runs: varlen_attn needs one sequence per document"
        if p.causal_align == "top_left" and p.doc_ids is None:
            if any(p.valid_q(b) != p.valid_k(b) for b in range(p.batch)):
                return False, ("top-left causal with query length != key length: varlen_attn (FlashAttention) "
                               "aligns the causal diagonal bottom-right")
    return True, ""

