"""napkin analyze, expand, configure and sweep: the model's answers for a diagram and a GPU."""

from __future__ import annotations

import itertools
from typing import Annotated, Literal, Optional

import typer

from analyzer.cli.app import (
    CHECK_FAILED,
    MAX_POINTS,
    DiagramArg,
    Dtype,
    GpuOpt,
    KernelDtype,
    OneValue,
    Overlap,
    Strategy,
    UsageError,
    app,
    check_dtypes,
    compared_gpus,
    console,
    parse_sets,
    parse_size_ranges,
    progress_bar,
    shipped_gpus,
)
from analyzer.cli.cached import answer
from analyzer.common.atomic import check_target

Rotation = Literal["allgather", "alltoall"]     # analyzer.config.context_parallel.ROTATIONS
Merge = Literal["napkin", "torch"]              # analyzer.config.context_parallel.MERGES


@app.command(cls=OneValue)
def analyze(
    diagram: DiagramArg,
    gpu: Annotated[Optional[list[str]], typer.Option(
        "--gpu", "-g", metavar="GPU", autocompletion=shipped_gpus,
        help="GPU profile name or alias (napkin hardware list), or a profile "
                                           ".yaml file; several compare the GPUs side by side.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", metavar="NAME=VALUE", help="Override a size (q=16384) or pin a tile size (g_q=128); a "
                                                  "range (q=1024..32768, doubling) or a list (q=1000,3000) "
                                                  "compares sizes; repeatable.")] = None,
    dtype: Annotated[Optional[Dtype], typer.Option(help="Element type of arrays without their own.")] = None,
    cluster: Annotated[Optional[int], typer.Option(help="Model thread block clusters of this size "
                                                        "(a cross-transfer level, Theorem 3).")] = None,
    devices: Annotated[Optional[int], typer.Option(
        min=1, help="Also predict the attention split over 1 .. N GPUs of one host by context parallelism "
                    "(torch's ring with napkin's kernel for each block; the profile's interconnect).")] = None,
    rotation: Annotated[Rotation, typer.Option(
        help="With --devices: how the keys and values move, one all-gather (torch's default) or a "
             "permutation per step.")] = "allgather",
    merge: Annotated[Merge, typer.Option(
        help="With --devices: how each step's block joins the running output, napkin's merge kernel or "
             "torch's merger (its eager fp32 passes).")] = "napkin",
    heads: Annotated[int, typer.Option(min=1, help="With --devices: attention heads (the weave's).")] = 1,
    batch: Annotated[int, typer.Option(min=1, help="With --devices: batch entries (the weave's).")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON (napkin schema report; "
                                                         "a comparison: napkin schema comparison).")] = False,
    as_latex: Annotated[bool, typer.Option("--latex", help="Print the symbolic model as LaTeX.")] = False,
    plot: Annotated[Optional[str], typer.Option(
        metavar="FILE", help="With a size range: draw the predicted time per size (.png, .svg or .pdf).")] = None,
) -> None:
    """Derive transfers, memory and FLOPs per level, pick tile sizes for a GPU, predict the time."""
    if as_json and as_latex:
        raise UsageError("--json and --latex: each prints the whole analysis in its own form; pass one",
                          field="--latex")
    if cluster is not None and cluster < 2:
        raise UsageError(f"--cluster {cluster}: a cluster has at least 2 members")
    if devices is None and (heads, batch, rotation, merge) != (1, 1, "allgather", "napkin"):
        raise UsageError("--heads, --batch, --rotation and --merge shape the context-parallel prediction",
                         field="--heads" if heads != 1 else "--batch" if batch != 1 else "--rotation"
                         if rotation != "allgather" else "--merge", hint="add --devices N")
    gpus = compared_gpus(gpu)
    sets, ranged = parse_size_ranges(set_ or [])
    options = {"dtype": dtype, "cluster": cluster,
               "devices": None if devices is None else (devices, rotation, heads, batch, merge)}
    if len(gpus) == 1 and not ranged:
        if plot is not None:
            raise UsageError("--plot draws a size range", field="--plot", hint="add --set NAME=A..B")
        _show(_analysis(diagram, gpus[0], sets, **options), as_json, as_latex)
        return
    _compare(diagram, gpus, sets, ranged, options, as_json=as_json, as_latex=as_latex, plot=plot)


