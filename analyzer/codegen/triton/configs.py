"""The configurations of a generated Triton module: the CONFIGS table (one configuration per kernel and
head dim, or a table of them by problem size with its lookup), CONFIG_KEYS, and the check of the
configuration a call passes as `config=` (`_per_kernel`), with the wrapper's lines about it.

A configuration names the kernel's constexprs as the kernel does (TILE_Q, BLOCK_X: analyzer.codegen.triton
KernelIds) and adds num_warps and num_stages; analyzer.codegen.triton.module writes the rest of the module.
"""

from __future__ import annotations

import math

from analyzer.codegen.escape import py_str
from analyzer.codegen.helpers_text import PER_KERNEL_HELPER
from analyzer.codegen.pymodule import sized_helpers
from analyzer.codegen.triton import kernel as tr
from analyzer.diagram.interface import Attention


def padded(k, dim) -> bool:
    """Whether group dimension `dim` of kernel `k` has a tile product that is no power of two in some
    configuration the file carries: its kernel then masks the padding of its power-of-two block."""
    sizes = k.plan.schedule.partition.group_sizes
    for c in k.every_choice:
        product = math.prod(c.tiles.get(sizes[a].name, 1) for a in dim.axes)
        if product & (product - 1):
            return True
    return False


def names(k, ids: tr.KernelIds) -> dict[str, str]:
    """Partition symbol -> the name of its entry in a configuration (g_q -> TILE_Q, s_x -> BLOCK_X)."""
    p = k.plan
    sizes = p.schedule.partition.group_sizes
    out = {sizes[a].name: ids.tile(a) for dim in p.groups for a in dim.axes}
    if p.stream is not None:
        out[p.schedule.partition.stream[1].name] = ids.block(p.stream.name)
    return out


def _entry(k, c, ids: tr.KernelIds) -> str:
    """One configuration as the launcher reads it: tile constexprs by name, warps, stages."""
    entry = {name: c.tiles.get(symbol, 1) for symbol, name in names(k, ids).items()}
    entry["num_warps"] = c.num_warps
    entry["num_stages"] = c.num_stages
    return "{" + ", ".join(f"{py_str(n)}: {int(v)}" for n, v in entry.items()) + "}"


def configs(g, ids: dict[str, tr.KernelIds]) -> str:
    """The module's CONFIGS table, CONFIG_KEYS, the by-size lookup (_nearest, _sized) where a kernel has a
    table, and _per_kernel. `ids`: each kernel's identifiers, by plan name."""
    sized = any(k.tables for k in g.kernels)
    lines = ["# The configuration of each kernel (napkin sweep's first), keyed by head dim where it has one"]
    if sized:
        first = next(t for k in g.kernels for t in k.tables.values())
        lines += ["# An entry with 'by_size' is the model's first choice per problem size: a row per length in",
                  *(["# LENGTHS (the sequence length), a column per batch x query heads in INSTANCES, each an "
                     "index into",
                     "# its 'configs'; a call takes the nearest grid point (log2, analyzer.config.by_size)."]
                    if isinstance(g.roles, Attention) else
                    ["# LENGTHS (the default sizes scaled alike, by their geometric mean), a column per instance",
                     "# count in INSTANCES (one), each an index into its 'configs'; a call takes the nearest grid",
                     "# point (log2, analyzer.config.by_size)."]),
                  f"LENGTHS = {first.lengths!r}", f"INSTANCES = {first.instances!r}"]
    lines.append("CONFIGS = {")
    for k in g.kernels:
        kid = ids[k.plan.name]
        lines.append(f"    {py_str(k.plan.name)}: {{")
        for key, c in k.choices.items():
            table = k.tables.get(key)
            if table is None:
                lines.append(f"        {key!r}: {_entry(k, c, kid)},")
                continue
            lines.append(f"        {key!r}: {{")
            lines.append("            'configs': (")
            lines += [f"                {_entry(k, t, kid)},  # {chr(65 + i)}"
                      for i, t in enumerate(table.configs)]
            lines.append("            ),")
            lines.append("            'by_size': (")
            lines += [f"                {row!r},  # length {n}" for n, row in zip(table.lengths, table.cells,
                                                                             strict=True)]
            lines.append("            ),")
            lines.append("        },")
        lines.append("    },")
    lines.append("}")
    lines.append("CONFIG = CONFIGS  # the same, under the short name")
    lines += _config_keys(g, ids)
    if sized:
        lines += sized_helpers(g)
    lines += ["", "", *PER_KERNEL_HELPER.splitlines()]
    return "\n".join(lines) + "\n\n"


def keys(k, ids: tr.KernelIds) -> dict[str, bool]:
    """The keys of kernel `k`'s configuration, each True where a call's value must be a power of two: a
    tile of a dimension the kernel does not pad (its block is the tiles' product), a stream's chunk (a
    tl.arange extent) and num_warps; num_stages may be any positive int."""
    p = k.plan
    out = {ids.tile(a): not padded(k, dim) for dim in p.groups for a in dim.axes}
    if p.stream is not None:
        out[ids.block(p.stream.name)] = True
    return {**out, "num_warps": True, "num_stages": False}


def _config_keys(g, ids: dict[str, tr.KernelIds]) -> list[str]:
    lines = ["# What a call's config= gives a kernel: a dict with these keys (those of its CONFIGS entries),",
             "# True where the value must be a power of two (a block's extent in tl.arange, the warps)",
             "CONFIG_KEYS = {"]
    for k in g.kernels:
        flags = keys(k, ids[k.plan.name])
        lines.append(f"    {py_str(k.plan.name)}: {{"
                     + ", ".join(f"{py_str(key)}: {flag}" for key, flag in flags.items()) + "},")
    lines.append("}")
    return lines
