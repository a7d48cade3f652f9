"""The result of `napkin configure`: a stable, documented schema (`napkin schema configuration`).

Bytes, clock cycles and seconds as the keys say. Tables are named after the paper's (Section 5.6,
Table 1: configuration; Table 2: maximum analysis; Table 3: compute analysis; Appendix B.0.1 and the
sheets' Table 4: throughput analysis; Section 6: overlap).
"""

from __future__ import annotations

from pydantic import Field

from analyzer.model.result import ExpectedOut, Out

SCHEMA_VERSION = 1


class VariableOut(Out):
    """Table 1: one variable to pre-allocate."""

    name: str
    array: str = Field(description="The diagram array it holds (a staged copy is named array.where).")
    doc: str
    shape: str = Field(description="Dimensions by configuration variable, e.g. `w_q x d`.")
    dims: dict[str, int]
    dtype: str
    level: str = Field(description="Where it is computed or consumed: `tensor core` or `registers`.")
    storage: str = Field(description="`smem` or `registers`.")
    scope: str = Field(description="`block`: one copy per thread block (M_TB); `group`: one per "
                                   "warpgroup or warp (M_WG).")
    multiple: int
    buffers: int = Field(description="Copies held at once (asynchronous loads, intra overlap).")
    bytes: int


class CapacityOut(Out):
    """Table 2: one storage level."""

    storage: str
    max_bytes: float = Field(description="M_max: what one block may use.")
    block_bytes: int = Field(description="M_TB.")
    group_bytes: int = Field(description="M_WG.")
    n_max: float | None = Field(description="(M_max - M_TB) / M_WG; null when M_WG = 0.")
    n: int
    excess_block_bytes: float
    excess_group_bytes: float
    excess_thread_bytes: float | None = Field(description="Registers: excess per group over its "
                                                          "threads.")
    thread_limit_excess_bytes: float | None = Field(
        description="Registers: the per-thread register limit minus a thread's share of M_WG.")
    fits: bool


class ColumnOut(Out):
    """Table 3: one column of the loop body, per row and per chunk."""

    label: str
    op: str
    pipeline: str
    dtype: str
    formula: str = Field(description="Ops per row in the configuration's variables.")
    ops_per_row: float
    ops_per_clock: float = Field(description="Per SM: FLOP/s / (N_SM f_K) for tensor cores.")
    clocks_per_row: float


class ComputeOut(Out):
    columns: list[ColumnOut]
    clocks_per_row: dict[str, float] = Field(description="Per pipeline: the sum of its columns.")
    limiting_pipeline: str
    overhead_ops_per_row: dict[str, float] = Field(
        description="Threads' work outside the columns (max, sums, scaling, ...), counted as overhead.")


class ThroughputOut(Out):
    """Appendix B.0.1."""

    tensor_clocks_per_row: float = Field(description="k.")
    bytes_per_chunk: int = Field(description="H: bytes a block loads per chunk.")
    clock_hz: float = Field(description="f_K.")
    bandwidth_bytes_per_s: float = Field(description="B: the bandwidth of `loads_from`.")
    sm_count: int
    rows: int = Field(description="g: rows sharing each loaded chunk.")
    load_time_s: float = Field(description="T_H = H N_SM / B.")
    min_rows: float = Field(description="g* = T_H f_K / k: fewer rows are bandwidth bound.")
    compute_time_s: float = Field(description="T_K = k g / f_K.")
    ops_per_chunk: float = Field(description="K = g x tensor ops per row.")
    throughput_flops_per_s: float = Field(description="K N_SM / max(T_K, T_H).")
    bound: str
    loads_from: str = Field("gmem", description="The level the chunks are loaded from: GMEM, as the paper's "
                                                "B.0.1 has it, or L2 where the launched kernel's model reads "
                                                "them there (the Hopper kernel: the blocks of a head share them).")


class BlockOut(Out):
    group: int
    iteration: int
    stage: str
    lane: str
    start: float
    work: float
    overhead: float


class OverlapOut(Out):
    """Section 6: the warpgroup schedule, in clock cycles per row."""

    strategy: str
    groups: int
    overhead: float = Field(description="Assumed overhead of non-tensor blocks (0.66 = 66%).")
    stages: dict[str, float] = Field(description="Clock cycles per row of each block.")
    period_clocks_per_row: float = Field(description="Steady-state clocks per iteration of every "
                                                     "group, list-scheduled.")
    bound_clocks_per_row: float = Field(description="The closed-form lower bound on the period.")
    utilization: float = Field(description="Tensor-core busy share of the period.")
    accommodation: float | None = Field(description="The largest overhead that keeps the tensor cores "
                                                    "busy; null: unbounded (no non-tensor work).")
    blocks: list[BlockOut] = Field(description="The first iterations, for drawing.")


class ConfigurationOut(Out):
    name: str
    title: str
    paper: str
    kernel: str
    strategy: str
    overlap: str
    unit: str = Field(description="`warpgroup` (Hopper) or `warp`: the tensor-core thread group.")
    threads_per_group: int
    groups: int = Field(description="N.")
    stages: int
    derived_from: str


class ConfigurationReport(Out):
    schema_version: int = SCHEMA_VERSION
    napkin_version: str
    diagram: str
    source: str
    gpu: str
    gpu_source: str
    configuration: ConfigurationOut
    values: dict[str, int] = Field(description="Every size and configuration variable.")
    divisors: list[str] = Field(description="Divisor constraints the configuration meets (Section 5.4).")
    variables: list[VariableOut]
    capacity: list[CapacityOut]
    compute: ComputeOut
    throughput: ThroughputOut
    overlap: OverlapOut | None
    fits: bool
    problems: list[str] = Field(description="Why it does not fit, naming the variables.")
    notes: list[str]
    expected: ExpectedOut | None = Field(
        None, description="What napkin kernel launches at these sizes and its expected time (the same as "
                          "napkin analyze, sweep and the kernel's header); the tables are Section 5's "
                          "analysis of `configuration`, their throughput the paper's idealised bound.")
    expected_absent: str | None = Field(None, description="Why there is no expected time, where there is none.")
    launched: bool = Field(False, description="The tables analyse the configuration napkin kernel launches at "
                                              "these sizes, `expected`'s.")
    other: str | None = Field(None, description="Why the tables analyse another configuration than "
                                                "`expected`'s, where they do (napkin configure and report).")
