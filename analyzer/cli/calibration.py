"""napkin calibrate: the model's stated assumptions fitted to measured times."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

import typer

from analyzer.cli.app import (
    OneValue,
    UsageError,
    app,
    progress_bar,
    shipped_gpus,
    wrote,
)
from analyzer.common.atomic import check_target


@app.command(cls=OneValue)
def calibrate(
    recording: Annotated[str, typer.Argument(metavar="RECORDING", help="A recording of measured configurations "
                                                  "(bench/results/sweep_h200.json).")],
    gpu: Annotated[str, typer.Option("--gpu", "-g", metavar="GPU", autocompletion=shipped_gpus,
                                     help="The profile the recording was swept on.")] = "h200",
    output: Annotated[Optional[str], typer.Option(
        "--output", "-o", metavar="FILE", help="Write the calibrated profile here (hardware/h200-calibrated.yaml).")] = None,
    report: Annotated[Optional[str], typer.Option(metavar="FILE", help="Write the validation report (markdown).")] = None,
    plot: Annotated[Optional[str], typer.Option(metavar="FILE", help="Write the predicted-against-measured scatter here "
                                                     "(.png, .svg or .pdf).")] = None,
    held_out: Annotated[Optional[list[str]], typer.Option(
        "--held-out", metavar="FAMILY=SIZE", help="FAMILY=SIZE held out of the fit (default attention=8192, matmul=6144); "
                           "repeatable.")] = None,
    samples: Annotated[int, typer.Option(help="Bootstrap refits for the uncertainties.", min=2,
                                         max=1000)] = 40,
    registers: Annotated[Optional[str], typer.Option(
        "--registers", metavar="FILE", help="A compile recording (bench/results/compiled_h200.json): fit the "
                            "compiler's register count into the profile, and report it against "
                            "Tables 1 and 2.")] = None,
    kernel: Annotated[Literal["portable", "hopper", "contraction", "chain"], typer.Option(   # calibrate.fits.FITS
        "--kernel", help="portable: the Triton kernels' model (a recording of bench/sweep_h200.py); hopper: "
                         "the Hopper attention kernel's (bench/hopper_sweep.py); contraction: the Hopper "
                         "contraction kernel's (bench/hopper_contraction.py); chain: the Hopper chain kernel's "
                         "(napkin measure mlp2 --sweep).")] = "portable",
    across: Annotated[Optional[str], typer.Option(
        "--across", metavar="RECORDING:GPU", help="Another GPU's recording (of the same kernel) and profile, "
                         "RECORDING:GPU: the report carries the fit there, with that GPU's datasheet "
                         "figures.")] = None,
    variants: Annotated[Optional[str], typer.Option(
        "--variants", metavar="RECORDING", help="A sweep of the Hopper kernel's variants (bench/hopper_variants.py): "
                                               "fit what each op of a chain of scores costs (a tanh, ALiBi, a "
                                               "bias) on top of the softmax fit.")] = None,
    allow_gpu_mismatch: Annotated[bool, typer.Option(
        "--allow-gpu-mismatch", help="Fit a recording measured on another GPU model than --gpu's (or "
                                     "--across's) anyway; refused without it.")] = False,
) -> None:
    """Fit the model's stated assumptions to measured times; write a calibrated profile and a report."""
    from analyzer.calibrate.fits import DEFAULT, FITS
    other, other_gpu = _across(across)
    fit = FITS[kernel]
    given = {"--plot": plot, "--held-out": held_out, "--registers": registers,
             "--samples": samples if samples != 40 else None, "--variants": variants}
    for option, value in given.items():
        if value is not None and option not in fit.options:
            takers = " or ".join(f.name for f in FITS.values() if option in f.options)
            raise UsageError(f"{option} is for --kernel {takers}", hint=f"leave it out with --kernel {kernel}")
    for option, path in (("--output", output), ("--report", report), ("--plot", plot)):
        if path is not None:
            check_target(path, option)
    if plot is not None:
        from analyzer.plot.output import output_format
        output_format(plot, "--plot")
    options = {"held_out_size": _held_out(held_out), "registers": registers, "samples": samples,
               "variants": variants}
    options = {keyword: options[keyword] for keyword in fit.options.values() if keyword}
    with progress_bar("calibrate") as progress:
        result = fit.run(recording, gpu, other=other, other_gpu=other_gpu, allow_gpu_mismatch=allow_gpu_mismatch,
                         progress=progress, **options)
    words = ["napkin", "calibrate", recording, "--gpu", gpu] + (["--kernel", kernel] if kernel != DEFAULT else [])
    for flag, value in (("-o", output), ("--report", report), ("--plot", plot)):
        if value:
            words += [flag, value]
    words += [f"--held-out={h}" for h in held_out or []]
    if samples != 40:
        words += ["--samples", str(samples)]
    if registers:
        words += ["--registers", registers]
    if variants:
        words += ["--variants", variants]
    if across:
        words += ["--across", across]
    if allow_gpu_mismatch:
        words += ["--allow-gpu-mismatch"]
    REPORTED[kernel](result, " ".join(words), output, report, plot)


