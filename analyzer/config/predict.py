"""The model's prediction for a generated kernel on one problem shape: each of its kernels with the
configuration its wrapper launches at that shape (the by-size table's, analyzer.config.by_size, where it
has one), timed as `napkin sweep` times a configuration: tiles, warps, stages and the blocks an SM holds."""

from __future__ import annotations

from dataclasses import dataclass

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.config.choose import timed
from analyzer.config.kernels import Configured, configure_kernels
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.interface import Attention
from analyzer.diagram.weave import outer_tiles
from analyzer.hardware import Profile
from analyzer.model.analysis import TermModel, analyze, load
from analyzer.model.predict import kernel_parts


def _configured(d: Diagram, gpu: str, sized: bool, dtype: str) -> Configured:
    """One configuration per kernel, however many shapes are predicted for it: kept per compiled diagram
    (the same file's document compiles to the same one, analyzer.diagram.graph.compile_data, so a file
    edited between calls is configured again), held with the entry so that its id is not reused."""
    key = (id(d), gpu, sized, dtype)
    hit = _CONFIGURED.get(key)
    if hit is None or hit[0] is not d:
        if len(_CONFIGURED) >= _CONFIGURED_MAX:
            _CONFIGURED.pop(next(iter(_CONFIGURED)))
        hit = _CONFIGURED[key] = (d, configure_kernels(d, gpu, dtype=dtype, sized=sized))
    return hit[1]


_CONFIGURED: dict[tuple, tuple[Diagram, Configured]] = {}
_CONFIGURED_MAX = 32


@dataclass(frozen=True)
class Prediction:
    time_s: float
    flops: float                 # tensor FLOPs the model counts (block skipping included)
    bound: str
    tiles: dict[str, int]
    sizes: dict[str, int]


def predict_configured(g: Configured, profile: Profile, sizes: dict[str, int]) -> Prediction:
    """The generated kernels of `g` at `sizes` (size symbols of the weaved diagram), each with the
    configuration its wrapper launches there."""
    d: Diagram = g.diagram
    values = {**{s.name: int(v) for s, v in d.defaults.items()}, **sizes}
    key = g.key_at(values)
    ones = outer_tiles(d, g.roles.outer)
    time_s = flops = 0.0
    bounds, tiles, fallback = [], dict(ones), None
    for k, c in zip(g.kernels, g.launched(values), strict=True):
        tiles.update(c.tiles)
        if c.analyzed:           # outside Section 5's model: napkin analyze's time of this kernel
            fallback = fallback or {x.name: x for x in _analyzed(g, profile, values, key).kernels}
            out = fallback[k.plan.name]
            time_s += out.predicted_time_s
            flops += out.flops_value.get("tensor", 0.0)
            bounds.append(out.bound)
            continue
        terms = TermModel(d, profile, k.plan.name).terms(values, [{**c.tiles, **ones}])
        time_s += float(timed(terms, [c], profile)[0])
        flops += float(terms.values["flops_tensor"][0])
        bounds.append(kernel_parts(terms.values, terms.weights, profile, d.dtype).bound(0))
    bound = bounds[0] if len(set(bounds)) == 1 else "mixed: " + ", ".join(
        f"{k.plan.name} {b}" for k, b in zip(g.kernels, bounds, strict=True))
    return Prediction(time_s, flops, bound, tiles, values)


def _analyzed(g, profile: Profile, sizes: dict[str, int], key: int | None):
    """napkin analyze of the weaved diagram at `sizes`, the tiles of the kernels it times (those outside
    Section 5's model) pinned to head dim `key`'s; the others take analyze's own (Section 5's may hold
    more than the paper's memory count allows, as the portable kernel's allocation does on a GPU without
    pipelining)."""
    d = g.diagram
    partition = {s.name for k in d.kernels for p in k.partitions.values() for s in p.symbols}
    pins = dict(outer_tiles(d, g.roles.outer))
    for k in g.kernels:
        if k.choice(key).analyzed:
            pins.update(k.choice(key).tiles)
    return analyze(d, profile, sets={**sizes, **{k: v for k, v in pins.items() if k in partition}})


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


def predict(diagram: str | Diagram, gpu: str | Profile, *, dtype: str = "fp16", batch: int = 1, heads: int = 1,
            kv_heads: int | None = None, seqlen_q: int, seqlen_k: int | None = None,
            head_dim: int = 128, sized: bool = True, configured: Configured | None = None) -> Prediction:
    """The predicted time of the kernel `napkin kernel` generates for `diagram` (a name, a file, or the
    diagram as compiled from its file), on one SDPA-shaped problem; `sized`: as the Triton wrapper, which chooses a configuration per call (the CUDA loader
    does not); pass `configured` (analyzer.config.kernels, or a generated kernel) to reuse its
    configuration."""
    profile = hardware.load(gpu)
    model = hardware.portable_model(profile)        # as napkin kernel ranks: the measured fit where one is
    key = model.name if model is not profile else gpu if isinstance(gpu, str) else profile.name
    g = configured or _configured(load(diagram), key, sized, dtype)
    if not isinstance(g.roles, Attention):
        raise NapkinError(f"{g.source_file} is not attention-shaped; use predict_configured")
    sizes = attention_sizes(g.roles, g.diagram, batch=batch, heads=heads, kv_heads=kv_heads or heads,
                            seqlen_q=seqlen_q, seqlen_k=seqlen_k or seqlen_q, head_dim=head_dim)
    return predict_configured(g, model, sizes)
