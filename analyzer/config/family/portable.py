"""The portable families: the Triton module (every GPU, every diagram) and the CUDA kernels.

Both run the diagram's own plan (analyzer.config.kernels: weave, schedule, a configuration per head dim)
and are timed by the portable kernels' model (analyzer.config.predict), calibrated where a sweep of them
was fitted on the GPU (hardware.portable_model: a shipped datasheet profile borrows its calibrated
sibling's fit). The Triton module chooses a configuration per call from a by-size table; the CUDA
kernels run the configuration of the diagram's default sizes, clamped to what their loader launches
(analyzer.codegen.cuda: the generator hands this family the configurations as run).
"""

from __future__ import annotations

import time

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.common.expr import at
from analyzer.common.progress import Progress
from analyzer.config.choose import legal, rank_at, same_config
from analyzer.config.configure import schedule_of
from analyzer.config.family.base import Accuracy, Expected, Family, Launch
from analyzer.config.kernels import configure_kernels
from analyzer.config.predict import predict_configured
from analyzer.config.ranking import Row, Sweep, portable_label
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention, interface
from analyzer.diagram.weave import outer_tiles, weave_diagram
from analyzer.hardware import Profile
from analyzer.model.analysis import TermModel, load, resolve_sizes
from analyzer.model.predict import kernel_parts


class Portable(Family):
    """The portable Triton module: it realises every diagram napkin compiles."""

    name = "triton"
    title = "the portable Triton module"
    fit = "portable"
    sized = True

    def take(self, diagram, profile, *, dtype, config, sets, tables):
        # ranked by the portable kernels' fit where one was measured on this GPU (hardware.portable_model)
        return Launch(self, configure_kernels(diagram, hardware.portable_model(profile), dtype=dtype,
                                              config=config, sets=sets, sized=self.sized))

    def expected(self, launched, profile, sizes):
        c = launched.configured
        fitted = hardware.portable_model(profile)      # what take() ranked the configurations with
        p = predict_configured(c, fitted, sizes)
        launched_choices = c.launched(sizes)
        label = "; ".join(portable_label(choice) for choice in launched_choices)
        if fitted.portable_fitted:
            model, calibrated = f"the portable kernel's model calibrated on {fitted.name}", True
        else:
            model, calibrated = ("the paper's idealised model with napkin sweep's terms: no one has fitted the "
                                 f"portable kernel's model on {profile.name}"), False
        return Expected(self.name, label, p.time_s, p.flops, p.bound, model, calibrated, dict(p.sizes),
                        portable=tuple(launched_choices), kernel=self.title)

    def allocated(self, launched, profile, sizes):
        return [c.smem_bytes for c in launched.configured.launched(sizes)]

    def accuracy(self, profile):
        fitted = hardware.portable_model(profile)
        held = {family: f"{_pct(h.median)}" + (f" (90th percentile {_pct(h.p90)})" if h.p90 is not None else "")
                + f" on {family}" for family, h in fitted.calibration.held_out().items()} \
            if fitted.calibration else {}
        return Accuracy("the portable kernel's model", fitted.name, held)

    def sweep(self, diagram, profile, *, dtype, sets, kernel, progress, sibling_fit):
        return _sweep(self, diagram, profile, dtype=dtype, sets=sets, kernel=kernel, progress=progress,
                      sibling_fit=sibling_fit)


