"""The derived figures of an attnbench report row, as the report stores them.

Schema version 2 reports carry, per row and timed pass, the figures of the
derive step (reports/derive.hpp; docs/report-format.md, "derived"): useful and
executed TFLOP/s, % of the measured GEMM and copy ceilings, the roofline floor
(floor_ms), x_floor and bound. The scripts read them here instead of recomputing.
For version 1 files (no "derived") only the useful / executed TFLOP/s are
recomputed from the row's work and median time (FLOPs / median / 1e12); the
roofline figures are then None (`attnbench report` derives them on load).
"""

_FLOPS = {"fwd": ("useful_flops_fwd", "executed_flops_fwd"), "bwd": ("useful_flops_bwd", "executed_flops_bwd")}


def _v1_tflops(row, pass_, key):
    work = row.get("work") or {}
    stats = (row.get("timing") or {}).get(pass_)
    ms = stats.get("median_ms") if isinstance(stats, dict) else None
    which = 0 if key == "useful_tflops" else 1
    if pass_ == "fwd_bwd":
        parts = [work.get(_FLOPS[p][which]) for p in ("fwd", "bwd")]
        flops = sum(parts) if all(parts) else None
    else:
        flops = work.get(_FLOPS[pass_][which])
    return flops / (ms * 1e-3) / 1e12 if flops and ms else None


def figure(row, pass_, key):
    """derived[pass_][key] of `row` (pass_ in fwd, bwd, fwd_bwd), or None.

    Falls back to recomputing useful_tflops / executed_tflops for rows of
    version 1 reports, which have no "derived" object."""
    derived = row.get("derived")
    if isinstance(derived, dict):
        figs = derived.get(pass_)
        return figs.get(key) if isinstance(figs, dict) else None
    if "derived" not in row and key in ("useful_tflops", "executed_tflops"):
        return _v1_tflops(row, pass_, key)
    return None
