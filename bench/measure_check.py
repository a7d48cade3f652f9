"""Issue 37's targets on the GPU at hand, in one run: a profile drafted from the device against the
shipped datasheet profile's predictions, and `napkin measure --sweep` followed by `napkin calibrate`
against the shipped fit.

Parts (--parts, comma-separated):
- `draft`: `napkin hardware draft` (analyzer.measure.draft: the driver's properties, a copy, matmuls);
  the drafted profile's and the shipped datasheet profile's predictions (napkin analyze's, the idealised
  model both) of each diagram at its defaults, and their ratio (the target: within 15 %).
- `sweep`: the Hopper attention kernel's sweep of attention and causal_attention at the head dims
  --head-dims names (at FlashAttention-3's lengths, the configurations --design names: sampled, the
  shipped fits' design, or full, every legal one; timed as --timer says; analyzer.measure.sweep), added
  to sweep_<gpu>.json in --out (each run adds to the file); its configurations compiled ahead by
  --workers processes.
- `fit`: `napkin calibrate` of that recording (analyzer.calibrate.hopper), each fitted parameter beside
  the shipped fit's with both standard errors, and whether they agree within them (the target); with
  `--design sampled`, of the records of a full recording that a sampled sweep times (the same
  configurations at the same shapes, analyzer.measure.sweep.sampled).
- `contraction-sweep`: `napkin measure --sweep` of matmul and matmul_bias_gelu, the Hopper contraction
  kernel's (analyzer.measure.sweep_contraction), into contraction_<gpu>.json in --out.
- `contraction-fit`: `napkin calibrate --kernel contraction` of that recording against the shipped fit, as
  `fit` does.
- `chain-sweep`, `chain-fit`: the same for the chain kernel: `napkin measure --sweep` of mlp2 and
  linear_attention_queries at their widths and at half of them (CHAIN_SWEEPS, the shipped fit's), into
  chain_<gpu>.json, and `napkin calibrate --kernel chain` of it against the shipped chain fit.

    python bench/measure_check.py --parts draft                        # a minute
    python bench/measure_check.py --parts sweep --head-dims 128,256    # a few minutes with 15 workers
    python bench/measure_check.py --parts fit                          # seconds, no GPU needed
    python bench/measure_check.py --parts contraction-sweep            # a minute and a half
    python bench/measure_check.py --parts contraction-fit              # seconds, no GPU needed
    python bench/measure_check.py --parts chain-sweep,chain-fit        # four minutes with 15 workers

It writes measure_check_<gpu>.json and .md into --out ($OUT if set, else bench/results), or
measure_check_contraction_<gpu> (measure_check_chain_<gpu>) for the contraction (chain) parts alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, log, save_results  # noqa: E402

DIAGRAMS = ("attention", "causal_attention", "matmul", "mlp2")      # what the draft predicts
# each kernel's sweeps, as the shipped fit's recordings were made: (diagram, --set sizes)
SWEEPS = {"contraction": (("matmul", {}), ("matmul_bias_gelu", {})),
          "chain": (("mlp2", {}), ("linear_attention_queries", {}), ("mlp2", {"i": 128, "o": 128}),
                    ("linear_attention_queries", {"d": 64, "e": 64}))}


def draft_part(gpu_name: str) -> dict:
    import datetime

    from analyzer import hardware
    from analyzer.measure.device import profile_for
    from analyzer.measure.draft import draft, measure_rates, properties, reference
    from analyzer.model.analysis import analyze
    props = properties(0)
    _, ref, _ = reference(props.device)
    measured = measure_rates(tuple(t for t in ("fp16", "bf16") if t in ref.tensor_dtypes))
    text = draft(props, measured, datetime.date.today().isoformat())
    path = Path(tempfile.mkdtemp()) / "drafted.yaml"
    path.write_text(text)
    drafted, shipped = hardware.load(str(path)), hardware.load(profile_for(props.device))
    rows = []
    for diagram in DIAGRAMS:
        ours, theirs = (analyze(diagram, p).totals.predicted_time_s for p in (drafted, shipped))
        rows.append({"diagram": diagram, "drafted_s": ours, "shipped_s": theirs, "ratio": ours / theirs})
        log(rows[-1])
    return {"profile": text, "shipped": shipped.name, "copy_bytes_per_s": measured.copy_bytes_per_s,
            "matmul_flops_per_s": measured.matmul_flops_per_s, "rows": rows}


def sweep_part(out: Path, gpu_name: str, head_dims: tuple[int, ...], rep_ms: float, workers: int | None,
               timer: str = "auto", design: str = "sampled") -> dict:
    from analyzer.measure.sweep import Grid, sweep
    from analyzer.measure.timing import timer_named
    path = out / f"sweep_{gpu_name}.json"
    doc = json.loads(path.read_text()) if path.exists() else {"meta": {}, "records": []}
    for diagram in ("attention", "causal_attention"):
        new = sweep(diagram, grid=Grid(head_dims=head_dims, design=design), rep_ms=rep_ms, workers=workers,
                    timer=timer_named(timer),
                    command=f"python bench/measure_check.py --parts sweep --head-dims "
                            f"{','.join(map(str, head_dims))} --rep-ms {rep_ms:g} --timer {timer} --design {design}",
                    progress=lambda what, done, total: log(f"{diagram} {what} {done}/{total}") if done % 20 == 0
                    else None)
        doc = {"meta": new["meta"], "records": [*doc["records"], *new["records"]]}
        path.write_text(json.dumps(doc, indent=1))
        ok = sum(r["status"] == "ok" for r in new["records"])
        log(f"{diagram}: {ok} of {len(new['records'])} records measured")
    return {"recording": str(path), "records": len(doc["records"])}


def sampled_records(path: Path, profile: str, into: Path) -> Path:
    """The records of the recording at `path` that a sweep of the sampled design times (its configurations
    at each of the grid's shapes, ranked by `profile`'s model), written to `into`."""
    from analyzer import hardware
    from analyzer.codegen import generate
    from analyzer.config import hopper
    from analyzer.measure.reference import inputs
    from analyzer.measure.sweep import Grid, json_key, sampled
    from analyzer.measure.trial import attention_sizes
    doc, grid, p = json.loads(path.read_text()), Grid(), hardware.load(profile)
    keep = set()
    for diagram in ("attention", "causal_attention"):
        g = generate(diagram, p)
        chain = hopper.scores(g.as_launch.configured)
        for d in grid.head_dims:
            for length in grid.lengths:
                shapes, _ = inputs(g, attention_sizes(g, grid.tokens, grid.hidden, length, d))
                ranked = hopper.ranked(p, d, g.dtype, seq_q=length, seq_k=length,
                                       instances=shapes[0][0] * shapes[0][1], causal=g.roles.causal, scores=chain)
                keep |= {(d, g.roles.causal, length, json_key(c.entry())) for _, c in sampled(ranked, length)}
    records = [r for r in doc["records"] if (r["head_dim"], r["causal"], r["seq_q"], json_key(r["config"])) in keep]
    log(f"{len(records)} of {len(doc['records'])} records are the sampled design's ({len(keep)} configurations "
        "and shapes)")
    into.write_text(json.dumps({**doc, "records": records}))
    return into


def fit_part(out: Path, gpu_name: str, profile: str, design: str = "full") -> dict:
    import numpy as np

    from analyzer import hardware
    from analyzer.calibrate.hopper import Errors, calibrate, predict
    from analyzer.config.hopper_params import HopperParams
    from analyzer.hardware import hopper_fit
    recording = out / f"sweep_{gpu_name}.json"
    with tempfile.TemporaryDirectory() as tmp:
        if design == "sampled":
            recording = sampled_records(recording, profile, Path(tmp) / recording.name)
        result = calibrate(str(recording), profile)
    shipped, _ = hopper_fit(hardware.load(profile))
    rows = []
    for name, err in result.fitted.uncertainty.items():
        ours = getattr(result.fitted.params, name)
        theirs = getattr(shipped, name, None)
        if theirs is not None and theirs.value is not None:
            rows.append(_agreement(name, ours, err, theirs))
    # what the fits say, beside what their parameters are: both fits' predictions of this sweep's records
    measured = np.array([r.time_s for r in result.records])
    ours = predict(result.base, result.records, result.fitted.params)
    theirs = predict(result.base, result.records, HopperParams.of(hardware.load(profile)))
    held = np.array([s != "train" for s in result.split])
    predictions = {"fits_apart": _errors(Errors.of(ours, theirs)),
                   "this_fit_held_out": _errors(Errors.of(ours[held], measured[held])),
                   "shipped_fit": _errors(Errors.of(theirs, measured))}
    return {"rows": rows, "predictions": predictions, "same_configurations": _shift(result.records, gpu_name),
            "design": design, "records": len(result.records)}


def kernel_sweep_part(kernel: str, out: Path, gpu_name: str, rep_ms: float, workers: int | None) -> dict:
    """`kernel`'s sweeps (SWEEPS: contraction or chain) into <kernel>_<gpu>.json in `out`."""
    from analyzer.measure.sweep import sweep
    path = out / f"{kernel}_{gpu_name}.json"
    doc = json.loads(path.read_text()) if path.exists() else {"records": []}
    for diagram, sets in SWEEPS[kernel]:
        new = sweep(diagram, rep_ms=rep_ms, workers=workers, sets=sets,
                    command=f"python bench/measure_check.py --parts {kernel}-sweep --rep-ms {rep_ms:g}")
        doc = {**new, "records": [*doc["records"], *new["records"]]}
        path.write_text(json.dumps(doc, indent=1))
        log(f"{diagram} {sets}: {sum('error' not in r for r in new['records'])} of {len(new['records'])} records "
            "measured")
    return {"recording": str(path), "records": len(doc["records"])}