class Cuda(Portable):
    """The CUDA kernels and their loader: the portable plan in CUDA C++, for GPUs before Hopper too."""

    name = "cuda"
    title = "the CUDA kernels"
    sized = False
    ranks = False
    language = "cuda"
    as_run = ", as the CUDA kernel runs it"

    def allocated(self, launched, profile, sizes):
        return [None] * len(launched.configured.kernels)      # the CUDA backend clamps its own

    def sweep(self, diagram, profile, *, dtype, sets, kernel, progress, sibling_fit):
        return "napkin sweep ranks the hopper or the triton backend's configurations"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _sweep(family: Portable, diagram: str | Diagram, profile: Profile, *, dtype: str, sets: dict[str, int],
           kernel: str | None, progress: Progress, sibling_fit: bool) -> list[Sweep]:
    """The portable module's legal configurations of each kernel (or of `kernel`), ranked at `sets`."""
    began = time.perf_counter()
    profile.check_dtype(dtype)
    own = profile
    if sibling_fit:
        profile = hardware.portable_model(profile)
    diagram = load(diagram)          # read once: take() below configures it as compiled here
    base = load(diagram, dtype=dtype)
    roles = interface(base)
    woven = weave_diagram(base, roles.outer)
    size_names = {s.name for s in woven.size_symbols}
    tile_names = {s.name for k in base.kernels for p in k.partitions.values() for s in p.symbols}
    unknown = sorted(set(sets) - size_names - tile_names)
    if unknown:
        raise NapkinError(f"--set {unknown[0]}: {woven.name} has no size or tile size {unknown[0]!r}",
                          hint=f"sizes: {', '.join(sorted(size_names))}; tiles: "
                               f"{', '.join(sorted(tile_names))}")
    sizes, _ = resolve_sizes(woven, {k: v for k, v in sets.items() if k in size_names})
    shown = {s.name: int(v) for s, v in sizes.items()}
    pins = {k: v for k, v in sets.items() if k in tile_names}
    head_pin = {}
    if isinstance(roles, Attention):     # legality as the generator judges it: per head dim
        head = base.size(roles.head_dim)
        value = int(at(woven.size(roles.head_dim), sizes))
        head_pin = {str(s): value for s in head.free_symbols}
        pins.update(head_pin)
    names = [k.name for k in woven.kernels]
    if kernel is not None and kernel not in names:
        raise NapkinError(f"--kernel {kernel}: {woven.name} has no such kernel",
                          hint=f"its kernels: {', '.join(names)}")
    ranking = [kernel] if kernel else names
    for name in ranking:        # a kernel with nothing to configure below SMEM: say so before ranking any
        try:
            schedule_of(base, name)
        except NapkinError as exc:
            if len(names) == 1:
                raise
            others = [n for n in names if n != name and _configurable(base, n)]
            raise NapkinError(f"kernel {name!r} of {woven.name} streams no axis into a contraction: there is "
                              "nothing to configure below SMEM", file=exc.file,
                              hint=(f"rank the others alone: --kernel {' or --kernel '.join(others)}" if others
                                    else exc.hint)) from None
    # what napkin kernel launches at these sizes: its configuration for this head dim alone (the module
    # configures every head dim; the others cannot be what a call at these sizes launches)
    launched = family.take(diagram, own, dtype=dtype, config=None, sets={**sets, **head_pin}, tables=True)
    e = family.expected(launched, own, shown)
    chosen = dict(zip(names, launched.configured.launched(shown), strict=True))
    progress("configure", 1, 1)
    out = []
    for i, name in enumerate(ranking):
        progress("rank", i, len(ranking))
        choices = legal(base, profile, name, pins, dtype)
        ones = outer_tiles(woven, roles.outer)
        ranked, terms = rank_at(TermModel(woven, profile, name), profile, shown, choices, ones)
        parts = kernel_parts(terms.values, terms.weights, profile, dtype)
        index = {id(c): i for i, c in enumerate(choices)}
        rows = [Row(c.kernel, dict(c.tiles), ones, c.num_warps, c.num_stages, t, f, parts.bound(index[id(c)]))
                for c, t, f in ranked]
        at_row = next((i for i, (c, _, _) in enumerate(ranked) if same_config(c, chosen[name])), None)
        # the rows' model: napkin kernel's (e.model), unless sibling_fit=False ranked with other figures
        model = e.model if launched.configured.gpu == profile.name else (
            f"the paper's idealised model with napkin sweep's terms ({profile.name}'s own figures)")
        out.append(Sweep(woven.name, profile.name, profile.portable_fitted, dtype, name, shown,
                         rows, 0.0, family.name, model, at_row, e))
    progress("rank", len(ranking), len(ranking))
    elapsed = time.perf_counter() - began
    return [Sweep(**{**s.__dict__, "seconds": elapsed}) for s in out]


def _configurable(d, kernel: str) -> bool:
    try:
        schedule_of(d, kernel)
    except NapkinError:
        return False
    return True


__all__ = ["Cuda", "Portable"]
