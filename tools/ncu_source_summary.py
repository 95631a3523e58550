#!/usr/bin/env python3
"""Summarise Nsight Compute's per-instruction source counters of one kernel.

    ncu --section SourceCounters --section WarpStateStats ... -o prof <program>
    ncu --import prof.ncu-rep --page source --csv --print-source sass > prof_sass.csv
    tools/ncu_source_summary.py prof_sass.csv[.gz] [--per HGMMA] [--range A:B] [--window 100] [--top 25]

Input: the CSV of `ncu --page source --csv --print-source sass` (one kernel; gzip
allowed): a "Kernel Name" line, then one row per SASS instruction with the columns
"Source", "Instructions Executed", "Warp Stall Sampling (All Samples)" and one
"stall_<reason>" column per stall reason (Nsight Compute 2025.x naming).

Prints, from those counters alone:
  1. the stall reasons' share of all warp-state samples;
  2. the instruction mix per loop step: warp-level executions of each opcode
     divided by the executions of the most executed `--per` instruction (default
     HGMMA: in an attention main loop each of a step's wgmma instructions runs
     once per warp and step, so the quotient is "instructions per warp and step";
     `--range A:B` counts only instructions A .. B - 1, e.g. the main loop's region
     from item 3, so that a producer's barrier spins do not count);
  3. the share of samples in windows of `--window` consecutive instructions (the
     code's regions: main loop GEMM issue, softmax, tile prologue, producer), those
     above 1%;
  4. the `--top` instructions with the most samples, their three main stall
     reasons, execution count and text.

Method of docs/results/2026-11-29-h200-session26.md (where the forward's consumer
warps wait). Exit status 2 with a message on a file it cannot read.
"""
import argparse
import collections
import csv
import gzip
import sys


def read_rows(path):
    """The header and the instruction rows of an ncu source-page CSV."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        print(f"ncu_source_summary: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    start = next((i for i, r in enumerate(rows) if "Source" in r and "Address" in r), None)
    if start is None:
        print(f"ncu_source_summary: {path}: no header row with 'Address' and 'Source' "
              "(expected `ncu --page source --csv --print-source sass`)", file=sys.stderr)
        sys.exit(2)
    return rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]


def number(text):
    try:
        return float(text.replace(",", "")) if text not in ("", "-") else 0.0
    except ValueError:
        return 0.0


def opcode(sass):
    """The mnemonic of a SASS line without predicate and modifiers: '@!P1 BRA x' -> 'BRA'."""
    words = [w for w in sass.strip().split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--per", default="HGMMA", help="opcode whose most executed instruction counts the steps")
    ap.add_argument("--range", default=":", help="A:B, the instruction indices of the mix (default all)")
    ap.add_argument("--window", type=int, default=100, help="instructions per region window")
    ap.add_argument("--top", type=int, default=25, help="instructions listed by samples")
    a = ap.parse_args()

    hdr, rows = read_rows(a.csv)
    col = {h: i for i, h in enumerate(hdr)}
    for need in ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)"):
        if need not in col:
            print(f"ncu_source_summary: {a.csv}: no column '{need}'", file=sys.stderr)
            sys.exit(2)
    src, ex, smp = col["Source"], col["Instructions Executed"], col["Warp Stall Sampling (All Samples)"]
    reasons = [(i, h[len("stall_"):]) for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(number(r[smp]) for r in rows) or 1.0

    print(f"{a.csv}: {len(rows)} instructions, {int(total)} warp-state samples")
    by_reason = collections.Counter()
    for r in rows:
        for i, name in reasons:
            by_reason[name] += number(r[i])
    print("\nstall reasons (% of samples): " +
          ", ".join(f"{name} {100 * v / total:.1f}" for name, v in by_reason.most_common(10) if v))

    try:
        lo, hi = (int(x) if x else None for x in a.range.split(":"))
    except ValueError:
        print(f"ncu_source_summary: --range {a.range!r}: expected A:B (instruction indices)", file=sys.stderr)
        sys.exit(2)
    part = rows[lo:hi]
    steps = max((number(r[ex]) for r in part if opcode(r[src]) == a.per), default=0.0)
    mix, mix_samples = collections.Counter(), collections.Counter()
    for r in part:
        mix[opcode(r[src])] += number(r[ex])
        mix_samples[opcode(r[src])] += number(r[smp])
    if steps:
        print(f"\ninstructions {a.range} per warp and step ({int(steps)} warp-steps: the most executed {a.per}); "
              f"all: {sum(mix.values()) / steps:.0f}")
        for op, n in mix.most_common(20):
            print(f"  {op:12s} {n / steps:8.1f}   samples {100 * mix_samples[op] / total:5.1f}%")
    else:
        print(f"\nno {a.per} instruction: no per-step mix (try --per)")

    print(f"\nsamples by windows of {a.window} instructions (those above 1%):")
    for w in range(0, len(rows), a.window):
        s = sum(number(r[smp]) for r in rows[w:w + a.window])
        if s / total > 0.01:
            top = collections.Counter()
            for r in rows[w:w + a.window]:
                for i, name in reasons:
                    top[name] += number(r[i])
            print(f"  {w:5d}-{w + a.window - 1:5d} {100 * s / total:5.1f}%  " +
                  ", ".join(f"{name} {100 * v / total:.1f}" for name, v in top.most_common(3)))

    print(f"\ntop {a.top} instructions by samples (index, % of samples, executions, main stalls, SASS):")
    order = sorted(range(len(rows)), key=lambda k: -number(rows[k][smp]))[:a.top]
    for k in sorted(order):
        r = rows[k]
        stalls = sorted(((number(r[i]), name) for i, name in reasons), reverse=True)[:3]
        print(f"  {k:5d} {100 * number(r[smp]) / total:5.1f}% {int(number(r[ex])):>10d}  " +
              ", ".join(f"{name} {int(v)}" for v, name in stalls if v) + f"  | {r[src].strip()[:80]}")


if __name__ == "__main__":
    main()
