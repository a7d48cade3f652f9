"""The Hopper attention module's by-size table as text (analyzer.config.hopper_table.HopperTable): the header's
picture of it, and the CONFIGS block the wrapper's _sized reads (analyzer.codegen.pymodule)."""

from __future__ import annotations

from analyzer.codegen.escape import py_str
from analyzer.config.hopper import HopperConfig
from analyzer.config.hopper_table import HopperTable


def configuration_lines(g, tables: dict[int, HopperTable]) -> list[str]:
    """The header's lines on the configurations: per head dim, the model's choice by problem size."""
    lines = ["  Hopper kernel: one producer warp (TMA loads into a ring of SMEM stages, mbarriers) and N "
             "consumer warpgroups (wgmma, the scores' ops in registers: " + g.hopper.scores.label() + ")"]
    for d, t in tables.items():
        lines.append(f"  d={d}: by problem size (the call's nearest keys and batch x heads), queries = keys:")
        lines.append("      keys" + "".join(f"{m:>6}" for m in t.instances))
        lines += [f"    {n:>6}" + "".join(f"{chr(65 + i):>6}" for i in plane[0])
                  for n, plane in zip(t.lengths, t.cells, strict=True)]
        if len(t.ratios) > 1:
            lines.append(f"    (queries {', '.join(map(str, t.ratios[1:]))} times the keys: CONFIGS' by_size)")
        lines += [f"    {chr(65 + i)}: {c.label()}" for i, c in enumerate(t.configs)]
    lines.append(f"  from the Hopper configurations ranked by the paper's model ({g.gpu}; analyzer.config.hopper), "
                 "or the configuration the command names")
    return lines


def _entry(c: HopperConfig) -> str:
    return "{" + ", ".join(f"{py_str(k)}: {v!r}" for k, v in c.entry().items()) + "}"


def _ratio_text(ratio: int) -> str:
    return "queries = keys" if ratio == 1 else f"queries = {ratio} x keys"


def table_lines(kernel: str, tables: dict[int, HopperTable]) -> list[str]:
    """LENGTHS, RATIOS, INSTANCES and CONFIGS up to its kernel's entry's closing brace (the caller closes
    the dict): per head dim its distinct configurations and, per key length and ratio, a row of indices."""
    first = next(iter(tables.values()))
    lines = ["# The configuration of the kernel per head dim and problem size: a block per key length in LENGTHS,",
             "# in it a row per queries a key in RATIOS, in it a column per query rows in INSTANCES (in square",
             "# problems of that length: batch x query heads where queries = keys), each an index into 'configs';",
             "# a call takes the nearest grid point (log2, analyzer.config.hopper_table.HopperTable).",
             "# WARPGROUPS: consumer warpgroups N; BLOCK_X: keys per chunk s_x; STAGES: SMEM buffers per streamed",
             "# load; OVERLAP:",
             "# none, inter (ping-pong), intra (softmax under the next QK^T) or inter+intra; SCHEDULE: tiles (a",
             "# block a tile), persistent (a block an SM, taking every grid-th tile) or prefetch (persistent,",
             "# two query buffers: a tile's first QK^T beside the tile before's last PV; ranked where fitted).",
             f"LENGTHS = {first.lengths!r}", f"RATIOS = {first.ratios!r}", f"INSTANCES = {first.instances!r}",
             "CONFIGS = {",
             f"    {py_str(kernel)}: {{"]
    for d, t in tables.items():
        lines += [f"        {d!r}: {{", "            'configs': ("]
        lines += [f"                {_entry(c)},  # {chr(65 + i)}" for i, c in enumerate(t.configs)]
        lines += ["            ),", "            'by_size': ("]
        for n, plane in zip(t.lengths, t.cells, strict=True):
            lines += [f"                (  # length {n}"]
            lines += [f"                    {row!r},  # {_ratio_text(r)}"
                      for r, row in zip(t.ratios, plane, strict=True)]
            lines += ["                ),"]
        lines += ["            ),", "        },"]
    return lines
