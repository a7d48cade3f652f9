"""The identifiers of one generated Triton kernel: its locals, and its parameters in order, claimed first
so that the kernel, its launcher and the CONFIGS table (analyzer.codegen.triton.configs) name them alike."""

from __future__ import annotations

from analyzer.codegen.names import PlanIds, Scope
from analyzer.codegen.render import lse_of, pointers, runtime_axes, scaled_ops
from analyzer.config.plan import KernelPlan

# What a kernel writes as it is: its own locals, and the module's names it uses (analyzer.codegen.names)
KERNEL_LOCALS = ("ELEM", "pid", "band", "first", "rows", "rest", "lo", "whole", "hi", "mid", "start", "t", "p", "alpha",
                 "m_new", "m_use", "tl", "triton")


class KernelIds(PlanIds):
    """The identifiers of one Triton kernel, by what they name: its parameters are claimed first, in
    order, so that the launcher and the CONFIGS table (analyzer.codegen.triton.configs) name them alike."""

    def __init__(self, p: KernelPlan, module: Scope, lse: bool = True) -> None:
        super().__init__(Scope(KERNEL_LOCALS, parent=module))
        self.p = p
        # the output whose rows' log-sum-exp it can write, and their axes (`lse`: where the wrapper asks)
        self.lse = lse_of(p) if lse else None
        self.params = self._signature()

    def whole(self, axis: str) -> str:
        """The constexpr holding a whole axis's size."""
        return self.scope("SIZE_{}", axis, case="upper")

    def band(self) -> str:
        """The constexpr holding a banded block order's rows per band (plan.band_rows)."""
        return self.scope("BAND_{}", self.p.banded[0], case="upper")

    def even(self) -> str | None:
        """The constexpr that says the stream's size is a multiple of its chunk, so that the kernel has no
        edge chunks: None where the kernel has no stream, or skips blocks (its edge pass holds the
        diagonal, whatever the size)."""
        st = self.p.stream
        if st is None or self.p.schedule.skip is not None:
            return None
        return self.scope("EVEN_{}", st.name, case="upper")

    def _signature(self) -> list[tuple[str, str]]:
        """The kernel's parameters, (name, comment), in order."""
        p = self.p
        params = [(self.ptr(a), f"{a}: [{', '.join(p.axes_of(a))}]") for a in pointers(p)]
        params += [(self.size(a), "") for a in runtime_axes(p)]
        params += [(self.stride(a, x), "") for a in pointers(p) for x in p.axes_of(a)]
        params += [(self.scale(o.name), f"{o.name}: {o.applied.scale}") for o in scaled_ops(p)]
        params += [(f"{self.whole(d.axes[0])}: tl.constexpr", "") for d in p.wholes]
        params += [(f"{t}: tl.constexpr", "") for t in self.tiles()]
        if p.banded:
            params.append((f"{self.band()}: tl.constexpr", "row tiles per band of the block order"))
        params += [(f"{self.block(d.name)}: tl.constexpr", "") for d in p.dims]
        if self.even():
            params.append((f"{self.even()}: tl.constexpr", "the stream's size a multiple of its chunk: no edge chunks"))
        if self.lse is not None:      # where the rows' log-sum-exp goes, when the call asks for it
            out, axes = self.lse
            params.append((self.lse_ptr(), f"the rows' log-sum-exp of {out}: [{', '.join(axes)}], float32"))
            params += [(self.lse_stride(a), "") for a in axes]
            params.append((f"{self.store_lse()}: tl.constexpr", "whether the call asks for the log-sum-exp"))
        return params

    def lse_ptr(self) -> str:
        return self.scope("lse_ptr")

    def lse_stride(self, axis: str) -> str:
        return self.scope("stride_lse_{}", axis)

    def store_lse(self) -> str:
        return self.scope("STORE_LSE")

    def tiles(self) -> tuple[str, ...]:
        return tuple(self.tile(a) for d in self.p.groups for a in d.axes)


__all__ = ["KERNEL_LOCALS", "KernelIds"]
