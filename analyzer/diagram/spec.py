"""Named configurations in diagram files (`configurations:`): how a kernel maps below SMEM.

A configuration fixes what Sections 5.3-5.6 leave free: which strategy moves tensor-core data to the
registers, how warpgroups overlap, the sizes of the configuration variables (warpgroup rows, stream
and subloop sizes, the number of warpgroups), the buffers of asynchronous loads, and element types.
The variables themselves are derived from the kernel (analyzer.config.lowering); a configuration only
sets numbers and choices. docs/configure.md is the reference.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from analyzer.common.base import DType, Strict


class ConfigurationSpec(Strict):
    """One configuration of one kernel for a GPU architecture (a column of the paper's sheets)."""

    name: str
    title: str = ""
    paper: str = Field("", description="Where the paper configures it, e.g. `Appendix B.2.4`.")
    doc: str = ""
    kernel: str | None = Field(None, description="The kernel configured; default: the first kernel "
                               "with a stream partition.")
    strategy: Literal["fragment", "staged"] = Field(
        "fragment", description="fragment: threads work on tensor-core fragments in registers "
        "(FlashAttention-2/3, Section 6); staged: tensor-core data is incoherent, so it passes "
        "through SMEM to and from the registers, in subloops (the paper's derivation, Section 5.3).")
    overlap: Literal["inter", "intra"] = Field(
        "inter", description="inter: warpgroups ping-pong, one's softmax under another's matrix "
        "multiplies; intra: one warpgroup overlaps its own softmax with its next matrix multiply and "
        "holds two score tiles (Section 6, FlashAttention-3).")
    warpgroups: PositiveInt | None = Field(None, description="N, tensor-core thread groups per block "
                                           "(warpgroups on Hopper, warps before); g = N w.")
    stages: PositiveInt = Field(2, description="Buffers per streamed load: 2 loads the next chunk "
                                "while computing on this one (the sheets' 'extra loaded').")
    rows_per_load: PositiveInt | None = Field(
        None, description="Query rows that share each loaded chunk in the throughput analysis; "
        "default g. Larger values model caching (Appendix B.0.1 sets 999 for FlashAttention-3).")
    sizes: dict[str, PositiveInt] = Field(
        default_factory=dict, description="Configuration variables and tile sizes: w_q (rows per "
        "warpgroup), s_x (stream), u_x (register subloop), c_x, c_d, e_d (staged chunks), and "
        "diagram sizes such as d.")
    dtypes: dict[str, DType] = Field(
        default_factory=dict, description="Element type per array of the kernel (e.g. Q: fp8), and "
        "`aux` for the online-softmax auxiliaries; default: the diagram's, and the op's accumulate "
        "type for accumulators, scores and auxiliaries.")
    storage: dict[str, Literal["smem", "registers"]] = Field(
        default_factory=dict, description="fragment strategy: where a loaded per-warpgroup operand "
        "lives (e.g. Q: registers, as the FlashAttention-3 sheets have it); default smem.")
