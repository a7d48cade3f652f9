"""Several GPUs as one more level (Appendix A.2.3): what crosses the link under context parallelism.

A.2.3 treats GPUs joined by a link as a cross-transfer level x whose children are GPUs. With the data
already distributed, its rough model has the GPUs exchange H*(a, M_c) - H*(a, N M_c): nothing wherever
one GPU could hold the whole problem, "a rough model, which can be refined by aligning the group sizes
used in diagrams". This module is that refinement for context parallelism. The query axis of an
attention diagram is group-partitioned over the N GPUs (g = a_q / N: each holds one slice of the
queries) and its key axis stream-partitioned in N chunks (each holds one chunk of the keys and values
and streams the others from the GPUs that hold them). Section 2's counting rules give the level's
transfers H = N_g H_g at that partition (analyzer.model.cost). Every array is already distributed, each
GPU holding 1/N of it, so what crosses the link is H less each array once: for attention
(N - 1)(|K| + |V|), every GPU receiving every other GPU's keys and values.

Block skipping does not apply at this level: under a causal mask torch's round-robin layout gives each
GPU queries from both ends of the sequence, so every chunk of keys reaches every GPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from analyzer.common.errors import NapkinError
from analyzer.common.expr import symbol
from analyzer.diagram.compiled import Diagram, Partition
from analyzer.diagram.interface import Attention, interface
from analyzer.model.cost import level_cost
from analyzer.model.fusion import schedule

DEVICES = symbol("N_c")          # the GPUs the level joins (the paper's N_c of Theorem 3)


@dataclass(frozen=True)
class CrossTransfers:
    """The multi-GPU level's transfers, in values and bytes, as expressions in the diagram's sizes and
    N_c: `level` is H at the device partition, `cross` what crosses the link in all (H less each array
    once), `per_device` what one GPU receives (cross / N_c)."""

    roles: Attention
    level: sympy.Expr
    cross: sympy.Expr
    cross_bytes: sympy.Expr

    @property
    def per_device(self) -> sympy.Expr:
        return sympy.simplify(self.cross / DEVICES)

    @property
    def per_device_bytes(self) -> sympy.Expr:
        return sympy.simplify(self.cross_bytes / DEVICES)


def attention_roles(d: Diagram, *, field: str = "--devices") -> Attention:
    """The roles of an attention diagram of one kernel: the shape context parallelism splits."""
    roles = interface(d)
    if not isinstance(roles, Attention) or len(d.kernels) != 1:
        raise NapkinError(f"{d.name} is not attention in one kernel: context parallelism splits an attention "
                          "kernel's queries and keys across GPUs", file=d.source, field=field,
                          hint="model several GPUs with an attention diagram (napkin diagrams list)")
    return roles


def cross_transfers(d: Diagram, roles: Attention | None = None) -> CrossTransfers:
    """The transfers of the multi-GPU level at the device partition (see the module). `roles`: those of
    the diagram `d` was weaved from (batch and heads added), where it is a weaved one."""
    roles = roles or attention_roles(d)
    kernel = d.kernels[0]
    level = next(lv for lv in reversed(d.levels) if lv in kernel.partitions)
    taken = {x.name for x in d.size_symbols} | {x.name for k in d.kernels for p in k.partitions.values()
                                                for x in p.symbols}
    g, s = (symbol(_fresh(name, taken)) for name in ("g_gpu", "s_gpu"))
    ring = schedule(d, kernel, level, Partition(((roles.seq_q, g),), (roles.seq_k, s)))
    cost = level_cost(dataclasses.replace(ring, skip=None))      # every chunk reaches every GPU
    at_devices = {g: d.size(roles.seq_q) / DEVICES}
    arrays = (*ring.loads, *ring.saves)
    size = {n: sympy.Mul(*(d.size(a) for a in d.arrays[n].axes)) for n in arrays}
    once = sympy.Add(*size.values())
    once_bytes = sympy.Add(*(size[n] * d.arrays[n].bytes_per_value for n in arrays))
    h = sympy.expand(cost.transfers.subs(at_devices))
    return CrossTransfers(roles, h, sympy.factor(sympy.expand(h - once)),
                          sympy.factor(sympy.expand(cost.transfer_bytes.subs(at_devices) - once_bytes)))


def _fresh(name: str, taken: set[str]) -> str:
    """`name`, or it with underscores appended until no size or tile of the diagram has it."""
    while name in taken:
        name += "_"
    return name
