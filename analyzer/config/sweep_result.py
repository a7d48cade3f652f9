"""The result of `napkin sweep --json`: a stable, documented schema (`napkin schema sweep`).

Seconds and FLOPs as the keys say. One entry per kernel ranked; its rows fastest first, rows within
`tie` of each other ordered by the kernel's tie rule (docs/cli.md, "napkin sweep").
"""

from __future__ import annotations

from pydantic import Field

from analyzer.model.result import ContextParallelOut, ExpectedOut, Out

SCHEMA_VERSION = 1


class SweepRowOut(Out):
    """One legal configuration and its predicted time. The portable module's rows carry tiles, warps
    and stages; the Hopper kernel's carry its `configuration` (what the generated module's CONFIGS
    holds: WARPGROUPS, BLOCK_X, STAGES, OVERLAP, SCHEDULE)."""

    kernel: str
    tiles: dict[str, int] | None = Field(None, description="The lowest level's tile sizes (portable).")
    num_warps: int | None = Field(None, description="Warps per thread block (portable).")
    num_stages: int | None = Field(None, description="Buffers per streamed load (portable).")
    configuration: dict[str, int | str] | None = Field(None, description="The Hopper kernel's configuration.")
    time_s: float = Field(description="Predicted time at the sweep's sizes.")
    tensor_flops: float = Field(description="Tensor-core FLOPs of the launch (block skipping included).")
    throughput_flops_per_s: float
    bound: str = Field(description="What sets the time: compute, power or transfers (portable); tensor, "
                                   "threads or loads (Hopper).")


class SweepOut(Out):
    """The ranking of one kernel's legal configurations at one problem size."""

    diagram: str
    gpu: str
    calibrated: bool = Field(description="Whether the model's parameters were fitted to measurements.")
    model: str = Field(description="Which model timed the rows and where its parameters come from.")
    dtype: str
    kernel: str
    backend: str = Field(description="hopper (the Gluon kernel) or triton (the portable module).")
    sizes: dict[str, int] = Field(description="The weaved diagram's sizes the rows are timed at.")
    seconds: float = Field(description="How long ranking took.")
    launched: int | None = Field(description="Index in rows of what the generated module launches at these "
                                             "sizes (its by-size table's cell); None: none of them.")
    tie: float = Field(description="Relative time within which rows tie and the tie rule orders them.")
    expected: ExpectedOut | None = Field(description="The launched row's time, as napkin analyze states it.")
    rows: list[SweepRowOut] = Field(description="Every legal configuration, the model's choice first.")


class SweepReport(Out):
    schema_version: int = SCHEMA_VERSION
    napkin_version: str
    sweeps: list[SweepOut]
    context_parallel: ContextParallelOut | None = Field(
        None, description="napkin sweep --devices: the launched kernel's time on 1 .. N GPUs of one host.")
