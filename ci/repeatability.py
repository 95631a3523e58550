#!/usr/bin/env python3
"""Run-to-run spread of medians within one report (scenarios/repeatability.json).

The scenario lists each workload twice (case ids first-* and second-*); for every
(workload, backend, pass) this prints both medians and their relative difference
|a - b| / min(a, b), and exits 1 when any exceeds --tolerance (default 2%).

    ci/repeatability.py out/repeat_cold/report.json [out/repeat_hot/report.json ...]
"""
import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--tolerance", type=float, default=0.02)
    args = ap.parse_args()
    worst = 0.0
    compared = 0
    for path in args.reports:
        with open(path) as f:
            report = json.load(f)
        mode = "hot" if "--hot" in report.get("command", "") else "cold"
        medians = {}
        for row in report["results"]:
            cid = row["case_id"]
            for prefix in ("first-", "second-"):
                if cid.startswith(prefix):
                    for name, stats in (row.get("timing") or {}).items():
                        if stats:
                            medians[(cid[len(prefix):], row.get("variant", row["backend"]), name, prefix)] = stats
        print(f"## {path} ({mode} L2)")
        print(f"{'workload':<24} {'backend':<18} {'pass':<8} {'first ms':>10} {'second ms':>10} {'diff':>7}  n1/n2")
        for (work, backend, name, prefix), a in sorted(medians.items()):
            if prefix != "first-":
                continue
            b = medians.get((work, backend, name, "second-"))
            if not b:
                continue
            diff = abs(a["median_ms"] - b["median_ms"]) / min(a["median_ms"], b["median_ms"])
            worst = max(worst, diff)
            compared += 1
            flag = "" if diff <= args.tolerance else "  > tolerance"
            print(f"{work:<24} {backend:<18} {name:<8} {a['median_ms']:>10.4f} {b['median_ms']:>10.4f} "
                  f"{100 * diff:>6.2f}%  {a['n']}/{b['n']}{flag}")
    print(f"compared {compared} (workload, backend, pass) pairs; worst difference {100 * worst:.2f}% "
          f"(tolerance {100 * args.tolerance:.1f}%)")
    if compared == 0:
        print("nothing to compare: no first-/second- rows with timings", file=sys.stderr)
        return 2
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
