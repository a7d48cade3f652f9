"""Every shipped diagram's kernel at its default sizes on one GPU: does it run, is it right, how fast.

For every shipped diagram (or those --diagrams names), the file `napkin kernel <diagram> --gpu <gpu>`
writes (its default backend: the Hopper Gluon kernel for streamed softmax attention on the H100 and the
H200, the portable Triton module otherwise), and the files of `--backend triton` and `--backend cuda`
where those backends render the diagram, each a row:
- generated as napkin kernel generates it, and called at the diagram's default sizes (one batch entry
  and head, as napkin analyze and the file's header state them) on N(0, 1) inputs;
- checked against a float64 evaluation of the diagram in torch (`evaluate`: each op of the diagram as
  torch computes it, contractions by einsum), before it is timed: the largest error over the largest
  reference value, against the element type's unit roundoff u (2^-11 for fp16) times the square root
  of the diagram's longest reduction L (`tolerance`: rounding errors of the fp16 intermediates and the
  output add up over at most L terms, which grows like sqrt(L) u; Higham and Mary, "A new approach to
  probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019);
- timed as bench.common.timed times (triton.testing.do_bench, the median), beside the prediction of
  the file's header (analyzer.codegen.generate's `expected`), and in TFLOP/s of the tensor-core FLOPs
  the model counts (block skipping included).
A row that fails records its error's first line (an OutOfResources at launch, a compile error, a
wrong result) and the run goes on with the next.

    python bench/defaults.py --gpu h100                          # every diagram, every backend
    python bench/defaults.py --gpu h200 --diagrams attention,linear_attention --backends default,triton
    python bench/defaults.py --gpu h100 --dry-run                # generate every file, list the rows

It writes defaults_<gpu>.json and defaults_<gpu>.md into --out ($OUT if set, else ./out), rewritten
after every row; --dry-run needs no GPU, nor torch.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # after the checkout's root is on sys.path
    command,
    environment,
    import_file,
    log,
    save_results,
    timed,
)

GPUS = ("h100", "h200")
BACKENDS = ("default", "triton", "cuda")       # napkin kernel's own choice, then the others forced
ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}   # unit roundoff: half the spacing of the numbers at 1
BUDGET_S = 540


# ------------------------------------------------------------------------------- the kernels

def inputs(g, sizes: dict[str, int] | None = None) -> tuple[list[list[int]], dict[str, Any]]:
    """The shapes of the wrapper's tensors at the diagram's default sizes (or `sizes` where it names
    them), and its keyword arguments:
    (batch, heads, seqlen, head_dim) for attention, with the key/value heads of a grouped-query diagram,
    then the scores' other inputs (ALiBi's slopes: (batch, heads));
    the diagram's axes in order for the others."""
    from analyzer.diagram.interface import Attention
    size = g.axis_sizes(sizes or {})
    r = g.roles
    if isinstance(r, Attention):
        heads = size(r.heads) if r.heads else size("heads")
        queries = heads * (size(r.group) if r.group else 1)
        batch = size("batch")
        extras = [[batch, queries, *(size(a) for a in g.diagram.arrays[n].axes if a in (r.seq_q, r.seq_k))]
                  for n in r.extras]       # the scores' other inputs: (batch, heads, their sequence axes)
        return ([[batch, queries, size(r.seq_q), size(r.head_dim)], [batch, heads, size(r.seq_k), size(r.head_dim)],
                 [batch, heads, size(r.seq_k), size(r.value_dim)], *extras], {"causal": r.causal})
    return [[size(a) for a in g.diagram.arrays[n].axes] for n in r.inputs], {}


def reduction(g, sizes: dict[str, int] | None = None) -> int:
    """The longest axis the diagram sums over (a contraction, softmax or reduction) at its defaults (or
    `sizes`)."""
    size = g.axis_sizes(sizes or {})
    return max((size(op.applied.over) for op in g.diagram.ops if op.applied.over), default=1)


def tolerance(dtype: str, length: int) -> float:
    """The largest error over the largest reference value a row may have: sqrt(L) u."""
    return math.sqrt(length) * ROUNDOFF[dtype]


