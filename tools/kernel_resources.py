#!/usr/bin/env python3
"""Per-kernel resources of two attnbench builds side by side: registers, stack,
local memory (spills), shared memory and SASS instruction count of every kernel
of the fused family (`cuobjdump --dump-resource-usage` and `cuobjdump -sass` of
each binary, per architecture). Shows that a refactor changed no kernel, or which
ones it changed:

    tools/kernel_resources.py BEFORE_BINARY AFTER_BINARY [--filter attn_] [--all]

Prints a markdown table of the kernels whose numbers differ (every kernel with
--all) and a summary line; exit 0 always (a report, not a gate). Needs cuobjdump
(the CUDA toolkit's bin/), which the CPU machine may lack: run it on the GPU host.
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys


def cuobjdump():
    for cand in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if cand and shutil.which(cand):
            return cand
    sys.exit("kernel_resources.py: cuobjdump not found (CUDA toolkit bin/ on PATH?)")


def cuobjdump_lines(binary, tool, flag, header):
    """(arch, kernel, line) for every line of `cuobjdump FLAG BINARY` inside a kernel
    section: `header` matches a kernel's first line (group 1: the mangled name)."""
    out = subprocess.run([tool, flag, binary], capture_output=True, text=True, check=True).stdout
    arch, fn = "?", None
    for line in out.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(header, line)
        if m:
            fn = m.group(1)
            continue
        if fn:
            yield arch, fn, line


def resources(binary, tool, pattern):
    """{(arch, kernel): {REG, STACK, SHARED, LOCAL}} from --dump-resource-usage."""
    res = {}
    for arch, fn, line in cuobjdump_lines(binary, tool, "--dump-resource-usage", r"\s*Function (\S+):"):
        if "REG:" in line and re.search(pattern, fn):
            res[(arch, fn)] = {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)}
    return res


def sass_counts(binary, tool, pattern):
    """{(arch, kernel): instruction count} from -sass (a kernel's copies in several
    cubins are summed)."""
    counts = collections.Counter()
    for arch, fn, line in cuobjdump_lines(binary, tool, "-sass", r"\s*Function : (\S+)"):
        if re.search(pattern, fn) and re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+\S", line):
            counts[(arch, fn)] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--filter", default="attn_", help="regex on the mangled kernel name (default attn_)")
    ap.add_argument("--all", action="store_true", help="list unchanged kernels too")
    a = ap.parse_args()
    tool = cuobjdump()
    rb, ra = resources(a.before, tool, a.filter), resources(a.after, tool, a.filter)
    sb, sa = sass_counts(a.before, tool, a.filter), sass_counts(a.after, tool, a.filter)
    keys = sorted(set(rb) | set(ra))
    print("| arch | kernel | REG | LOCAL (spill) | STACK | SASS instructions |")
    print("|---|---|---|---|---|---|")
    changed = 0
    for k in keys:
        b, f = rb.get(k), ra.get(k)
        row = []
        for field in ("REG", "LOCAL", "STACK"):
            vb = b[field] if b else None
            vf = f[field] if f else None
            row.append(f"{vb}" if vb == vf else f"{vb} -> {vf}")
        ib, ia = sb.get(k), sa.get(k)
        row.append(f"{ib}" if ib == ia else f"{ib} -> {ia}")
        differs = any("->" in c for c in row)
        changed += differs
        if differs or a.all:
            print(f"| {k[0]} | {k[1]} | " + " | ".join(row) + " |")
    print(f"\n{len(keys)} kernels matching /{a.filter}/; {changed} differ "
          f"(before: {len(rb)} kernels, after: {len(ra)} kernels)")


if __name__ == "__main__":
    main()
