"""The host's cost of one call: napkin's generated attention against SDPA's backends, at a tiny shape.

At a shape whose kernel runs for a few microseconds the GPU waits for the host, and a call costs what
its Python and its launch cost. For each callable this script runs N calls back to back (no
synchronisation between them), after a warm-up, and reports the wall time per call: the host time per
call, since the GPU's share is far below it (each kernel's own time, by CUDA graph replays, is beside
it). Then it profiles napkin's Hopper module over the same calls (cProfile, the functions by their own
time), so that a change to the wrapper is aimed where the time goes.

Callables: napkin's Hopper module and its portable module (`napkin kernel attention --gpu <gpu>`, and
with `--backend triton`), SDPA's cuDNN and FlashAttention backends, and FlashAttention-4's CuTe forward
where `flash_attn.cute` imports.

    python bench/host_cost.py --gpu h100 [--calls 2000] [--seq 128] [--head-dim 128]

Writes host_cost_<gpu>.json and .md into --out ($OUT if set, else ./out).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    command,
    environment,
    import_file,
    log,
    rotations,
    save_results,
    timed,
)

ROUNDS = 5       # each callable's N calls are timed this many times, rotating; the median is reported
CHECK_LENGTHS = (333, 1000)    # sequence lengths of the launch-plan checks (edges: no multiple of a tile)


def plan_checks(torch: Any, gpu: str, tmp: Path) -> list[dict[str, Any]]:
    """Every shipped diagram whose default kernel on `gpu` is the Hopper module, called four times at each
    of CHECK_LENGTHS: the first call plans and launches through Triton's binder, the second launches the
    compiled kernel with the plan, the third does so with tensors of its own (the descriptors rebound),
    the fourth with views at an odd offset (copies, fresh descriptors). Each output against the
    diagram's float64 evaluation (bench.defaults: sqrt(L) u)."""
    from analyzer.codegen import generate
    from analyzer.common import resources
    from bench.defaults import inputs, reduction, reference, tolerance
    rows = []
    for name in sorted(resources.shipped("diagrams")):
        g = generate(name, gpu)
        if g.backend != "hopper":
            continue
        (path,) = [p for p in g.write(tmp / f"check_{name}.py") if p.suffix == ".py"]
        module = import_file(path, f"check_{name}")
        wrapper = getattr(module, module.__all__[0])
        r = g.roles
        for length in CHECK_LENGTHS:
            sets = {r.seq_q: length, r.seq_k: length}
            shapes, kwargs = inputs(g, sets)
            limit = tolerance(g.dtype, reduction(g, sets))
            dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[g.dtype]
            gen = torch.Generator(device="cuda").manual_seed(length)
            errors = []
            for call in range(4):
                if call == 3:     # views 2 bytes past an aligned base: copies the TMA engine can address
                    tensors = [torch.randn(math.prod(s) + 1, generator=gen, device="cuda", dtype=dtype)[1:].view(s)
                               for s in shapes]
                elif call != 1:
                    tensors = [torch.randn(*s, generator=gen, device="cuda", dtype=dtype) for s in shapes]
                ref = reference(torch, g, tensors, sets)
                out = wrapper(*tensors, **kwargs)
                errors.append(float((out.double() - ref).abs().max() / ref.abs().max()))
            rows.append({"diagram": name, "length": length, "errors": errors, "tolerance": limit,
                         "ok": all(e <= limit for e in errors)})
            log(f"  {name} at {length}: {', '.join(f'{e:.2g}' for e in errors)} (tolerance {limit:.2g})")
    return rows