def _analysis(diagram: str, gpu: str, sets: dict[str, int], *, dtype: str | None, cluster: int | None,
              devices: tuple[int, str, int, int, str] | None = None):
    """napkin analyze's answer: from the result cache where it holds one, else computed (and stored).
    `devices`: the GPUs, rotation, heads, batch and merge of the context-parallel prediction (--devices)."""
    from analyzer.model.result import Analysis

    def compute() -> Analysis:
        from analyzer import hardware
        from analyzer.config.launch import with_expected
        from analyzer.model.analysis import analyze as run
        from analyzer.model.analysis import load
        profile = hardware.load(gpu)
        d = load(diagram)       # read once: the analysis and the kernel's expected time share it
        result = with_expected(run(d, profile, sets=sets, dtype=dtype, cluster=cluster), d, profile, dtype=dtype,
                               sets=sets)
        if devices is None:
            return result
        from analyzer.config.context_parallel import with_context_parallel
        n, rotation, heads, batch, merge = devices
        weave = {k: v for k, v in (("heads", heads), ("batch", batch)) if v != 1}
        return with_context_parallel(result, d, profile, n, rotation=rotation, merge=merge, dtype=dtype,
                                     sets={**sets, **weave})
    key = {"sets": sets, "dtype": dtype, "cluster": cluster, **({"devices": list(devices)} if devices else {})}
    return answer("analyze", diagram, gpu, key, Analysis, compute)


def _show(result, as_json: bool, as_latex: bool) -> None:
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    elif as_latex:
        from analyzer.report.analysis import latex
        typer.echo(latex(result))
    else:
        from analyzer.report.analysis import render
        console().print(render(result))


def _compare(diagram: str, gpus: list[str], sets: dict[str, int], ranged: dict[str, list[int]], options: dict,
             *, as_json: bool, as_latex: bool, plot: str | None) -> None:
    """Several GPUs or sizes: one analysis each, as one table (and a plot of time per size)."""
    from analyzer.common.version import __version__
    from analyzer.model.result import Comparison
    if as_latex:
        raise UsageError("--latex prints one analysis", field="--latex",
                         hint="give one --gpu and single sizes, or use --json")
    if plot is not None:
        from analyzer.plot.output import output_format
        check_target(plot, "--plot")
        output_format(plot, "--plot")
        if len(ranged) != 1:
            raise UsageError("--plot draws time against one size", field="--plot",
                             hint="give one --set NAME=A..B")
    points = [dict(zip(ranged, values, strict=True)) for values in itertools.product(*ranged.values())]
    if len(points) * len(gpus) > MAX_POINTS:
        raise UsageError(f"{len(gpus)} GPU(s) x {len(points)} sizes: at most {MAX_POINTS} analyses at once",
                         field="--set", hint="narrow the range")
    with progress_bar("analyze") as progress:
        analyses = []
        for i, (g, point) in enumerate(itertools.product(gpus, points)):
            progress("analyze", i, len(gpus) * len(points))
            analyses.append(_analysis(diagram, g, {**sets, **point}, **options))
    result = Comparison(napkin_version=__version__, varied=list(ranged), analyses=analyses)
    if plot:
        from analyzer.plot.output import save
        from analyzer.plot.sizes import figure
        saved = save(figure(result), plot, "--plot")
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        from analyzer.report.comparison import comparison_text
        console().print(comparison_text(result))
    if plot:
        typer.echo(f"wrote {saved}", err=as_json)


@app.command(cls=OneValue)
def expand(
    diagram: DiagramArg,
    kernel: Annotated[Optional[str], typer.Option(metavar="NAME", help="Kernel name (default: every kernel).")] = None,
    level: Annotated[Optional[str], typer.Option(metavar="LEVEL", help="Level whose relabelling to expand (default: "
                                                      "the diagram's lowest).")] = None,
) -> None:
    """Print a diagram's kernels as loop pseudocode: head, body per chunk, tail (Sections 5.1-5.2)."""
    from analyzer.config.expand import expand as run
    from analyzer.config.expand import render
    from analyzer.model.analysis import load
    typer.echo(render(run(load(diagram), kernel=kernel, level=level)))


