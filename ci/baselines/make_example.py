#!/usr/bin/env python3
"""Write the example baselines of ci/baselines/ (stdlib only, deterministic).

example-h100.json and example-h100-rerun.json are two runs of one small sweep
(schema v1, docs/report-format.md) with independent timing noise, shaped like
attnbench runs on an H100: the same run twice, which the regression gate must
read as SAME. They are synthetic stand-ins, made by this script, until a
recorded H100 run replaces them (ci/gate.sh says how). Tests derive the
slowdown, correctness-flip and environment-mismatch variants from them.

    python3 ci/baselines/make_example.py
"""
import json
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

ENV = {
    "gpu": {"available": True, "index": 0, "device_count": 1, "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-00000000-0000-0000-0000-000000000000", "pci_bus_id": "00000000:19:00.0",
            "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 52428800,
            "memory_bytes": 85045231616, "memory_bus_width_bits": 5120,
            "shared_memory_per_sm_bytes": 233472, "ecc": True},
    "versions": {"driver": "570.133.20", "cuda_driver_api": "12.8", "cuda_runtime": "13.0",
                 "cuda_runtime_built": "13.0", "nvml": "12.570.133.20", "cudnn": "91900",
                 "cublas": "13.0.0"},
    "clocks_at_start": {"available": True, "time": "2026-03-02T10:00:00Z", "sm_clock_mhz": 1980,
                        "mem_clock_mhz": 2619, "max_sm_clock_mhz": 1980, "temperature_c": 36,
                        "power_w": 71.5, "throttle_mask": 1, "throttle_reasons": ["gpu_idle"]},
    "host": {"hostname": "gpu-host", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
             "logical_cpus": 16, "memory_bytes": 137438953472, "os": "Linux 6.8.0 x86_64"},
    "harness": {"git_revision": "example", "command_line": "attnbench run scenarios/smoke.json --out out",
                "compiler": "gcc 12.2.0", "assertions": False, "cuda_build": True},
    "time": "2026-03-02T10:00:00Z",
}

CEILINGS = {
    "measured": True, "gemm_bf16_tflops": 745.0, "copy_gbps": 2980.0,
    "gemm_bf16": {"name": "gemm_bf16", "value": 745.0, "unit": "TFLOP/s", "median_ms": 1.4758,
                  "min_ms": 1.4701, "max_ms": 1.4902, "n": 15, "work": 1099511627776.0,
                  "how": "cublasGemmEx 8192x8192x8192 bf16 in/out, CUBLAS_COMPUTE_32F"},
    "copy_d2d": {"name": "copy_d2d", "value": 2980.0, "unit": "GB/s", "median_ms": 0.7206,
                 "min_ms": 0.7180, "max_ms": 0.7302, "n": 15, "work": 2147483648.0,
                 "how": "cudaMemcpyAsync device-to-device of 1073741824 bytes"},
}

POLICY = {"cold": True, "warmup": 2, "min_samples": 5, "max_samples": 1000,
          "target_rel_stddev": 0.02, "max_seconds": 2.0}


def thumb(kind, n):
    rows = []
    for i in range(n):
        if kind == "causal":
            rows.append("".join("#" if j < i else "+" if j == i else "." for j in range(n)))
        elif kind == "window":
            rows.append("".join("+" if i - 1 <= j <= i else "." for j in range(n)))
        elif kind == "document":
            doc = i // 3
            rows.append("".join(("#" if j < i else "+") if j // 3 == doc and j <= i else "." for j in range(n)))
        else:
            rows.append("#" * n)
    return {"rows": rows, "q_block": 128, "kv_block": 128, "cell_q_blocks": 1, "cell_kv_blocks": 1}


CASES = [
    # id, seq, mask list, thumbnail kind, pairs fraction, packing ratio
    ("full-s1024", 1024, [], "full", 1.0, None),
    ("causal-s1024", 1024, [{"kind": "causal", "align": "bottom_right"}], "causal", 0.5 + 0.5 / 1024, None),
    ("causal-s4096", 4096, [{"kind": "causal", "align": "bottom_right"}], "causal", 0.5 + 0.5 / 4096, None),
    ("window256-s4096", 4096, [{"kind": "causal", "align": "bottom_right"},
                               {"kind": "sliding_window", "left": 256, "right": 0}], "window", 257 / 4096, None),
    ("packed-codealpaca-s4096", 4096, [{"kind": "causal", "align": "bottom_right"},
                                       {"kind": "document", "docs_per_row": [11, 12], "padding_tokens": [96, 40]}],
     "document", 0.08, 0.983),
]
BACKENDS = {"naive": 0.30, "cudnn": 0.62}  # fraction of the GEMM peak on useful fwd FLOPs


def samples(rng, median, n, noise):
    return [round(median * math.exp(rng.gauss(0.0, noise)), 6) for _ in range(n)]


def stats(xs):
    s = sorted(xs)
    n = len(s)

    def q(p):
        h = (n - 1) * p
        lo = math.floor(h)
        hi = min(lo + 1, n - 1)
        return s[lo] + (h - lo) * (s[hi] - s[lo])

    mean = sum(s) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in s) / (n - 1)) if n > 1 else 0.0
    return {"n": n, "median_ms": q(0.5), "q1_ms": q(0.25), "q3_ms": q(0.75), "iqr_ms": q(0.75) - q(0.25),
            "min_ms": s[0], "max_ms": s[-1], "mean_ms": mean, "stddev_ms": sd,
            "rel_stddev": sd / mean if mean > 0 else 0.0, "converged": sd / mean <= 0.02,
            "stop_reason": "converged" if sd / mean <= 0.02 else "time_cap", "timer": "cuda_events",
            "cold": True, "warmup": 2, "wall_seconds": round(sum(s) * 1e-3 * 1.3, 6), "samples_ms": xs}


