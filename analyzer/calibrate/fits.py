"""The fits napkin calibrate makes: one per model that times a kernel family (analyzer.config.family:
each family names its `fit`). The portable families (Triton, CUDA) share the portable kernels' model,
fitted to a sweep of the Triton module's configurations (analyzer.calibrate.calibrate); the Hopper
attention family has its own (analyzer.calibrate.hopper), and so has the Hopper contraction family, one
for its kernel of one contraction (analyzer.calibrate.contraction) and one for its chain kernel
(analyzer.calibrate.chain). Each fit says which options of napkin
calibrate it takes beyond the recording, the profile, the outputs and --across, and runs as one call;
the CLI dispatches through this registry, and tests/unit/test_families.py holds it to the families'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from analyzer.calibrate import calibrate as portable
from analyzer.calibrate import chain, contraction, hopper_variants


@dataclass(frozen=True)
class KernelFit:
    """One fit: `run(recording, gpu, other=, other_gpu=, allow_gpu_mismatch=, progress=, **options)`."""

    name: str                         # napkin calibrate --kernel NAME; the families' `fit`
    options: dict[str, str]           # the CLI options it takes -> the keyword run() takes them as
    run: Callable[..., Any]


DEFAULT = "portable"      # napkin calibrate's --kernel when none is given
FITS: dict[str, KernelFit] = {f.name: f for f in (
    KernelFit("portable",                         # a recording of bench/sweep_h200.py
              {"--plot": "", "--held-out": "held_out_size", "--registers": "registers", "--samples": "samples"},
              lambda *a, **k: portable.calibrate(*a, **k)),       # looked up at the call: tests replace it
    KernelFit("hopper", {"--variants": "variants"},      # a recording of bench/hopper_sweep.py (and of the variants)
              lambda *a, **k: hopper_variants.calibrate(*a, **k)),
    KernelFit("contraction", {},                         # a recording of bench/hopper_contraction.py
              lambda *a, **k: contraction.calibrate(*a, **k)),
    KernelFit("chain", {},                               # a recording of napkin measure mlp2 --sweep
              lambda *a, **k: chain.calibrate(*a, **k)),
)}


__all__ = ["DEFAULT", "FITS", "KernelFit"]
