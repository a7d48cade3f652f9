"""napkin measure --sweep: every legal configuration of the Hopper attention kernel a diagram generates,
checked and timed on the GPU at hand at the FlashAttention-3 grid's sizes, written as the recording
`napkin calibrate --kernel hopper` fits (the format bench/hopper_sweep.py writes), so that a user fits
the model to their own GPU in one pair of commands. Where the GPU's kernel for the diagram is the
portable module (every GPU before Hopper), analyzer.measure.sweep_portable sweeps it for the portable
kernels' fit; where it is the Hopper contraction kernel, analyzer.measure.sweep_contraction for that
kernel's fit.

    the diagram's Hopper module (analyzer.codegen.generate, backend hopper), its head dim and mask
    -> the grid (Grid): 16384 tokens (batch x sequence) and a hidden size of 2048 (heads x head dim) at
       lengths 1k to 16k and head dims 64, 128 and 256, FlashAttention-3's grid (its Figure 5; the model's
       held-out length among them)
    -> the legal configurations the model ranks there (analyzer.config.hopper.ranked), as the grid's
       design asks (`sampled`, the default: the design the shipped fits' recordings were timed on,
       bench/hopper_sweep.py's; `full`: every one at every length), each checked once against float64
       at a small odd shape (CHECK_AT), then timed at every length it is legal at
       (analyzer.measure.timing), the model's prediction and rank beside it
    -> the recording: meta (date, command, device, profile, timer) and a record per configuration and
       length (kind "grid"), a configuration that fails its check or its launch recorded as an error
"""

from __future__ import annotations

import datetime
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.common.progress import Progress, silent
from analyzer.config import hopper
from analyzer.diagram.interface import Attention
from analyzer.measure.ahead import default_workers
from analyzer.measure.device import Device, local_device, profile_for, torch_module
from analyzer.measure.reference import inputs
from analyzer.measure.result import TimingOut
from analyzer.measure.run import DTYPES, SEED, measurable, written
from analyzer.measure.sweep_contraction import ContractionGrid, ContractionRun
from analyzer.measure.sweep_portable import PortableGrid, PortableRun
from analyzer.measure.timing import REP_MS, timed
from analyzer.measure.trial import CHECK_AT, Trials, attention_sizes, finish, small

HEAD_DIMS = (64, 128, 256)    # where V's head dim is the query's: FlashAttention-3's grid's; else the diagram's
DESIGNS = ("sampled", "full")
ALL_STAGES_AT = (2048, 8192)  # sampled: the lengths at which every stage count is timed
PERSISTENT_TOP = 6            # sampled: the block-an-SM schedules timed for the model's first tile configurations
PREFETCH_AT = (512, 1024, 2048)   # sampled: the lengths at which the prefetch schedule is timed (where it ranks)


@dataclass(frozen=True)
class Grid:
    """The sizes swept: `tokens` (batch x sequence) at each length, a hidden size of `hidden` (heads x
    head dim), each head dim; FlashAttention-3's grid by default (its Figure 5), the model's held-out
    length (analyzer.calibrate.hopper.HELD_OUT_SEQLEN) among the lengths."""

    tokens: int = 16384
    hidden: int = 2048
    lengths: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)
    head_dims: tuple[int, ...] = HEAD_DIMS
    design: str = "sampled"       # which configurations a length times (sampled; DESIGNS)


def fewest_stages(tiles: list[Any]) -> list[Any]:
    """Configurations in the model's order, only the fewest stages of each (warpgroups, chunk, overlap) and
    the model's first choice: what the sampled design times outside ALL_STAGES_AT (bench/hopper_sweep.py's
    candidates too), the stage count being what moves a time least."""
    fewest: dict[tuple, int] = {}
    for c in tiles:
        key = (c.warpgroups, c.chunk, c.overlap)
        fewest[key] = min(fewest.get(key, c.stages), c.stages)
    return [c for i, c in enumerate(tiles) if i == 0 or c.stages == fewest[(c.warpgroups, c.chunk, c.overlap)]]


