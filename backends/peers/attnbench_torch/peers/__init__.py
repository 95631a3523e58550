"""The PyTorch attention paths, one module per family: sdpa.py (the three
F.scaled_dot_product_attention backends), flex.py (flex_attention), varlen.py
(varlen_attn); base.py holds what they share. Importing this package imports no
torch: each peer reaches it through the TorchEnv it is given."""

from ..protocol import SDPA_PEERS, Unsupported
from .base import Peer, is_compile_resource_error, is_kernel_rejection
from .flex import FlexPeer
from .sdpa import SdpaPeer
from .varlen import VarlenPeer

__all__ = ["Peer", "SdpaPeer", "FlexPeer", "VarlenPeer", "make_peer", "is_kernel_rejection",
           "is_compile_resource_error"]


def make_peer(name, p, T, inputs, notes):
    """The Peer of `name` for problem p on TorchEnv T with device `inputs`; notes
    collects what the result's notes will say. Raises Unsupported for an unknown name."""
    if name in SDPA_PEERS:
        return SdpaPeer(name, p, T, inputs, notes)
    if name == "torch-flex":
        return FlexPeer(name, p, T, inputs, notes)
    if name == "torch-varlen":
        return VarlenPeer(name, p, T, inputs, notes)
    raise Unsupported(f"unknown peer {name!r}")
