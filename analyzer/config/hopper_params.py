"""The Hopper kernel's model's stated assumptions (analyzer.config.hopper), each a parameter that a
sweep of the kernel fits (napkin calibrate --kernel hopper; analyzer.hardware.HopperFit says what each
means and carries the fitted values with their standard errors). The defaults are the paper's idealised
model.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from analyzer.hardware import Profile, hopper_fit

OVERHEAD = 0.66               # o: Section 6.3's hypothesis, the threads' work Table 3 leaves out
# The kernel's schedules, in the order a tie goes (the hardware's own first): tiles (a block a tile), persistent
# (a block an SM, taking the tiles in turn) and prefetch (persistent, with two query buffers and the output's
# own, so that the next tile's queries land early and its first Q K^T runs beside this one's last P V)
SCHEDULES = ("tiles", "persistent", "prefetch")
PERSISTENT_SCHEDULES = ("persistent", "prefetch")
# The schedules the model has terms for; each persistent one is ranked where a fit measured it
# (ranked_schedules)
MODELLED_SCHEDULES = ("tiles", "persistent", "prefetch")


@dataclass(frozen=True)
class HopperParams:
    """The stated assumptions of the model below, each a parameter a sweep of the kernel fits
    (napkin calibrate --kernel hopper; hardware.HopperFit says what each means). The defaults are the
    paper's idealised model."""

    tensor_efficiency: float = 1.0
    softmax_overhead: float = OVERHEAD
    l2_efficiency: float = 1.0
    chunk_overhead_s: float = 0.0
    prologue_chunks: float = 1.0
    tile_overhead_s: float = 0.0
    consumer_overhead_s: float = 0.0   # a tile's seconds per consumer warpgroup (its epilogue)
    launch_overhead_s: float = 0.0
    lone_overlap: float = 0.0      # share of the way from no overlap to intra a lone warpgroup goes unasked
    mask_overhead: float = 0.0     # chunk times a causally masked step adds (the paper counts no mask work)
    overlap_softness: float = 0.0  # 1/p of the p-norm the SM's lanes' work combines by (0: Section 6's max)
    # per lowering of a score op (analyzer.config.scores): the SM clocks a score costs, fitted on a sweep of
    # the variants (napkin calibrate --variants); an op absent costs its counted SFU and lane operations
    score_clocks: tuple[tuple[str, float], ...] = ()
    bias_efficiency: float = 1.0   # achieved fraction of the HBM bandwidth an additive bias is read at
    # SM clocks a block's copy engine spends a row of a bias tile beyond its bytes (a TMA box of w rows is w
    # requests): a chunk of s_x keys costs a block's g_q rows this once, so narrow chunks pay it more a key
    bias_row_clocks: float = 0.0
    # FP8: the achieved fraction of the FP8 tensor rate, as a share of what tensor_efficiency says of the
    # 16-bit one (fitted on a sweep of the FP8 kernel, napkin calibrate --variants)
    fp8_tensor_efficiency: float = 1.0
    # share of a tile's fixed cost (its prologue chunks and tile overhead) the persistent schedule runs under
    # the tile before it; None: no sweep of that schedule was fitted, so the model does not rank it (and
    # prices it as the paper would, every prologue but the first hidden)
    persistent_hidden: float | None = None
    persistent_slowdown: float = 0.0   # what a streamed chunk costs the persistent schedules more, as a fraction
    # share of a tile's fixed cost the prefetch schedule runs under the tile before it (its first Q K^T beside
    # that tile's last P V, its queries landed early); None: no sweep of that schedule was fitted, and the
    # model does not rank it
    prefetch_hidden: float | None = None
    source: str = "the paper's idealised model"     # where the values come from, for headers and reports

    @classmethod
    def of(cls, profile: Profile) -> HopperParams:
        """The profile's fitted parameters (its own, or its GPU's shipped calibration), else the defaults."""
        found = hopper_fit(profile)
        if found is None:
            return cls()
        fit, name = found
        given = {f.name: getattr(fit, f.name).value for f in fields(cls)
                 if f.name not in ("source", "score_clocks") and getattr(fit, f.name) is not None}
        ops = tuple(sorted((k, e.value) for k, e in fit.score_clocks.items()))
        return cls(**given, score_clocks=ops, source=f"calibrated on {name}")

    @property
    def calibrated(self) -> bool:
        return self.source != HopperParams.source


# Schedules the model does not rank under a mask (causal, a window): measured on an H200, the prefetch
# schedule runs causal tiles of 128-key chunks at 0.91-1.07x the persistent schedule's speed from 512 to 2k
# tokens (and of 64-key chunks at 0.85-1.10x; bench/results/hopper_sweep_h200_masks.md), and ranked there the
# H200's fit chose it at 128-key chunks where 64-key ones ran 1.23-1.33x faster (docs/section6.md, "The
# mask's own cost"); its term is fitted on unmasked records alone
UNMASKED_ONLY = ("prefetch",)


def ranked_schedules(params: HopperParams, masked: bool = False) -> tuple[str, ...]:
    """The schedules the model ranks: a persistent one only where a sweep of it (bench/hopper_sweep.py
    --schedules tiles,persistent,prefetch) fitted what it hides, and under a mask (`masked`) not those
    of UNMASKED_ONLY."""
    fitted = {"persistent": params.persistent_hidden, "prefetch": params.prefetch_hidden}
    return tuple(s for s in MODELLED_SCHEDULES
                 if fitted.get(s, 0.0) is not None and not (masked and s in UNMASKED_ONLY))


__all__ = ["MODELLED_SCHEDULES", "OVERHEAD", "PERSISTENT_SCHEDULES", "SCHEDULES", "UNMASKED_ONLY", "HopperParams",
           "ranked_schedules"]
