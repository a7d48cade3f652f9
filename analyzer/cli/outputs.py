"""napkin kernel, draw, plot and report: the files napkin writes from a diagram."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from analyzer.cli.app import (
    Backend,
    DiagramArg,
    Dtype,
    GpuOpt,
    GpusOpt,
    KernelDtype,
    OneValue,
    OutputOpt,
    Overlap,
    SetOpt,
    UsageError,
    app,
    check_dtypes,
    compared_gpus,
    parse_sets,
    plot_app,
    progress_bar,
    wrote,
)
from analyzer.cli.cached import KernelFiles, answer
from analyzer.common.atomic import check_target


@plot_app.command("transfers", cls=OneValue)
def plot_transfers(diagram: DiagramArg, output: OutputOpt, gpu: GpusOpt = None,
                   dtype: Annotated[Optional[list[str]], typer.Option(
                       metavar="[fp16|bf16|fp8|fp32]",
                       help="Element type; repeatable (default: the diagram's).")] = None,
                   set_: SetOpt = None) -> None:
    """H*(M) per GPU and element type, log-log, with memory limits and the chosen configuration."""
    from analyzer.plot.output import output_format, save
    check_target(output, "--output")
    output_format(output)
    from analyzer.plot.transfers import figure
    wrote(save(figure(diagram, compared_gpus(gpu), dtypes=check_dtypes(dtype or []),
                       sets=parse_sets(set_ or [])), output))


@plot_app.command("roofline", cls=OneValue)
def plot_roofline(diagram: DiagramArg, output: OutputOpt, gpu: GpusOpt = None,
                  dtype: Annotated[Optional[Dtype], typer.Option(help="Element type.")] = None,
                  set_: SetOpt = None) -> None:
    """Arithmetic intensity against attainable throughput, with the chosen configuration's point."""
    from analyzer.plot.output import output_format, save
    check_target(output, "--output")
    output_format(output)
    from analyzer.plot.roofline import figure
    check_dtypes([dtype] if dtype else [])
    wrote(save(figure(diagram, compared_gpus(gpu), dtype=dtype, sets=parse_sets(set_ or [])), output))


@plot_app.command("schedule", cls=OneValue)
def plot_schedule(diagram: DiagramArg, output: OutputOpt,
                  gpu: GpuOpt = "h100",
                  config: Annotated[Optional[str], typer.Option("--config", "-c", metavar="NAME", help="A named "
                                                                "configuration.")] = None,
                  set_: SetOpt = None,
                  overhead: Annotated[float, typer.Option(
                      help="Assumed overhead of non-tensor operations, e.g. 0.66 for 66%.")] = 0.0,
                  overlap: Annotated[Optional[Overlap], typer.Option(help="How warpgroups overlap (overrides "
                                                                      "the configuration's).")] = None,
                  ) -> None:
    """The clock-cycle overlap of warpgroups (Figures 34-37): pipelines as lanes, overhead hatched."""
    from analyzer.plot.output import output_format, save
    check_target(output, "--output")
    output_format(output)
    from analyzer.plot.schedule import figure
    wrote(save(figure(diagram, gpu, config=config, sets=parse_sets(set_ or []),
                       overhead=overhead, overlap=overlap), output))


