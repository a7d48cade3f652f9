"""One configuration's trial in a sweep (analyzer.measure.sweep, sweep_portable): the shapes it runs at,
its check against float64 and its timing, each failure kept as the record's error, not raised."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzer.common.progress import Progress
from analyzer.config.by_size import length_axes
from analyzer.diagram.interface import Attention
from analyzer.measure.ahead import compile_ahead
from analyzer.measure.reference import inputs, reduction, reference, tolerance
from analyzer.measure.result import TimingOut
from analyzer.measure.run import DTYPES, SEED

CHECK_AT = {"batch": 1, "heads": 2, "length": 273}    # attention: no multiple of any tile, every edge of the walk
CHECK_SIDE = 97                                        # any other diagram: a square problem no tile divides


def attention_sizes(g, tokens: int, hidden: int, length: int, head_dim: int) -> dict[str, int]:
    """The weaved attention diagram's sizes at one grid point: `head_dim`, tokens / length batch entries,
    hidden / head dim query heads (grouped-query: the key/value heads, its group as the file's)."""
    r: Attention = g.roles
    sizes = _sized(g, length, max(1, tokens // length), head_dim)
    heads = max(1, hidden // head_dim)
    if r.heads:
        sizes[g.diagram.size(r.heads).name] = max(1, heads // (g.axis_sizes({})(r.group) if r.group else 1))
    else:
        sizes["heads"] = heads
    return sizes


def small(g, head_dim: int | None) -> dict[str, int]:
    """Where each configuration is checked against float64: attention at CHECK_AT (`head_dim`), any other
    diagram (None) a square problem of CHECK_SIDE."""
    if head_dim is None:
        return square(g, CHECK_SIDE)
    r: Attention = g.roles
    sizes = _sized(g, CHECK_AT["length"], CHECK_AT["batch"], head_dim)
    sizes[g.diagram.size(r.heads).name if r.heads else "heads"] = CHECK_AT["heads"]
    return sizes


def square(g, side: int) -> dict[str, int]:
    """A diagram that is not attention at a square problem: every length axis `side`."""
    names = {g.diagram.size(a).name for a in length_axes(g.diagram, g.roles)}
    return {s.name: int(v) for s, v in g.diagram.defaults.items()} | dict.fromkeys(names, side)


def _sized(g, length: int, batch: int, head_dim: int) -> dict[str, int]:
    r: Attention = g.roles
    sizes = {s.name: int(v) for s, v in g.diagram.defaults.items()}
    for axis in (r.seq_q, r.seq_k):
        sizes[g.diagram.size(axis).name] = length
    sizes["batch"] = batch
    name = g.diagram.size(r.head_dim)
    if name.is_Symbol:
        sizes[name.name] = head_dim
    return sizes


@dataclass
class Trials:
    """A sweep's module and its state: the wrapper a configuration is launched through, where its inputs
    live, the timer, and the checks made (once a head dim and configuration) and failed."""

    g: Any                                    # the generated module (analyzer.codegen.generate)
    profile: Any
    wrapper: Callable[..., Any]
    torch: Any
    element: Any                              # the inputs' torch dtype
    tensors_on: str
    timer: Callable[[Callable[[], Any], float], TimingOut]
    launch: Callable[..., Any]                # launch(wrapper, tensors, keywords, configuration)
    rep_ms: float
    progress: Progress
    total: int = 0                            # the trials in all, for the progress bar (0: not counted)
    done: int = 0
    methods: set = field(default_factory=set)
    failed: dict = field(default_factory=dict)      # (head dim, configuration) -> why it is wrong
    checked: set = field(default_factory=set)
    module: Path | None = None                # the module's file and its entry point, for compiling ahead
    entry: str = ""
    workers: int = 1                          # processes compiling ahead (1: each compiles on first launch)

    def ahead(self, launches: list[tuple[dict[str, int], dict]]) -> None:
        """Compile the configurations of `launches` (sizes, configuration entry) in worker processes,
        where there are workers and a module file (analyzer.measure.ahead)."""
        if self.module is None or self.workers <= 1:
            return
        calls = [(*inputs(self.g, sizes), entry) for sizes, entry in launches]
        compile_ahead(self.module, self.entry, DTYPES[self.g.dtype], calls, self.workers, self.tensors_on,
                      self.progress)

    def check(self, head_dim: int | None, configs: list[tuple[str, Any]], at: dict[str, int] | None = None) -> None:
        """Each configuration (its label and the entry it is launched with) not yet checked at this head dim
        (None: not attention), against float64 at `at` (default: where `small` says); one that is wrong is
        kept in `failed`."""
        todo = [(label, entry) for label, entry in configs if (head_dim, label) not in self.checked]
        if not todo:
            return
        at = at or small(self.g, head_dim)
        xs, kwargs = self.tensors(at, SEED)
        want = reference(self.torch, self.g, xs, at)
        allowed = tolerance(self.g.dtype, reduction(self.g, at))
        for label, entry in todo:
            self.progress("sweep: check", self.done, self.total)
            self.done += 1
            self.checked.add((head_dim, label))
            why = wrong(lambda entry=entry: self.launch(self.wrapper, xs, kwargs, entry), want, allowed)
            if why is not None:
                self.failed[(head_dim, label)] = why

    def tensors(self, sizes: dict[str, int], seed: int) -> tuple[list, dict]:
        """The wrapper's inputs at `sizes`, N(0, 1), seeded, and its keywords."""
        shapes, kwargs = inputs(self.g, sizes)
        generator = self.torch.Generator(device=self.tensors_on).manual_seed(seed)
        return [self.torch.randn(*s, generator=generator, device=self.tensors_on, dtype=self.element)
                for s in shapes], kwargs


def failure(exc: BaseException) -> str:
    """A configuration's failure as its record keeps it: the exception's type and the start of its text."""
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def wrong(call: Callable[[], Any], want: Any, allowed: float) -> str | None:
    """Why the configuration's output is wrong against the float64 `want` (None: it is right)."""
    try:
        error = float((call().double() - want).abs().max() / want.abs().max())
    except Exception as exc:  # noqa: BLE001 - a configuration that fails is a record of its failure
        return failure(exc)
    if math.isfinite(error) and error <= allowed:
        return None
    return f"largest error {error:.3g} of the largest value, above {allowed:.3g}"


def finish(rec: dict, error: str | None, timer: Callable[[Callable[[], Any], float], TimingOut],
           call: Callable[[], Any], rep_ms: float, methods: set) -> dict:
    """The record timed where its configuration passed its check, else its error."""
    if error is None:
        try:
            t = timer(call, rep_ms)
            methods.add(t.method)
            return {**rec, "status": "ok", "time_s": t.time_s, "time_s_p20": t.time_s_p20, "time_s_p80": t.time_s_p80}
        except Exception as exc:  # noqa: BLE001 - as above
            error = failure(exc)
    return {**rec, "status": "error", "error": error}


__all__ = ["CHECK_AT", "CHECK_SIDE", "Trials", "attention_sizes", "failure", "finish", "small", "square", "wrong"]
