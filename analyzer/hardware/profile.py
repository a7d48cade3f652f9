"""GPU profiles (hardware/*.yaml): the schema, and the rates derived from it (analyzer.hardware.files
reads the files).

A profile holds the memory hierarchy (levels with capacities, instance counts and bandwidths), the SM
count and clocks, per-pipeline throughput, register and thread limits, and the divisors that tensor
cores and coalesced access impose. Keys carry their units; every number has a source comment in the
file (docs/hardware-profiles.md lists the sources and where the paper's values differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from analyzer.common.base import DType, Strict
from analyzer.common.errors import NapkinError
from analyzer.diagram.primitives import PIPELINES

DOCS_HINT = "see docs/hardware-profiles.md"

def Count(most: int, least: int = 1):  # noqa: N802 - a type, as pydantic's conint
    """A whole number from `least` to `most` (strict, as every profile field: not true, not 1e15)."""
    return Annotated[int, Field(ge=least, le=most)]


def Amount(least: float, most: float):  # noqa: N802
    """A finite number from `least` to `most` (an int or a float; not true, not text)."""
    return Annotated[float, Field(ge=least, le=most, allow_inf_nan=False)]


# Plausible ranges (docs/hardware-profiles.md): wide enough for any GPU napkin could model, narrow
# enough that a typo of a few orders of magnitude (warp_size: 1e15, a capacity of 1e-300 bytes) is an
# error at load time rather than a prediction of nan or a division by zero later.
Bytes = Amount(1, 1e15)                    # a level's capacity: 1 byte to 1 PB
BytesPerSecond = Amount(1e6, 1e16)         # a bandwidth: 1 MB/s to 10 PB/s
Hertz = Amount(1e7, 1e11)                  # a clock: 10 MHz to 100 GHz
FlopsPerSecond = Amount(1e9, 1e18)         # a tensor-core peak: 1 GFLOP/s to 1 EFLOP/s
Instances = Count(1_000_000)
PerClock = Count(65536)
ClusterSize = Count(1024, least=2)


class Exact(Strict):
    """Strict types: a count is a whole number and a rate a number, never a bool or text."""

    model_config = ConfigDict(strict=True)


class LevelProfile(Exact):
    """One level of the memory hierarchy, highest (gmem) first."""

    name: str
    kind: Literal["memory", "cache", "cross"] = Field(
        description="memory: holds data for its children; cache: an intermediate caching level "
                    "(Theorem 2); cross: transfers between children, e.g. thread block clusters "
                    "(Theorem 3).")
    capacity_bytes: Bytes | None = Field(None, description="Capacity of one instance "
                                                 "(not for cross levels).")
    capacity_bytes_per_block: Bytes | None = Field(
        None, description="The most one thread block may use (e.g. 227 KB of shared memory).")
    instances: Instances | None = Field(None, description="How many instances the GPU has (SMs "
                                          "for smem; not for cross levels).")
    bandwidth_bytes_per_s: BytesPerSecond | None = Field(
        None, description="Rate at which the level serves its children, whole GPU, read + write.")
    bandwidth_bytes_per_s_by_cluster: dict[ClusterSize, BytesPerSecond] | None = Field(
        None, description="cross levels: child-to-child bandwidth by cluster size.")
    cluster_size_max: ClusterSize | None = Field(None, description="cross levels: largest cluster.")
    doc: str = ""

    @model_validator(mode="after")
    def _fields_of_kind(self) -> LevelProfile:
        if self.capacity_bytes_per_block and self.capacity_bytes and \
                self.capacity_bytes_per_block > self.capacity_bytes:
            raise ValueError(f"level {self.name}: capacity_bytes_per_block exceeds capacity_bytes")
        if self.kind == "cross":
            if not self.bandwidth_bytes_per_s_by_cluster:
                raise ValueError(f"cross level {self.name} needs bandwidth_bytes_per_s_by_cluster")
            for n in self.bandwidth_bytes_per_s_by_cluster:
                if n < 2 or (self.cluster_size_max is not None and n > self.cluster_size_max):
                    raise ValueError(f"cross level {self.name}: a cluster of {n} is not between 2 and "
                                     f"cluster_size_max")
        else:
            for key in ("capacity_bytes", "instances"):
                if getattr(self, key) is None:
                    raise ValueError(f"level {self.name} needs {key}")
        return self

    @property
    def block_capacity_bytes(self) -> float:
        return self.capacity_bytes_per_block or self.capacity_bytes


class Interconnect(Exact):
    """The link between the GPUs of one host: the multi-GPU cross-transfer level x of Appendix A.2.3
    (its children are GPUs, as a thread block cluster's are SMs)."""

    name: str = Field(description="The link's name (nvlink, pcie).")
    devices_max: Count(1024, least=2) = Field(description="The most GPUs of one host it joins.")
    bandwidth_bytes_per_s: BytesPerSecond = Field(
        description="What one GPU sends to the others per second, one direction (it receives as much at "
                    "once): NVLink 4's 900 GB/s is 450e9 each way.")
    latency_s: Amount(0.0, 1.0) = Field(
        0.0, description="What a collective costs before its first byte arrives (NCCL's launch and handshake): "
                         "measured, not a datasheet's; 0 where no one measured it.")
    doc: str = ""


class Clocks(Exact):
    boost_hz: Hertz
    tensor_hz: Hertz = Field(description="The clock behind the datasheet tensor peaks (f_K).")


class PerSMPerClock(Exact):
    """Results per clock per SM of the non-tensor pipelines."""

    sfu_ops: PerClock = Field(description="Special function unit (ex2, rcp, ...).")
    fp32_fma: PerClock
    fp16_fma: PerClock


class Registers(Exact):
    per_sm: Count(1 << 24) = Field(description="32-bit registers per SM.")
    per_thread_max: Count(65536)
    per_block_max: Count(1 << 24)


class Threads(Exact):
    warp_size: Count(1024) = 32
    per_sm_max: Count(65536)
    per_block_max: Count(65536)
    blocks_per_sm_max: Count(1024)


class MMAShape(Exact):
    m: Count(1024)
    n: Count(1024)
    k: Count(1024)


class Divisors(Exact):
    coalesce_bytes: Count(65536) = Field(description="GMEM<->SMEM transfers move this many "
                                        "consecutive bytes (Section 5, coalesced memory transfer).")
    mma_instruction: str = Field(description="e.g. wgmma (Hopper), mma.sync (Ampere, Turing).")
    mma_threads: Count(1024) = Field(description="Threads that issue one tensor-core instruction "
                                     "together: 128 for a warpgroup (wgmma), 32 for a warp (mma.sync). "
                                     "The unit napkin configure splits a block's rows over (Section 5.3).")
    mma: dict[DType, MMAShape] = Field(description="Tensor-core tile per element type: group and "
                                       "stream sizes of contraction axes must be multiples.")


@dataclass(frozen=True)
class HeldOut:
    """How far a fitted model was off on records held out of its fit: |predicted / measured - 1|."""

    median: float
    p90: float | None = None       # the 90th percentile, where the fit says


# the calibration's fit entries napkin calibrate writes per family: `held_out_median_error.attention`
HELD_OUT = ("held_out_median_error", "held_out_p90_error")
# the Hopper kernel's fit: which held-out records each median is over
HOPPER_HELD_OUT = {"the held-out size": "held_out_median_error", "shapes beyond the grid": "beyond_median_error",
                   "score modifications at the held-out size": "variants_held_out_median_error"}


def held_out_fit(errors: dict[str, HeldOut]) -> dict[str, float]:
    """A calibration's fit entries for the held-out errors per family, as Calibration.held_out reads them."""
    out = {}
    for family, e in errors.items():
        out[f"{HELD_OUT[0]}.{family}"] = float(f"{e.median:.3g}")
        if e.p90 is not None:
            out[f"{HELD_OUT[1]}.{family}"] = float(f"{e.p90:.3g}")
    return out


class Estimate(Exact):
    """A fitted parameter: its value and one standard error (bootstrap over the recorded configurations)."""

    value: float = Field(ge=0, allow_inf_nan=False)
    uncertainty: float | None = Field(None, ge=0, allow_inf_nan=False)


class RegisterRelation(Exact):
    """Registers per thread the compiler allots a configuration, fitted to a compile recording
    (napkin calibrate --registers): offset + table_scale x (Table 1's share) + tile_scale x (row block
    x stream chunk elements per thread). Resident blocks and legality then follow the compiler's
    count instead of Table 1's plus a fixed reserve."""

    offset: Estimate = Field(description="Registers a thread uses beyond its arrays (r0).")
    table_scale: Estimate = Field(description="Registers per register of Table 1's share (kappa).")
    tile_scale: Estimate = Field(description="Registers per element of the row block x stream chunk tile "
                                             "per thread (mu): temporaries Table 1 leaves out.")
    source: str = Field(description="The compile recording the relation came from.")

    def registers(self, table1, tile):
        return self.offset.value + self.table_scale.value * table1 + self.tile_scale.value * tile


class HopperFit(Exact):
    """The Hopper kernel's model (analyzer.config.hopper) fitted to a sweep of that kernel's configurations
    (napkin calibrate --kernel hopper; docs/validation.md). Absent parameters keep the paper's idealised
    model: efficiencies 1, Section 6.3's 66 % overhead, one chunk of prologue a tile, no fixed costs, no mask work."""

    source: str = Field(description="The recording the fit came from, and the command.")
    tensor_efficiency: Estimate | None = Field(
        None, description="Achieved fraction of the tensor cores' datasheet rate inside wgmma.")
    softmax_overhead: Estimate | None = Field(
        None, description="o of Section 6.3: the threads' work beyond Table 3's, per clock of it.")
    l2_efficiency: Estimate | None = Field(None, description="Achieved fraction of the L2 bandwidth.")
    chunk_overhead_s: Estimate | None = Field(
        None, description="Seconds a block spends per streamed chunk beyond its period and loads "
                          "(barrier waits, issue).")
    prologue_chunks: Estimate | None = Field(
        None, description="Chunk times a tile adds for its prologue and epilogue (the first QK^T and the "
                          "last PV alone).")
    tile_overhead_s: Estimate | None = Field(
        None, description="Seconds a tile adds beyond its chunks (its query load, output store, "
                          "barrier set-up).")
    consumer_overhead_s: Estimate | None = Field(
        None, description="Seconds a tile adds per consumer warpgroup beyond its chunks (each one's epilogue: "
                          "normalising its rows, storing them through SMEM, the copy engine's store).")
    launch_overhead_s: Estimate | None = Field(None, description="Seconds per kernel launch.")
    lone_overlap: Estimate | None = Field(
        None, description="Where a lone consumer warpgroup with no overlap scheduled runs, from the serial "
                          "period (0) to the intra-warpgroup one (1).")
    mask_overhead: Estimate | None = Field(
        None, description="Chunk times a causal tile's masked step adds beyond its chunk (the first chunk and "
                          "those on the diagonal: the mask's compares and selects).")
    overlap_softness: Estimate | None = Field(
        None, description="1/p of the p-norm a period combines the tensor cores' and the threads' work by: 0 "
                          "is Section 6's perfect overlap (the longer alone), 1/2 a quadrature sum.")
    score_clocks: dict[str, Estimate] = Field(
        default_factory=dict, description="Per lowering of a score op between the contractions (sigmoid, "
                                          "softcap, alibi shifted, add, ...): the SM clocks a score costs the "
                                          "threads, fitted on a sweep of the diagrams that apply it "
                                          "(napkin calibrate --variants); an op absent costs its counted SFU "
                                          "and lane operations.")
    bias_efficiency: Estimate | None = Field(
        None, description="Achieved fraction of the HBM bandwidth an additive bias (heads x queries x keys) "
                          "is read at.")
    bias_row_clocks: Estimate | None = Field(
        None, description="SM clocks a block's copy engine spends a row of a bias tile beyond its bytes (a "
                          "TMA box is a request a row), fitted with bias_efficiency on chunks of two widths.")
    fp8_tensor_efficiency: Estimate | None = Field(
        None, description="FP8 wgmma's achieved fraction of the FP8 tensor rate, as a share of what "
                          "tensor_efficiency says of the 16-bit one (napkin calibrate --variants on a sweep of the "
                          "FP8 kernel).")
    persistent_hidden: Estimate | None = Field(
        None, description="Share of a tile's fixed cost (its prologue chunks and tile overhead) the persistent "
                          "schedule runs under the tile before it; absent where no sweep of that schedule was "
                          "fitted, and then the model does not rank it.")
    persistent_slowdown: Estimate | None = Field(
        None, description="What a streamed chunk costs the persistent schedules beyond a block a tile's, as a "
                          "fraction of it; fitted with persistent_hidden.")
    prefetch_hidden: Estimate | None = Field(
        None, description="Share of a tile's fixed cost the prefetch schedule (two query buffers; the next "
                          "tile's first QK^T beside this one's last PV) runs under the tile before it; absent "
                          "where no sweep of that schedule was fitted, and then the model does not rank it.")
    fit: dict[str, float | int | str] = Field(default_factory=dict,
                                              description="How well the fit did (informative).")

    def held_out(self) -> dict[str, HeldOut]:
        """What napkin calibrate --kernel hopper measured of the fit on records it held out: the grid's
        held-out size and the shapes beyond the grid, by their median error (empty where the fit does not
        say)."""
        return {what: HeldOut(float(self.fit[key])) for what, key in HOPPER_HELD_OUT.items()
                if isinstance(self.fit.get(key), int | float)}


class ContractionFit(Exact):
    """The Hopper contraction kernel's model (analyzer.config.contraction) fitted to a sweep of that
    kernel's configurations (napkin calibrate --kernel contraction). Absent parameters keep the idealised
    model: the datasheet's rates, no fixed costs."""

    source: str = Field(description="The recording the fit came from, and the command.")
    tensor_efficiency: Estimate | None = Field(
        None, description="Achieved fraction of the tensor cores' datasheet rate inside wgmma.")
    l2_efficiency: Estimate | None = Field(None, description="Achieved fraction of the L2 bandwidth.")
    smem_efficiency: Estimate | None = Field(
        None, description="Achieved fraction of the SMEM bandwidth wgmma reads its operands at.")
    load_latency_s: Estimate | None = Field(
        None, description="Seconds a chunk's load takes to land; the STAGES - 1 chunks loaded ahead hide it.")
    chunk_overhead_s: Estimate | None = Field(
        None, description="Seconds a block spends per streamed chunk beyond its contraction and loads.")
    tile_overhead_s: Estimate | None = Field(
        None, description="Seconds a tile adds beyond its chunks and its tail (the last chunk's wait, the "
                          "output's staging and store).")
    launch_overhead_s: Estimate | None = Field(None, description="Seconds per kernel launch.")
    wait_s: Estimate | None = Field(
        None, description="The chain kernel's (napkin calibrate --kernel chain): seconds a consumer warpgroup "
                          "waits a chunk beyond its own wgmmas (its first contraction's result before the ops "
                          "between them, its second's drain before the next chunk), which the other consumers' "
                          "wgmmas fill.")
    power_efficiency: Estimate | None = Field(
        None, description="The chain kernel's: the fraction of the tensor cores' datasheet rate the whole GPU "
                          "sustains with every SM at work (its power limit lowers the clock that one SM alone "
                          "runs at).")
    thread_efficiency: Estimate | None = Field(
        None, description="The chain kernel's: the share of the lanes' and the special function unit's "
                          "datasheet rates the ops between its contractions run their counted FLOPs at (the "
                          "instructions a FLOP takes, the conversions and selects the count leaves out).")
    fit: dict[str, float | int | str] = Field(default_factory=dict,
                                              description="How well the fit did (informative).")

    def held_out(self) -> dict[str, HeldOut]:
        """The fit's median error on the shapes it held out (empty where the fit does not say)."""
        value = self.fit.get("held_out_median_error")
        return {"the held-out shapes": HeldOut(float(value))} if isinstance(value, int | float) else {}


class Calibration(Exact):
    """The model's stated assumptions, fitted to measurements (napkin calibrate; docs/validation.md).

    Absent parameters keep the datasheet model: every efficiency 1, every overhead 0.
    """

    source: str = Field(description="The recording the fit came from, and the command.")
    pipeline_efficiency: dict[Literal["tensor", "sfu", "vector"], Estimate] = Field(
        default_factory=dict, description="Achieved fraction of each pipeline's peak rate.")
    bandwidth_efficiency: dict[str, Estimate] = Field(
        default_factory=dict, description="Level name -> achieved fraction of the bandwidth that "
                                          "feeds it.")
    level_overlap: Estimate | None = Field(
        None, description="Share of the shorter levels' transfer time hidden under the longest "
                          "level's, since levels stream concurrently: 0 is Equation 2's sum, 1 the "
                          "longest level alone.")
    softmax_overhead: Estimate | None = Field(
        None, description="Seconds of non-tensor work (sfu + vector pipelines) that tensor-core work "
                          "does not hide, per second of it (Section 6.3's softmax overhead).")
    softmax_overlap: Estimate | None = Field(
        None, description="How fast the exposed softmax falls with the blocks k resident per SM: "
                          "softmax_overhead x k^-softmax_overlap (Section 6: one block's softmax "
                          "runs under another's GEMMs).")
    step_overhead_s: Estimate | None = Field(
        None, description="Seconds one thread block spends per streamed chunk beyond its FLOPs and "
                          "transfers (Section 6.3's small-tile overhead), shared by the blocks "
                          "resident on an SM.")
    load_latency_s: Estimate | None = Field(
        None, description="Latency of one streamed load; stages - 1 buffers in flight per resident "
                          "block hide it (5.6), or it bounds the chunk rate.")
    edge_exposed: Estimate | None = Field(
        None, description="Seconds per second of a block's prologue and epilogue transfers (arrays "
                          "outside the streamed loop, at HBM bandwidth) that compute does not hide.")
    block_overhead_s: Estimate | None = Field(
        None, description="Seconds an SM idles while a block starts (fills its pipeline) and ends "
                          "(stores its output) when the SM holds that block alone; once per wave.")
    launch_overhead_s: Estimate | None = Field(None, description="Seconds per kernel launch.")
    power: dict[str, Estimate] = Field(
        default_factory=dict, description="Pipeline or level name -> the share of what the SM clock "
                                          "sustains that it draws at its datasheet rate: the work takes "
                                          "at least the sum of share x datasheet seconds (the GPU "
                                          "lowers its clock under load).")
    registers: RegisterRelation | None = Field(
        None, description="The compiler's register count (absent: Table 1's share plus a reserve).")
    hopper: HopperFit | None = Field(
        None, description="The Hopper kernel's model fitted to a sweep of it (absent: the paper's "
                          "idealised model ranks its configurations).")
    contraction: ContractionFit | None = Field(
        None, description="The Hopper contraction kernel's model fitted to a sweep of it (absent: the "
                          "idealised model ranks its configurations).")
    chain: ContractionFit | None = Field(
        None, description="The Hopper chain kernel's model (two contractions, the second fed by the first) "
                          "fitted to a sweep of it (absent: the contraction kernel's fit, carried over).")
    fit: dict[str, float | int | str] = Field(default_factory=dict,
                                              description="How well the fit did (informative).")

    def efficiency(self, pipeline: str) -> float:
        e = self.pipeline_efficiency.get(pipeline)
        return e.value if e else 1.0

    def bandwidth(self, level: str) -> float:
        e = self.bandwidth_efficiency.get(level)
        return e.value if e else 1.0

    def value(self, name: str) -> float:
        e = getattr(self, name)
        return e.value if e else 0.0

    def held_out(self) -> dict[str, HeldOut]:
        """Per family of the recording (attention, matmul), what napkin calibrate measured of the fit on the
        records it held out of it (empty for a calibration written before it said)."""
        out = {}
        for key, value in self.fit.items():
            name, _, family = key.partition(".")
            if name == HELD_OUT[0] and family and isinstance(value, int | float):
                p90 = self.fit.get(f"{HELD_OUT[1]}.{family}")
                out[family] = HeldOut(float(value), float(p90) if isinstance(p90, int | float) else None)
        return out

    def as_params(self) -> dict[str, float]:
        """Flat parameter names (pipeline_efficiency.tensor, softmax_overhead, ...) -> values."""
        out = {f"pipeline_efficiency.{k}": e.value for k, e in self.pipeline_efficiency.items()}
        out.update({f"bandwidth_efficiency.{k}": e.value for k, e in self.bandwidth_efficiency.items()})
        out.update({f"power.{k}": e.value for k, e in self.power.items()})
        out.update({k: self.value(k) for k in SCALARS if getattr(self, k) is not None})
        return out


# the calibration's parameters that are one number each (not one per pipeline or level)
SCALARS = ("level_overlap", "softmax_overhead", "softmax_overlap", "step_overhead_s", "load_latency_s",
           "edge_exposed", "block_overhead_s", "launch_overhead_s")


def _as_written(schema: dict[str, Any]) -> None:
    """The JSON Schema of a profile as a file writes it: a file that names another with `extends:`
    gives only what differs (analyzer.hardware.files merges the two and validates the whole), so it
    needs none of the keys a profile of its own must have."""
    schema["properties"]["extends"] = {
        "type": "string", "title": "Extends",
        "description": "The profile this file completes: a shipped profile's name (h200) or a profile file's "
                       "path from this file's folder. Keys given here replace its keys; its aliases are not "
                       "inherited. A calibrated profile extends its datasheet profile with a calibration."}
    schema["if"] = {"required": ["extends"]}
    schema["else"] = {"required": schema.pop("required")}


class Profile(Exact):
    # the JSON Schema (napkin schema profile) describes the files: whole, or extending another
    model_config = ConfigDict(json_schema_extra=_as_written)

    name: str
    aliases: list[str] = Field(default_factory=list)
    description: str
    architecture: str
    compute_capability: str
    sm_count: Count(100_000)
    clocks: Clocks
    tensor_dtypes: list[Literal["fp16", "bf16", "fp8"]] = Field(
        description="Element types the tensor cores take (fp32 inputs run as tf32 or on CUDA cores).")
    tensor_flops_per_s: dict[Literal["fp16", "bf16", "fp8", "tf32"], FlopsPerSecond] = Field(
        description="Dense tensor-core peak per element type (tf32: fp32 inputs on tensor cores).")
    per_sm_per_clock: PerSMPerClock
    registers: Registers
    threads: Threads
    levels: list[LevelProfile] = Field(min_length=2)
    divisors: Divisors
    interconnect: Interconnect | None = Field(
        None, description="The link between GPUs of one host (napkin analyze --devices); absent: one GPU.")
    calibration: Calibration | None = Field(
        None, description="Fitted efficiencies and overheads (napkin calibrate); absent: datasheet "
                          "model.")
    doc: str = ""
    # the file it was read from, as reports show it (analyzer.hardware.files sets it)
    _source: str | None = PrivateAttr(None)

    @property
    def source(self) -> str:
        """Where the profile came from, as a report or an error names it: its file, or for a profile
        built in code the shipped file of its name."""
        return self._source or f"hardware/{self.name}.yaml"

    @property
    def portable_fitted(self) -> bool:
        """Whether the profile carries the portable kernels' fitted parameters (a calibration may hold
        the Hopper kernel's fit alone, calibration.hopper)."""
        return self.calibration is not None and bool(self.calibration.as_params())

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        names = [lv.name for lv in self.levels]
        if len(set(names)) != len(names):
            raise ValueError("level names must be distinct")
        if self.levels[0].kind != "memory":
            raise ValueError("the first (highest) level must be of kind memory")
        for dtype in self.tensor_dtypes:
            if dtype not in self.tensor_flops_per_s:
                raise ValueError(f"tensor_flops_per_s has no entry for {dtype}")
            if dtype not in self.divisors.mma:
                raise ValueError(f"divisors.mma has no tensor-core tile for {dtype}")
        if self.divisors.mma_threads % self.threads.warp_size:
            raise ValueError(f"divisors.mma_threads ({self.divisors.mma_threads}) is not a whole number of "
                             f"warps of threads.warp_size ({self.threads.warp_size})")
        chain = [lv for lv in self.levels if lv.kind != "cross"]
        for parent, child in zip(chain, chain[1:], strict=False):
            if child.instances % parent.instances:
                raise ValueError(f"level {child.name} has {child.instances} instances, not a multiple "
                                 f"of {parent.name}'s {parent.instances}")
        if self.calibration:
            for level, e in self.calibration.bandwidth_efficiency.items():
                if level not in names:
                    raise ValueError(f"calibration.bandwidth_efficiency names level {level!r}, which "
                                     f"the profile lacks (its levels: {', '.join(names)})")
                if e.value <= 0:
                    raise ValueError(f"calibration.bandwidth_efficiency.{level} must be above 0")
            for pipe, e in self.calibration.pipeline_efficiency.items():
                if e.value <= 0:
                    raise ValueError(f"calibration.pipeline_efficiency.{pipe} must be above 0")
            for name, e in self.calibration.power.items():
                if name not in (*PIPELINES, *names):
                    raise ValueError(f"calibration.power names {name!r}, which is neither a pipeline "
                                     f"({', '.join(PIPELINES)}) nor a level ({', '.join(names)})")
                if e.value < 0:
                    raise ValueError(f"calibration.power.{name} must be 0 or above")
        return self

    # -- derived ---------------------------------------------------------------------------------
    def level(self, name: str) -> LevelProfile:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise NapkinError(f"GPU profile {self.name} has no level {name!r}",
                          hint=f"its levels: {', '.join(lv.name for lv in self.levels)}")

    def with_level(self, name: str, **updates: float) -> Profile:
        """A copy with some of one level's values replaced (e.g. the paper's value for a test)."""
        self.level(name)
        data = self.model_dump()
        data["levels"] = [{**lv, **updates} if lv["name"] == name else lv for lv in data["levels"]]
        return Profile.model_validate(data)   # validated like a file

    def check_dtype(self, dtype: str) -> None:
        if dtype != "fp32" and dtype not in self.tensor_dtypes:
            raise NapkinError(f"{self.name} has no {dtype} tensor cores",
                              hint=f"{self.name} takes: {', '.join(['fp32', *self.tensor_dtypes])}")

    def rate(self, pipeline: str, dtype: str) -> float:
        """Operations per second of a pipeline for the whole GPU (paper Table 3: ops/clk x N_SM x f_K)."""
        per_clock = self.sm_count * self.clocks.tensor_hz
        if pipeline == "tensor":
            if dtype in self.tensor_dtypes:
                return self.tensor_flops_per_s[dtype]
            return 2 * self.per_sm_per_clock.fp32_fma * per_clock   # fp32 on CUDA cores
        if pipeline == "sfu":
            return self.per_sm_per_clock.sfu_ops * per_clock
        if pipeline == "vector":
            return self.per_sm_per_clock.fp32_fma * per_clock      # one fp32 op per lane per clock
        raise KeyError(pipeline)
