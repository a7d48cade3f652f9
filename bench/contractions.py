"""Contractions and chains on one GPU beside what a user would call instead: matmul, RMSNorm-matmul, a
matmul with bias and GELU, the fused MLP, Llama's SwiGLU MLP and linear attention, each generated as
`napkin kernel` writes it, and the same module with its masked edge loop compiled in.

The portable kernel streams the contracted axis in two loops, the interior chunks unmasked and the
edge chunks masked. Where the accumulator runs on from one loop into the other, ptxas serialises
every wgmma of the interior loop (its note C7515). The generator now compiles the edge loop only where
the launcher says the stream has edge chunks (a constexpr, EVEN_<stream>: the stream's size a multiple
of its chunk). Each row times both, so one run says what the serialised wgmma cost:
- `napkin`: the module as generated (EVEN_<stream> from the call's sizes);
- `edge loop`: the same module with EVEN_<stream>=False, the loop the kernel had before;
- the peer: torch's own sequence of calls for the same diagram (torch.matmul; F.rms_norm then a
  matmul; addmm then GELU; relu(X W1) W2; silu(X W1) (X W3) W2; Q (K^T V)).
Every module is first checked against a float64 evaluation of the diagram (bench.defaults.reference;
its tolerance: sqrt(L) u, L the longest reduction). Each is timed by triton.testing.do_bench in three
rotating rounds, the median of the rounds' medians reported, with the model's prediction (the file
header's) beside it.

    python bench/contractions.py --gpu h100                 # every row
    python bench/contractions.py --gpu h100 --rows matmul   # rows whose diagram is named
    python bench/contractions.py --dry-run                  # generate, list the rows (no GPU)

Writes contractions_<gpu>.json and .md into --out ($OUT if set, else ./out).
"""

from __future__ import annotations

import argparse
import math
import os
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
from bench.defaults import inputs, reduction, reference, tolerance  # noqa: E402
from bench.matmul_wgmma import with_edge_loop  # noqa: E402

# (diagram, element type, sizes): issue 33's shapes; attention is the portable attention kernel, timed
# for what the edge loop's constexpr changes there (its calibration was recorded with the loop)
ROWS = [("matmul", "fp16", {"a": 4096, "b": 4096, "c": 4096}),
        ("matmul", "bf16", {"a": 4096, "b": 4096, "c": 4096}),
        ("matmul", "fp16", {"a": 8192, "b": 8192, "c": 8192}),
        ("matmul", "bf16", {"a": 8192, "b": 8192, "c": 8192}),
        ("rmsnorm_matmul", "fp16", {}),
        ("matmul_bias_gelu", "fp16", {}),
        ("mlp2", "fp16", {}),
        ("swiglu_mlp", "bf16", {}),
        ("linear_attention", "fp16", {}),
        ("attention", "fp16", {"batch": 2, "heads": 16, "q": 4096, "x": 4096}),
        ("attention", "fp16", {"q": 16384, "x": 16384})]
ROUNDS = 3


def peer(torch: Any, diagram: str, tensors: list[Any]) -> tuple[str, Any]:
    """What a user calls instead, and its name."""
    F = torch.nn.functional
    if diagram == "matmul":
        a, b = tensors
        return "torch.matmul", lambda: torch.matmul(a, b)
    if diagram == "rmsnorm_matmul":
        x, g, w = tensors
        return "F.rms_norm, then torch.matmul", lambda: torch.matmul(F.rms_norm(x, (x.shape[1],), g, 1e-6), w)
    if diagram == "matmul_bias_gelu":
        x, w, b = tensors
        return "addmm, then F.gelu (tanh)", lambda: F.gelu(torch.addmm(b, x, w), approximate="tanh")
    if diagram == "swiglu_mlp":
        x, w1, w3, w2 = tensors
        return "silu(X W1) * (X W3), then W2 (torch)", \
            lambda: torch.matmul(F.silu(torch.matmul(x, w1)) * torch.matmul(x, w3), w2)
    if diagram == "mlp2":
        x, w1, w2 = tensors
        return "relu(X W1) W2 (torch)", lambda: torch.matmul(torch.relu(torch.matmul(x, w1)), w2)
    if diagram == "linear_attention":
        q, k, v = tensors
        return "Q (K^T V) (torch)", lambda: torch.matmul(q, torch.matmul(k.T, v))
    if diagram == "attention":
        q, k, v = tensors
        return "SDPA (cuDNN)", lambda: _sdpa(torch, q, k, v)
    raise ValueError(f"no peer for {diagram}")


def _sdpa(torch: Any, q: Any, k: Any, v: Any) -> Any:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def generated(diagram: str, gpu: str, dtype: str, sets: dict[str, int]):
    from analyzer.codegen import generate
    return generate(diagram, gpu, backend="triton", dtype=dtype, sets=sets or None)


