"""One configuration's trial in a sweep (analyzer.measure.sweep, sweep_portable): its check against
float64 and its timing, each failure kept as the record's error, not raised."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from analyzer.common.progress import Progress
from analyzer.measure.reference import inputs
from analyzer.measure.result import TimingOut


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
    done: int = 0
    methods: set = field(default_factory=set)
    failed: dict = field(default_factory=dict)      # (head dim, configuration) -> why it is wrong
    checked: set = field(default_factory=set)

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


__all__ = ["Trials", "failure", "finish", "wrong"]
