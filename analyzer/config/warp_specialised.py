"""What a warp-specialised Hopper kernel spends beside its tiles, whichever family it is: one producer
warpgroup issuing TMA copies and N consumer warpgroups running wgmma (the attention kernel,
analyzer.config.hopper; the contraction and chain kernels, analyzer.config.contraction and .chain).

- registers: setmaxnreg gives the producer the minimum (24 a thread) and the N consumers the rest of
  the register file, as FlashAttention-3 does; each family counts what a consumer holds and adds
  REGISTER_RESERVE for indices, addresses and loop state;
- SMEM: an mbarrier a ring stage and direction, and what Triton allocates for the partitions.
"""

from __future__ import annotations

from analyzer.hardware import Profile

PRODUCER_REGISTERS = 24       # setmaxnreg's minimum (PTX): the producer only issues TMA copies
REGISTER_RESERVE = 24         # per consumer thread beyond the tiles (analyzer.config.hopper's docstring)
MBARRIER_BYTES = 8
# What Triton allocates beside the kernel's own buffers: gl.warp_specialize hands the worker partitions
# their arguments through SMEM, and a called function keeps its scratch there; 228 to 320 bytes for the
# shipped kernel compiled for sm_90a at 1 to 4 consumers (tests/kernels/test_allocation.py), counted as
# this bound
PARTITION_BYTES = 512


def hopper_capable(profile: Profile) -> bool:
    """Whether `profile` describes a GPU with warpgroup MMA, TMA and setmaxnreg (sm_90)."""
    return profile.divisors.mma_instruction == "wgmma" and profile.threads.warp_size == 32


def register_cap(profile: Profile, warpgroups: int) -> int:
    """The kernel's registers a thread at launch (maxnreg): the register file shared by the N consumer
    warpgroups and the producer's, in steps of 8 (setmaxnreg's granule)."""
    per_thread = profile.registers.per_sm // profile.divisors.mma_threads     # one warpgroup alone
    return min(per_thread // (warpgroups + 1), profile.registers.per_thread_max + 1) // 8 * 8


def registers_per_consumer(profile: Profile, warpgroups: int) -> int:
    """What setmaxnreg gives each consumer thread: the cap of every warpgroup less the producer's 24,
    shared by the N consumers, in steps of 8, at most a thread's maximum."""
    pool = register_cap(profile, warpgroups) * (warpgroups + 1) - PRODUCER_REGISTERS
    return min(pool // warpgroups, profile.registers.per_thread_max) // 8 * 8


__all__ = ["MBARRIER_BYTES", "PARTITION_BYTES", "PRODUCER_REGISTERS", "REGISTER_RESERVE", "hopper_capable",
           "register_cap", "registers_per_consumer"]
