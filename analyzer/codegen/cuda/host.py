"""The host side of a tensor-core kernel (analyzer.codegen.cuda.mma): its configuration structs, its
launcher template and its extern "C" entry, which picks the variant from the runtime sizes and the
dtype. Each function takes the kernel's writer `w` (an MmaKernel) and returns C++."""

from __future__ import annotations

from analyzer.codegen.cuda.variants import SMEM_DEFAULT, WHOLE_EXTENTS
from analyzer.codegen.escape import cpp_comment
from analyzer.codegen.render import pointers
from analyzer.config.plan import band_rows


def cfg_structs(w) -> str:
    """The configuration structs: one specialisation per variant."""
    cfg = w.fns.cfg
    lines = [f"template <int V> struct {cfg};"]
    for v in w.variants:
        at = f"{w.k.key_axis}={v.key}" if v.key is not None else "one configuration for all sizes"
        wh = ", ".join(f"{d} extent {e}" for d, e in v.wholes)
        what = cpp_comment(at + ("; " + wh if wh else ""))
        lines.append(f"template <> struct {cfg}<{v.index}> {{  // {what}")
        lines.append(f"  static constexpr int WARPS = {v.warps}, MA = {v.ma}, STAGES = {v.stages};")
        for a, t in v.tiles:
            lines.append(f"  static constexpr int {w.n.tile(a)} = {t};")
        if w.p.banded:
            tiles = dict(v.tiles)
            r, col = w.p.banded
            lines.append(f"  static constexpr int BAND = {band_rows(tiles[r], tiles[col], w.g.sm_count)};"
                         f"  // row tiles per band: one wave of {w.g.sm_count} blocks covers a square")
        for d, e in v.extents:
            lines.append(f"  static constexpr int {w.ext(d)} = {e};")
        lines.append(f"  static constexpr int HEAD_ELEMS = {v.head_elems}, STAGE_ELEMS = {v.stage_elems};")
        lines.append("};")
    return "\n".join(lines) + "\n"


def vec_conditions(w) -> list[tuple[int, str]]:
    """Host conditions for the 16-byte load path of each loaded tile and the paired stores."""
    p, n = w.p, w.n
    out = []
    for bit, name in enumerate(w.loaded):
        dims = p.tiles_of[name]
        if len(dims) != 2 or len(p.dim(dims[1]).axes) != 1:
            continue
        inner = p.dim(dims[1]).axes[0]
        conds = [f"napkin::aligned({n.ptr(name)}, 16)", f"{n.stride(name, inner)} == 1"]
        conds += [f"{n.stride(name, x)} % 8 == 0" for x in p.axes_of(name) if x != inner]
        out.append((bit, " && ".join(conds)))
    for i, name in enumerate(w.s.saves):
        bit = len(w.loaded) + i
        v_dims = w.canon(p.tiles_of[name])
        if len(v_dims) != 2 or len(p.dim(v_dims[1]).axes) != 1:
            continue
        unit = p.dim(v_dims[1]).axes[0]
        conds = [f"napkin::aligned({n.ptr(name)}, 4)", f"{n.stride(name, unit)} == 1"]
        conds += [f"{n.stride(name, x)} % 2 == 0" for x in p.axes_of(name) if x != unit]
        out.append((bit, " && ".join(conds)))
    return out


def launcher(w) -> str:
    """The launcher template: shared memory, grid and vector-path checks, the launch; then the entry."""
    p, f, n = w.p, w.fns, w.n
    params = w.c_params("void*")
    blocks = " * ".join([*(f"napkin::cdiv({n.size(a)}, C::{n.tile(a)})" for a in w.group_axes()),
                         *(n.size(a) for a in p.grid)]) or "1"
    lines = ["template <typename T, int V>",
             f"static int {f.launch}(" + ", ".join([*params, "int major", "cudaStream_t stream"]) + ")",
             "{",
             f"  using C = {f.cfg}<V>;",
             "  const int nbuf = major >= 8 ? C::STAGES : 1;  // sm_75: one buffer, plain loads",
             "  const size_t smem = (size_t)(C::HEAD_ELEMS + nbuf * C::STAGE_ELEMS) * sizeof(T);",
             "  if (smem > (size_t)napkin::smem_optin()) return NAPKIN_ERR_SMEM;",
             f"  if (smem > {SMEM_DEFAULT}) {{",
             (f"    const cudaError_t e = cudaFuncSetAttribute({f.kernel}<T, V>, "
              "cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);"),
             "    if (e != cudaSuccess) return (int)e;",
             "  }",
             f"  const int64_t blocks = {blocks};",
             "  if (blocks <= 0) return 0;",
             "  if (blocks > 2147483647LL) return NAPKIN_ERR_GRID;",
             "  if (" + " || ".join(f"{n.size(a)} > 2147483647LL" for a in w.axes)
             + ") return NAPKIN_ERR_GRID;",
             "  int vec = 0;"]
    for bit, cond in vec_conditions(w):
        lines.append(f"  if ({cond}) vec |= {1 << bit};")
    args = []
    for a in pointers(p):
        const = "const " if a not in w.s.saves else ""
        args.append(f"static_cast<{const}T*>({n.ptr(a)})")
    args += w.arg_names()[len(pointers(p)):]
    lines.append(f"  {f.kernel}<T, V><<<(unsigned)blocks, C::WARPS * 32, smem, stream>>>(")
    lines.append("      " + ", ".join([*args, "vec"]) + ");")
    lines.append("  return (int)cudaGetLastError();")
    lines.append("}")
    lines.append("")
    lines += extern_entry(w)
    return "\n".join(lines) + "\n"


def extern_entry(w) -> list[str]:
    """The extern "C" entry: the dtype and the runtime sizes choose a variant."""
    p, f, k = w.p, w.fns, w.k
    key_dim = p.dim_of.get(k.key_axis) if k.key_axis else None
    lines = [f'extern "C" int {f.entry}('
             + ", ".join([*w.c_params("void*"), "int dtype", "void* stream"]) + ")", "{",
             "  cudaGetLastError();  // clear an earlier error of this runtime",
             "  if (dtype != 0 && dtype != 1) return NAPKIN_ERR_DTYPE;",
             "  const int major = napkin::device_major();",
             "  if (dtype == 1 && major < 8) return NAPKIN_ERR_BF16;",
             "  const cudaStream_t s = static_cast<cudaStream_t>(stream);"]
    args = ", ".join([*w.arg_names(), "major", "s"])
    for v in w.variants:
        conds = []
        for d, e in v.wholes:
            size = w.n.size(p.dim(d).axes[0])
            if d == key_dim:
                conds.append(f"{size} == {v.key}")
            else:
                lower = max([x for x in WHOLE_EXTENTS if x < e], default=0)
                conds.append(f"{size} <= {e}" + (f" && {size} > {lower}" if lower else ""))
        cond = " && ".join(conds) or "true"
        lines.append(f"  if ({cond})")
        lines.append(f"    return dtype == 0 ? {f.launch}<__half, {v.index}>({args})")
        lines.append(f"                      : {f.launch}<__nv_bfloat16, {v.index}>({args});")
    lines.append("  return NAPKIN_ERR_SIZE;")
    lines.append("}")
    return lines


__all__ = ["cfg_structs", "vec_conditions", "launcher", "extern_entry"]
