"""The model's prediction for a generated kernel on one problem shape (napkin analyze of the weaved
diagram, with the tiles the kernel was configured with)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from analyzer.analysis import analyze
from analyzer.config.configure import _profile
from analyzer.diagram.compiled import Diagram
from analyzer.errors import NapkinError
from analyzer.hardware import Profile
from analyzer.kernel.interface import Attention


@lru_cache(maxsize=32)
def _generated(diagram: str, gpu: str, backend: str, dtype: str):
    """One generation per kernel, however many shapes are predicted for it."""
    from analyzer.kernel.generate import generate
    return generate(diagram, gpu, backend=backend, dtype=dtype)


@dataclass(frozen=True)
class Prediction:
    time_s: float
    flops: float                 # tensor FLOPs the model counts (block skipping included)
    bound: str
    tiles: dict[str, int]
    sizes: dict[str, int]


def predict_sizes(woven: Diagram, profile: Profile, sizes: dict[str, int],
                  tiles: dict[str, int]) -> Prediction:
    """Analyse the weaved diagram at `sizes` (size symbols) with the tile sizes pinned."""
    symbols = {s.name for s in woven.size_symbols}
    sets = {k: v for k, v in sizes.items() if k in symbols}
    partition = {s.name for k in woven.kernels for p in k.partitions.values() for s in p.symbols}
    sets.update({k: v for k, v in tiles.items() if k in partition})
    result = analyze(woven, profile, sets=sets)
    return Prediction(result.totals.predicted_time_s, result.totals.tensor_flops, result.totals.bound,
                      {k: v for k, v in sets.items() if k in partition}, sets)


def attention_sizes(roles: Attention, woven: Diagram, *, batch: int, heads: int, kv_heads: int,
                    seqlen_q: int, seqlen_k: int, head_dim: int) -> dict[str, int]:
    """Size symbols of the weaved attention diagram for an SDPA-shaped problem."""
    axis_value = {"batch": batch, roles.seq_q: seqlen_q, roles.seq_k: seqlen_k, roles.head_dim: head_dim}
    if roles.heads:
        axis_value[roles.heads] = kv_heads
    else:
        if heads != kv_heads:
            raise NapkinError(f"{woven.name} has no grouped-query axis: heads ({heads}) must equal "
                              f"kv_heads ({kv_heads})")
        axis_value["heads"] = heads
    if roles.group:
        if heads % kv_heads:
            raise NapkinError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
        axis_value[roles.group] = heads // kv_heads
    sizes = {woven.size(a).name: v for a, v in axis_value.items() if woven.size(a).is_Symbol}
    for axis, value in axis_value.items():     # sizes the diagram ties together (x = q)
        size = woven.size(axis).subs({s: sizes[s.name] for s in woven.size(axis).free_symbols
                                      if s.name in sizes})
        if size.is_number and int(size) != value:
            raise NapkinError(f"{woven.name}: axis {axis} is {woven.size(axis)} = {size}, not {value}")
    return sizes


def predict(diagram: str, gpu: str | Profile, *, dtype: str = "fp16", batch: int = 1, heads: int = 1,
            kv_heads: int | None = None, seqlen_q: int, seqlen_k: int | None = None,
            head_dim: int = 128, backend: str = "triton", generated=None) -> Prediction:
    """The predicted time of the kernel `napkin kernel` generates for `diagram`, on one SDPA-shaped
    problem; pass `generated` (analyzer.kernel.generate's result) to reuse its configuration."""
    profile, _ = _profile(gpu)
    g = generated or _generated(diagram, profile.name, backend, dtype)
    if not isinstance(g.roles, Attention):
        raise NapkinError(f"{diagram} is not attention-shaped; use predict_sizes")
    sizes = attention_sizes(g.roles, g.diagram, batch=batch, heads=heads, kv_heads=kv_heads or heads,
                            seqlen_q=seqlen_q, seqlen_k=seqlen_k or seqlen_q, head_dim=head_dim)
    return predict_sizes(g.diagram, profile, sizes, g.tiles_for(head_dim))
