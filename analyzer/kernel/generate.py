"""The pipeline of `napkin kernel`: diagram + GPU + configuration -> a standalone kernel file.

    raw diagram -> weave over batch (and heads) -> compile -> schedule of each kernel at SMEM
    -> configuration per head dimension (analyzer.kernel.choose) -> plan (analyzer.kernel.plan)
    -> Triton source (analyzer.kernel.triton) or CUDA source (analyzer.kernel.cuda)
    -> a module with a header, the kernels, their configurations and a torch wrapper
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import sympy
from sympy.printing.pycode import pycode

from analyzer.analysis import load
from analyzer.config.configure import _profile, schedule_of
from analyzer.diagram.compiled import Diagram
from analyzer.errors import NapkinError
from analyzer.hardware import Profile
from analyzer.kernel.choose import Choice, choose
from analyzer.kernel.interface import Attention, Plain, interface
from analyzer.kernel.plan import KernelPlan, plan
from analyzer.kernel.weave import compile_woven, outer_tiles, source_data
from analyzer.model.fusion import schedule

BACKENDS = ("triton", "cuda")
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128, 256)      # configured head dims besides the diagram's own ("256 where it fits")


@dataclass(frozen=True)
class KernelConfigs:
    """One kernel of the diagram, its plan, and its configuration per head dim (None: one for all)."""

    plan: KernelPlan
    choices: dict[int | None, Choice]
    key_axis: str | None            # the whole axis the configurations are keyed by (the head dim)


@dataclass
class Generated:
    diagram: Diagram                # weaved
    source_file: str
    gpu: str
    backend: str
    dtype: str
    command: str
    roles: Attention | Plain
    kernels: list[KernelConfigs]
    source: str = ""
    extra: dict[str, str] = field(default_factory=dict)   # other files (CUDA: the Python loader)
    prediction: str = ""
    prediction_at: str = ""
    sm_count: int = 1               # the profile's SMs: one wave of blocks (plan.band_rows)

    def tiles_for(self, key: int | None) -> dict[str, int]:
        """Every kernel's tiles for head dim `key` (the weaved axes take one index a block)."""
        tiles = outer_tiles(self.diagram, self.roles.outer)
        for k in self.kernels:
            choice = k.choices.get(key) or k.choices.get(None) or next(iter(k.choices.values()))
            tiles.update(choice.tiles)
        return tiles

    @property
    def configs(self) -> list[dict]:
        rows = []
        for k in self.kernels:
            for key, c in k.choices.items():
                rows.append({"kernel": k.plan.name, "head_dim": key, **c.tiles,
                             "num_warps": c.num_warps, "num_stages": c.num_stages, "source": c.source})
        return rows

    def write(self, path: str | Path) -> list[Path]:
        path = Path(path)
        path.write_text(self.source)
        written = [path]
        for suffix, text in self.extra.items():
            other = path.with_suffix(suffix)
            other.write_text(text)
            written.append(other)
        return written


def generate(diagram: str, gpu: str | Profile, *, backend: str = "triton", dtype: str = "fp16",
             config: str | None = None, sets: dict[str, int] | None = None) -> Generated:
    if backend not in BACKENDS:
        raise NapkinError(f"{backend!r}: expected {' or '.join(BACKENDS)}", field="--backend")
    if dtype not in DTYPES:
        raise NapkinError(f"{dtype!r}: generated kernels take {' or '.join(DTYPES)}",
                          field="--dtype", hint="fp8 kernels are not generated yet")
    profile, _ = _profile(gpu)
    profile.check_dtype(dtype)
    base = load(diagram, dtype=dtype)
    roles = interface(base)
    data, source = source_data(diagram, dtype)
    woven = compile_woven(data, source, roles.outer)
    kernels = [_configure(base, woven, k.name, profile, roles, config, sets or {}, dtype)
               for k in woven.kernels]
    command = _command(diagram, profile.name, backend, dtype, config, sets or {})
    g = Generated(woven, source, profile.name, backend, dtype, command, roles, kernels,
                  sm_count=profile.sm_count)
    _predict_defaults(g, profile)
    if backend == "triton":
        from analyzer.kernel.module import triton_module
        g.source = triton_module(g)
    else:
        from analyzer.kernel.cuda import cuda_files
        g.source, g.extra = cuda_files(g)
    return g


def _predict_defaults(g: Generated, profile: Profile) -> None:
    """The header's prediction: the diagram's default sizes, one batch entry and head."""
    from analyzer.kernel.predict import predict_sizes
    from analyzer.report import seconds, si
    sizes = {s.name: int(v) for s, v in g.diagram.defaults.items()}
    key = None
    if isinstance(g.roles, Attention):
        key = int(g.diagram.size(g.roles.head_dim).subs(g.diagram.defaults))
    p = predict_sizes(g.diagram, profile, sizes, g.tiles_for(key))
    shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
    g.prediction_at = f"napkin analyze, {profile.name}, {shown}"
    g.prediction = f"{seconds(p.time_s)}, {si(p.flops / p.time_s, 'FLOP/s')}, {p.bound}-bound"


def _command(diagram, gpu, backend, dtype, config, sets) -> str:
    words = ["napkin", "kernel", diagram, "--gpu", gpu, "--backend", backend, "--dtype", dtype]
    if config:
        words += ["--config", config]
    for k, v in sets.items():
        words += ["--set", f"{k}={v}"]
    return " ".join(shlex.quote(w) for w in words)


