"""The Triton backend: each kernel plan as a @triton.jit function (kernel), the configurations table
(configs), and the module with its launchers and wrapper (module)."""

from analyzer.codegen.triton.kernel import RENDERED, SPELLING, KernelIds, render_kernel
from analyzer.codegen.triton.module import (
           config_keys,
           config_names,
           triton_ids,
           triton_module,
)

__all__ = ["RENDERED", "SPELLING", "KernelIds", "config_keys", "config_names", "render_kernel", "triton_ids",
           "triton_module"]
