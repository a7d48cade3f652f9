"""Table 1's register count against what the compiler allots (napkin calibrate --registers).

The model sizes a thread's registers by Table 1 (its share of the arrays a warpgroup keeps in
registers) plus a reserve (analyzer.config.choose.table1_registers); resident blocks and legality
follow from it, and SMEM from Table 2. A compile-only recording (python bench/sweep_h200.py
--compile-only) says what the compiler allotted each configuration: registers per thread, spilled
bytes and SMEM bytes. Joined to the measured configurations, it states how far the assumption is off:
- registers: the compiler's against the model's, per family; how many configurations reach the
  per-thread cap or spill;
- a least-squares relation on those below the cap, compiler = r0 + kappa * (Table 1's share)
  + mu * (row block x stream chunk per thread), with bootstrap standard errors: mu counts the
  per-chunk temporaries Table 1 leaves out (the scores' copies, a tensor-core operand in registers);
- SMEM: Table 2's count against the compiler's;
- time: the calibrated model's median predicted / measured at the cap and below it.
napkin calibrate stores the relation in the calibrated profile (hardware.RegisterRelation), where
resident blocks and legality follow it (analyzer.config.choose.registers_per_thread), and reports the
rest in docs/validation.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from analyzer.calibrate.components import legal_choice, model_of
from analyzer.calibrate.record import Record, read_json
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.config.choose import RESERVE_REGISTERS, table1_registers
from analyzer.hardware import Estimate, Profile, RegisterRelation

RELATION = ("r0", "kappa", "mu")     # compiler registers = r0 + kappa * table1 + mu * tile


class Compiled(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    diagram: str
    head_dim: int | None = None
    tiles: dict[str, int]
    num_warps: int = Field(gt=0)
    num_stages: int = Field(gt=0)
    registers: int | None = Field(None, ge=0, description="Registers per thread the compiler allotted.")
    spills: int | None = Field(None, ge=0, description="Bytes spilled to local memory.")
    shared_bytes: int | None = Field(None, ge=0)
    error: str | None = None

    @property
    def key(self) -> tuple:
        return (self.diagram, self.head_dim, tuple(sorted(self.tiles.items())), self.num_warps,
                self.num_stages)


class CompiledRecording(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    meta: dict
    records: list[Compiled]


def load_compiled(path: str | Path) -> CompiledRecording:
    """A compile recording, found by its checkout path from any folder as the recordings are."""
    path = resources.recording(Path(path))
    rec = read_json(path, CompiledRecording, missing=f"no such compile recording: {path}",
                    field="--registers", hint="give a compile recording's path, or record one with "
                                              "python bench/sweep_h200.py --compile-only on a GPU; napkin "
                                              "ships bench/results/compiled_h200.json")
    if not any(c.registers for c in rec.records):
        raise NapkinError(f"{path} records no registers", file=str(path), field="records",
                          hint="record it with python bench/sweep_h200.py --compile-only")
    return rec


@dataclass(frozen=True)
class Configuration:
    """One measured configuration with the model's and the compiler's counts."""

    family: str
    key: tuple
    model: float            # registers per thread: Table 1's share + reserve
    table1: float           # Table 1's share alone
    tile: float             # row block x stream chunk elements per thread
    compiler: int
    spills: int
    smem_model: float       # Table 2's bytes, every stage's buffers
    smem_compiler: int


@dataclass(frozen=True)
class FamilyRegisters:
    family: str
    count: int
    model_median: float
    compiler_median: float
    ratio_median: float      # compiler / model
    ratio_low: float
    ratio_high: float
    capped: int              # at the per-thread cap
    spilling: int
    smem_equal: int          # Table 2's SMEM equals the compiler's


@dataclass(frozen=True)
class RegisterFit:
    """The compiler's counts joined to the measured configurations, and the relation fitted to them."""

    source: str
    meta: dict
    cap: int                                  # registers per thread the GPU allows
    configurations: dict[str, Configuration]  # by the records' configuration key
    relation: dict[str, tuple[float, float]]  # r0, kappa, mu -> (value, bootstrap s.e.)
    rms: float                                # registers, of the relation, below the cap
    fitted: int

    def register_relation(self) -> RegisterRelation | None:
        if any(not np.isfinite(v) or v < 0 for v, _ in self.relation.values()):
            return None
        r0, kappa, mu = (Estimate(value=float(f"{v:.4g}"),
                                  uncertainty=float(f"{e:.2g}") if np.isfinite(e) else None)
                         for v, e in (self.relation[n] for n in RELATION))
        return RegisterRelation(offset=r0, table_scale=kappa, tile_scale=mu,
                                source=f"{self.source}: {self.meta.get('command', '?')}, "
                                       f"{self.meta.get('date', '?')}; {self.fitted} configurations below "
                                       f"the {self.cap}-register cap, least squares")


