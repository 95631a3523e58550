# Generates the wgmma wrappers of backends/kernels/wgmma_sm90.cuh (the part after
# fence_acc): python3 gen_wgmma.py, then paste /tmp/gen/wrappers.inc there.
out = []
for N in (64, 128):
    nreg = N // 2
    regs = ", ".join(f"%{i}" for i in range(nreg))
    ops = ",\n          ".join(", ".join(f'"+f"(d[{j}].c[{e}])' for e in range(4)) for j in range(N // 8))
    for mode in ("ss", "rs"):
        if mode == "ss":
            a_str = f"%{nreg}"; b = nreg + 1; sd = nreg + 2; tn = nreg + 3
            ins = f'"l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB)'
            tail = f"p, 1, 1, 0, %{tn};"
            sig = "uint64_t desc_a, uint64_t desc_b, int scale_d"
            doc = f"/// D (m64n{N}, float32) {{+}}= A B with A and B from shared memory (descriptors)."
        else:
            a_str = "{" + ", ".join(f"%{nreg+i}" for i in range(4)) + "}"; b = nreg + 4; sd = nreg + 5; tn = nreg + 6
            ins = f'"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB)'
            tail = f"p, 1, 1, %{tn};"
            sig = "const uint32_t (&a)[4], uint64_t desc_b, int scale_d"
            doc = f"/// D (m64n{N}, float32) {{+}}= A B with A from registers (the m16n8k16 A layout per warp)."
        out.append(doc)
        out.append(f"template <bool Bf16, int kTransB>")
        out.append(f"__device__ __forceinline__ void wgmma_{mode}_n{N}(Acc (&d)[{N // 8}], {sig}) {{")
        out.append("#if ATTNBENCH_SM90A")
        for bf, ty in ((True, "bf16"), (False, "f16")):
            kw = "if constexpr (Bf16)" if bf else "else"
            out.append(f"  {kw} {{")
            out.append(f'    asm volatile(')
            out.append(f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{sd}, 0;\\n"')
            out.append(f'        "wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{ty}.{ty} "')
            out.append(f'        "{{{regs}}}, "')
            out.append(f'        "{a_str}, %{b}, {tail}\\n}}\\n"')
            out.append(f"        : {ops}")
            out.append(f"        : {ins});")
            out.append("  }")
        out.append("#else")
        out.append("  (void)d; (void)desc_b; (void)scale_d;" + (" (void)desc_a;" if mode == "ss" else " (void)a;"))
        out.append("  __trap();")
        out.append("#endif")
        out.append("}")
        out.append("")
open("/tmp/gen/wrappers.inc", "w").write("\n".join(out))
