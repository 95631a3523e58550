"""The seeded input generator of harness/model/tensors.hpp in plain Python.

counter_uniform / counter_normal (counter-based: splitmix64 and Box-Muller, so any
element can be regenerated on its own), round_to (a double rounded to fp32, fp16
or bf16 as the C++ side does: through float32, then to nearest even) and
make_inputs_head (the first elements of make_inputs()). Standard library only;
asserted against tests/data/golden/generator.json by tests/test_golden.py.
"""

import math
import struct

from .masks import MASK64, splitmix64

_TWO_PI = 6.283185307179586476925
_STREAM_MUL = 0xD1B54A32D192ED03
STREAMS = {"q": 1, "k": 2, "v": 3, "do": 4, "bias": 5, "offset": 6}  # make_inputs() streams


def counter_uniform(seed, stream, index):
    """Uniform double in [0, 1): top 53 bits of
    splitmix64(splitmix64(seed ^ (stream * 0xD1B54A32D192ED03)) + index) / 2^53."""
    inner = splitmix64((seed ^ (stream * _STREAM_MUL)) & MASK64)
    h = splitmix64((inner + index) & MASK64)
    return (h >> 11) * (1.0 / 9007199254740992.0)


def counter_normal(seed, stream, index):
    """Standard normal sample `index` of `stream` under `seed`: Box-Muller on the
    uniforms (2 * index, 2 * index + 1), u1 clamped to >= 1e-300."""
    u1 = counter_uniform(seed, stream, 2 * index)
    u2 = counter_uniform(seed, stream, 2 * index + 1)
    if u1 < 1e-300:
        u1 = 1e-300
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)


def _to_f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def round_to(dtype, x):
    """x rounded to `dtype` ("fp32", "fp16", "bf16") and back to a double, as
    harness/model/tensors.cpp round_to(): first to float32, then (fp16, bf16) to
    nearest even. Raises KeyError for another dtype name."""
    f = _to_f32(x)
    if dtype == "fp32":
        return f
    if dtype == "fp16":
        return struct.unpack("<e", struct.pack("<e", f))[0]
    if dtype == "bf16":
        bits = struct.unpack("<I", struct.pack("<f", f))[0]
        if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x007FFFFF):  # NaN stays NaN
            return f
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    raise KeyError(dtype)


def make_inputs_head(p, name, count, seed=None):
    """The first `count` elements (flat, logical [B, H, S, D] order) of input `name`
    ("q", "k", "v", "do", "bias" or "offset") that make_inputs() generates for
    problem p (problems.Problem) under `seed` (default p.seed): N(0, 1) rounded to
    p.dtype for q, k, v, do; to fp32 for bias; offset = floor(uniform * size).
    Raises KeyError for another name."""
    seed = int(p.seed if seed is None else seed) & MASK64
    stream = STREAMS[name]
    if name == "offset":
        return [int(counter_uniform(seed, stream, i) * float(p.bias_size)) for i in range(count)]
    dtype = "fp32" if name == "bias" else p.dtype
    return [round_to(dtype, counter_normal(seed, stream, i)) for i in range(count)]
