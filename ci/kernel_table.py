#!/usr/bin/env python3
"""Print the kernel traces of an attnbench report (`attnbench run --kernel-trace`).

    python3 ci/kernel_table.py REPORT.json [--top N]

For every row with extra.kernel_trace: the timed medians, then per pass (fwd, bwd)
the kernels sorted by device time with calls, mean, share, grid / CTAs, registers
and shared memory. Exit 1 when no row of the report has a trace.
"""
import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--top", type=int, default=12, help="kernels per pass (default 12)")
    a = ap.parse_args()
    rows = json.load(open(a.report))["results"]
    found = 0
    for r in rows:
        kt = (r.get("extra") or {}).get("kernel_trace")
        if not kt:
            continue
        found += 1
        med = {k: round(v["median_ms"], 4) for k, v in (r.get("timing") or {}).items()
               if isinstance(v, dict) and "median_ms" in v}
        print(f"## {r['case_id']} / {r.get('variant', r['backend'])}: {r['status']} {med}")
        if "unavailable" in kt:
            print(f"  unavailable: {kt['unavailable']}")
            continue
        for p in ("fwd", "bwd"):
            t = kt.get(p)
            if not t:
                continue
            if "error" in t:
                print(f"  {p}: error: {t['error']}")
                continue
            extra = ""
            if "busy_us" in t:  # reports before the timeline have no busy time / streams
                extra = f", busy {t['busy_us']:.1f} us over {t['streams']} stream(s)"
            print(f"  {p}: {t['activities']} activities, device {t['device_us']:.1f} us, span {t['span_us']:.1f} us{extra}")
            for k in t["kernels"][: a.top]:
                shape = (f"grid {k['grid']} ({k['ctas']} CTAs) block {k['block']} regs {k['registers']} "
                         f"smem {k['shared_bytes']}") if k["kind"] == "kernel" else f"{k['bytes']} bytes"
                name = k["name"] if len(k["name"]) <= 110 else k["name"][:107] + "..."
                print(f"    {k['total_us']:9.1f} us {100 * k['share']:5.1f}% x{k['calls']:<3d} {name}\n"
                      f"                {shape}")
    if not found:
        print("no row has extra.kernel_trace (run with --kernel-trace on a GPU)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
