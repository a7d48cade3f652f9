"""The result of `napkin analyze`: a stable, documented schema (`napkin schema report`).

Expressions are strings that `sympy.sympify` parses back (all symbols are positive sizes; `M` is the
lower-level memory of the optimum H*(a, M)). Numbers are in values, bytes, FLOPs and seconds as their
keys say. SCHEMA_VERSION changes only when a field is removed or changes meaning.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SizeOut(Out):
    axis: str
    expression: str = Field(description="Size of the axis in the size symbols.")
    value: int


class OpOut(Out):
    name: str
    primitive: str
    column: int = Field(description="Function column, left to right.")
    inputs: list[str]
    output_axes: list[str]
    over: str | None
    weave: list[str] = Field(description="Axes the primitive is mapped over.")
    broadcast: dict[str, list[str]] = Field(description="Inputs copied along weaved axes they lack.")
    kernel: str


class StandardTermOut(Out):
    alpha: str = Field(description="alpha_t(a) of Equation 1.")
    beta: str = Field(description="beta_t of Equation 1: the term is alpha_t * M**-beta_t.")


class OptimumOut(Out):
    """H*(a, M) of Equation 4 in values and in bytes, with M left as a symbol."""

    h_star: str
    h_star_bytes: str | None = Field(description="The same in bytes, M in bytes (Equation 3).")
    standard_form: list[StandardTermOut]
    memory_lead: str = Field(description="Leading memory term set equal to M.")
    group_sizes: dict[str, str] = Field(description="Group sizes at the optimum, in M.")


class BandwidthLimitOut(Out):
    """Appendix B.1: where this level stops being bandwidth bound (H*/K < Hdot/Kdot)."""

    compute_per_transfer: float = Field(description="Kdot/Hdot: tensor FLOPs per value moved.")
    min_memory_bytes: float | None = Field(description="Absolute minimum memory, axes -> infinity.")
    min_sizes: dict[str, float] = Field(description="Absolute minimum of each size, M -> infinity.")
    tile_sizes: dict[str, float] = Field(description="Optimal group sizes at this level's memory.")
    min_sizes_at_memory: dict[str, float] = Field(description="Minimum of each size at this "
                                                              "level's memory.")


class LevelOut(Out):
    level: str
    role: str = Field(description="memory, cache (Theorem 2) or cross (Theorem 3).")
    drawn: bool = Field(description="Drawn in the diagram; else it takes the relabelling of the next "
                                    "lower drawn level, with its symbols suffixed by this level.")
    source: str = Field(description="Level whose bandwidth feeds this one.")
    bandwidth_bytes_per_s: float
    weight_s_per_byte: float = Field(description="Hdot^-1 of Equation 2; at a cross level Theorem 3's "
                                                 "w_hc - w_xc, negative where cross transfers are slower "
                                                 "than direct ones (the time uses received_bytes_value).")
    memory_limit_bytes: float = Field(description="M_l: per-block capacity, or N_c M_c.")
    children: int | None
    group: dict[str, str] = Field(description="Grouped axis -> group-size symbol.")
    stream: dict[str, str] = Field(description="Streamed axis -> stream-size symbol.")
    transfers: str = Field(description="H: values loaded and saved (symbolic).")
    transfer_bytes: str
    per_group: str = Field(description="H_g = H / N_g.")
    groups: str = Field(description="N_g.")
    memory: str = Field(description="M: values held at once (symbolic).")
    memory_bytes: str
    optimum: OptimumOut | None = Field(description="Absent where no closed form exists.")
    bandwidth_limit: BandwidthLimitOut | None = Field(description="Absent without a closed form or "
                                                                  "tensor FLOPs.")
    chosen: dict[str, int] = Field(description="Partition sizes chosen for the GPU.")
    constraints: list[str] = Field(description="Divisor constraints the choice obeys.")
    transfers_values: float
    transfers_bytes_value: float
    memory_values: float
    memory_bytes_value: float
    groups_value: float
    received_bytes_value: float = Field(description="Bytes received over the feed from source (Theorem 3, "
                                                    "Equation 11): transfers_bytes_value, except below a "
                                                    "cross level, which delivers part of it directly.")
    transfer_time_s: float = Field(description="received_bytes_value at the bandwidth feeding the level.")
    latex: dict[str, str] = Field(description="LaTeX of transfers, per_group, groups, memory and "
                                               "h_star.")


class ClassicRuleOut(Out):
    """The classic FlashAttention block sizes (Dao et al. 2022, Algorithm 1) against napkin's optimum."""

    level: str = Field(description="The lowest level, where the rule sets the tiles.")
    query_axis: str = Field(description="Grouped m axis of the first contraction: B_r rows.")
    key_axis: str = Field(description="Streamed n axis of the first contraction: B_c rows.")
    head_axis: str = Field(description="Contracted k axis of the first contraction: d.")
    head_dim: int = Field(description="d, the size of head_axis.")
    memory_elements: int = Field(description="M of Algorithm 1: the level's memory limit in bytes over "
                                             "the bytes per value of the diagram's dtype.")
    b_c: int = Field(description="ceil(M / 4d), before clamping to the key axis.")
    b_r: int = Field(description="min(ceil(M / 4d), d), before clamping to the query axis.")
    tiles: dict[str, int] = Field(description="Partition sizes at the rule: B_r and B_c clamped to "
                                              "their axes, every other group size 1 (one head per block).")
    transfer_bytes: float = Field(description="Transfers at this level with the rule's tiles.")
    memory_bytes: float = Field(description="Memory the rule's tiles need under napkin's counting.")
    memory_limit_bytes: float
    fits: bool = Field(description="memory_bytes <= memory_limit_bytes.")
    breaks: list[str] = Field(description="Divisor constraints the rule's tiles do not obey.")
    optimal_tiles: dict[str, int] = Field(description="Tiles with the fewest transfer bytes within the "
                                                      "same memory limit and divisor constraints.")
    optimal_transfer_bytes: float
    ratio: float = Field(description="transfer_bytes / optimal_transfer_bytes (>= 1 when the rule's "
                                     "tiles are feasible).")
    predicted_time_s: float = Field(description="Predicted kernel time with the rule's tiles at this "
                                                "level and the chosen tiles above it.")