def sampled(ranked: list[tuple[float, Any]], length: int) -> list[tuple[float, Any]]:
    """The configurations the shipped fits' recordings timed at a length (bench/hopper_sweep.py's
    candidates; the model's order kept): with the tiles schedule, every one at ALL_STAGES_AT and elsewhere
    the fewest stages of each (warpgroups, chunk, overlap) and the model's first choice; with a schedule of
    a block an SM, the model's first PERSISTENT_TOP of those (prefetch at PREFETCH_AT alone, the lengths of
    the H200's sweep of it). A fit depends on the design as well as on
    the GPU (docs/measure.md): the same GPU's full grid and this one differ beyond the fits' standard
    errors in the schedules' parameters, so a user's fit is held against the shipped one on this design."""
    tiles = [c for _, c in ranked if c.schedule == "tiles"]
    tiles = tiles if length in ALL_STAGES_AT else fewest_stages(tiles)
    first = {(c.warpgroups, c.chunk, c.stages, c.overlap) for c in tiles[:PERSISTENT_TOP]}
    kept = {id(c) for c in tiles}
    return [(t, c) for t, c in ranked if id(c) in kept
            or (c.schedule != "tiles" and (c.warpgroups, c.chunk, c.stages, c.overlap) in first
                and (c.schedule != "prefetch" or length in PREFETCH_AT))]


def sweep(diagram: str, gpu: str | None = None, *, sets: dict[str, int] | None = None, grid: Grid = Grid(),
          portable: PortableGrid = PortableGrid(), contraction: ContractionGrid = ContractionGrid(),
          rep_ms: float = REP_MS, device: Device | None = None, tensors_on: str = "cuda",
          timer: Callable[[Callable[[], Any], float], TimingOut] = timed,
          launch: Callable[..., Any] | None = None, command: str = "", workers: int | None = None,
          progress: Progress = silent) -> dict:
    """The recording of every legal configuration of `diagram`'s kernel on the local GPU: the Hopper
    attention kernel's at `grid`'s sizes, the Hopper contraction kernel's at `contraction`'s
    (analyzer.measure.sweep_contraction), or the portable module's at `portable`'s (analyzer.measure
    .sweep_portable), its configurations compiled first by `workers` processes (analyzer.measure.ahead;
    default: a core each but one).
    `device`, `tensors_on`, `timer` and `launch` (the call of one configuration: launch(module's wrapper,
    tensors, keywords, entry)) are for running the pipeline elsewhere than on a Hopper GPU (the tests;
    a launch of their own compiles nothing ahead)."""
    torch = torch_module()
    device = device or local_device()
    profile = hardware.load(gpu or profile_for(device))
    g = generate(diagram, profile, sets=sets)
    measurable(g)
    if g.contraction is not None:     # the Hopper contraction kernel: its fit's recording
        with tempfile.TemporaryDirectory(prefix="napkin-sweep-") as tmp:
            module, entry, wrapper = written(g, Path(tmp))
            run = ContractionRun(g, profile, wrapper, torch, getattr(torch, DTYPES[g.dtype]), tensors_on, timer,
                                 launch or _launch, rep_ms, progress, module=module, entry=entry,
                                 workers=_workers(workers, launch), diagram=diagram)
            records = run.records(contraction)
        return {"meta": _meta(device, profile, torch, command, run.methods, run.where, f" --kernel {run.fit}"),
                "env": {"gpu": device.name}, "gpu_profile": profile.name, "records": records}
    workers = _workers(workers, launch)
    launch = launch or _launch
    if g.hopper is None:         # the portable module: its two families' recording (napkin calibrate)
        with tempfile.TemporaryDirectory(prefix="napkin-sweep-") as tmp:
            module, entry, wrapper = written(g, Path(tmp))
            run = PortableRun(g, profile, wrapper, torch, getattr(torch, DTYPES[g.dtype]), tensors_on, timer,
                              launch, rep_ms, progress, module=module, entry=entry, workers=workers,
                              diagram=diagram)
            records = run.records(portable)
        return {"meta": _meta(device, profile, torch, command, run.methods,
                              f"attention: {portable.tokens} tokens, hidden {portable.hidden}, lengths "
                              f"{list(portable.lengths)}, head dims {list(portable.head_dims)}; matmul: sides "
                              f"{list(portable.sides)}", ""), "records": records}
    with tempfile.TemporaryDirectory(prefix="napkin-sweep-") as tmp:
        module, entry, wrapper = written(g, Path(tmp))
        run = _Run(g, profile, wrapper, torch, getattr(torch, DTYPES[g.dtype]), tensors_on, timer, launch, rep_ms,
                   progress, module=module, entry=entry, workers=workers,
                   chain=hopper.scores(g.as_launch.configured))
        at = g.axis_sizes({})
        own = at(g.roles.head_dim)
        head_dims = grid.head_dims if at(g.roles.value_dim) == own else (own,)
        points = [run.point(grid, length, d) for d in head_dims for length in grid.lengths]
        run.total = sum(len(p[-1]) for p in points) + len({(p[0], json_key(c.entry())) for p in points
                                                           for _, c in p[-1]})
        run.ahead([(at, c.entry()) for d, _, sizes, *_, ranked in points
                   for _, c in ranked for at in (small(g, d), sizes)])     # where it is checked, and timed
        records = [rec for p in points for rec in run.timed(p)]
    return {"meta": _meta(device, profile, torch, command, run.methods,
                          f"{grid.tokens} tokens, hidden {grid.hidden}, lengths {list(grid.lengths)}, head dims "
                          f"{list(head_dims)}, {grid.design} design", " --kernel hopper"), "records": records}


