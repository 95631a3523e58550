"""Timing of a pass inside the worker: CUDA events behind a stream hold, cold or
hot, under the stopping rule of stopping.py (harness/measure/measure.cpp's).
torch is reached through the TorchEnv `T` passed in.
"""

import time

from .stopping import next_hold_ms, sample_until_stable


class StreamHold:
    """Holds the stream with a spin kernel (torch.cuda._sleep) while the host enqueues
    a timed pass, so that the CUDA events measure the GPU work and not Python and
    dispatcher time (nvbench's blocking-kernel idea; a training loop hides that host
    time too, by running ahead of the GPU). The spin is calibrated once in cycles per
    ms and sized to twice the largest host enqueue time seen so far (at least 0.2 ms).
    Samples whose enqueue outlasted the spin are counted as host_gaps."""

    def __init__(self, T, notes, enabled):
        self.T, self.ok, self.cycles_per_ms = T, False, 0.0
        if not enabled:
            return
        torch = T.torch
        try:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)  # load the kernel
            a.record()
            torch.cuda._sleep(2_000_000)
            b.record()
            b.synchronize()
            ms = float(a.elapsed_time(b))
            if ms > 0:
                self.cycles_per_ms, self.ok = 2_000_000 / ms, True
        except Exception as e:  # noqa: BLE001 - optional refinement
            notes.append(f"stream hold unavailable ({type(e).__name__}: {e}): host enqueue time is inside the samples")

    def hold(self, ms):
        """Enqueue a spin of about `ms` milliseconds (no-op when unavailable)."""
        if self.ok:
            self.T.torch.cuda._sleep(int(self.cycles_per_ms * ms))


def time_pass(T, peer, pass_name, policy, flush, hold):
    """Raw CUDA-event samples (ms) of one pass. bwd: an untimed forward first; cold:
    the flush buffer is written between the untimed part and the timed events; then
    the stream hold (StreamHold) and the timed region."""
    torch = T.torch
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def untimed():
        if pass_name == "bwd":
            return peer.forward()[0]
        return None

    def body(state):
        if pass_name == "fwd":
            return peer.forward()
        if pass_name == "bwd":
            return peer.backward(state)
        out, _ = peer.forward()
        return peer.backward(out)

    host = []  # host enqueue time of body(), ms
    for _ in range(policy.warmup):
        state = untimed()
        t0 = time.perf_counter()
        r = body(state)
        host.append((time.perf_counter() - t0) * 1e3)
        del r
    T.sync()
    hold_ms = next_hold_ms(0.2, host[-1]) if host else 5.0
    host.clear()
    gaps = 0

    def take():
        nonlocal hold_ms, gaps
        state = untimed()
        if flush is not None:
            flush.zero_()
        hold.hold(hold_ms)
        start.record()
        t0 = time.perf_counter()
        r = body(state)
        h = (time.perf_counter() - t0) * 1e3
        end.record()
        end.synchronize()
        del r
        host.append(h)
        if hold.ok and h > hold_ms:
            gaps += 1
        hold_ms = next_hold_ms(hold_ms, h)
        return float(start.elapsed_time(end))

    samples, reason, wall = sample_until_stable(policy, take)
    host_sorted = sorted(host)
    info = {"stop_reason": reason, "timer": "cuda_events", "cold": flush is not None, "warmup": policy.warmup,
            "wall_seconds": wall, "flush_bytes": int(flush.numel()) if flush is not None else 0,
            "hold_stream": hold.ok, "hold_ms": hold_ms if hold.ok else 0.0,
            "host_enqueue_ms_median": host_sorted[len(host_sorted) // 2] if host_sorted else None,
            "host_gaps": gaps}
    return samples, info

