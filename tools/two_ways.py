"""Shared by tools/flex_variants.py and tools/do_bench_dense.py: time one pass two ways."""

import statistics
import time


def two_ways(torch, body, leaves, reps=50):
    """(do_bench_ms, held_events_ms, host_enqueue_ms) of body(), medians.

    do_bench: triton.testing.do_bench, how docs/peers/torch-2.11-h100.json was
    measured (back-to-back repetitions, L2 cleared between them). held events:
    one pass between CUDA events after an L2 flush, the stream held by a spin
    kernel (about 10 ms at 1.98 GHz) while the host enqueues, as the torch
    worker's StreamHold does. Gradients of `leaves` are reset before each pass."""
    import triton.testing
    db = triton.testing.do_bench(body, grad_to_none=leaves, return_mode="median")
    flush = torch.empty(2 * torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size,
                        dtype=torch.uint8, device="cuda")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev, host = [], []
    for _ in range(reps):
        for t in leaves:
            t.grad = None
        flush.zero_()
        torch.cuda._sleep(20_000_000)
        s.record()
        h0 = time.perf_counter()
        body()
        host.append((time.perf_counter() - h0) * 1e3)
        e.record()
        e.synchronize()
        ev.append(s.elapsed_time(e))
    return db, statistics.median(ev), statistics.median(host)