@dataclass(frozen=True)
class RegisterCheck:
    """What the report says: the counts per family, the relation, and the time model at the cap."""

    fit: RegisterFit
    families: list[FamilyRegisters]
    bias: dict[str, tuple[int, float]]        # "at the cap" / "below" -> (records, median pred / meas)
    misses: tuple[int, int]                   # sizes whose first choice is > 5 % off; of them, capped


def fit_registers(records: list[Record], path: str, base: Profile, *, samples: int = 200,
                  seed: int = 0) -> RegisterFit:
    """Join `path`'s compiler counts to the measured configurations and fit the relation."""
    compiled = load_compiled(path)
    by_key = {c.key: c for c in compiled.records if c.registers is not None}
    cap = base.registers.per_thread_max
    models: dict[tuple, tuple] = {}
    configs: dict[tuple, Configuration] = {}
    by_label: dict[str, Configuration] = {}
    for r in records:
        key = (r.diagram, r.head_dim, tuple(sorted(r.tiles.items())), r.num_warps, r.num_stages)
        c = by_key.get(key)
        if c is None:
            continue
        if key not in configs:
            m = (r.diagram, r.dtype, r.kernel)
            if m not in models:
                models[m] = model_of(r.diagram, r.dtype, r.kernel, base)[:2]
            choice = legal_choice(*models[m], base, r)
            threads = r.num_warps * base.threads.warp_size
            share = table1_registers(choice, base) or 0.0
            smem = sum(k.block_bytes + k.n * k.group_bytes for k in choice.report.capacity
                       if k.storage == "smem")
            configs[key] = Configuration(r.family, key, share + RESERVE_REGISTERS, share,
                                         choice.tile_elements / threads, c.registers, c.spills or 0,
                                         smem, c.shared_bytes or 0)
        by_label[r.config_key] = configs[key]
    if not configs:
        raise NapkinError(f"{path} has no configuration of the recording", field="--registers",
                          hint="pass the compile recording of the same sweep")
    relation, rms, fitted = _relation(list(configs.values()), cap, samples, seed)
    return RegisterFit(path, compiled.meta, cap, by_label, relation, rms, fitted)


def check_registers(fit: RegisterFit, records: list[Record], predicted: np.ndarray,
                    shapes: list) -> RegisterCheck:
    """The calibrated model's bias at the cap and below, and how many of its missed first choices
    (`shapes`: validate.ShapeResult per size) the compiler caps."""
    at = {r.config_key: fit.configurations.get(r.config_key) for r in records}
    capped = np.array([(at[r.config_key] is not None and at[r.config_key].compiler >= fit.cap)
                       for r in records])
    joined = np.array([at[r.config_key] is not None for r in records])
    ratio = predicted / np.array([r.time_s for r in records])
    bias = {name: (int(m.sum()), float(np.median(ratio[m])) if m.any() else float("nan"))
            for name, m in (("at the cap", joined & capped), ("below", joined & ~capped))}
    missed = [s for s in shapes if s.chosen_over_best > 1.05]
    hit = sum(1 for s in missed if (c := fit.configurations.get(s.chosen)) is not None
              and (c.compiler >= fit.cap or c.spills > 0))
    rows = list({c.key: c for c in fit.configurations.values()}.values())
    return RegisterCheck(fit, _families(rows, fit.cap), bias, (len(missed), hit))


def _families(rows: list[Configuration], cap: int) -> list[FamilyRegisters]:
    out = []
    for fam in sorted({c.family for c in rows}):
        fr = [c for c in rows if c.family == fam]
        model = np.array([c.model for c in fr])
        comp = np.array([c.compiler for c in fr], dtype=np.float64)
        ratio = comp / model
        out.append(FamilyRegisters(fam, len(fr), float(np.median(model)), float(np.median(comp)),
                                   float(np.median(ratio)), float(ratio.min()), float(ratio.max()),
                                   int((comp >= cap).sum()), sum(c.spills > 0 for c in fr),
                                   sum(c.smem_model == c.smem_compiler for c in fr)))
    return out


