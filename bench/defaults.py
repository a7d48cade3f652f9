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
- timed as napkin measure times a kernel (analyzer.measure.timing: CUDA events, or CUDA graph replays
  where a call's launch costs half its time or more; the median), beside the prediction of
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

from analyzer.measure.reference import inputs, reduction, reference, tolerance  # noqa: E402
from analyzer.measure.timing import timed  # noqa: E402
from bench.common import (  # after the checkout's root is on sys.path
    command,
    environment,
    import_file,
    log,
    save_results,
)

GPUS = ("h100", "h200")
BACKENDS = ("default", "triton", "cuda")       # napkin kernel's own choice, then the others forced
BUDGET_S = 540


# ------------------------------------------------------------------------------- the kernels

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
        t = timed(lambda: wrapper(*tensors, **row["kwargs"]), rep_ms)      # as napkin measure times it
        row.update(status="ok", time_s=t.time_s, time_s_p20=t.time_s_p20, time_s_p80=t.time_s_p80,
                   timer=t.method, tflops=row["tensor_flops"] / t.time_s / 1e12,
                   over_predicted=t.time_s / row["predicted_s"])
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
    parser.add_argument("--rep-ms", type=float, default=100.0, help="the timer's repetition time")
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
            "timer": ("napkin measure's (analyzer.measure.timing): CUDA events, or CUDA graph replays where a "
                      "call's launch costs half its time or more (each row says which); the median"
                      if not args.dry_run else "nothing: a dry run"),
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