def generated(diagram: str, gpu: str, backend: str):
    """The file napkin kernel writes for `diagram` on `gpu` (`backend` "default": its own choice)."""
    from analyzer.codegen import generate
    return generate(diagram, gpu, backend=None if backend == "default" else backend)


def rows(diagrams: list[str], gpu: str, backends: tuple[str, ...]) -> list[dict[str, Any]]:
    """One row per diagram and backend, each with its generated file (or why it has none): the default
    backend's, then triton's and cuda's where they render the diagram and are not its default."""
    from analyzer import hardware
    from analyzer.common.errors import NapkinError
    from analyzer.config.launch import allocated, sizes_of
    profile = hardware.load(gpu)
    out = []
    for diagram in diagrams:
        default = generated(diagram, gpu, "default")
        files: list[tuple[str, Any]] = [("default", default)] if "default" in backends else []
        for backend in BACKENDS[1:]:
            if backend not in backends or backend == default.backend:
                continue
            try:
                files.append((backend, generated(diagram, gpu, backend)))
            except NapkinError as exc:
                files.append((backend, exc))
        for backend, g in files:
            row: dict[str, Any] = {"diagram": diagram, "backend": backend}
            if isinstance(g, NapkinError):
                row.update(status="n/a", error=_line(g))
            else:
                shapes, kwargs = inputs(g)
                e, length = g.expected, reduction(g)
                row.update(status="generated", file=g, backend=g.backend, default=g is default,
                           command=g.command, dtype=g.dtype, shapes=shapes, kwargs=kwargs, reduction=length,
                           tolerance=tolerance(g.dtype, length), configuration=e.configuration,
                           predicted_s=e.time_s, tensor_flops=e.tensor_flops,
                           smem_counted=allocated(g.as_launch, profile, sizes_of(g, None)))
            out.append(row)
    return out


# ------------------------------------------------------------------------ float64 reference