def run_row(row: dict[str, Any], g, tmp: Path, torch: Any, triton: Any) -> None:
    name = f"{row['diagram']}_{row['dtype']}_{len(os.listdir(tmp))}"
    (path,) = [p for p in g.write(tmp / f"{name}.py") if p.suffix == ".py"]
    edge = tmp / f"{name}_edge.py"
    edge.write_text(with_edge_loop(path.read_text()))
    kernels = {"napkin": import_file(path, name), "edge loop": import_file(edge, f"{name}_edge")}
    gen = torch.Generator(device="cuda").manual_seed(0)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[row["dtype"]]
    tensors = [torch.randn(*s, generator=gen, device="cuda", dtype=dtype) for s in row["shapes"]]
    calls = {}
    for label, module in kernels.items():
        wrapper = getattr(module, module.__all__[0])
        calls[label] = (lambda w=wrapper: w(*tensors, **row["kwargs"]))
    row["peer"], calls["peer"] = peer(torch, row["diagram"], tensors)
    ref = reference(torch, g, tensors, row["sets"])
    scale = float(ref.abs().max())
    row["max_error"] = {}
    for label, fn in calls.items():
        out = fn()
        torch.cuda.synchronize()
        err = float((out.double() - ref).abs().max()) / scale
        row["max_error"][label] = err if math.isfinite(err) else float("inf")
    del ref
    wrong = [k for k in kernels if not row["max_error"][k] <= row["tolerance"]]
    if wrong:
        row.update(status="wrong", error=f"{', '.join(wrong)}: error above {row['tolerance']:.3g}")
        return
    medians: dict[str, list[float]] = {k: [] for k in calls}
    for _, label in rotations(list(calls), ROUNDS):     # rotating order: no kernel always runs first
        medians[label].append(timed(triton, calls[label])["time_s"])
    row["time_s"] = {k: statistics.median(v) for k, v in medians.items()}
    row["rounds_s"] = medians
    row["status"] = "ok"


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    lines = [f"# Contractions beside torch: {meta['gpu']}", "",
             f"`{meta['command']}`, {meta['date']}. Each module checked against float64 (largest error over the "
             "largest value, at most sqrt(L) u), then timed by triton.testing.do_bench in three rotating rounds "
             "(median of the rounds' medians). `edge loop`: the same module with its masked edge loop compiled "
             "in (EVEN_<stream>=False), as the generator wrote it before; ptxas serialises its wgmma (C7515).", "",
             "| diagram | dtype | sizes | napkin | edge loop | edge / napkin | peer | peer time | napkin / peer speed "
             "| TFLOP/s | predicted | measured / predicted | max error (tol) | configuration |",
             "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---|"]
    for r in doc["rows"]:
        sizes = " ".join(f"{k}={v}" for k, v in r["sizes"].items())
        if r["status"] != "ok":
            lines.append(f"| {r['diagram']} | {r['dtype']} | {sizes} | {r['status']}: {r.get('error', '')} "
                         "| | | | | | | | | | |")
            continue
        t = r["time_s"]
        lines.append(
            f"| {r['diagram']} | {r['dtype']} | {sizes} | {t['napkin'] * 1e6:.1f} us | {t['edge loop'] * 1e6:.1f} us "
            f"| {t['edge loop'] / t['napkin']:.2f} | {r['peer']} | {t['peer'] * 1e6:.1f} us "
            f"| {t['peer'] / t['napkin']:.2f} | {r['tensor_flops'] / t['napkin'] / 1e12:.0f} "
            f"| {r['predicted_s'] * 1e6:.1f} us | {t['napkin'] / r['predicted_s']:.2f} "
            f"| {r['max_error']['napkin']:.2g} ({r['tolerance']:.2g}) | {r['configuration']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--rows", default="", help="only rows of these diagrams (comma-separated)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    wanted = set(filter(None, args.rows.split(",")))
    rows = []
    for diagram, dtype, sets in ROWS:
        if wanted and diagram not in wanted:
            continue
        g = generated(diagram, args.gpu, dtype, sets)
        shapes, kwargs = inputs(g, sets)
        e, length = g.expected, reduction(g, sets)
        size = g.axis_sizes(sets)
        rows.append({"diagram": diagram, "dtype": dtype, "sizes": {a: size(a) for a in g.diagram.axes}, "shapes": shapes,
                     "sets": sets, "kwargs": kwargs, "reduction": length, "tolerance": tolerance(dtype, length),
                     "configuration": e.configuration, "predicted_s": e.time_s, "tensor_flops": e.tensor_flops,
                     "status": "generated", "_g": g})
    if args.dry_run:
        for r in rows:
            print(r["diagram"], r["dtype"], r["sizes"], r["shapes"], r["configuration"])
        return 0
    import torch
    import triton
    doc: dict[str, Any] = {"meta": {**environment(), "command": command("contractions.py", argv),
                                    "profile": args.gpu, "date": time.strftime("%Y-%m-%d")}, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in rows:
            g = r.pop("_g")
            log(f"{r['diagram']} {r['dtype']} {r['sizes']}")
            try:
                run_row(r, g, Path(tmp), torch, triton)
            except Exception as exc:      # a row that fails records why; the run goes on
                r.update(status="error", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            torch.cuda.empty_cache()
            doc["rows"].append(r)
            save_results(args.out, f"contractions_{args.gpu}", doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
