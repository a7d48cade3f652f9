"""The range in which each fitted parameter means what docs/model.md says it means.

A fit that leaves one of them (an overlap of levels of 74, a tensor-core efficiency of 148) has not
found the model's assumptions in the recording: it has bent a parameter to absorb what the model does
not describe (too few configurations or sizes to tell the parameters apart, or times no kernel takes).
napkin calibrate refuses such a fit, naming the parameter, rather than write it into a profile.
Bounds that depend on the data: an efficiency up to the boost clock over the tensor clock (the peak
at the highest clock the GPU runs), and an overhead in seconds up to the longest measured time (every
overhead is paid at least once by the kernel it slows).
"""

from __future__ import annotations

import math

from analyzer.common.errors import NapkinError

SECONDS = ("step_overhead_s", "load_latency_s", "block_overhead_s", "launch_overhead_s")
SHARES = ("level_overlap", "softmax_overhead")          # a share of a time: 0 to 1
POWER_MAX = 10.0     # power.*: the share of what the clock sustains that a pipeline draws at its peak
EXPONENT_MAX = 4.0   # softmax_overlap: k^-beta; beyond 4 one extra resident block hides all of it
EXPOSED_MAX = 10.0   # edge_exposed: seconds per second of prologue and epilogue transfers


def parameter_range(name: str, *, efficiency_max: float, longest_s: float) -> tuple[float, float]:
    """The closed range of fitted parameter `name` (a flat name, as fit.FITTED lists them)."""
    if name.startswith(("pipeline_efficiency.", "bandwidth_efficiency.")):
        return 0.0, efficiency_max
    if name.startswith("power."):
        return 0.0, POWER_MAX
    if name in SHARES:
        return 0.0, 1.0
    if name == "softmax_overlap":
        return 0.0, EXPONENT_MAX
    if name == "edge_exposed":
        return 0.0, EXPOSED_MAX
    if name in SECONDS:
        return 0.0, longest_s
    raise KeyError(name)


def check_ranges(values: dict[str, float], *, efficiency_max: float, longest_s: float,
                 source: str) -> None:
    """A NapkinError naming the first parameter outside its range (or not a number)."""
    for name, value in values.items():
        low, high = parameter_range(name, efficiency_max=efficiency_max, longest_s=longest_s)
        if not (math.isfinite(value) and low <= value <= high):
            raise NapkinError(
                f"the fit put {name} at {value:.4g}, outside its range [{low:.4g}, {high:.4g}] "
                "(docs/model.md): the recording does not determine the model's parameters",
                file=source, field="records",
                hint="record more configurations and sizes (python bench/sweep_h200.py), and check that "
                     "its times are the kernels' in seconds")


def at_bounds_text(at_bounds: dict[str, str], values: dict[str, float]) -> str:
    """The parameters a fit left at a bound of their range, as a profile's field and the reports name
    them: "launch_overhead_s = 1e-05 (upper bound); lone_overlap = 1 (upper bound)"; "" for none. A
    parameter there is a limit the recording pushed it to, not a measurement of what it means."""
    return "; ".join(f"{n} = {values[n]:.4g} ({side} bound)" for n, side in at_bounds.items())
