"""What `napkin configure` and napkin report's Section 5 analyse: the configuration napkin kernel launches.

One screen, one configuration: the tables analyse the configuration napkin kernel launches at the sizes
given, whose expected time the screen states (analyzer.config.launch), unless the command asks for
another: a configuration the diagram file names (--config), Section 5's own variables (w_q, u_x, c_x,
..., N, stages, rows), a strategy or an overlap. The tables then analyse that one, and the screen says
why it is not the launched one; it says so too where Section 5 cannot express the launched
configuration, or napkin kernel generates none (the configuration then comes from napkin analyze's
tiles, as analyzer.config.configure derives it).

The launched configuration in Section 5's variables:
- the Hopper kernel (analyzer.config.hopper): N consumer warpgroups of w rows (g = N w query rows a
  block; every other grouped axis one index a block), the chunk s, `stages` buffers per streamed load,
  the overlap Section 6's schedule models it with (intra where the kernel overlaps within a warpgroup,
  else inter, as the kernel's own model does), and the chunks loaded from L2 (the blocks of one head
  share them: the model's LOADS_FROM, where the paper's B.0.1 loads from GMEM);
- the portable module: its tiles and stages; Section 5 counts N = g / w thread groups of the tensor
  cores' m rows, whatever number of warps the module runs a block with. Its SMEM verdict is the
  module's own allocation (analyzer.config.allocation), the legality napkin kernel chose it by: Table 2
  charges each thread group its own fragment buffers and `stages` buffers per streamed load, where the
  module shares one tile a block and Triton keeps fewer buffers, so Table 2 may exceed the limit for a
  kernel that runs. The screen then states both: the verdict, and Table 2's excess as a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.config.chain import ChainConfig
from analyzer.config.choose import smem_limit
from analyzer.config.configure import configure, names_of, schedule_of
from analyzer.config.hopper import LOADS_FROM
from analyzer.config.launch import Expected, expected_at, expected_out, portable_label
from analyzer.config.result import ConfigurationReport
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention, interface
from analyzer.hardware import Profile
from analyzer.model.analysis import load, partition_symbols

LAUNCHED = "launched"
TITLE = "what napkin kernel launches at these sizes"


@dataclass(frozen=True)
class Screen:
    """napkin configure's arguments for the configuration a screen analyses (the overlap schedule's
    figure draws the same one)."""

    config: str | None = None
    sets: dict[str, int] = field(default_factory=dict)
    strategy: str | None = None
    overlap: str | None = None
    loads_from: str | None = None
    notes: tuple[str, ...] = ()
    derived_from: str | None = None      # the launched configuration, as its head names it
    allocated: int | None = None         # SMEM a block of the launched portable module allocates


def configure_screen(diagram: str | Diagram, gpu: str | Profile, *, config: str | None = None,
                     sets: dict[str, int] | None = None, dtype: str | None = None, overhead: float = 0.0,
                     strategy: str | None = None, overlap: str | None = None
                     ) -> tuple[ConfigurationReport, Screen]:
    """Section 5's tables of the configuration napkin kernel launches at the sizes `sets` gives, with
    its expected time; of the one the arguments ask for where they ask for another (the report's
    `other` says which and why). Also the arguments the tables were configured with. `diagram`: a name,
    a file, or the diagram as compiled from its file."""
    profile = hardware.load(gpu)
    diagram = load(diagram)             # read once: the expected time and the tables share it
    base = load(diagram, dtype=dtype)
    asked = Screen(config, dict(sets or {}), strategy, overlap)
    try:
        e, absent = expected_at(diagram, profile, dtype=dtype, sets=asked.sets), None
    except NapkinError as exc:
        e, absent = None, exc.message
    why = _asked(base, asked)
    if why is None and e is None:
        why = "napkin kernel generates no kernel here"
    if why is None:
        try:
            screen = _launched(base, e, asked.sets)
            report = _configure(base, profile, screen, dtype, overhead)
        except NapkinError as exc:
            why = f"Section 5 cannot express the launched one ({exc.message})"
    if why is not None:
        screen = asked
        report = _configure(base, profile, screen, dtype, overhead)
    c = report.configuration
    if why is None:
        c = c.model_copy(update={"name": LAUNCHED, "title": TITLE, "derived_from": screen.derived_from})
        report = _allocated_verdict(report, screen, profile)
    return report.model_copy(update={
        "configuration": c, "notes": [*report.notes, *screen.notes],
        "expected": expected_out(e) if e else None, "expected_absent": absent,
        "launched": why is None, "other": why}), screen


def _configure(base: Diagram, profile: Profile, s: Screen, dtype: str | None, overhead: float
               ) -> ConfigurationReport:
    return configure(base, profile, config=s.config, sets=s.sets, dtype=dtype, overhead=overhead,
                     strategy=s.strategy, overlap=s.overlap, loads_from=s.loads_from)


def _allocated_verdict(report: ConfigurationReport, screen: Screen, profile: Profile
                       ) -> ConfigurationReport:
    """The launched portable module's SMEM verdict from its own allocation; Table 2's SMEM excess, where
    there is one, becomes a note (the module's docstring says why the two differ)."""
    if screen.allocated is None:
        return report
    limit = smem_limit(profile)
    smem = [p for p in report.problems if p.startswith("smem: ")]
    rest = [p for p in report.problems if p not in smem]
    if screen.allocated > limit:
        rest.insert(0, f"smem: the portable module allocates {screen.allocated} B a block, more than the "
                       f"{limit:.0f} B a block may use")
    notes = [(f"smem: a block of the portable module allocates {screen.allocated} B of the {limit:.0f} B it "
              "may use (analyzer.config.allocation, the legality napkin kernel chose it by)")]
    notes += [f"Table 2's count, not the module's: {p}" for p in smem]
    return report.model_copy(update={"fits": not rest, "problems": rest,
                                      "notes": [*report.notes, *notes]})


def _asked(base: Diagram, s: Screen) -> str | None:
    """Why the arguments ask for another configuration than the launched one, or None."""
    known = {x.name for x in base.size_symbols} | set(partition_symbols(base))
    own = [k for k in s.sets if k not in known]      # napkin kernel takes sizes and tiles alone
    words = ([f"--config {s.config}"] if s.config else []) + [f"--set {k}" for k in own] + \
        ([f"--strategy {s.strategy}"] if s.strategy else []) + ([f"--overlap {s.overlap}"] if s.overlap else [])
    return f"{', '.join(words)} asked for it" if words else None


def _launched(base: Diagram, e: Expected, sets: dict[str, int]) -> Screen:
    """The launched configuration `e` as napkin configure's arguments, with the sizes `sets` gives."""
    s = schedule_of(base)
    part = s.partition
    sizes = {k: v for k, v in sets.items() if k in {x.name for x in base.size_symbols}}
    if e.hopper is not None:
        c = e.hopper
        roles = interface(base)
        if not isinstance(roles, Attention) or roles.seq_q not in part.group_sizes or part.stream is None:
            raise NapkinError(f"kernel {s.kernel.name!r} does not block the queries as the Hopper kernel does")
        tiles = {sym.name: 1 for sym in part.group_sizes.values()}     # one head a block ...
        tiles[part.group_sizes[roles.seq_q].name] = c.block_rows       # ... and g = N w of its queries
        tiles[part.stream[1].name] = c.chunk
        overlap = "intra" if c.intra else "inter"
        notes = [(f"loads from {LOADS_FROM.upper()}: the blocks of one head share each chunk of the streamed "
                  "operands, as the Hopper kernel's model counts them (the paper's B.0.1 loads from GMEM)")]
        if c.overlap != overlap:
            notes.append(f"overlap {c.overlap}: Section 6's schedule takes it as {overlap}, as the Hopper "
                         "kernel's model does")
        return Screen(sets={**sizes, **tiles, "N": c.warpgroups, names_of(s).w: c.rows, "stages": c.stages},
                      overlap=overlap, loads_from=LOADS_FROM, notes=tuple(notes),
                      derived_from=f"the Hopper kernel napkin kernel generates, launching {e.configuration}")
    if e.contraction:
        return _contraction_screen(base, e, s, sizes)
    choice = next((ch for ch in e.portable if ch.kernel == s.kernel.name), None)
    if choice is None:
        raise NapkinError(f"napkin kernel launches no configuration of kernel {s.kernel.name!r}")
    note = (f"N counts Section 5's thread groups of {names_of(s).w} rows (the tensor cores' m); the portable "
            f"module runs a block with {choice.num_warps} warps")
    which, notes = "", [note]
    if len(e.portable) > 1:
        which = f" for kernel {s.kernel.name}"
        notes.append(f"napkin kernel launches {len(e.portable)} kernels; Section 5 configures one, "
                     f"{s.kernel.name}, the first that streams an axis into a contraction")
    return Screen(sets={**sizes, **choice.tiles, "stages": choice.num_stages}, notes=tuple(notes),
                  allocated=choice.smem_bytes, derived_from=f"the portable {e.backend} module napkin kernel generates, launching{which} "
                               f"{portable_label(choice)}")


def _contraction_screen(base: Diagram, e: Expected, s, sizes: dict[str, int]) -> Screen:
    """The Hopper contraction kernel's launched configuration of kernel `s` as napkin configure's
    arguments: its tile of rows and columns, its chunk, its consumer warpgroups of w rows, its stages."""
    c = e.contraction[[k.name for k in base.kernels].index(s.kernel.name)]
    part = s.partition
    if isinstance(c, ChainConfig):      # its rows' tile and its chunk; the mid ops under the second contraction
        rows = next(iter(part.group_sizes.values())).name
        notes = ("the Hopper chain kernel's consumers each run both contractions of w rows on wgmma, the ops "
                 "between them under the next chunk's (intra-warpgroup); Section 5's tables count its rings of B "
                 "chunks, its rows of A and its accumulators",)
        return Screen(sets={**sizes, rows: c.block_m, part.stream[1].name: c.block_f, "N": c.warpgroups,
                            names_of(s).w: c.rows, "stages": c.stages}, overlap="intra", loads_from=LOADS_FROM,
                      notes=notes, derived_from=f"the Hopper chain kernel napkin kernel generates, launching "
                                                f"{e.configuration}")
    dot = next(o for o in s.ops if o.primitive.contraction)
    rows = next(a for a in base.arrays[dot.operands[0]].axes if a != dot.applied.over)
    cols = next(a for a in base.arrays[dot.operands[1]].axes if a != dot.applied.over)
    tiles = {part.group_sizes[rows].name: c.block_m, part.group_sizes[cols].name: c.block_n,
             part.stream[1].name: c.block_k}
    notes = ("the Hopper contraction kernel's consumers each contract w rows of the tile on wgmma; Section 5's "
             "tables count its ring of A and B chunks and its accumulators, not its staging tile of the output",)
    return Screen(sets={**sizes, **tiles, "N": c.warpgroups, names_of(s).w: c.rows, "stages": c.stages},
                  loads_from=LOADS_FROM, notes=notes,
                  derived_from=f"the Hopper contraction kernel napkin kernel generates, launching {e.configuration}")


__all__ = ["Screen", "configure_screen"]
