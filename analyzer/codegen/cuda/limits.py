"""What the GPU allows one block of a generated CUDA kernel, read off its profile (analyzer.hardware).

analyzer.codegen.generate builds the limits from the profile the file is generated for and passes them
with the file (KernelFile.cuda_limits); the variant chooser (analyzer.codegen.cuda.variants) fits each
configuration within them. What is a choice of the renderer rather than of the GPU (rows a block,
columns of a register tile, the chunk, stages) stays a constant there.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.common.errors import NapkinError
from analyzer.hardware import Profile

WARP = 32   # threads of a warp: the mma.sync fragments, ldmatrix and the prelude's shuffles assume 32


@dataclass(frozen=True)
class CudaLimits:
    """The GPU's limits a CUDA kernel's variants must respect."""

    smem_per_block: int          # bytes of shared memory one block may use (its opt-in maximum)
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
        return cls(smem_per_block=int(profile.level("smem").block_capacity_bytes),
                   registers_per_thread=profile.registers.per_thread_max,
                   threads_per_block=profile.threads.per_block_max)


__all__ = ["CudaLimits", "WARP"]
