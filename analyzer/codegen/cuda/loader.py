"""The Python loader beside each .cu file: it compiles the .cu with nvcc on first use (cached by source
hash), loads it with ctypes and exposes the same wrapper and checks as the Triton module.

Its fixed text is loader_template.py (package data, copied section by section); generated here are only
what depends on the diagram: the launchers' signatures, the configurations, one launcher per kernel
and the wrapper (analyzer.codegen.pymodule's, on CUDA devices only). Diagram names reach the loader only as
string literals (analyzer.codegen.escape) and identifiers claimed from its scope (analyzer.codegen.names).
"""

from __future__ import annotations

import ast
import re
from importlib import resources

from analyzer.codegen.cuda.mma import MmaKernel
from analyzer.codegen.cuda.variants import WHOLE_EXTENTS
from analyzer.codegen.escape import py_comment, py_doc, py_str
from analyzer.codegen.names import PlanIds, Scope
from analyzer.codegen.pymodule import (
    MODULE_GLOBALS,
    checked_python,
    guarded_imports,
    header,
    module_ids,
    wrapper,
)
from analyzer.codegen.render import loaded, pointers, scaled_ops
from analyzer.common.errors import NapkinError
from analyzer.diagram.interface import Attention

TEMPLATE = resources.files(__package__).joinpath("loader_template.py").read_text(encoding="utf-8")
_MARK = re.compile(r"^# napkin-loader: (\w+)$", re.M)


def _sections(text: str) -> dict[str, str]:
    """The template's sections by name, without the blank lines around them (the note before the first
    marker is left out)."""
    parts = _MARK.split(text)
    sections = {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts), 2)}
    if list(sections) != ["imports", "torch", "signatures", "runtime"]:
        raise NapkinError(f"internal: loader_template.py has sections {list(sections)}, not imports, "
                          "torch, signatures and runtime")
    return sections


def _bound(text: str) -> tuple[str, ...]:
    """The names Python `text` binds at its top level: imports, assignments and functions."""
    names: list[str] = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return tuple(names)


SECTIONS = _sections(TEMPLATE)


def _configs(writers, ids) -> str:
    """CONFIGS: each kernel's variants as CUDA runs them, and napkin's configuration they came from."""
    lines = ["# The configuration of each kernel as CUDA runs it (napkin's own under 'napkin'), keyed by",
             "# head dim where it has one",
             "CONFIGS = {"]
    for k, w in writers:
        p = k.plan
        sizes = p.schedule.partition.group_sizes
        tile, block = ids.kernels[p.name].tile, ids.kernels[p.name].block
        lines.append(f"    {py_str(p.name)}: {{")
        by_key: dict = {}
        for v in w.variants:
            by_key.setdefault(v.key, []).append(v)
        for key, variants in by_key.items():
            c = k.choices[key]
            napkin = {tile(a): c.tiles.get(sizes[a].name, 1) for d in p.groups for a in d.axes}
            if p.stream is not None:
                napkin[block(p.stream.name)] = c.tiles[p.schedule.partition.stream[1].name]
            napkin["num_warps"] = c.num_warps
            napkin["num_stages"] = c.num_stages
            entries = []
            for v in variants:
                e = {tile(a): t for a, t in v.tiles}
                if p.stream is not None and v.chunk is not None:
                    e[block(p.stream.name)] = v.chunk
                e["num_warps"] = v.warps
                e["num_stages"] = v.stages
                if isinstance(w, MmaKernel):
                    e["rows"] = v.extent(w.row.name)
                    e["smem_bytes"] = v.smem
                if v.wholes and len(variants) > 1:
                    e["extents"] = {d: x for d, x in v.wholes}
                entries.append(e)
            entry = dict(entries[0])
            if len(entries) > 1:
                entry = {"variants": entries}
            entry["napkin"] = napkin
            lines.append(f"        {key!r}: {entry!r},")
        lines.append("    },")
    lines.append("}")
    lines.append("CONFIG = CONFIGS  # the same, under the short name")
    return "\n".join(lines) + "\n"


def _launchers(writers, ids) -> list[str]:
    """One Python launcher per kernel: the arguments of its extern \"C\" entry, in order."""
    out = []
    for k, w in writers:
        p = k.plan
        ptrs = pointers(p)
        first = next((a for a in ptrs if a in loaded(p)), ptrs[0])
        lines = [f"def {ids.launch[p.name]}(t, size, stride, scale):",
                 '    """' + py_doc(f"Kernel {p.name!r} ({w.fn} in the .cu): t, size, stride, scale map names "
                                  "to tensors and numbers.") + '"""']
        if isinstance(w, MmaKernel):
            key_dim = p.dim_of.get(k.key_axis) if k.key_axis else None
            for d in p.wholes:
                if d.name != key_dim:
                    axis = py_str(d.axes[0])
                    why = py_str(f"; the CUDA kernel {p.name!r} holds it whole in registers, at most "
                                 f"{max(WHOLE_EXTENTS)}")
                    lines.append(f"    if size[{axis}] > {max(WHOLE_EXTENTS)}:")
                    lines.append(f"        raise ValueError({py_str('axis ' + d.axes[0] + ' has size ')} "
                                 f"+ str(size[{axis}]) + {why})")
        lines.append(f"    device = t[{py_str(first)}].device")
        lines.append("    lib = _library(device)")
        args = [f"t[{py_str(a)}].data_ptr()" for a in ptrs]
        args += [f"size[{py_str(a)}]" for a in w.axes]
        args += [f"stride[{py_str(a)}][{py_str(x)}]" for a in ptrs for x in p.axes_of(a)]
        args += [f"scale[{py_str(o.name)}]" for o in scaled_ops(p)]
        args += [f"_DTYPE_CODE[t[{py_str(first)}].dtype]", "_stream(device)"]
        lines.append(f"    code = lib.{w.fn}(")
        lines += [f"        {a}," for a in args]
        lines.append("    )")
        lines.append(f"    _check(lib, code, {py_str(p.name)})")
        out += lines + ["", ""]
    return out


