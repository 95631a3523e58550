#!/usr/bin/env python3
"""Markdown table of the timed rows of attnbench reports: per case and backend,
the forward, backward and forward+backward medians (ms), useful TFLOP/s of the
forward and backward passes, the forward+backward time as a multiple of its
roofline floor (with the bound: memory or compute), and the tile efficiency
(useful / executed pairs). Reads the report's stored figures (timing medians,
the rows' "derived" figures through ci/report_figures.py, work.tile_efficiency).

    ci/timing_table.py REPORT.json [REPORT.json ...]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_figures import figure  # noqa: E402


def main(paths):
    print("| case | backend | status | fwd ms | bwd ms | fwd+bwd ms | fwd TFLOP/s | bwd TFLOP/s | "
          "fwd+bwd x floor | tile eff. |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        for row in report.get("results", []):
            t = row.get("timing") or {}
            w = row.get("work") or {}

            def med(k):
                v = t.get(k)
                return v.get("median_ms") if isinstance(v, dict) else None

            def rate(pass_):
                v = figure(row, pass_, "useful_tflops")
                return f"{v:.0f}" if v else "-"

            def floor(pass_):
                x, bound = figure(row, pass_, "x_floor"), figure(row, pass_, "bound")
                return f"{x:.2f}x ({bound})" if x else "-"

            fwd, bwd, both = med("fwd"), med("bwd"), med("fwd_bwd")
            fmt = lambda x: f"{x:.3f}" if x else "-"
            eff = w.get("tile_efficiency")
            if row.get("status") not in ("pass", "fail", "unchecked"):
                continue
            effs = f"{eff:.2f}" if eff else "-"
            print(f"| {row['case_id']} | {row.get('variant', row['backend'])} | {row['status']} | {fmt(fwd)} | {fmt(bwd)} | {fmt(both)} | "
                  f"{rate('fwd')} | {rate('bwd')} | {floor('fwd_bwd')} | {effs} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