def make(seed, started, finished):
    rng = random.Random(seed)
    rows = []
    for cid, seq, mask, tk, frac, packing in CASES:
        b, hq, hkv, d = 2, 16, 4, 128
        problem = {"batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": seq, "seq_k": seq, "head_dim": d,
                   "head_dim_v": d, "dtype": "bf16", "scale": None, "layout": "bshd", "mask": mask,
                   "score_mod": {"kind": "none"}, "seed": 7}
        useful_pairs = int(b * hq * seq * seq * frac)
        n_tiles = seq // 128
        for backend, eff in BACKENDS.items():
            row = {"case_id": cid, "backend": backend, "problem": problem}
            if backend == "naive" and cid.startswith("packed"):
                row.update({"status": "unsupported", "reason": "naive: document masks need the THD layout",
                            "work": None, "packing": None, "check": None, "timing": None, "memory": None,
                            "extra": None})
                rows.append(row)
                continue
            executed_pairs = useful_pairs if backend == "naive" and tk == "full" else \
                (b * hq * seq * seq if backend == "naive" else int(useful_pairs * (1.0 + 1.0 / max(1, n_tiles))))
            per = 2.0 * (d + d)
            work = {"useful_pairs": useful_pairs, "executed_pairs": executed_pairs,
                    "useful_flops_fwd": per * useful_pairs, "executed_flops_fwd": per * executed_pairs,
                    "useful_flops_bwd": 2.5 * per * useful_pairs, "executed_flops_bwd": 2.5 * per * executed_pairs,
                    "tile_efficiency": useful_pairs / executed_pairs,
                    "flop_convention": "fwd = 2 * pairs * (Dqk + Dv) summed over batch and query heads; bwd = 2.5 * fwd (FlashAttention)"}
            fwd_ms = per * executed_pairs / (eff * 745e12) * 1e3 + 0.012
            bwd_ms = 2.5 * per * executed_pairs / (0.8 * eff * 745e12) * 1e3 + 0.02
            timing = {"fwd": stats(samples(rng, fwd_ms, 30, 0.008)),
                      "bwd": stats(samples(rng, bwd_ms, 25, 0.008)),
                      "fwd_bwd": stats(samples(rng, fwd_ms + bwd_ms, 20, 0.008))}
            ratios = {"O": 1.0 + 0.1 * rng.random(), "LSE": 0.9 + 0.2 * rng.random(),
                      "dQ": 1.2 + 0.3 * rng.random(), "dK": 1.5 + 0.8 * rng.random(), "dV": 1.1 + 0.2 * rng.random()}
            tensors = [{"name": k, "pass": True, "max_abs_err": 1e-3 * v, "mean_abs_err": 1e-4 * v,
                        "rel_l2_err": 2e-3 * v, "lp_max_abs_err": 1e-3, "ulp": 3.9e-3, "r": 2.0 if k in ("O", "LSE") else 3.0,
                        "tolerance": (2.0 if k in ("O", "LSE") else 3.0) * 1e-3 + 3.9e-3, "ratio": v,
                        "checked": 1 << 20, "nan_mismatch": 0, "unwritten": 0, "masked_nonzero": 0}
                       for k, v in ratios.items()]
            row.update({
                "status": "pass",
                "work": work,
                "packing": ({"source": "empirical:codealpaca", "strategy": "ffd", "pad_to": "max_seq_len",
                             "target_fill": 1.0, "real_tokens": int(2 * seq * packing),
                             "padded_tokens": 2 * seq, "packing_ratio": packing, "docs_per_pack": [11, 12],
                             "truncated_docs": 0} if packing else None),
                "check": {"pass": True, "mode": "full", "scope": "all 8 (batch, kv-head) slices",
                          "rule": "r_fwd = 2, r_bwd = 3 (docs/semantics.md section 7)",
                          "worst_ratio": max(ratios.values()), "reference_ms": 850.0, "tensors": tensors},
                "timing": timing,
                "memory": {"allocated_bytes": 64 << 20, "workspace_bytes": (b * hq * seq * seq * 2) if backend == "naive" else 0},
                "extra": {"prepare_ms": 3.5, "setup_ms": 0.4, "deterministic": backend == "naive",
                          "expected_deterministic": backend == "naive"},
                "clocks": {"start": ENV["clocks_at_start"], "end": dict(ENV["clocks_at_start"], sm_clock_mhz=1755,
                                                                        throttle_mask=4, throttle_reasons=["sw_power_cap"])},
                "mask_thumbnail": thumb(tk, min(n_tiles, 32)),
            })
            rows.append(row)
    return {
        "schema_version": 1, "tool": "attnbench", "git_revision": "example",
        "command": "attnbench run scenarios/smoke.json --out out",
        "started": started, "finished": finished,
        "scenario": {"name": "example-smoke", "description": "example baseline (synthetic, see make_example.py)",
                     "file": "scenarios/smoke.json", "cases": len(CASES)},
        "shard": "0/1", "backends": list(BACKENDS), "measurement": POLICY,
        "environment": ENV, "ceilings": CEILINGS, "results": rows,
    }


def main():
    for name, seed, t0, t1 in [("example-h100.json", 1, "2026-03-02T10:00:00Z", "2026-03-02T10:04:10Z"),
                               ("example-h100-rerun.json", 2, "2026-03-02T11:00:00Z", "2026-03-02T11:04:12Z")]:
        with open(os.path.join(HERE, name), "w") as f:
            json.dump(make(seed, t0, t1), f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