def _wrapper(g, ids) -> list[str]:
    """The Triton module's wrapper (same checks, same call), on CUDA devices only."""
    lines = wrapper(g, ids)
    out: list[str] = []
    i = 0
    replaced = False
    while i < len(lines):
        line = lines[i]
        if "TRITON_INTERPRET" in line and line.strip().startswith("if "):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}if device.type != "cuda":')
            out.append(f'{indent}    raise ValueError(f"the tensors are on {{device}}; this kernel runs on a '
                       'CUDA GPU only "')
            out.append(f'{indent}                     "(compiled with nvcc; on the CPU use the Triton '
                       'backend under TRITON_INTERPRET=1)")')
            i += 1
            depth = 0
            while i < len(lines):
                depth += lines[i].count("(") - lines[i].count(")")
                i += 1
                if depth <= 0:
                    break
            replaced = True
            continue
        out.append(line)
        i += 1
    if not replaced:   # the wrapper changed: put the check after the device is known
        at = next(j for j, x in enumerate(out) if x.strip().startswith("device = "))
        indent = out[at][: len(out[at]) - len(out[at].lstrip())]
        out[at + 1:at + 1] = [f'{indent}if device.type != "cuda":',
                              (f'{indent}    raise ValueError(f"the tensors are on {{device}}; this kernel '
                               'runs on a CUDA GPU only")')]
    if isinstance(g.roles, Attention) and not any(k.key_axis for k in g.kernels):
        # no kernel holds the head dim whole: every head dim runs
        out = [x.replace("if head_dim not in HEAD_DIMS:", "if HEAD_DIMS and head_dim not in HEAD_DIMS:")
               for x in out]
    return out


# What the loader defines or imports itself, besides what it claims per diagram: the module's globals and
# every name the template's text binds at its top level
LOADER_GLOBALS = (*MODULE_GLOBALS, *_bound(TEMPLATE))


def _config_ids(plan, scope: Scope) -> PlanIds:
    """The names of a kernel's configuration entries in CONFIGS (TILE_Q, BLOCK_X), spelt as the Triton
    module spells them, in a scope of their own under the loader's."""
    return PlanIds(Scope((), parent=scope))


def wrapper_name(g) -> str:
    """The loader's function for a call (the .cu file's header names it too)."""
    return module_ids(g, LOADER_GLOBALS, _config_ids).wrapper


def loader_text(g, writers) -> str:
    """The Python loader of generated file `g` whose kernels are `writers` ((kernel, writer) pairs)."""
    ids = module_ids(g, LOADER_GLOBALS, _config_ids)
    signatures = {w.fn: (len(pointers(k.plan)), len(w.axes) + sum(len(k.plan.axes_of(a))
                                                                  for a in pointers(k.plan)),
                         len(scaled_ops(k.plan)))
                  for k, w in writers}
    out = ['"""' + py_doc(f"{g.diagram.name}: CUDA kernels generated by napkin from {g.source_file}; this "
                          "loader compiles the .cu file next to it with nvcc on first use (cached by source "
                          "hash) and calls it.") + '"""', ""]
    out += ["# " + py_comment(line) if line else "#" for line in header(g, ids.wrapper)]
    out += [("# Backend: CUDA C++ in the .cu file of the same name (see its header for how CUDA runs "
             "each configuration)."), ""]
    out.append(SECTIONS["imports"])
    out += ["", *guarded_imports(SECTIONS["torch"].splitlines(), "torch"), ""]
    out.append("_SIGNATURES = {  # launcher -> (pointers, int64 sizes and strides, float scales)")
    for fn, sig in signatures.items():
        out.append(f"    {py_str(fn)}: {sig!r},")
    out.append("}")
    out += ["", SECTIONS["runtime"], "", ""]
    out.append(_configs(writers, ids))
    out += _launchers(writers, ids)
    out += _wrapper(g, ids)
    return checked_python("\n".join(out).rstrip() + "\n", g.source_file)


__all__ = ["loader_text", "wrapper_name", "LOADER_GLOBALS", "SECTIONS", "TEMPLATE"]
