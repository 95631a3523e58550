#!/usr/bin/env python3
"""Markdown table of attnbench report rows next to a peers file's numbers.

    ci/peers_table.py PEERS.json REPORT.json [REPORT.json ...]

For every case of the reports that matches a workload of the peers file (dense
rows by kind, S, B, H and D; packed CodeAlpaca rows by model), prints each
backend's forward and forward+backward medians (ms), the peers file's value for
the same PyTorch path where there is one (and our/their ratio), and the speed-up
of each of our backends over the fastest path the peers file lists, and our
row's useful fwd+bwd TFLOP/s and its time as a multiple of the roofline floor
(the report's stored figures, ci/report_figures.py).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_figures import figure  # noqa: E402

# attnbench peer backend -> the peers file's backend names for the same path
SAME_PATH = {
    "torch-sdpa-cudnn": ["sdpa-cudnn", "torch-sdpa(dense-bool-mask)"],
    "torch-sdpa-flash": ["sdpa-flash"],
    "torch-sdpa-efficient": ["sdpa-efficient"],
    "torch-flex": ["flex", "torch-flex"],
    "torch-varlen": ["varlen", "torch-varlen(native)"],
}


def peers_case(row):
    """The peers file's case name of a report row, or None."""
    cid, p = row["case_id"], row["problem"]
    m = re.match(r"B(\d+)-S(\d+)_D(\d+)_(causal|full)$", cid)
    if m:
        b, s, d, kind = m.groups()
        return f"dense-{kind}-S{s}-B{b}-H{p['heads_q']}-D{d}"
    if re.match(r"dense-(causal|full)-S\d+-B\d+-H\d+-D\d+$", cid):  # scenarios/peers_h100.json
        return cid
    m = re.match(r"(?:codealpaca-)?(llama3-8b|llama3\.2-1b)(?:_greedy_fill1_padmax)?$", cid)
    if m:
        return {"llama3-8b": "codealpaca-llama3-8b S8192 B4",
                "llama3.2-1b": "codealpaca-llama3.2-1b S8192 B4 D64"}[m.group(1)]
    return None


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    peers = {}
    doc = json.load(open(argv[1]))
    rows_key = next(k for k, v in doc.items() if isinstance(v, list))
    for r in doc[rows_key]:
        if "fwd_ms" in r:
            peers.setdefault(r["case"], {})[r["backend"]] = r
    ours = {}
    for path in argv[2:]:
        for row in json.load(open(path))["results"]:
            case = peers_case(row)
            if case is None or case not in peers or row["status"] != "pass":
                continue
            t = row.get("timing") or {}
            if "fwd" not in t:
                continue
            tf, xf = figure(row, "fwd_bwd", "useful_tflops"), figure(row, "fwd_bwd", "x_floor")
            roof = (f"{tf:.0f}" if tf else "-") + (f" ({xf:.2f}x)" if xf else "")
            ours.setdefault(case, {})[row.get("variant", row["backend"])] = (t["fwd"]["median_ms"],
                                                         t.get("fwd_bwd", {}).get("median_ms"), row["case_id"], roof)
    print("| workload | backend | fwd ms | fwd+bwd ms | peers file fwd / fwd+bwd (same path) | ours / file | "
          "fwd+bwd TFLOP/s (x floor) |")
    print("|---|---|---|---|---|---|---|")
    for case in sorted(ours):
        best_f = min(r["fwd_ms"] for r in peers[case].values())
        best_fb = min(r["fwdbwd_ms"] for r in peers[case].values())
        best_f_name = min(peers[case].values(), key=lambda r: r["fwd_ms"])["backend"]
        best_fb_name = min(peers[case].values(), key=lambda r: r["fwdbwd_ms"])["backend"]
        for backend, (f, fb, cid, roof) in sorted(ours[case].items(), key=lambda kv: kv[1][0]):
            same = next((peers[case][n] for n in SAME_PATH.get(backend, []) if n in peers[case]), None)
            if same:
                ref = f"{same['fwd_ms']:.4f} / {same['fwdbwd_ms']:.4f} ({same['backend']})"
                ratio = f"{f / same['fwd_ms']:.2f} / {fb / same['fwdbwd_ms']:.2f}" if fb else f"{f / same['fwd_ms']:.2f}"
            elif not backend.startswith("torch-"):
                ref = f"fastest: {best_f:.4f} ({best_f_name}) / {best_fb:.4f} ({best_fb_name})"
                ratio = f"speed-up {best_f / f:.2f}x / {best_fb / fb:.2f}x" if fb else f"speed-up {best_f / f:.2f}x"
            else:
                ref, ratio = "-", "-"
            fbs = f"{fb:.4f}" if fb else "-"
            print(f"| {cid} | {backend} | {f:.4f} | {fbs} | {ref} | {ratio} | {roof} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
