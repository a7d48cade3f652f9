"""napkin measure and napkin hardware draft: the generated kernel on the GPU at hand, beside the model's
prediction; a profile drafted from that GPU."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

import typer

from analyzer.cli.app import (
    CHECK_FAILED,
    Backend,
    DiagramArg,
    MeasuredDtype,
    OneValue,
    SetOpt,
    UsageError,
    app,
    console,
    hardware_app,
    parse_sets,
    progress_bar,
    shipped_gpus,
    wrote,
)
from analyzer.common.atomic import check_target

Timer = Literal["auto", "graph"]        # analyzer.measure.timing.TIMERS
Design = Literal["sampled", "full"]     # analyzer.measure.sweep.DESIGNS


@app.command(cls=OneValue)
def measure(
    diagram: DiagramArg,
    gpu: Annotated[Optional[str], typer.Option(
        "--gpu", "-g", metavar="GPU", autocompletion=shipped_gpus,
        help="The profile to generate and predict for (a name, alias or .yaml file); default: the shipped "
             "profile whose compute capability, SM count and memory are the local GPU's.")] = None,
    set_: SetOpt = None,
    dtype: Annotated[Optional[MeasuredDtype], typer.Option(
        help="The element type (default: the diagram's); the FP8 kernel's checks and timing are "
             "bench/hopper_fp8.py's.")] = None,
    backend: Annotated[Optional[Backend], typer.Option(
        help="The kernel family (default: napkin kernel's choice for the GPU).")] = None,
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", metavar="NAME", help="A configuration named in the diagram file.")] = None,
    rep_ms: Annotated[float, typer.Option("--rep-ms", min=1.0, max=10000.0,
                                          help="Milliseconds each timing repetition runs.")] = 100.0,
    timer: Annotated[Timer, typer.Option(
        help="auto: CUDA events, or graph replays where a call's launch is as long as its kernel; graph: "
             "graph replays always, as the shipped fits' recordings were timed.")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print the measurement as JSON (napkin schema "
                                                         "measurement).")] = False,
    output: Annotated[Optional[str], typer.Option(
        "--output", "-o", metavar="FILE", help="Also write the measurement's JSON here.")] = None,
    sweep: Annotated[Optional[str], typer.Option(
        "--sweep", metavar="RECORDING",
        help="Instead: time every legal configuration of the kernel (the Hopper attention kernel at "
             "FlashAttention-3's grid, the Hopper contraction kernel at square problems, or the portable "
             "module's attention or matmul) and add the records to RECORDING (created if absent), which "
             "napkin calibrate fits.")] = None,
    design: Annotated[Design, typer.Option(
        help="With --sweep of the Hopper attention kernel: sampled (every configuration at 2048 and 8192 "
             "tokens, the fewest stages of each elsewhere, a block an SM for the model's first six: the "
             "design the shipped fits were fitted on) or full (every configuration at every length).")] = "sampled",
    workers: Annotated[Optional[int], typer.Option(
        "--workers", min=1, max=128,
        help="With --sweep: processes compiling the configurations ahead of their timing (default: a core "
             "each but one, at most 16; 1: each compiles on its first launch).")] = None,
) -> None:
    """Run the generated kernel on this machine's GPU: check it against float64, time it, and set the
    time beside the model's prediction. Exits 3 where the check fails (the kernel is then not timed)."""
    from analyzer.common.atomic import write_text
    from analyzer.measure import measure as run
    from analyzer.measure.timing import timer_named
    from analyzer.report.measurement import measurement_table
    if sweep is not None:
        if output is not None or as_json:
            raise UsageError("--sweep writes its recording; -o and --json are a single measurement's",
                             field="--sweep", hint="pass --sweep alone")
        _sweep(diagram, gpu, parse_sets(set_ or []), rep_ms, sweep, workers, timer, design)
        return
    if workers is not None:
        raise UsageError("--workers compiles a sweep's configurations", field="--workers", hint="pass it with --sweep")
    if design != "sampled":
        raise UsageError("--design chooses a sweep's configurations", field="--design", hint="pass it with --sweep")
    if output is not None:
        check_target(output, "--output")
    sets = parse_sets(set_ or [])
    with progress_bar("measure") as progress:
        m = run(diagram, gpu, sets=sets, dtype=dtype, backend=backend, config=config, rep_ms=rep_ms,
                timer=timer_named(timer), progress=progress)
    text = m.model_dump_json(indent=2)
    if output is not None:
        write_text(output, text + "\n", "--output")
    if as_json:
        typer.echo(text)
    else:
        console().print(measurement_table(m))
    if output is not None and not as_json:      # with --json, stdout is the JSON alone
        wrote(output)
    if not m.check.passed:
        typer.echo(f"error: {m.diagram}'s kernel is wrong on this GPU: largest error {m.check.max_error:.3g} of the "
                   f"largest value, above {m.check.tolerance:.3g}", err=True)
        raise typer.Exit(CHECK_FAILED)