def kernel_fit_part(kernel: str, out: Path, gpu_name: str, profile: str) -> dict:
    """napkin calibrate --kernel `kernel` of that recording, each parameter against the shipped fit's."""
    from analyzer import hardware
    from analyzer.calibrate import chain, contraction
    from analyzer.hardware import chain_fit, contraction_fit
    fitting, found = {"contraction": (contraction, contraction_fit), "chain": (chain, chain_fit)}[kernel]
    result = fitting.calibrate(str(out / f"{kernel}_{gpu_name}.json"), profile)
    shipped, _ = found(hardware.load(profile))
    rows = [_agreement(name, getattr(result.params, name), result.uncertainty[name], getattr(shipped, name))
            for name in fitting.PARAMETERS]
    return {"rows": rows, "errors": result.errors["calibrated"], "shipped_fit": dict(shipped.fit),
            "held_out": result.held_out_what}


def _agreement(name: str, ours: float, err: float, theirs) -> dict:
    """A fitted parameter beside the shipped fit's estimate of it, and whether they agree within their two
    standard errors combined; a parameter no record of the recording moves (an infinite error: the causal
    mask's cost on a sweep of one diagram) is not determined by it (agree: None)."""
    spread = math.hypot(err, theirs.uncertainty or 0.0)
    return {"parameter": name, "fitted": ours, "fitted_error": err if math.isfinite(err) else None,
            "shipped": theirs.value, "shipped_error": theirs.uncertainty,
            "agree": abs(ours - theirs.value) <= spread if math.isfinite(err) else None,
            # how many combined standard errors apart: with twelve parameters drawn alike, about a third lie
            # beyond one (a normal's 32 %), so "agree" within one is the strict reading of the target
            "apart": abs(ours - theirs.value) / spread if math.isfinite(err) and spread else None}


