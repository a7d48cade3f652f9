"""The maximum analysis (Section 5.6, Table 2): how many thread groups fit, and what is left over.

Per storage level, M_TB is what one block holds once and M_WG what each tensor-core thread group
(warpgroup) adds, so a block with N groups needs M_TB + N M_WG and at most

    N_max = (M_max - M_TB) / M_WG

groups fit. At the configured N the excess is M_max - M_TB - N M_WG per block, that over N per group,
and for registers that over the group's threads per thread. A thread also cannot address more than its
own register limit (255 registers on every shipped GPU): the FlashAttention-3 sheets' "excess registers
per thread" is that limit minus a group's registers over its threads. A negative excess means the
configuration does not fit: SMEM cannot be allocated, registers spill to local memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.config.lowering import REGISTERS, SMEM, Variable
from analyzer.config.setting import Setting

REGISTER_BYTES = 4   # one 32-bit register


@dataclass(frozen=True)
class Capacity:
    """One row of Table 2."""

    storage: str
    max_bytes: float            # M_max per block
    block_bytes: int            # M_TB
    group_bytes: int            # M_WG
    n_max: float                # (M_max - M_TB) / M_WG; inf when M_WG = 0
    n: int
    excess_block: float         # at N
    excess_group: float
    excess_thread: float | None  # registers only
    thread_limit_excess: float | None = None   # registers: per-thread register limit minus use

    @property
    def fits(self) -> bool:
        tight = [self.excess_block] + ([self.thread_limit_excess]
                                       if self.thread_limit_excess is not None else [])
        return all(x >= 0 for x in tight)


def capacities(setting: Setting, variables: tuple[Variable, ...]) -> tuple[Capacity, ...]:
    p = setting.profile
    level = setting.schedule.level
    limits = {SMEM: p.level(level).block_capacity_bytes,
              REGISTERS: min(p.registers.per_block_max, p.registers.per_sm) * REGISTER_BYTES}
    threads = setting.threads_per_group
    n = setting.warpgroups
    rows = []
    for storage, limit in limits.items():
        held = [v for v in variables if v.storage == storage]
        block = sum(v.bytes for v in held if v.scope == "block")
        group = sum(v.bytes for v in held if v.scope == "group")
        n_max = (limit - block) / group if group else math.inf
        excess = limit - block - n * group
        per_thread = excess / n / threads if storage == REGISTERS else None
        cap = (p.registers.per_thread_max * REGISTER_BYTES - group / threads
               if storage == REGISTERS else None)
        rows.append(Capacity(storage, limit, block, group, n_max, n, excess, excess / n, per_thread, cap))
    return tuple(rows)


def problems(setting: Setting, variables: tuple[Variable, ...], rows: tuple[Capacity, ...]) -> list[str]:
    """Why a configuration does not fit, naming the variables that fill the level."""
    out = []
    for row in rows:
        held = sorted((v for v in variables if v.storage == row.storage), key=lambda v: -v.bytes)
        biggest = ", ".join(f"{v.name} {v.bytes} B" for v in held[:3])
        if row.excess_block < 0:
            if math.isinf(row.n_max):      # nothing per group: the block's own variables overflow
                fit = "the block's own variables alone do not fit"
            elif row.n_max >= 1:
                fit = f"at most N = {math.floor(row.n_max)} fit"
            else:
                fit = f"not even one {setting.unit} fits"
            out.append(f"{row.storage}: {row.n} x {row.group_bytes} B per {setting.unit} + "
                       f"{row.block_bytes} B per block exceeds the {row.max_bytes:.0f} B a block may "
                       f"use by {-row.excess_block:.0f} B (largest: {biggest}); {fit}")
        if row.thread_limit_excess is not None and row.thread_limit_excess < 0:
            limit = setting.profile.registers.per_thread_max
            out.append(f"registers: each thread needs {row.group_bytes / setting.threads_per_group:.0f} B, "
                       f"{-row.thread_limit_excess:.0f} B more than its {limit} registers hold: expect "
                       f"spills to local memory (largest: {biggest})")
    threads = setting.warpgroups * setting.threads_per_group
    limit = setting.profile.threads.per_block_max
    if threads > limit:
        out.append(f"threads: N = {setting.warpgroups} {setting.unit}s of {setting.threads_per_group} "
                   f"threads is {threads}, above the {limit} a block may have")
    return out