class KernelOut(Out):
    name: str
    ops: list[str]
    head: list[str] = Field(description="Ops run once per group before the loop.")
    body: list[str] = Field(description="Ops run once per chunk of the streamed axis.")
    tail: list[str] = Field(description="Ops run once per group after the loop.")
    block_skipping: str | None = Field(description="Block skipping under a mask (causal, a window, a band), if any.")
    notes: list[str]
    levels: list[LevelOut]
    flops: dict[str, str] = Field(description="FLOPs per pipeline at the lowest level (symbolic).")
    flops_value: dict[str, float]
    compute_time_s: dict[str, float] = Field(description="Per pipeline, wave quantization included.")
    utilization: float = Field(description="N_g / (N_SM ceil(N_g / N_SM)), over the imbalance of "
                                           "unequal blocks under block skipping.")
    transfer_time_s: float = Field(description="Weighted transfers, Equation 2.")
    latency_time_s: float = Field(0.0, description="The loads in flight (5.6): (lambda C + transfers) / "
                                                   "((stages - 1) k); the transfers' time with no load "
                                                   "latency (lambda 0).")
    overhead_time_s: float = Field(0.0, description="Calibrated overheads added to the slowest pipeline: "
                                                    "sigma k^-beta (sfu + vector) + t_step C / k.")
    power_time_s: float = Field(0.0, description="Calibrated power bound: the least time at the clock "
                                                 "the work's activity allows (0: none).")
    exposed_time_s: float = Field(0.0, description="Calibrated prologue/epilogue transfers, block start "
                                                   "and launch, outside every overlap.")
    predicted_time_s: float = Field(description="max(max(slowest pipeline, loads in flight) + overheads, "
                                                "power, transfers) + exposed.")
    bound: str = Field(description="The term that sets predicted_time_s.")
    cluster_trade_off_s: dict[str, float] | None = Field(
        None, description="With --cluster: Delta H*(N) of Appendix A.2.3 in seconds per measured "
                          "cluster size N (positive: clusters of N save that much transfer time).")
    classic_rule: ClassicRuleOut | None = Field(
        None, description="The classic FlashAttention block-size rule at the lowest level; absent "
                          "where the kernel is not attention-shaped (docs/model.md, section 7).")


class TotalsOut(Out):
    flops: float
    tensor_flops: float
    compute_time_s: float
    transfer_time_s: float
    predicted_time_s: float
    throughput_flops_per_s: float = Field(description="Tensor FLOPs over the predicted time.")
    bound: str


class GpuOut(Out):
    name: str
    description: str
    source: str
    calibration: dict[str, float] | None = Field(
        None, description="A calibrated profile's fitted parameters (docs/model.md), flat names: they "
                          "relax the assumptions listed with the analysis.")


class DiagramOut(Out):
    name: str
    title: str
    paper: str
    source: str
    levels: list[str]


