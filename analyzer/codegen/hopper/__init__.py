"""The Hopper backend: streamed attention as a warp-specialised Gluon kernel for sm_90a (kernel) and its
module with configurations, TMA descriptors and the torch wrapper (module)."""

from analyzer.codegen.hopper.module import hopper_module

__all__ = ["hopper_module"]