@hardware_app.command("draft", cls=OneValue)
def hardware_draft(
    output: Annotated[str, typer.Option("--output", "-o", metavar="FILE",
                                        help="The profile .yaml to write.")],
    device: Annotated[int, typer.Option("--device", min=0, max=63, help="The CUDA device's index.")] = 0,
) -> None:
    """Draft a profile of this machine's GPU from what its driver reports and two measurements (a copy,
    a matmul), each figure with its source, for you to review; figures taken from a shipped profile of
    another compute capability are marked ASSUMED (docs/hardware-profiles.md, "Drafting a profile")."""
    import datetime

    from analyzer.common.atomic import write_text
    from analyzer.measure.draft import draft, measure_rates, properties, reference
    check_target(output, "--output")
    props = properties(device)
    _, ref, _ = reference(props.device)
    dtypes = tuple(t for t in ("fp16", "bf16") if t in ref.tensor_dtypes)
    text = draft(props, measure_rates(dtypes, device), datetime.date.today().isoformat())
    write_text(output, text, "--output")
    assumed = text.count("ASSUMED")
    typer.echo(f"drafted {props.device.describe()}" +
               (f"; {assumed} figures ASSUMED from another compute capability: check them" if assumed else ""))
    wrote(output)


def _sweep(diagram: str, gpu: str | None, sets: dict[str, int], rep_ms: float, path: str,
           workers: int | None, timer: str = "auto", design: str = "sampled") -> None:
    """napkin measure --sweep: the records added to the recording at `path` (one GPU's)."""
    import json
    import shlex
    import sys
    from pathlib import Path

    from analyzer.calibrate.record import check_gpu, read_json
    from analyzer.common.atomic import write_text
    from analyzer.common.errors import NapkinError
    from analyzer.hardware import load
    from analyzer.measure.sweep import Grid, Recorded, sweep
    from analyzer.measure.timing import timer_named
    check_target(path, "--sweep")
    before = None
    if Path(path).exists():
        before = read_json(Path(path), Recorded, missing=f"no such recording: {path}", field="--sweep",
                           hint="name a new file, or one napkin measure --sweep wrote")
    command = "napkin " + " ".join(shlex.quote(w) for w in sys.argv[1:])
    with progress_bar("sweep") as progress:
        doc = sweep(diagram, gpu, sets=sets, grid=Grid(design=design), rep_ms=rep_ms, command=command,
                    workers=workers, timer=timer_named(timer), progress=progress)
    if before is not None:
        check_gpu(before.meta, path, load(doc["meta"]["profile"]), option="--sweep")
        if before.meta.get("calibrate") != doc["meta"]["calibrate"]:
            raise NapkinError(f"{path} holds another kernel's records than this sweep's (each kernel's records "
                              "are fitted apart)", field="--sweep",
                              hint="sweep into another file")
        doc = {**doc, "meta": {**doc["meta"], "added_to": [*before.meta.get("added_to", []), before.meta]},
               "records": [*before.records, *doc["records"]]}
    write_text(path, json.dumps(doc, indent=1) + "\n", "--sweep")
    ok = sum("error" not in r for r in doc["records"])     # either format keeps a failure's error
    typer.echo(f"{ok} of {len(doc['records'])} records measured in {path}; fit them with napkin calibrate {path} "
               f"--gpu {doc['meta']['profile']}{doc['meta']['calibrate']}")
    wrote(path)
