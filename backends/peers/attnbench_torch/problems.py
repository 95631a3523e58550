"""The attention problem of a problem file (docs/semantics.md section 10) and the
peers' static support rules. Standard library only.

Mirrors harness/model/problem.hpp; the mask part is masks.Mask.
"""

import math

from .masks import Mask
from .protocol import RequestError, need

_SIZES = ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim", "head_dim_v")


class Problem(Mask):
    """One attention problem parsed from a problem-file object.

    Fields: batch, heads_q, heads_kv, seq_q, seq_k, head_dim, head_dim_v, dtype
    ("fp32" | "fp16" | "bf16"), scale (1/sqrt(head_dim) when absent or null),
    layout ("bshd" | "bhsd" | "thd"), mask (the terms as given), score_mod / mod /
    cap / max_distance / bias_size, seed; plus the flattened mask of masks.Mask.
    Raises RequestError naming `where`/field and the value on malformed input.
    """

    def __init__(self, obj, where="problem.json"):
        if not isinstance(obj, dict):
            raise RequestError(f"{where}: expected a JSON object")
        self.raw = obj
        for name in _SIZES[:-1]:
            setattr(self, name, need(obj, name, "int", where))
        self.head_dim_v = obj.get("head_dim_v", self.head_dim)
        for name in _SIZES:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise RequestError(f"{where}/{name}: expected a positive integer, got {v!r}")
        if self.heads_q % self.heads_kv:
            raise RequestError(f"{where}/heads_kv: heads_q ({self.heads_q}) is not a multiple of heads_kv ({self.heads_kv})")
        self.dtype = obj.get("dtype", "bf16")
        if self.dtype not in ("fp32", "fp16", "bf16"):
            raise RequestError(f"{where}/dtype: expected fp32, fp16 or bf16, got {self.dtype!r}")
        s = obj.get("scale")
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float))):
            raise RequestError(f"{where}/scale: expected a number or null, got {s!r}")
        self.scale = float(s) if s is not None else 1.0 / math.sqrt(self.head_dim)
        self.layout = obj.get("layout", "bshd")
        if self.layout not in ("bshd", "bhsd", "thd"):
            raise RequestError(f"{where}/layout: expected bshd, bhsd or thd, got {self.layout!r}")
        mask = obj.get("mask", [])
        if isinstance(mask, dict):
            mask = [mask]
        if not isinstance(mask, list):
            raise RequestError(f"{where}/mask: expected a list of mask objects")
        self.mask = mask
        self._parse_score_mod(obj.get("score_mod", {"kind": "none"}), where)
        self.seed = obj.get("seed", 0)
        self.init_mask(mask, self.batch, self.seq_q, self.seq_k, where)

    def _parse_score_mod(self, sm, where):
        if isinstance(sm, str):
            sm = {"kind": sm}
        if sm is None:
            sm = {"kind": "none"}
        self.score_mod = sm
        self.mod = sm.get("kind", "none")
        if self.mod not in ("none", "softcap", "alibi", "rel_bias", "offset_bias"):
            raise RequestError(f"{where}/score_mod/kind: unknown score mod {self.mod!r}")
        self.cap = float(sm.get("cap", 0.0)) if self.mod == "softcap" else 0.0
        self.max_distance = int(sm.get("max_distance", 0)) if self.mod == "rel_bias" else 0
        self.bias_size = int(sm.get("size", 0)) if self.mod == "offset_bias" else 0

    def bias_shape(self):
        """Shape of the learnable bias, or None."""
        if self.mod == "rel_bias":
            return (self.heads_q, 2 * self.max_distance + 1)
        if self.mod == "offset_bias":
            return (self.bias_size,)
        return None