def _launch(fn, xs, kwargs, entry):
    """One configuration's call: the module's wrapper with `entry` as its configuration."""
    return fn(*xs, **kwargs, config=entry)


def _workers(workers: int | None, launch) -> int:
    """The processes compiling ahead: `workers`, else a core each but one, none for a launch of the tests'."""
    if workers is not None:
        return workers
    return default_workers() if launch is None else 1


def _meta(device: Device, profile, torch, command: str, methods: set, grid: str, calibrate: str) -> dict:
    """The recording's meta; `calibrate`: the option napkin calibrate fits its records with."""
    return {"date": datetime.date.today().isoformat(), "command": command, "gpu": device.name,
            "profile": profile.name, "sm_count": device.sm_count, "timer": "; ".join(sorted(methods)),
            "torch": torch.__version__, "grid": grid, "checked_at": CHECK_AT, "calibrate": calibrate}


@dataclass
class _Run(Trials):
    """One sweep of the Hopper attention kernel: its chain of scores, and how many trials in all."""

    chain: Any = None

    def point(self, grid: Grid, length: int, head_dim: int) -> tuple:
        r: Attention = self.g.roles
        sizes = attention_sizes(self.g, grid.tokens, grid.hidden, length, head_dim)
        shapes, _ = inputs(self.g, sizes)
        batch, heads_q, heads_kv = shapes[0][0], shapes[0][1], shapes[1][1]
        value_dim = shapes[2][3] if shapes[2][3] != head_dim else None
        ranked = hopper.ranked(self.profile, head_dim, self.g.dtype, seq_q=length, seq_k=length,
                               instances=batch * heads_q, causal=r.causal, scores=self.chain, value_dim=value_dim)
        ranks = {id(c): i for i, (_, c) in enumerate(ranked, 1)}         # the model's rank of each, in all
        if grid.design == "sampled":
            ranked = sampled(ranked, length)
        return head_dim, length, sizes, batch, heads_q, heads_kv, value_dim, ranks, ranked

    def timed(self, point: tuple) -> list[dict]:
        head_dim, length, sizes, batch, heads_q, heads_kv, value_dim, ranks, ranked = point
        self.check(head_dim, [(json_key(c.entry()), c.entry()) for _, c in ranked])
        xs, kwargs = self.tensors(sizes, SEED + length)
        records = []
        for predicted, c in ranked:
            rank = ranks[id(c)]
            self.progress("sweep: time", self.done, self.total)
            self.done += 1
            rec = {"kind": "grid", "diagram": self.g.diagram.name, "dtype": self.g.dtype, "head_dim": head_dim,
                   "causal": self.g.roles.causal, "batch": batch, "heads_q": heads_q, "heads_kv": heads_kv,
                   "seq_q": length, "seq_k": length, "value_dim": value_dim, "config": c.entry(),
                   "model_rank": rank, "predicted_s": predicted}
            records.append(finish(rec, self.failed.get((head_dim, json_key(c.entry()))), self.timer,
                                  lambda c=c: self.launch(self.wrapper, xs, kwargs, c.entry()), self.rep_ms,
                                  self.methods))
        return records


class Recorded(BaseModel):
    """What a sweep added to must be: a recording of either kind, its meta and its records (each kind's
    loader, napkin calibrate's, checks the records themselves)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    meta: dict
    records: list[dict]


def json_key(entry: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(entry.items()))


__all__ = ["ALL_STAGES_AT", "DESIGNS", "HEAD_DIMS", "PERSISTENT_TOP", "PREFETCH_AT", "Grid", "Recorded",
           "fewest_stages", "sampled", "sweep"]
