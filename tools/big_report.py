#!/usr/bin/env python3
"""Write a large synthetic report.json for scale tests of compare / merge / summary.

usage: tools/big_report.py TEMPLATE.json ROWS OUT.json [--slower PCT]

Every row of TEMPLATE (a real report, e.g. docs/results/raw/*.json) is repeated
with case ids suffixed "#<n>" until ROWS rows are written, in the writer's layout
(header, then one compact row per line), streamed so the script itself stays
small in memory. --slower PCT scales every timing sample by (1 + PCT/100), so
that `attnbench compare` has SLOWER verdicts to report.
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("template")
    ap.add_argument("rows", type=int)
    ap.add_argument("out")
    ap.add_argument("--slower", type=float, default=0.0)
    a = ap.parse_args()
    doc = json.load(open(a.template))
    rows = doc.pop("results")
    if not rows:
        raise SystemExit(a.template + ": no rows to repeat")
    factor = 1.0 + a.slower / 100.0
    head = json.dumps(doc, indent=1)
    with open(a.out, "w") as f:
        f.write(head[:-2] + ',\n "results": [')
        for n in range(a.rows):
            r = json.loads(json.dumps(rows[n % len(rows)]))
            r["case_id"] = "%s#%d" % (r["case_id"], n // len(rows))
            for t in (r.get("timing") or {}).values():
                if factor != 1.0 and isinstance(t, dict):
                    for k in ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "mean_ms"):
                        if isinstance(t.get(k), (int, float)):
                            t[k] *= factor
                    if isinstance(t.get("samples_ms"), list):
                        t["samples_ms"] = [s * factor for s in t["samples_ms"]]
            f.write(("\n  " if n == 0 else ",\n  ") + json.dumps(r, separators=(",", ":")))
        f.write("\n ]\n}\n")


if __name__ == "__main__":
    main()