def _held_out(held_out: list[str] | None) -> dict[str, int] | None:
    """--held-out FAMILY=SIZE ... as a dict (None without it)."""
    if not held_out:
        return None
    sizes = {}
    for item in held_out:
        family, _, size = item.partition("=")
        if not family or not size.isdigit():
            raise UsageError(f"--held-out {item!r}: expected FAMILY=SIZE, e.g. attention=8192")
        sizes[family] = int(size)
    return sizes


def _portable_done(result, command: str, output: str | None, report: str | None, plot: str | None) -> None:
    from analyzer.report.calibration import summary, write
    for path in write(result, command, output, report, plot):
        wrote(path)
    cal = result.calibrated.calibration
    for name, value in cal.as_params().items():
        typer.echo(f"  {name} = {value:.4g}{_bound(result.fit.at_bounds.get(name))}")
    for line in summary(result):
        typer.echo(line)


def _bound(side: str | None) -> str:
    """A parameter line's mark where the fit left it at a bound of its range."""
    return f"   at its {side} bound" if side else ""


def _across(across: str | None) -> tuple[str | None, str | None]:
    """--across RECORDING:GPU as its two parts (None, None without it)."""
    if not across:
        return None, None
    other, _, other_gpu = across.rpartition(":")
    if not other or not other_gpu:
        raise UsageError(f"--across {across!r}: expected RECORDING:GPU, e.g. bench/results/sweep_h200.json:h200")
    return other, other_gpu


def _hopper_done(result, command: str, output: str | None, report: str | None, plot: None) -> None:
    from analyzer.calibrate.hopper import BIAS_TERMS
    from analyzer.report.hopper_calibration import summary, write
    for path in write(result, command, output, report):
        wrote(path)
    for name, value in result.fitted.uncertainty.items():
        typer.echo(f"  {name} = {getattr(result.fitted.params, name):.4g} ± {value:.2g}"
                   f"{_bound(result.fitted.at_bounds.get(name))}")
    if (v := result.variants) is not None:
        for name, value in v.uncertainty.items():
            shown = name if name in BIAS_TERMS else f"score_clocks[{name}]"
            typer.echo(f"  {shown} = {v.value(name):.4g} ± {value:.2g}{_bound(v.at_bounds.get(name))}")
    for line in summary(result):
        typer.echo(line)


def _contraction_done(result, command: str, output: str | None, report: str | None, plot: None) -> None:
    from analyzer.report.contraction_calibration import summary, write
    for path in write(result, command, output, report):
        wrote(path)
    for name, value in result.uncertainty.items():
        typer.echo(f"  {name} = {getattr(result.params, name):.4g} ± {value:.2g}{_bound(result.at_bounds.get(name))}")
    for line in summary(result):
        typer.echo(line)


# What each fit of analyzer.calibrate.fits.FITS writes and prints (its report lives in report/)
REPORTED = {"portable": _portable_done, "hopper": _hopper_done, "contraction": _contraction_done,
            "chain": _contraction_done}
