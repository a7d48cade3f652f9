"""Kernel generation (`napkin kernel`): a diagram's configured kernels as Triton or CUDA source.

    configured kernels (analyzer.config.kernels) -> a backend renders each plan (triton, cuda)
    -> the file's header, configurations and wrapper (module) -> Generated, written by files
"""

from analyzer.codegen.generate import Generated, generate

__all__ = ["Generated", "generate"]