def relation_fit(table1: np.ndarray, tile: np.ndarray, compiler: np.ndarray) -> np.ndarray:
    """Least squares r0, kappa, mu of compiler = r0 + kappa * table1 + mu * tile."""
    x = np.stack([np.ones(len(table1)), table1, tile], axis=1)
    return np.linalg.lstsq(x, compiler, rcond=None)[0]


def _relation(rows: list[Configuration], cap: int, samples: int, seed: int):
    below = [c for c in rows if c.compiler < cap]
    t1 = np.array([c.table1 for c in below])
    tile = np.array([c.tile for c in below])
    comp = np.array([c.compiler for c in below], dtype=np.float64)
    if len(below) < 2 * len(RELATION):
        nan = (float("nan"), float("nan"))
        return dict.fromkeys(RELATION, nan), float("nan"), len(below)
    coef = relation_fit(t1, tile, comp)
    rng = np.random.default_rng(seed)
    draws = [relation_fit(t1[i], tile[i], comp[i])
             for i in (rng.integers(0, len(below), len(below)) for _ in range(samples))]
    spread = np.std(draws, axis=0, ddof=1)
    rms = float(np.sqrt(np.mean((coef[0] + coef[1] * t1 + coef[2] * tile - comp) ** 2)))
    return ({n: (float(v), float(s)) for n, v, s in zip(RELATION, coef, spread, strict=True)}, rms,
            len(below))


def markdown(c: RegisterCheck) -> list[str]:
    """The report's section."""
    f = c.fit
    r0, kappa, mu = (f.relation[n] for n in RELATION)
    lines = ["## Registers and SMEM: the model's count against the compiler's", "",
             f"**Data.** `{f.source}` (`{f.meta.get('command', '?')}`, {f.meta.get('date', '?')}, triton "
             f"{f.meta.get('triton', '?')}): the registers per thread, spilled bytes and SMEM bytes the "
             "compiler allotted each measured configuration. The datasheet model assumes a thread uses "
             "Table 1's share of the arrays kept in registers plus a reserve of "
             f"{RESERVE_REGISTERS} (resident blocks and legality follow from it), and Table 2's SMEM.", "",
             "| family | configs | Table 1 + reserve (median) | compiler (median) | compiler / model: "
             f"median (range) | at the {f.cap} cap | spilling | SMEM as Table 2 |",
             "|---|---|---|---|---|---|---|---|"]
    for fam in c.families:
        lines.append(f"| {fam.family} | {fam.count} | {fam.model_median:.0f} | {fam.compiler_median:.0f} | "
                     f"{fam.ratio_median:.2f} ({fam.ratio_low:.2f} to {fam.ratio_high:.2f}) | {fam.capped} | "
                     f"{fam.spilling} | {fam.smem_equal} of {fam.count} |")
    lines += ["", f"Below the cap ({f.fitted} configurations) the compiler allots r0 + κ · (Table 1's "
              "share) + μ · (row block × stream chunk per thread) registers, with "
              f"r0 = {r0[0]:.1f} ± {r0[1]:.1f}, κ = {kappa[0]:.2f} ± {kappa[1]:.2f}, "
              f"μ = {mu[0]:.2f} ± {mu[1]:.2f} (bootstrap s.e.), RMS {f.rms:.0f} registers. "
              "μ is what Table 1 leaves out per element of the row block × stream chunk tile (the "
              "hypothesis: copies of the scores in attention, the streamed operand's fragments in the "
              "matmul). The calibrated profile carries this relation (`calibration.registers`): its "
              "resident blocks follow it, and `napkin sweep` drops the configurations it puts at the "
              "cap.", ""]
    at, below = c.bias["at the cap"], c.bias["below"]
    misses = (f"Of the {c.misses[0]} sizes whose first choice (calibrated) is more than 5 % slower than "
              f"the best, {c.misses[1]} chose a configuration the compiler caps at {f.cap} registers or "
              "spills." if c.misses[0] else
              "No size's first choice (calibrated) is more than 5 % slower than the best.")
    lines += [f"Measured records at the cap: {at[0]}, where the calibrated model's median predicted / "
              f"measured is {at[1]:.2f}; below it: {below[0]}, median {below[1]:.2f}. {misses}", ""]
    return lines