@app.command(cls=OneValue)
def configure(
    diagram: DiagramArg,
    gpu: GpuOpt = "h100",
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", metavar="NAME", help="A configuration named in the diagram file (napkin configure DIAGRAM "
                               "--list); default: derived from the tiles napkin analyze chooses.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", metavar="NAME=VALUE", help="Set a size (q=16384) or a configuration variable (w_q=128, s_x=64, "
                            "N=3, stages=2, g_q=384); repeatable.")] = None,
    dtype: Annotated[Optional[Dtype], typer.Option(help="Element type of arrays without their own.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the diagram's named configurations.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tables as JSON "
                                                         "(napkin schema configuration).")] = False,
    overhead: Annotated[float, typer.Option(help="Assumed overhead of non-tensor operations for the "
                                                 "overlap analysis, e.g. 0.66 for 66%.")] = 0.0,
    strategy: Annotated[Optional[Strategy], typer.Option(help="Where the softmax rescales (Section 5.5; overrides the "
                                                         "configuration's).")] = None,
    overlap: Annotated[Optional[Overlap], typer.Option(help="How warpgroups overlap (Section 5.7; overrides the "
                                                        "configuration's).")] = None,
    strict: Annotated[bool, typer.Option(help="Exit with code 3 if the configuration does not "
                                              "fit (negative excess).")] = False,
) -> None:
    """Configuration, memory, compute and throughput tables for a GPU (Section 5, Appendix B), of the
    configuration napkin kernel launches unless the options ask for another."""
    from analyzer.config.configure import configurations
    check_dtypes([dtype] if dtype else [])
    if list_:
        from analyzer.report.configure import render_list
        console().print(render_list(configurations(diagram, dtype=dtype)))
        return
    from analyzer.config.screen import configure_screen
    result, _ = configure_screen(diagram, gpu, config=config, sets=parse_sets(set_ or []), dtype=dtype,
                                 overhead=overhead, strategy=strategy, overlap=overlap)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        from analyzer.report.configure import render
        console().print(render(result))
    if strict and not result.fits:
        raise typer.Exit(CHECK_FAILED)


@app.command(cls=OneValue)
def sweep(
    diagram: DiagramArg,
    gpu: GpuOpt = "h100",
    dtype: Annotated[KernelDtype, typer.Option(help="The generated kernels' element type.")] = "fp16",
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", metavar="NAME=VALUE", help="A size of the weaved diagram (batch=4, heads=16, q=4096, d=128) or a "
                            "pinned tile (g_q=128); repeatable.")] = None,
    kernel: Annotated[Optional[str], typer.Option(metavar="NAME", help="Rank this kernel only.")] = None,
    backend: Annotated[Optional[Literal["hopper", "triton"]], typer.Option(
        help="Whose configurations to rank; default: as napkin kernel chooses.")] = None,
    top: Annotated[int, typer.Option(help="Show the fastest N (0: all).", min=0)] = 0,
    devices: Annotated[Optional[int], typer.Option(
        min=1, help="Also predict the launched kernel's attention split over 1 .. N GPUs of one host "
                    "(context parallelism, as napkin analyze --devices).")] = None,
    rotation: Annotated[Rotation, typer.Option(help="With --devices: allgather or alltoall.")] = "allgather",
    merge: Annotated[Merge, typer.Option(help="With --devices: napkin's merge kernel or torch's merger.")] = "napkin",
    as_json: Annotated[bool, typer.Option("--json", help="Print the ranking as JSON.")] = False,
) -> None:
    """Every legal configuration (tiles, warps, stages) with its predicted time, fastest first."""
    from analyzer.config.sweep import report
    from analyzer.config.sweep import sweep as run
    from analyzer.report.sweep import sweep_text
    if devices is None and (rotation, merge) != ("allgather", "napkin"):
        field = "--rotation" if rotation != "allgather" else "--merge"
        raise UsageError(f"{field} shapes the context-parallel prediction", field=field, hint="add --devices N")
    sets = parse_sets(set_ or [])
    with progress_bar("sweep") as progress:
        result = run(diagram, gpu, dtype=dtype, sets=sets, kernel=kernel, backend=backend, progress=progress)
    split = None
    if devices is not None:
        from analyzer.config.context_parallel import context_parallel, context_parallel_out
        split = context_parallel_out(context_parallel(diagram, gpu, devices, rotation=rotation, merge=merge,
                                                      dtype=dtype, sets=sets))
    if as_json:
        typer.echo(report(result).model_copy(update={"context_parallel": split}).model_dump_json(indent=2))
        return
    console().print(sweep_text(result, top))
    if split is not None:
        from analyzer.report.devices import context_parallel_parts
        for part in context_parallel_parts(split):
            console().print(part)


