#!/usr/bin/env python3
"""Markdown table of the timed rows of attnbench reports: per case and backend,
the forward, backward and forward+backward medians (ms), useful TFLOP/s of each
pass, and the tile efficiency (useful / executed pairs). Reads the report's own
figures (timing medians, work.useful_flops_*, work.tile_efficiency).

    ci/timing_table.py REPORT.json [REPORT.json ...]
"""
import json
import sys


def main(paths):
    print("| case | backend | status | fwd ms | bwd ms | fwd+bwd ms | fwd TFLOP/s | bwd TFLOP/s | tile eff. |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        for row in report.get("results", []):
            t = row.get("timing") or {}
            w = row.get("work") or {}

            def med(k):
                v = t.get(k)
                return v.get("median_ms") if isinstance(v, dict) else None

            def rate(flops, ms):
                return f"{flops / ms / 1e9:.0f}" if flops and ms else "-"

            fwd, bwd, both = med("fwd"), med("bwd"), med("fwd_bwd")
            fmt = lambda x: f"{x:.3f}" if x else "-"
            eff = w.get("tile_efficiency")
            if row.get("status") not in ("pass", "fail", "unchecked"):
                continue
            effs = f"{eff:.2f}" if eff else "-"
            print(f"| {row['case_id']} | {row['backend']} | {row['status']} | {fmt(fwd)} | {fmt(bwd)} | {fmt(both)} | "
                  f"{rate(w.get('useful_flops_fwd'), fwd)} | {rate(w.get('useful_flops_bwd'), bwd)} | {effs} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