class ExpectedOut(Out):
    """What the kernel napkin kernel generates is expected to take at these sizes (analyzer.config.launch):
    the same configuration and time napkin sweep marks and the kernel's header states."""

    backend: str = Field(description="hopper (the Gluon kernel for Hopper) or triton (the portable module).")
    kernel: str = Field("", description="How a sentence names the kernel: its family's title.")
    configuration: str = Field(description="The configuration its wrapper launches at these sizes.")
    time_s: float
    throughput_flops_per_s: float = Field(description="Tensor FLOPs (block skipping included) over time_s.")
    bound: str
    model: str = Field(description="Which model timed it and where its parameters come from.")
    calibrated: bool = Field(description="False: the idealised model; no one fitted this kernel's model on this GPU.")
    sizes: dict[str, int] = Field(description="The weaved diagram's sizes (one batch entry and head unless set).")


class DeviceCountOut(Out):
    """Context parallelism on one number of GPUs (analyzer.config.context_parallel): the slowest rank."""

    devices: int
    time_s: float
    efficiency: float = Field(description="Strong scaling against one GPU: T_1 / (N T_N).")
    kernel_s: float = Field(description="The slowest rank's blocks, each its kernel's expected time.")
    engine_s: float = Field(description="Its copies of the keys and values and torch's merges, at HBM bandwidth.")
    link_s: float = Field(description="What one GPU receives over the link, at the link's bandwidth.")
    waits_s: float = Field(description="The part of link_s that no step hides (communication exposed).")
    cross_bytes: float = Field(description="Bytes one GPU receives over the link.")
    bound: str = Field(description="communication where a step waits for the link, else compute.")
    link_bound_up_to: int | None = Field(
        None, description="The longest query sequence (the key sequence in proportion) at which a step waits for "
                          "the link: longer ones hide it. None: no length (to 16M tokens) waits, or one GPU.")


class ContextParallelOut(Out):
    """napkin analyze --devices: the attention split over GPUs by torch's ring, with napkin's kernel for
    each block (docs/scale.md)."""

    engine: str = Field(description="The engine whose schedule is modelled.")
    rotation: str = Field(description="allgather (torch's default) or alltoall.")
    merge: str = Field(description="napkin (one merge kernel a step, in place of torch's merger) or torch (its "
                                   "merger's eager fp32 passes).")
    link: str
    link_bytes_per_s: float = Field(description="One GPU's bandwidth to the others, one direction.")
    cross_bytes_per_device: str = Field(description="Bytes one GPU receives over the link, in the weaved "
                                                    "diagram's sizes and N_c (Appendix A.2.3, the groups aligned).")
    sizes: dict[str, int] = Field(description="The weaved diagram's sizes of the whole problem.")
    counts: list[DeviceCountOut]


class Analysis(Out):
    """Everything `napkin analyze` derives for one diagram on one GPU."""

    schema_version: int = SCHEMA_VERSION
    napkin_version: str
    diagram: DiagramOut
    gpu: GpuOut
    dtype: str
    cluster: int | None
    sizes: list[SizeOut]
    ops: list[OpOut]
    kernels: list[KernelOut]
    totals: TotalsOut
    assumptions: list[str]
    expected: ExpectedOut | None = Field(
        None, description="The generated kernel's expected time (napkin analyze leads with it); totals is "
                          "the paper's idealised bound beside it.")
    expected_absent: str | None = Field(None, description="Why there is no expected time, where there is none.")
    context_parallel: ContextParallelOut | None = Field(
        None, description="napkin analyze --devices: the time on 1 .. N GPUs of one host.")

    def size(self, axis: str) -> int | None:
        """The size of `axis` (None: the diagram has no such axis)."""
        return next((s.value for s in self.sizes if s.axis == axis), None)

    def value(self, name: str) -> int | None:
        """What a --set name came to here: an axis's size (q), a size symbol's (one an axis's size is
        exactly), or a tile of the lowest level (g_q, s_x); None: the analysis has no such name."""
        found = self.size(name)
        if found is None:
            found = next((s.value for s in self.sizes if s.expression == name), None)
        for k in self.kernels if found is None else ():
            if k.levels and name in k.levels[-1].chosen:
                return k.levels[-1].chosen[name]
        return found


class Comparison(Out):
    """`napkin analyze` with several --gpu or a size range (--set q=1024..32768): one analysis per GPU
    and size, GPUs outer, sizes in the order given (the paper's Section 4: which GPU, for which
    algorithm and memory)."""

    schema_version: int = SCHEMA_VERSION
    napkin_version: str
    varied: list[str] = Field(description="The sizes given as a range, in the order they vary.")
    analyses: list[Analysis]
