"""The timing policy of a request, the stopping rule and the stream hold's length,
in plain Python.

A port of harness/measure/measure.hpp (TimingPolicy, sample_until_stable,
next_hold_ms).
Standard library only; the traces of tests/data/golden/stopping.json, written by
the C++ side, are asserted against sample_until_stable by tests/test_golden.py.
"""

import math
import time

from .protocol import RequestError


class Policy:
    """Timing policy of the request's "timing" object (harness/measure/measure.hpp
    TimingPolicy): cold, warmup, min_samples, max_samples, target_rel_stddev,
    max_seconds, stopping ("rel_stddev" or "nvbench"), min_time_s, flush_bytes (None = 2x the L2 size), hold_stream. Raises
    RequestError for an invalid policy (the rules of TimingPolicy::validate)."""

    def __init__(self, obj):
        obj = obj or {}
        self.cold = bool(obj.get("cold", True))
        self.warmup = int(obj.get("warmup", 2))
        self.min_samples = int(obj.get("min_samples", 5))
        self.max_samples = int(obj.get("max_samples", 1000))
        self.target_rel_stddev = float(obj.get("target_rel_stddev", 0.02))
        self.max_seconds = float(obj.get("max_seconds", 2.0))
        self.flush_bytes = obj.get("flush_bytes")
        self.hold_stream = bool(obj.get("hold_stream", True))
        self.stopping = str(obj.get("stopping", "rel_stddev"))
        self.min_time_s = float(obj.get("min_time_s", 0.5))
        if self.warmup < 0 or self.min_samples < 1 or self.max_samples < self.min_samples \
                or not self.target_rel_stddev >= 0 or not self.max_seconds > 0 \
                or self.stopping not in ("rel_stddev", "nvbench") or not self.min_time_s >= 0:
            raise RequestError(f"request.json/timing: invalid policy {obj!r}")


def sample_until_stable(policy, take, now=time.perf_counter):
    """The stopping rule of harness/measure/measure.cpp sample_until_stable: call
    take() (one sample, ms) until n >= min_samples and stddev/mean <= target
    (with policy.stopping "nvbench" also the samples' sum >= 1000 * min_time_s)
    (converged; Welford's running mean and variance, n - 1 denominator, rel = 0
    for n = 1 or mean <= 0), n == max_samples, or the wall time read from now()
    (seconds) since the first call reaches max_seconds (time_cap); the checks in
    that order after every sample. Returns (samples, stop_reason, wall_s)."""
    samples = []
    mean = m2 = total = 0.0
    min_total_ms = 1e3 * policy.min_time_s if getattr(policy, "stopping", "rel_stddev") == "nvbench" else 0.0
    t0 = now()
    while True:
        x = take()
        samples.append(x)
        n = len(samples)
        d = x - mean
        mean += d / n
        m2 += d * (x - mean)
        total += x
        rel = math.sqrt(m2 / (n - 1)) / mean if n > 1 and mean > 0 else 0.0
        if n >= policy.min_samples and rel <= policy.target_rel_stddev and total >= min_total_ms:
            reason = "converged"
            break
        if n >= policy.max_samples:
            reason = "max_samples"
            break
        if now() - t0 >= policy.max_seconds:
            reason = "time_cap"
            break
    return samples, reason, now() - t0


def next_hold_ms(hold_ms, host_ms):
    """max(hold_ms, 2 * host_ms) clamped to [0.2, 100] ms: the stream hold that
    covers a host enqueue of host_ms twice over (harness/measure/measure.hpp)."""
    return min(max(max(hold_ms, 2.0 * host_ms), 0.2), 100.0)