@app.command(cls=OneValue)
def kernel(
    diagram: DiagramArg,
    output: Annotated[str, typer.Option("--output", "-o", metavar="FILE", help="File to write: a .py module (hopper, triton) "
                                                               "or a .cu file and its .py loader (cuda).")],
    gpu: GpuOpt = "h100",
    backend: Annotated[Optional[Backend], typer.Option(
        help="hopper (warp-specialised Gluon for sm_90a: streamed softmax attention), triton (portable) or "
             "cuda; default: hopper where the GPU and the diagram allow it, else triton.")] = None,
    dtype: Annotated[Optional[KernelDtype], typer.Option(help="The element type the kernel is "
                                                      "configured for (default: the diagram's); fp8: attention "
                                                      "on a Hopper GPU, e4m3 inputs with block scales.")] = None,
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", metavar="NAME", help="A configuration named in the diagram file; default: the best legal "
                               "configuration napkin configure ranks.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", metavar="NAME=VALUE", help="Pin a size or tile (d=64, g_q=128, s_x=64, stages=3); repeatable.")] = None,
) -> None:
    """Generate a standalone kernel that realises the diagram's configuration on a GPU."""
    from analyzer.codegen.files import check_kernel_target, write_kernel
    check_kernel_target(output, backend or "triton")      # hopper and triton both write a .py module
    sets = parse_sets(set_ or [])
    files = answer("kernel", diagram, gpu, {"backend": backend, "dtype": dtype, "config": config, "sets": sets},
                   KernelFiles, lambda: _generated(diagram, gpu, backend=backend, dtype=dtype, config=config,
                                                   sets=sets))
    if files.note:
        typer.echo(f"note: {files.note}", err=True)
    for path in write_kernel(output, files.backend, files.source, files.extra):
        wrote(path)


def _generated(diagram: str, gpu: str, **options) -> KernelFiles:
    """napkin kernel's files, generated: ranking the configurations by size is most of the work, which
    the result cache saves a repeated command."""
    from analyzer.codegen import generate
    with progress_bar("kernel") as progress:
        g = generate(diagram, gpu, progress=progress, **options)
    return KernelFiles(backend=g.backend, source=g.source, extra=dict(g.extra), note=g.note)


@app.command(cls=OneValue)
def draw(diagram: DiagramArg, output: OutputOpt,
         kernel: Annotated[Optional[str], typer.Option(metavar="NAME", help="Show this kernel's relabellings "
                                                            "(default: the first).")] = None) -> None:
    """Draw the diagram in the neural-circuit style (columns, wires, levels, relabellings)."""
    from analyzer.plot.output import output_format, save
    check_target(output, "--output")
    output_format(output)
    from analyzer.plot.draw import figure
    wrote(save(figure(diagram, kernel=kernel), output))




@app.command(cls=OneValue)
def report(diagram: DiagramArg,
           output: Annotated[str, typer.Option("--output", "-o", metavar="FILE",
                                               help="The HTML file to write (report.html).")],
           gpu: GpusOpt = None, set_: SetOpt = None,
           dtype: Annotated[Optional[Dtype], typer.Option(help="Element type of arrays without their own.")] = None,
           measurement: Annotated[Optional[list[str]], typer.Option(
               "--measurement", "-m", metavar="FILE", help="What napkin measure wrote of this diagram (-o or "
                                                           "--json): shown beside its prediction; repeatable.")] = None,
           devices: Annotated[Optional[int], typer.Option(
               min=1, help="Add the attention's time on 1 .. N GPUs of one host (context parallelism, as napkin "
                           "analyze --devices).")] = None,
           heads: Annotated[int, typer.Option(min=1, help="With --devices: attention heads (the weave's).")] = 1,
           batch: Annotated[int, typer.Option(min=1, help="With --devices: batch entries (the weave's).")] = 1,
           ) -> None:
    """One self-contained HTML page to share: prediction, measurements, drawing, symbolic model, Section 5,
    plots, kernel."""
    check_target(output, "--output")
    if not output.lower().endswith((".html", ".htm")):
        raise UsageError(f"{output!r}: napkin report writes one HTML page", field="--output",
                         hint="name it report.html")
    from analyzer.common.atomic import write_text
    from analyzer.measure.result import load_measurement
    from analyzer.report.page import Devices, page
    if devices is None and (heads, batch) != (1, 1):
        raise UsageError("--heads and --batch shape the context-parallel prediction",
                         field="--heads" if heads != 1 else "--batch", hint="add --devices N")
    gpus = compared_gpus(gpu)
    measured = [load_measurement(f) for f in measurement or []]
    with progress_bar("report") as progress:
        progress("analyse and draw", 0, 1)
        html = page(diagram, gpus, sets=parse_sets(set_ or []), dtype=dtype, path=output, measurements=measured,
                    devices=None if devices is None else Devices(devices, heads, batch))
    wrote(write_text(output, html, "--output"))
