"""The diagram file format (diagrams/*.yaml), as pydantic models.

A file says what a neural circuit diagram says (paper Section 2): axes with sizes, the arrays that enter
(data-type columns, with element type and level), the functions applied column by column (primitives
weaved over extra axes, composed left to right, concatenated side by side), the outputs, the levels of
the hierarchy, and how each fused kernel is relabelled per level: group partitions (tiling, Section
2.3) and a stream partition (streaming, Section 2.4). docs/diagram-format.md is the reference.

These models check the file's form only; analyzer.diagram.graph checks its meaning.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator

from analyzer.common.base import DType, Strict
from analyzer.common.expr import MAX_SIZE
from analyzer.diagram.spec import ConfigurationSpec

SizeText = Union[int, str]


def _whole(value: Any) -> Any:
    if isinstance(value, float | bool):
        raise ValueError("sizes are whole numbers or size expressions")
    return value


class AxisSpec(Strict):
    """An axis (a wire label). Its size is a symbol named like the axis unless `size` says otherwise."""

    size: SizeText | None = Field(None, description="Size expression over size symbols, e.g. `q` or "
                                  "`h*d`; default: a symbol named like the axis.")
    default: int | None = Field(None, le=MAX_SIZE, description="Default number for the axis's own "
                                "size symbol.")
    doc: str = ""

    @field_validator("size", "default", mode="before")
    @classmethod
    def _whole_numbers(cls, value: Any) -> Any:
        return _whole(value)


class ArraySpec(Strict):
    """An array entering the diagram: its axes (last = contiguous in memory), element type and level."""

    axes: list[str]
    dtype: DType | None = Field(None, description="Element type; default: the diagram's dtype.")
    level: str | None = Field(None, description="Level (colour) where the array lives; default: the "
                              "top level.")
    doc: str = ""


def _axes_alone(value: Any) -> Any:
    """`Q: [q, d]` is short for `Q: {axes: [q, d]}`."""
    return {"axes": value} if isinstance(value, list) else value


# An input as a file writes it: its axes alone, or the long form. The JSON Schema says both, so that an
# editor validating against `napkin schema diagram` takes the shorthand every shipped diagram uses.
ArrayEntry = Annotated[ArraySpec, BeforeValidator(_axes_alone, json_schema_input_type=list[str] | ArraySpec)]


class OpSpec(Strict):
    """One function column entry: a primitive applied to named arrays, weaved over the extra axes.

    The output array is named like the op. Its axes are the primitive's own output axes plus the weave;
    an input that lacks a weaved axis is copied to every index of it (Section 2.1, Figure 5).
    """

    name: str
    primitive: str
    inputs: list[str]
    output: list[str] = Field(description="Axes of the output array, in memory order.")
    over: str | None = Field(None, description="The axis the primitive acts on: contracted, reduced "
                             "or normalised.")
    scale: SizeText | float | None = Field(None, description="Constant factor (e.g. `d**-0.5`).")
    offset: int | float | str | None = Field(None, description="shift: the constant added to every item "
                                             "(e.g. `1e-6`, RMSNorm's epsilon); a number.")
    cap: int | float | str | None = Field(None, description="softcap: the bound of cap tanh(v / cap) (e.g. `50`, "
                                          "Gemma 2's attention scores); a positive number.")
    query: str | None = Field(None, description="causal_mask, window_mask, band_mask, alibi: the query axis.")
    key: str | None = Field(None, description="causal_mask, window_mask, band_mask, alibi: the key axis.")
    window: int | float | str | None = Field(None, description="window_mask: how many keys a query sees, its own "
                                     "and those before it (e.g. `4096`, Mistral's and Gemma 2's sliding "
                                     "window); a whole number.")
    before: int | float | str | None = Field(None, description="band_mask: how many keys before its own a query "
                                             "sees (e.g. `256`); a whole number, at least 0. Left out: all.")
    after: int | float | str | None = Field(None, description="band_mask: how many keys after its own a query "
                                            "sees (e.g. `256`); a whole number, at least 0. Left out: all.")
    weave: list[str] | None = Field(None, description="Optional: the weaved axes, checked against "
                                    "the ones the shapes imply.")
    dtype: DType | None = None
    accumulate: DType | None = Field(None, description="Element type of a streamed accumulator.")
    doc: str = ""


class ConcatSpec(Strict):
    """Concatenation: functions stacked in one column, acting side by side (Figure 3)."""

    concat: list[OpSpec] = Field(min_length=1)


def _op_kind(value: Any) -> str:
    return "<concat>" if isinstance(value, dict) and "concat" in value else "<op>"


OpEntry = Annotated[Union[Annotated[OpSpec, Tag("<op>")], Annotated[ConcatSpec, Tag("<concat>")]],
                    Discriminator(_op_kind)]


class PartitionSpec(Strict):
    """The relabelling of one kernel at one level: axis -> size symbol."""

    group: dict[str, str] = Field(default_factory=dict, description="Group partitions (tiling) of "
                                  "weaved axes: axis -> group-size symbol, e.g. {q: g_q}.")
    stream: dict[str, str] = Field(default_factory=dict, description="At most one stream partition "
                                   "of a streamable axis: axis -> stream-size symbol, e.g. {x: s_x}.")


class KernelSpec(Strict):
    """A fused kernel: ops executed together, intermediates kept at the lower levels."""

    name: str
    ops: list[str] | None = Field(None, description="The ops fused in this kernel; default: all.")
    partition: dict[str, PartitionSpec] = Field(default_factory=dict,
                                                description="Level -> relabelling at that level.")
    doc: str = ""


class DiagramSpec(Strict):
    """A neural circuit diagram of an algorithm, with its levels and relabellings."""

    name: str
    title: str = ""
    paper: str = Field("", description="Where the paper draws it, e.g. `Figure 21`.")
    doc: str = ""
    dtype: DType = "fp16"
    levels: list[str] = Field(default_factory=lambda: ["gmem", "smem"],
                              description="Levels (colours), highest first.")
    axes: dict[str, AxisSpec | None]
    inputs: dict[str, ArrayEntry]
    ops: list[OpEntry] = Field(min_length=1)
    outputs: list[str] = Field(min_length=1)
    kernels: list[KernelSpec] | None = Field(None, description="Fused kernels; default: one kernel "
                                             "holding every op, not partitioned.")
    configurations: list[ConfigurationSpec] = Field(
        default_factory=list, description="Named hardware configurations of the kernels (Section 5; "
        "napkin configure --config NAME).")
