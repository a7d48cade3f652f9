"""GPU profiles (hardware/*.yaml): schema, loading, aliases, and the rates derived from them.

A profile holds the memory hierarchy (levels with capacities, instance counts and bandwidths), the SM
count and clocks, per-pipeline throughput, register and thread limits, and the divisors that tensor
cores and coalesced access impose. Keys carry their units; every number has a source comment in the
file (docs/hardware-profiles.md lists the sources and where the paper's values differ).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PositiveInt, ValidationError, model_validator

from analyzer import resources
from analyzer.base import DType, Strict
from analyzer.errors import NapkinError
from analyzer.validation import from_validation_error
from analyzer.yamlio import load_file

DOCS_HINT = "see docs/hardware-profiles.md"

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]   # finite too: .inf is no rate


class LevelProfile(Strict):
    """One level of the memory hierarchy, highest (gmem) first."""

    name: str
    kind: Literal["memory", "cache", "cross"] = Field(
        description="memory: holds data for its children; cache: an intermediate caching level "
                    "(Theorem 2); cross: transfers between children, e.g. thread block clusters "
                    "(Theorem 3).")
    capacity_bytes: PositiveFloat | None = Field(None, description="Capacity of one instance "
                                                 "(not for cross levels).")
    capacity_bytes_per_block: PositiveFloat | None = Field(
        None, description="The most one thread block may use (e.g. 227 KB of shared memory).")
    instances: PositiveInt | None = Field(None, description="How many instances the GPU has (SMs "
                                          "for smem; not for cross levels).")
    bandwidth_bytes_per_s: PositiveFloat | None = Field(
        None, description="Rate at which the level serves its children, whole GPU, read + write.")
    bandwidth_bytes_per_s_by_cluster: dict[PositiveInt, PositiveFloat] | None = Field(
        None, description="cross levels: child-to-child bandwidth by cluster size.")
    cluster_size_max: PositiveInt | None = Field(None, description="cross levels: largest cluster.")
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


class Clocks(Strict):
    boost_hz: PositiveFloat
    tensor_hz: PositiveFloat = Field(description="The clock behind the datasheet tensor peaks (f_K).")


class PerSMPerClock(Strict):
    """Results per clock per SM of the non-tensor pipelines."""

    sfu_ops: PositiveInt = Field(description="Special function unit (ex2, rcp, ...).")
    fp32_fma: PositiveInt
    fp16_fma: PositiveInt


class Registers(Strict):
    per_sm: PositiveInt = Field(description="32-bit registers per SM.")
    per_thread_max: PositiveInt
    per_block_max: PositiveInt


class Threads(Strict):
    warp_size: PositiveInt = 32
    per_sm_max: PositiveInt
    per_block_max: PositiveInt
    blocks_per_sm_max: PositiveInt


class MMAShape(Strict):
    m: PositiveInt
    n: PositiveInt
    k: PositiveInt


class Divisors(Strict):
    coalesce_bytes: PositiveInt = Field(description="GMEM<->SMEM transfers move this many "
                                        "consecutive bytes (Section 5, coalesced memory transfer).")
    mma_instruction: str = Field(description="e.g. wgmma (Hopper), mma.sync (Ampere, Turing).")
    mma_threads: PositiveInt = Field(description="Threads that issue one tensor-core instruction "
                                     "together: 128 for a warpgroup (wgmma), 32 for a warp (mma.sync). "
                                     "The unit napkin configure splits a block's rows over (Section 5.3).")
    mma: dict[DType, MMAShape] = Field(description="Tensor-core tile per element type: group and "
                                       "stream sizes of contraction axes must be multiples.")


class Profile(Strict):
    name: str
    aliases: list[str] = Field(default_factory=list)
    description: str
    architecture: str
    compute_capability: str
    sm_count: PositiveInt
    clocks: Clocks
    tensor_dtypes: list[Literal["fp16", "bf16", "fp8"]] = Field(
        description="Element types the tensor cores take (fp32 inputs run as tf32 or on CUDA cores).")
    tensor_flops_per_s: dict[Literal["fp16", "bf16", "fp8", "tf32"], PositiveFloat] = Field(
        description="Dense tensor-core peak per element type (tf32: fp32 inputs on tensor cores).")
    per_sm_per_clock: PerSMPerClock
    registers: Registers
    threads: Threads
    levels: list[LevelProfile] = Field(min_length=2)
    divisors: Divisors
    doc: str = ""

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
        chain = [lv for lv in self.levels if lv.kind != "cross"]
        for parent, child in zip(chain, chain[1:], strict=False):
            if child.instances % parent.instances:
                raise ValueError(f"level {child.name} has {child.instances} instances, not a multiple "
                                 f"of {parent.name}'s {parent.instances}")
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


# -- loading -------------------------------------------------------------------------------------------

def load_profile_file(path: Path) -> Profile:
    data = load_file(path)
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, file=str(path), hint=DOCS_HINT) from None


@cache
def aliases() -> dict[str, str]:
    table: dict[str, str] = {}
    for stem, path in resources.shipped("hardware").items():
        profile = load_profile_file(path)
        for alias in profile.aliases:
            table[alias.lower()] = stem
    return table


def profile_path(name_or_path: str, *, field: str | None = "--gpu") -> Path:
    """The file of a shipped profile by name or alias (h100 -> h100-sxm5), or a given profile file."""
    return resources.resolve("hardware", name_or_path, what="GPU", aliases=aliases(), field=field)


def load_profile(name_or_path: str, *, field: str | None = "--gpu") -> Profile:
    return load_profile_file(profile_path(name_or_path, field=field))


def shipped_profiles() -> dict[str, Profile]:
    return {stem: load_profile_file(p) for stem, p in resources.shipped("hardware").items()}
