// The host memory policy of the attnbench process: large host tensors stay in the
// heap after they are freed, so that the next row's tensors of the same sizes reuse
// pages already mapped instead of faulting in fresh ones.
//
// Why: a row of a packed workload allocates host tensors of hundreds of MB to GBs
// (the inputs and the reference of a case, the outputs read back as float64, the
// peers' files decoded). glibc serves every allocation above its mmap threshold
// (at most 32 MiB) with a fresh mmap and unmaps it on free, so each row pays the
// kernel's page zeroing and one fault per 4 KiB page again, on the thread that
// first touches it (a std::vector<double> zero-fills on one thread). On the 2-core
// development machine reading back the four 400 MB float64 outputs of a peer took
// 3.8 s that way and 0.47-0.63 s with the freed memory kept (bench_peer_protocol,
// repetitions after the first; docs/results/2026-11-28-h100-session16.md).
#pragma once

#include <string>

namespace attnbench {

/// Keep freed host memory for reuse: with glibc, mallopt(M_MMAP_MAX, 0) (large
/// blocks of the main thread come from the heap, not from one mmap each) and
/// mallopt(M_TRIM_THRESHOLD, -1) (free() never returns the heap's top). The
/// process's resident size then stays at its peak, which a run reaches anyway
/// with the next case. Left alone when GLIBC_TUNABLES names a glibc.malloc.mmap_max
/// or trim_threshold setting (the user's choice wins), and without glibc.
/// Returns what was done, for logs: "kept", "left to GLIBC_TUNABLES" or
/// "not glibc". Never throws.
std::string keep_freed_host_memory();

}  // namespace attnbench