def _configure(base: Diagram, woven: Diagram, kernel: str, profile: Profile, roles, config, sets,
               dtype) -> KernelConfigs:
    s = schedule(woven, next(k for k in woven.kernels if k.name == kernel), woven.levels[-1])
    head = roles.head_dim if isinstance(roles, Attention) else None
    base_kernel = schedule(base, next(k for k in base.kernels if k.name == kernel), base.levels[-1])
    whole = [a for a in {a for n in base_kernel.arrays for a in base.arrays[n].axes}
             if a not in base_kernel.partition.group_sizes and a != base_kernel.stream_axis]
    key_axis = head if head in whole else None
    keys: list[int | None] = [None]
    if key_axis is not None:
        default = int(base.size(key_axis).subs(base.defaults))
        keys = sorted({default, *HEAD_DIMS} if key_axis not in sets else {sets[key_axis]})
    tiles = {sym.name for sym in base_kernel.partition.symbols}
    choices: dict[int | None, Choice] = {}
    errors = {}
    for key in keys:
        here = dict(sets)
        if key is not None:
            symbols = base.size(key_axis).free_symbols
            here.update({str(next(iter(symbols))): key})
        try:
            choices[key] = _choice(base, profile, kernel, tiles, config, here, dtype)
        except NapkinError as exc:
            errors[key] = exc
    if not choices:
        raise next(iter(errors.values()))
    first = next(iter(choices.values()))
    ones = outer_tiles(woven, roles.outer)
    woven_tiles = {**first.tiles, **ones}
    p = plan(woven, s, Choice(first.kernel, woven_tiles, first.num_warps, first.num_stages,
                              first.source))
    for key, c in choices.items():
        other = plan(woven, s, Choice(c.kernel, {**c.tiles, **ones},
                                      c.num_warps, c.num_stages, c.source))
        if [(d.name, d.kind) for d in other.dims] != [(d.name, d.kind) for d in p.dims] or \
                other.grid != p.grid:
            raise NapkinError(f"kernel {kernel!r}: the configuration for {key_axis}={key} tiles the "
                              "kernel differently from the others", file=base.source,
                              hint=f"pin the head dimension with --set {key_axis}=N")
    return KernelConfigs(p, choices, key_axis)


def _choice(d: Diagram, profile: Profile, kernel: str, tiles: set[str], config, sets, dtype) -> Choice:
    """Section 5's configuration where it applies (a streamed contraction); else napkin analyze's
    tiles with one warpgroup's warps and no pipelining, which the model does not configure."""
    try:
        schedule_of(d, kernel)
    except NapkinError:
        from analyzer.analysis import analyze
        result = analyze(d, profile, sets={k: v for k, v in sets.items()})
        chosen = next(k for k in result.kernels if k.name == kernel).levels[-1].chosen
        warps = max(1, profile.divisors.mma_threads // profile.threads.warp_size)
        return Choice(kernel, {k: v for k, v in chosen.items() if k in tiles}, max(4, warps), 1,
                      f"napkin analyze's tiles for {profile.name} (outside Section 5's model: "
                      "4 warps, no pipelining)")
    return choose(d, profile, kernel, tiles, config=config, sets=sets, dtype=dtype)


# -- helpers shared by the backends' module writers ---------------------------------------------------

def _symbol_axes(d: Diagram) -> dict[sympy.Symbol, str]:
    """Each size symbol -> the axis it is the size of (the axis of its own name first)."""
    found: dict[sympy.Symbol, str] = {}
    for name, axis in sorted(d.axes.items(), key=lambda item: item[0] != str(item[1].size)):
        if isinstance(axis.size, sympy.Symbol):
            found.setdefault(axis.size, name)
    return found


def size_checks(d: Diagram) -> list[tuple[str, str, str]]:
    """(axis, Python expression in size_<axis> names, message) for every axis whose size is tied to
    other axes in the diagram (e.g. causal self-attention's x = q)."""
    symbol_axis = _symbol_axes(d)
    out = []
    for name, axis in d.axes.items():
        if axis.size.is_number or symbol_axis.get(axis.size) == name:
            continue
        if not all(s in symbol_axis for s in axis.size.free_symbols):
            continue
        expr = axis.size.subs({s: sympy.Symbol(f"size_{symbol_axis[s]}") for s in axis.size.free_symbols})
        out.append((name, pycode(expr), f"axis {name} must be {axis.size} (diagram {d.source}, "
                                        f"axes.{name})"))
    return out


def scale_code(expr: sympy.Expr, d: Diagram) -> str:
    """A scale factor (e.g. d**-0.5) as Python in the wrapper's size_<axis> names."""
    symbol_axis = _symbol_axes(d)
    missing = [s for s in expr.free_symbols if s not in symbol_axis]
    if missing:
        raise NapkinError(f"scale {expr} uses {missing[0]}, which is no axis size", file=d.source)
    return pycode(expr.subs({s: sympy.Symbol(f"size_{symbol_axis[s]}") for s in expr.free_symbols}))


__all__ = ["generate", "Generated", "KernelConfigs", "BACKENDS", "DTYPES", "size_checks",
           "scale_code"]
