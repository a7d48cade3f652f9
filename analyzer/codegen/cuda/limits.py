"""What the GPU allows one block of a generated CUDA kernel, read off its profile (analyzer.hardware).

analyzer.codegen.generator builds the limits from the profile the file is generated for and passes them
with the file (KernelFile.cuda_limits); the variant chooser (analyzer.codegen.cuda.variants) fits each
configuration within them. What is a choice of the renderer rather than of the GPU (rows a block,
columns of a register tile, the chunk, stages) stays a constant there.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.hardware import Profile

WARP = 32   # threads of a warp: the mma.sync fragments, ldmatrix and the prelude's shuffles assume 32

# A choice of this renderer: its kernels have no warp specialisation, so what overlaps one block's loads
# and softmax with tensor-core work is a second block resident on the SM. A variant therefore fits two
# blocks an SM where it can (a one-off trial on an H100, not kept under bench/, saw variants of one block
# an SM run up to 43 % slower; bench/cuda_limits.py measures the rule against the old 99 KB constant).
BLOCKS_PER_SM = 2


@dataclass(frozen=True)
class CudaLimits:
    """The GPU's limits a CUDA kernel's variants must respect."""

    smem_per_block: int          # bytes of shared memory one block may use (its opt-in maximum)
    smem_per_sm: int             # bytes of shared memory an SM holds, for all its blocks
    registers_per_thread: int    # 32-bit registers one thread may use
    threads_per_block: int

    @classmethod
    def of(cls, profile: Profile) -> CudaLimits:
        """The limits of `profile`: its smem level's capacity a block, its registers and threads."""
        if profile.threads.warp_size != WARP:
            raise NapkinError(f"GPU profile {profile.name} has warps of {profile.threads.warp_size} threads; "
                              f"the CUDA backend writes warps of {WARP} (mma.sync, ldmatrix, shuffles)",
                              file=profile.source, field="threads.warp_size",
                              hint="use the Triton backend (--backend triton) for this GPU")
        smem = profile.level("smem")
        return cls(smem_per_block=int(smem.block_capacity_bytes), smem_per_sm=int(smem.capacity_bytes),
                   registers_per_thread=profile.registers.per_thread_max,
                   threads_per_block=profile.threads.per_block_max)


    @property
    def smem_budgets(self) -> tuple[int, ...]:
        """The shared memory a variant may use, in the order to try: a share that keeps BLOCKS_PER_SM
        blocks resident (the SM keeps what it holds beyond a block's maximum, CUDA's per-block reserve,
        for each of them), then all a block may use."""
        reserve = max(0, self.smem_per_sm - self.smem_per_block)
        shared = min(self.smem_per_block, self.smem_per_sm // BLOCKS_PER_SM - reserve)
        return (shared, self.smem_per_block) if 0 < shared < self.smem_per_block else (self.smem_per_block,)


__all__ = ["BLOCKS_PER_SM", "CudaLimits", "WARP"]
