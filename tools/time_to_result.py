#!/usr/bin/env python3
"""Issue 29's time-to-result figure of one `attnbench run` report:

    tools/time_to_result.py REPORT.json [WALL_SECONDS]

Prints, per case and in all, the rows, the GPU timing (per row: the wall of the
harness's timing loops, `timing.<pass>.wall_seconds`; for a peer, which times in
its own worker, the sum of its samples plus its warmup passes at the median),
the case's float64 reference (`check.reference_ms`, once per case: what
computing it cost, wherever it was computed) and where the rows' other host
time went (inputs, prepare, read-back, determinism, check, peers' worker), then
the run's wall time (WALL_SECONDS, else the report's started..finished) against
GPU timing + one reference per case: the issue's target is <= 1.3x.
"""
import json
import sys
from datetime import datetime


def gpu_seconds(row):
    total = 0.0
    for t in (row.get("timing") or {}).values():
        if not isinstance(t, dict):
            continue
        if t.get("wall_seconds"):
            total += t["wall_seconds"]
        elif t.get("samples_ms"):
            total += (sum(t["samples_ms"]) + t.get("warmup", 0) * t.get("median_ms", 0)) / 1000
    return total


def main():
    rep = json.load(open(sys.argv[1]))
    if len(sys.argv) > 2:
        wall = float(sys.argv[2])
    else:
        t = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
        wall = (t(rep["finished"]) - t(rep["started"])).total_seconds() if rep.get("finished") else None
    cases = {}
    for r in rep["results"]:
        c = cases.setdefault(r["case_id"], {"rows": 0, "gpu": 0.0, "ref": 0.0, "phases": {}})
        c["rows"] += 1
        c["gpu"] += gpu_seconds(r)
        chk = r.get("check") or {}
        c["ref"] = max(c["ref"], (chk.get("reference_ms") or 0) / 1000)
        e = r.get("extra") or {}
        ph = c["phases"]
        for k, v in (("inputs", (e.get("inputs") or {}).get("ms")), ("prepare", e.get("prepare_ms")),
                     ("read", e.get("read_outputs_ms")), ("determinism", e.get("determinism_ms")),
                     ("check", (e.get("check_overlap") or {}).get("check_ms"))):
            ph[k] = ph.get(k, 0) + (v or 0) / 1000
    print(f'{"case":36} {"rows":>4} {"gpu s":>7} {"ref s":>7}  host phases summed over rows, s')
    tot_gpu = tot_ref = 0.0
    for cid, c in cases.items():
        tot_gpu += c["gpu"]
        tot_ref += c["ref"]
        print(f'{cid[:36]:36} {c["rows"]:4} {c["gpu"]:7.2f} {c["ref"]:7.2f}  ' +
              " ".join(f"{k} {v:.1f}" for k, v in c["phases"].items()))
    budget = tot_gpu + tot_ref
    print(f"GPU timing {tot_gpu:.1f} s + one reference per case {tot_ref:.1f} s = {budget:.1f} s")
    if wall is not None and budget > 0:
        print(f"wall {wall:.1f} s = {wall / budget:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
