#!/usr/bin/env bash
# Sourced by the GPU benchmark scripts (ci/issue_tables.sh, ci/bench_gpu.sh):
# host memory of large problems (2-3 GB of float64 inputs and outputs per packed
# Llama-3-8B row) in transparent huge pages. On this project's Firecracker VMs a
# first-touch page fault costs about 3 ns per byte; glibc's hugetlb tunable cut the
# first touch of a 336 MB vector from 2.6 s to 0.5 s (measured on the CPU VM,
# 2026-11-24). It changes untimed host work only, never a kernel timing. A value
# the caller already set is kept.
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}