def _agreement_table(rows: list[dict]) -> list[str]:
    """The markdown of _agreement's rows, and how many of them agree."""
    md = ["| parameter | fitted | +- | shipped | +- | apart (combined errors) | agree |", "|---|---|---|---|---|---|---|"]
    md += [f"| {r['parameter']} | {r['fitted']:.4g} | "
           + (f"{r['fitted_error']:.2g}" if r["fitted_error"] is not None else "undetermined")
           + f" | {r['shipped']:.4g} | {r['shipped_error'] or 0:.2g} | "
           + (f"{r['apart']:.2f}" if r.get("apart") is not None else "-") + " | "
           + {True: "yes", False: "no", None: "-"}[r["agree"]] + " |" for r in rows]
    agree = [r["agree"] for r in rows if r["agree"] is not None]
    return md + ["", f"{sum(agree)} of {len(agree)} determined parameters agree with the shipped fit within their "
                 "combined standard errors."]


def _errors(e) -> dict:
    return {"count": e.count, "median": e.median, "p90": e.p90, "worst": e.worst}


def _shift(records: list, gpu_name: str) -> dict | None:
    """This sweep's time of each configuration and shape the shipped fit's recording also timed, over that
    recording's: how much two recordings of one GPU model differ before any fit."""
    shipped = Path(__file__).resolve().parent / "results" / f"hopper_sweep_{gpu_name}.json"
    if not shipped.exists():
        return None

    def key(head_dim, causal, seq_q, heads_q, config) -> str:
        return json.dumps([head_dim, causal, seq_q, heads_q, config], sort_keys=True)
    theirs = {key(r["head_dim"], r["causal"], r["seq_q"], r["heads_q"], r["config"]): r["time_s"]
              for r in json.loads(shipped.read_text())["records"]
              if r.get("kind") == "grid" and r.get("status", "ok") == "ok"}
    ratios = [r.time_s / t for r in records if (t := theirs.get(key(
        r.head_dim, r.causal, r.seq_q, r.heads_q, r.config.model_dump())))]
    if not ratios:
        return None
    import numpy as np
    p10, median, p90 = (float(x) for x in np.percentile(ratios, [10, 50, 90]))
    return {"recording": str(shipped.relative_to(shipped.parent.parent.parent)), "count": len(ratios),
            "median": median, "p10": p10, "p90": p90}