def callables(torch: Any, q: Any, k: Any, v: Any, modules: dict[str, Any]) -> dict[str, Any]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    out = {label: (lambda m=m: m.attention(q, k, v)) for label, m in modules.items()}

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v)
        return call
    out["SDPA cuDNN"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    out["SDPA flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
    try:
        from flash_attn.cute import flash_attn_func
        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        out["FlashAttention-4"] = lambda: flash_attn_func(qt, kt, vt)[0]
    except Exception as exc:   # noqa: BLE001 - the peer is optional
        log(f"FlashAttention-4 not timed: {type(exc).__name__}: {exc}")
    return out


def op_checks(torch: Any, op: Any, q: Any, k: Any, v: Any, ref: Any) -> dict[str, float]:
    """The Hopper module's custom op inside torch.compile (inductor, fullgraph) and inside a captured CUDA
    graph, each output's largest error over the largest float64 value (twice the attention for the
    compiled function, which scales it)."""
    scale = float(ref.abs().max())
    compiled = torch.compile(lambda q, k, v: op(q, k, v) * 2, fullgraph=True)
    out = compiled(q, k, v)
    errors = {"torch.compile": float((out.double() / 2 - ref).abs().max()) / scale}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        op(q, k, v)                              # the plan made before capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(q, k, v)
    graph.replay()
    torch.cuda.synchronize()
    errors["CUDA graph"] = float((captured.double() - ref).abs().max()) / scale
    log(f"  the op: {errors}")
    return errors


def per_call(torch: Any, fn: Any, calls: int) -> float:
    """Wall seconds per call of `calls` back-to-back calls, the GPU synchronised before and after."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls


def profile(fn: Any, calls: int, top: int = 25) -> list[dict[str, Any]]:
    """The `top` functions by their own time over `calls` calls of `fn`."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():
        rows.append({"function": f"{Path(file).name}:{line}({name})", "calls_per_call": ncalls / calls,
                     "own_us": tottime / calls * 1e6, "cumulative_us": cumtime / calls * 1e6})
    return sorted(rows, key=lambda r: -r["own_us"])[:top]


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [f"# The host's cost of one call: {m['gpu']}", "",
             f"`{m['command']}`, {m['date']}; batch 1, 1 head, {m['seq']} tokens, head dim {m['head_dim']}, "
             f"bf16. Host time: {m['calls']} back-to-back calls, wall time over calls, median of {ROUNDS} "
             "rotating rounds; kernel time: CUDA graph replays (triton.testing.do_bench_cudagraph).", "",
             "| callable | host time per call | over SDPA cuDNN | kernel time |", "|---|---:|---:|---:|"]
    base = doc["host_s"].get("SDPA cuDNN")
    for label, t in doc["host_s"].items():
        kernel = doc["kernel_s"].get(label)
        lines.append(f"| {label} | {t * 1e6:.1f} us | {t / base:.2f} | "
                     + (f"{kernel * 1e6:.1f} us |" if kernel else "- |"))
    checks = doc.get("checks", [])
    lines += ["", f"## The launch plans checked: {sum(c['ok'] for c in checks)} of {len(checks)} within tolerance", "",
              "Every shipped diagram the Hopper module realises, four calls at each length (planned through "
              "Triton's binder; the compiled kernel with the plan; the same with tensors of its own; with views "
              "2 bytes past an aligned base), each against float64: largest error over the largest value.", "",
              "| diagram | length | first | second | new tensors | odd offset | tolerance |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {c['diagram']} | {c['length']} | " + " | ".join(f"{e:.2g}" for e in c["errors"])
              + f" | {c['tolerance']:.2g} |" for c in checks]
    if doc.get("op_checks"):
        lines += ["", "The Hopper module's custom op (`attention_op()`), largest error over the largest float64 "
                  "value: " + "; ".join(f"inside {where} {e:.2g}" for where, e in doc["op_checks"].items()) + "."]
    lines += ["", f"## Where napkin's Hopper call spends its host time (cProfile, {m['profile_calls']} calls; "
              "own time a call, microseconds; cProfile's own overhead inflates small functions)", "",
              "| function | calls a call | own | cumulative |", "|---|---:|---:|---:|"]
    lines += [f"| `{r['function']}` | {r['calls_per_call']:.0f} | {r['own_us']:.2f} | {r['cumulative_us']:.2f} |"
              for r in doc["profile"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer.codegen import generate
    tmp = Path(tempfile.mkdtemp(prefix="host_cost_"))
    modules = {}
    for label, backend in (("napkin Hopper", None), ("napkin portable", "triton")):
        g = generate("attention", args.gpu, backend=backend, dtype="bf16")
        (path,) = [p for p in g.write(tmp / f"attention_{backend or 'hopper'}.py") if p.suffix == ".py"]
        modules[label] = import_file(path, path.stem)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 1, args.seq, args.head_dim, generator=gen, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    fns = callables(torch, q, k, v, modules)
    op = modules["napkin Hopper"].attention_op()
    fns["napkin Hopper, as a custom op"] = lambda: op(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    doc: dict[str, Any] = {"meta": {**environment(), "command": command("host_cost.py", argv), "profile": args.gpu,
                                    "date": time.strftime("%Y-%m-%d"), "calls": args.calls, "seq": args.seq,
                                    "head_dim": args.head_dim, "profile_calls": args.calls // 4},
                           "errors": {}, "host_s": {}, "kernel_s": {}}
    for label, fn in fns.items():
        doc["errors"][label] = float((fn().double() - ref).abs().max())
        per_call(torch, fn, 50)                          # warm: compile, caches
    rounds: dict[str, list[float]] = {label: [] for label in fns}
    for _, label in rotations(list(fns), ROUNDS):
        rounds[label].append(per_call(torch, fns[label], args.calls))
    doc["host_s"] = {label: statistics.median(ts) for label, ts in rounds.items()}
    doc["host_rounds_s"] = rounds
    for label, fn in fns.items():
        try:
            doc["kernel_s"][label] = timed(triton, fn, graph=True)["time_s"]
        except Exception as exc:   # noqa: BLE001 - a callable that cannot be captured has no kernel time
            log(f"{label}: no CUDA graph time ({type(exc).__name__})")
    doc["profile"] = profile(fns["napkin Hopper"], args.calls // 4)
    doc["checks"] = plan_checks(torch, args.gpu, tmp)
    doc["op_checks"] = op_checks(torch, op, q, k, v, ref)
    save_results(args.out, f"host_cost_{args.gpu}", doc, markdown(doc))
    log(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
