"""The .cu file of a generated diagram: its header, the prelude, and each kernel as its renderer writes
it (analyzer.codegen.cuda.mma for kernels with contractions, analyzer.codegen.cuda.point for the others),
every identifier claimed from the file's scope or a kernel's beneath it (analyzer.codegen.cuda.ids)."""

from __future__ import annotations

from dataclasses import replace

from analyzer.codegen.cuda.common import check_renderable
from analyzer.codegen.cuda.ids import FILE_RESERVED, CudaIds, Functions, fixed
from analyzer.codegen.cuda.loader import wrapper_name
from analyzer.codegen.cuda.mma import MmaKernel
from analyzer.codegen.cuda.point import PointKernel
from analyzer.codegen.cuda.prelude import PRELUDE, file_code
from analyzer.codegen.escape import cpp_comment
from analyzer.codegen.names import Scope
from analyzer.codegen.pymodule import header
from analyzer.config.kernels import KernelConfigs
from analyzer.config.plan import next_pow2


def _renderer(k) -> type[MmaKernel] | type[PointKernel]:
    check_renderable(k.plan)
    if any(o.primitive.contraction for o in k.plan.schedule.ops):
        return MmaKernel
    return PointKernel


def writers(g) -> list[tuple]:
    """Each kernel with its writer, every identifier claimed: the file's scope first reserves what every
    kernel writes itself, then claims each kernel's extern "C" entry (the loader's names for them come
    first), then its other functions; each kernel's own identifiers come from a scope beneath."""
    file = Scope(FILE_RESERVED, cpp=True)
    renderers = [(k, _renderer(k)) for k in g.kernels]
    own = {k.plan.name: fixed(g, k, cls) for k, cls in renderers}
    for names in own.values():
        file.reserve(*names)
    entries = {k.plan.name: file("napkin_{}_{}", g.diagram.name, k.plan.name) for k in g.kernels}
    out = []
    for k, cls in renderers:
        name, entry = k.plan.name, entries[k.plan.name]
        kernel = file.claim(("kernel", name), f"{entry}_kernel")
        if cls is MmaKernel:
            fns = Functions(entry, kernel, file.claim(("cfg", name), f"{entry}_cfg"),
                            file.claim(("launch", name), f"{entry}_launch"))
        else:
            fns = Functions(entry, kernel)
        out.append((k, cls(g, k, fns, CudaIds(k.plan, Scope(own[name], parent=file, cpp=True)))))
    return out


def _describe(k, w) -> list[str]:
    """Header lines: each kernel's configuration as CUDA runs it."""
    p = k.plan
    lines = []
    for v in w.variants:
        at = f"{k.key_axis}={v.key}: " if v.key is not None else ""
        wh = "".join(f", {d} extent {e}" for d, e in v.wholes if not (k.key_axis and d == p.dim_of[k.key_axis]))
        if isinstance(w, MmaKernel):
            tiles = ", ".join(f"{w.n.tile(a)}={t}" for a, t in v.tiles)
            chunk = f", {w.n.block(p.stream.name)}={v.chunk}" if p.stream is not None else ""
            text = (f"  CUDA {at}rows = {v.extent(w.row.name)} ({v.warps} warps x {16 * v.ma}), "
                    f"{tiles}{chunk}{wh}, "
                    f"{v.stages} stage{'s' if v.stages != 1 else ''}, {v.smem / 1024:.0f} KB shared memory")
        else:
            tiles = ", ".join(f"{w.n.tile(a)}={t}" for a, t in v.tiles)
            r = w.r.axes[0] if w.r is not None else "nothing"
            text = (f"  CUDA {at}{v.warps} warps striding along {r}" + (f", {tiles}" if tiles else "")
                    + " (no tensor cores: no contraction)")
        lines.append(text)
        if v.clamps:
            lines.append("    clamped: " + "; ".join(v.clamps))
    return lines


def cuda_source(g) -> tuple[str, list]:
    kernel_writers = writers(g)
    kernels = [(k, w, w.render()) for k, w in kernel_writers]
    out = ["// " + cpp_comment(line) if line else "//" for line in header(g, wrapper_name(g), "C++")]
    out.append("// CUDA realisation (analyzer.codegen.cuda): mma.sync.m16n8k16 tensor cores (fp16 and bf16 "
               "in, fp32 accumulate) on sm_80+,")
    out.append("// two m16n8k8 (fp16 only) on sm_75; shared-memory tiles in 16-byte cp.async loads "
               "into `stages` buffers on sm_80+ (plain loads, one buffer, on sm_75);")
    out.append("// a warp owns one or two m16 tiles (16 or 32 rows) of a block; online softmax in registers; "
               "launchers return 0 or a cudaError_t (negative: napkin_error_string).")
    for k, w, _ in kernels:
        out.append("// " + cpp_comment(f"Kernel {k.plan.name!r} -> {w.fn}:"))
        out += ["//" + cpp_comment(line) for line in _describe(k, w)]
    out.append("")
    out.append(PRELUDE.strip("\n"))
    out.append("")
    out += file_code()
    out.append("")
    for k, _, text in kernels:
        out.append("// " + cpp_comment(f"---- kernel {k.plan.name!r} " + "-" * 60))
        out.append(text)
    return "\n".join(out).rstrip() + "\n", kernel_writers


def as_run(g) -> tuple[KernelConfigs, ...]:
    """The kernels of file `g` with the configurations its CUDA kernels run at the diagram's default
    sizes: each configuration napkin chose, as its variant clamps it (analyzer.codegen.cuda.variants:
    tiles, chunk, warps, stages, shared memory), the variant of the default extents of the axes a block
    holds whole. What the file's header predicts the time of (analyzer.codegen.generator)."""
    size = g.axis_sizes({})
    out = []
    for k, w in writers(g):
        p = k.plan
        defaults = {d.name: max(16, next_pow2(size(d.axes[0]))) for d in p.wholes}
        chosen = {}
        for key, c in k.choices.items():
            v = next((v for v in w.variants if v.key == key and all(defaults.get(d) == e for d, e in v.wholes
                                                                      if d != p.dim_of.get(k.key_axis or ""))),
                     None)
            if v is None:
                continue            # a point kernel runs one variant for every key
            tiles = {**c.tiles, **{p.schedule.partition.group_sizes[a].name: t for a, t in v.tiles}}
            if v.chunk is not None:
                tiles[p.schedule.partition.stream[1].name] = v.chunk
            chosen[key] = replace(c, tiles=tiles, num_warps=v.warps, num_stages=v.stages, report=None,
                                  smem_bytes=v.smem or None, source=f"{c.source}, as the CUDA kernel runs it")
        out.append(replace(k, choices=chosen or k.choices, tables={}))
    return tuple(out)


__all__ = ["as_run", "cuda_source", "writers"]