def evaluate(torch: Any, d, arrays: dict[str, Any]) -> dict[str, Any]:
    """Every array of diagram `d` in float64 at its default sizes: `arrays` holds its inputs, each a
    tensor whose dimensions are the array's axes in order; each op's output is laid out the same way."""
    from analyzer.common.expr import at
    symbols = {s: int(v) for s, v in d.defaults.items()}
    letters = {a: chr(ord("a") + i) for i, a in enumerate(d.axes)}
    out = {name: t.double() for name, t in arrays.items()}
    axes_of = d.axes_of()

    def aligned(name: str, axes: tuple[str, ...]) -> Any:
        """Array `name` laid along `axes` (its own axes permuted, the missing ones of size 1)."""
        own = axes_of[name]
        t = out[name].permute(*[own.index(a) for a in axes if a in own])
        shape = [t.shape[[a for a in axes if a in own].index(a)] if a in own else 1 for a in axes]
        return t.reshape(shape)

    for op in d.ops:
        a = op.applied
        prim = op.primitive.name
        scale = float(at(a.scale, symbols)) if a.scale is not None else None
        if prim in ("dot", "softmax_dot"):
            first, second = op.operands
            x = out[first]
            if prim == "softmax_dot":
                axis = axes_of[first].index(a.over)
                x = _softmax(torch, x * (scale if scale is not None else 1.0), axis,
                             aligned(op.sink, axes_of[first]) if op.sink else None)
            spec = (f"{''.join(letters[x] for x in axes_of[first])},{''.join(letters[x] for x in axes_of[second])}"
                    f"->{''.join(letters[x] for x in a.output)}")
            out[op.name] = torch.einsum(spec, x, out[second])
            continue
        x = aligned(op.inputs[0], a.output) if prim not in ("sum", "max", "softmax") else out[op.inputs[0]]
        if prim == "softmax":
            y = _softmax(torch, x * (scale if scale is not None else 1.0), axes_of[op.inputs[0]].index(a.over),
                         aligned(op.sink, axes_of[op.inputs[0]]) if op.sink else None)
            out[op.name] = y.permute(*[axes_of[op.inputs[0]].index(o) for o in a.output])
        elif prim in ("sum", "max"):
            dim = axes_of[op.inputs[0]].index(a.over)
            y = x.sum(dim) if prim == "sum" else x.amax(dim)
            kept = [o for o in axes_of[op.inputs[0]] if o != a.over]
            out[op.name] = y.permute(*[kept.index(o) for o in a.output])
        elif prim in ("add", "sub", "mul", "div"):
            y = aligned(op.inputs[1], a.output)
            out[op.name] = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}[prim]
        elif prim == "scale":
            out[op.name] = x * scale
        elif prim == "shift":
            out[op.name] = x + float(at(a.offset, symbols))
        elif prim == "softcap":
            cap = float(at(a.cap, symbols))
            out[op.name] = cap * torch.tanh(x / cap)
        elif prim == "alibi":                # v - m |i - j|
            q, k = a.output.index(a.query), a.output.index(a.key)
            rows_ = torch.arange(x.shape[q], device=x.device).reshape([-1 if i == q else 1 for i in range(x.dim())])
            cols = torch.arange(x.shape[k], device=x.device).reshape([-1 if i == k else 1 for i in range(x.dim())])
            out[op.name] = x - aligned(op.inputs[1], a.output) * (rows_ - cols).abs().double()
        elif prim in ("causal_mask", "window_mask", "band_mask"):    # query i sees keys i - before .. i + after
            q, k = a.output.index(a.query), a.output.index(a.key)
            rows_ = torch.arange(x.shape[q], device=x.device).reshape([-1 if i == q else 1 for i in range(x.dim())])
            cols = torch.arange(x.shape[k], device=x.device).reshape([-1 if i == k else 1 for i in range(x.dim())])
            before, after = op.primitive.keys_before(a), op.primitive.keys_after(a)
            hidden = torch.zeros((), dtype=torch.bool, device=x.device)
            if after is not None:           # the keys after the band (after the query, under a causal mask)
                hidden = hidden | (cols > rows_ + int(after))
            if before is not None:          # and those before it
                hidden = hidden | (cols < rows_ - int(before))
            out[op.name] = x.masked_fill(hidden, float("-inf"))
        else:
            out[op.name] = {"exp": torch.exp, "sigmoid": torch.sigmoid, "relu": torch.relu, "tanh": torch.tanh,
                            "reciprocal": torch.reciprocal, "rsqrt": torch.rsqrt,
                            "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[prim](x)
    return out


def _softmax(torch: Any, x: Any, axis: int, sink: Any = None) -> Any:
    """softmax of `x` along `axis`; `sink` (x's layout, size 1 along `axis` and wherever it is copied),
    logits that join the denominator and weigh nothing: one more column, dropped after the softmax."""
    if sink is None:
        return torch.softmax(x, dim=axis)
    shape = list(x.shape)
    shape[axis] = 1
    both = torch.cat([x, sink.expand(shape)], dim=axis)
    return torch.softmax(both, dim=axis).narrow(axis, 0, x.shape[axis])


def reference(torch: Any, g, tensors: list[Any], sizes: dict[str, int] | None = None) -> Any:
    """The float64 output of the call `tensors` makes of generated file `g` (at `sizes`, default the
    diagram's), in the call's layout."""
    from analyzer.diagram.interface import Attention
    d, r = g.diagram, g.roles
    size = g.axis_sizes(sizes or {})
    if not isinstance(r, Attention):
        values = evaluate(torch, d, dict(zip(r.inputs, tensors, strict=True)))
        (name,) = r.outputs
        return values[name]
    arrays = {}
    for name, t, seq, dim in ((r.query, tensors[0], r.seq_q, r.head_dim), (r.key, tensors[1], r.seq_k, r.head_dim),
                              (r.value, tensors[2], r.seq_k, r.value_dim)):
        arrays[name] = _from_call(t, d.arrays[name].axes, r, seq, dim, size)
    for name, t in zip(r.extras, tensors[3:], strict=True):     # (batch, heads, then its sequence axes)
        axes = d.arrays[name].axes
        heads = [h for h in _heads(r) if h in axes]
        seqs = [a for a in axes if a in (r.seq_q, r.seq_k)]
        lengths = {r.seq_q: tensors[0].shape[2], r.seq_k: tensors[1].shape[2]}     # the call's, not the defaults
        shape = (size("batch"), size(r.heads) * (size(r.group) if r.group else 1) if r.heads else size("heads"),
                 *(lengths[a] for a in seqs))
        t = t.broadcast_to(shape).reshape(shape[0], *[size(h) for h in heads], *shape[2:])
        have = ["batch", *heads, *seqs]
        arrays[name] = t.permute(*[have.index(a) for a in axes])
    o = evaluate(torch, d, arrays)[r.output]
    return _to_call(o, d.arrays[r.output].axes, r, r.seq_q, r.value_dim)


def _heads(r) -> list[str]:
    return [r.heads, *([r.group] if r.group else [])] if r.heads else ["heads"]


def _from_call(t: Any, axes: tuple[str, ...], r, seq: str, dim: str, size) -> Any:
    """A (batch, heads, seqlen, dim) tensor as the diagram's array with `axes`: its heads split into the
    diagram's head axes (key/value heads, then the query group)."""
    heads = [h for h in _heads(r) if h in axes]
    t = t.reshape(t.shape[0], *[size(h) for h in heads], t.shape[2], t.shape[3])
    have = ["batch", *heads, seq, dim]
    return t.permute(*[have.index(a) for a in axes])


def _to_call(o: Any, axes: tuple[str, ...], r, seq: str, dim: str) -> Any:
    heads = [h for h in _heads(r) if h in axes]
    want = ["batch", *heads, seq, dim]
    o = o.permute(*[axes.index(a) for a in want])
    return o.reshape(o.shape[0], -1, o.shape[-2], o.shape[-1])


# --------------------------------------------------------------------------------------- a row

def run(row: dict[str, Any], tmp: Path, torch: Any, triton: Any, rep_ms: float) -> None:
    """Write the row's file, call it at the default sizes, check it against float64 and time it; on any
    error the row records its first line."""
    g = row["file"]
    name = f"{row['diagram']}_{g.backend}"
    paths = g.write(tmp / (f"{name}.cu" if g.backend == "cuda" else f"{name}.py"))
    module = import_file(next(p for p in paths if p.suffix == ".py"), name)
    named = getattr(module, "__all__", None)     # the CUDA loader has none: its wrapper is named as the module's
    wrapper = getattr(module, named[0] if named else "attention" if "causal" in row["kwargs"] else g.diagram.name)
    gen = torch.Generator(device="cuda").manual_seed(0)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[row["dtype"]]
    tensors = [torch.randn(*s, generator=gen, device="cuda", dtype=dtype) for s in row["shapes"]]
    try:
        out = wrapper(*tensors, **row["kwargs"])
        torch.cuda.synchronize()
        ref = reference(torch, g, tensors)
        worst = float((out.double() - ref).abs().max() / ref.abs().max())
        row.update(max_error=worst if math.isfinite(worst) else float("inf"))
        del ref, out
        if not row["max_error"] <= row["tolerance"]:
            row.update(status="wrong", error=f"largest error {row['max_error']:.3g} of the largest value, "
                                             f"above {row['tolerance']:.3g}")
            return
        t = timed(triton, lambda: wrapper(*tensors, **row["kwargs"]), rep_ms=rep_ms)
        row.update(status="ok", **t, tflops=row["tensor_flops"] / t["time_s"] / 1e12,
                   over_predicted=t["time_s"] / row["predicted_s"])
    finally:
        tensors.clear()              # the inputs' memory back before the next row
        torch.cuda.empty_cache()


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


# ------------------------------------------------------------------------------------ report

def record(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the JSON keeps it: its values, not the generated file."""
    return {k: v for k, v in row.items() if k != "file"}


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    lines = [f"# Every shipped diagram at its default sizes: {meta['gpu']}", "",
             (f"`{meta['command']}`, {meta['date']}; napkin's profile `{meta['profile']}`. Each kernel is "
              "checked against a float64 evaluation of its diagram before it is timed (largest error over the "
              "largest value, at most sqrt(L) u: L the longest reduction, u the unit roundoff), then timed by "
              f"{meta['timer']}. TFLOP/s count the tensor-core FLOPs the model counts."), "",
             "| diagram | backend | status | max error (tolerance) | time | predicted | TFLOP/s | configuration |",
             "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        backend = r["backend"] + (" (default)" if r.get("default") else "")
        status = r["status"] if not r.get("error") else f"{r['status']}: {r['error']}"
        err = (f"{r['max_error']:.2g} ({r['tolerance']:.2g})" if "max_error" in r else
               f"- ({r['tolerance']:.2g})" if "tolerance" in r else "-")
        time_ = f"{r['time_s'] * 1e6:.1f} us" if "time_s" in r else "-"
        predicted = f"{r['predicted_s'] * 1e6:.1f} us" if "predicted_s" in r else "-"
        tflops = f"{r['tflops']:.0f}" if "tflops" in r else "-"
        lines.append(f"| {r['diagram']} | {backend} | {status.replace('|', '/')} | {err} | {time_} | "
                     f"{predicted} | {tflops} | {r.get('configuration', '-')} |")
    counts = {s: sum(r["status"] == s for r in doc["rows"]) for s in dict.fromkeys(r["status"] for r in doc["rows"])}
    lines += ["", "Rows: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default="h100", choices=GPUS, help="napkin's profile the files are generated for")
    parser.add_argument("--diagrams", default="", help="comma-separated shipped diagrams (default: every one)")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma-separated: default (napkin kernel's own choice), triton, cuda")
    parser.add_argument("--rep-ms", type=float, default=100.0, help="do_bench's repetition time")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="rows that do not start in it are skipped")
    parser.add_argument("--dry-run", action="store_true", help="generate every file and list the rows; no GPU")
    parser.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = parser.parse_args(argv)
    began = time.monotonic()
    from analyzer.common import resources
    shipped = sorted(resources.shipped("diagrams"))
    diagrams = [d for d in args.diagrams.split(",") if d] or shipped
    unknown = [d for d in diagrams if d not in shipped]
    if unknown:
        parser.error(f"--diagrams: {', '.join(unknown)} not shipped (napkin diagrams list: {', '.join(shipped)})")
    backends = tuple(b for b in args.backends.split(",") if b)
    if not backends or set(backends) - set(BACKENDS):
        parser.error(f"--backends: a comma-separated list of {', '.join(BACKENDS)}")
    torch = triton = None
    if not args.dry_run:
        import torch
        import triton
        if not torch.cuda.is_available():
            print("error: no CUDA device (use --dry-run to list the rows without one)", file=sys.stderr)
            return 1
    meta = {"command": command("defaults.py", argv), "date": time.strftime("%Y-%m-%d"), "profile": args.gpu,
            "timer": "triton.testing.do_bench (median)" if not args.dry_run else "nothing: a dry run",
            **(environment() if torch else {"gpu": "dry run (no GPU)"})}
    if torch:
        meta["gpu"] = torch.cuda.get_device_name()
    log(f"{meta['gpu']}: {meta['command']}")
    table = rows(diagrams, args.gpu, backends)
    doc = {"meta": meta, "rows": [record(r) for r in table]}
    out = Path(args.out)
    name = f"defaults_{args.gpu}"
    tmp = Path(tempfile.mkdtemp(prefix="napkin_defaults_"))
    for i, row in enumerate(table):
        if row["status"] != "generated":
            continue
        if args.dry_run:
            row["status"] = "dry run"
        elif time.monotonic() - began > args.budget_s:
            row["status"] = "skipped: budget"
        else:
            try:
                run(row, tmp, torch, triton, args.rep_ms)
            except Exception as exc:  # noqa: BLE001 - a kernel that fails is a row of the table, not the end
                row.update(status="fail", error=_line(exc))
            log(f"  {row['diagram']} ({row['backend']}): {row['status']}"
                + (f" {row['error']}" if row.get("error") else ""))
        doc["rows"][i] = record(row)
        save_results(out, name, doc, markdown(doc))
    save_results(out, name, doc, markdown(doc))
    log(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