def markdown(doc: dict) -> str:
    md = [f"# Issue 37's targets on {doc['gpu']}", "", f"`{doc['command']}`, {doc['date']}.", ""]
    if "draft" in doc:
        d = doc["draft"]
        md += ["## A profile drafted from the device, against the shipped datasheet profile", "",
               f"Shipped profile: `{d['shipped']}`. Measured: copy {d['copy_bytes_per_s'] / 1e9:,.0f} GB/s; "
               + ", ".join(f"{t} matmul {r / 1e12:,.0f} TFLOP/s" for t, r in d["matmul_flops_per_s"].items()),
               "", "| diagram | drafted | shipped | drafted / shipped |", "|---|---|---|---|"]
        md += [f"| {r['diagram']} | {r['drafted_s'] * 1e6:.1f} us | {r['shipped_s'] * 1e6:.1f} us | {r['ratio']:.3f} |"
               for r in d["rows"]]
        md += ["", "```yaml", d["profile"].rstrip(), "```", ""]
    if "sweep" in doc:
        md += ["## The sweep", "", f"{doc['sweep']['records']} records in `{doc['sweep']['recording']}`.", ""]
    if "fit" in doc:
        f = doc["fit"]
        md += ["## Its fit against the shipped fit", "",
               *([f"Fitted on {f['records']} records, the {f['design']} design's.", ""] if "design" in f else []),
               *_agreement_table(doc["fit"]["rows"]), "",
               "| predictions | records | median | 90th percentile | largest |", "|---|---|---|---|---|"]
        what = {"fits_apart": "this fit against the shipped fit, every record",
                "this_fit_held_out": "this fit against the measured, held out of it",
                "shipped_fit": "the shipped fit against the measured, every record"}
        md += [f"| {what[k]} | {e['count']} | {e['median']:.1%} | {e['p90']:.1%} | {e['worst']:.1%} |"
               for k, e in doc["fit"]["predictions"].items()]
        if (shift := doc["fit"]["same_configurations"]) is not None:
            md += ["", f"The same configuration at the same shape, this sweep's time over `{shift['recording']}`'s "
                   f"({shift['count']} pairs): median {shift['median']:.3f}, 10th percentile {shift['p10']:.3f}, "
                   f"90th {shift['p90']:.3f}."]
    for kernel in ("contraction", "chain"):
        if kernel not in doc:
            continue
        c = doc[kernel]
        md += [f"## The Hopper {kernel} kernel: its sweep's fit against the shipped fit", "",
               f"Median error of this fit: {c['errors']['train']:.1%} on the records it was fitted to, "
               f"{c['errors']['held out']:.1%} on the side it held out ({c.get('held_out', '4096^3')}) (the "
               f"shipped fit: {c['shipped_fit'].get('train_median_error', float('nan')):.1%} and "
               f"{c['shipped_fit'].get('held_out_median_error', float('nan')):.1%}).", "",
               *_agreement_table(c["rows"]), ""]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="draft", help="comma-separated: draft, sweep, fit")
    ap.add_argument("--gpu", default=None, help="the profile the fit is held against (default: the device's)")
    ap.add_argument("--head-dims", default="128", help="the sweep's head dims, comma-separated")
    ap.add_argument("--rep-ms", type=float, default=20.0)
    ap.add_argument("--timer", default="auto", choices=("auto", "graph"),
                    help="the sweep's timer (napkin measure --timer): graph, as the shipped fits' recordings")
    ap.add_argument("--design", default="sampled", choices=("sampled", "full"),
                    help="the sweep's configurations (napkin measure --design)")
    ap.add_argument("--workers", type=int, default=None, help="processes compiling ahead (default: a core "
                                                                "each but one)")
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("OUT", Path(__file__).resolve().parent / "results")))
    args = ap.parse_args(argv)
    import datetime
    parts = set(args.parts.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    gpu, profile = "gpu", args.gpu
    if profile:         # a fit alone: the GPU its profile names (the recording's own, or refused by the fit)
        from analyzer import hardware
        gpu = hardware.load(profile).description
    if parts & {"draft", "sweep", "contraction-sweep", "chain-sweep"}:
        from analyzer.measure.device import local_device, profile_for
        device = local_device()
        gpu, profile = device.name, args.gpu or profile_for(device)
    name = "h200" if "H200" in gpu or (profile or "").startswith("h200") else "h100"
    doc = {"command": command("measure_check.py", argv), "date": datetime.date.today().isoformat(), "gpu": gpu}
    if "draft" in parts:
        doc["draft"] = draft_part(name)
    if "sweep" in parts:
        doc["sweep"] = sweep_part(args.out, name, tuple(int(d) for d in args.head_dims.split(",")), args.rep_ms,
                                   args.workers, args.timer, args.design)
    if "fit" in parts:
        doc["fit"] = fit_part(args.out, name, profile or name, args.design)
    for kernel in ("contraction", "chain"):
        if f"{kernel}-sweep" in parts:
            doc[f"{kernel}_sweep"] = kernel_sweep_part(kernel, args.out, name, args.rep_ms, args.workers)
        if f"{kernel}-fit" in parts:
            doc[kernel] = kernel_fit_part(kernel, args.out, name, profile or name)
    alone = [k for k in ("contraction", "chain") if parts <= {f"{k}-sweep", f"{k}-fit"}]
    stem = f"measure_check_{alone[0]}" if alone else "measure_check"
    save_results(args.out, f"{stem}_{name}", doc, markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
