"""The `napkin` command: parse arguments, call the library, print. Nothing else lives here.

Bad input of any kind becomes one line on stderr and exit code 1 (NapkinError); set NAPKIN_DEBUG=1
to see a traceback instead.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Annotated, Optional

import typer

from analyzer.common.atomic import check_target
from analyzer.common.errors import NapkinError
from analyzer.common.version import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="FlashAttention on a Napkin: diagrams in, GPU performance models out.")
hardware_app = typer.Typer(no_args_is_help=True, help="GPU profiles (hardware/*.yaml).")
diagrams_app = typer.Typer(no_args_is_help=True, help="Shipped diagrams (diagrams/*.yaml).")
app.add_typer(hardware_app, name="hardware")
plot_app = typer.Typer(no_args_is_help=True, help="Plots; the output's extension picks PNG, SVG or PDF.")
app.add_typer(diagrams_app, name="diagrams")
app.add_typer(plot_app, name="plot")

SET = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=([0-9]+)$")
DTYPES = ("fp16", "bf16", "fp8", "fp32")

DiagramArg = Annotated[str, typer.Argument(help="A shipped diagram name (napkin diagrams list) or a "
                                                ".yaml file.")]
GpusOpt = Annotated[Optional[list[str]], typer.Option(
    "--gpu", "-g", help="GPU profile name or alias, or a profile .yaml file; repeatable.")]
SetOpt = Annotated[Optional[list[str]], typer.Option(
    "--set", "-s", help="Override a size (q=16384) or pin a tile size (g_q=128); repeatable.")]
OutputOpt = Annotated[str, typer.Option("--output", "-o", help="Output file: .png, .svg or .pdf.")]


def _progress(title: str):
    from analyzer.report.terminal import progress
    return progress(title)


def _console():
    from analyzer.report.terminal import console
    return console()


def _parse_sets(items: list[str]) -> dict[str, int]:
    sets: dict[str, int] = {}
    for item in items:
        match = SET.match(item.strip())
        if not match:
            raise NapkinError(f"--set {item!r}: expected NAME=NUMBER, e.g. --set q=4096")
        if len(match[2]) > 15:   # beyond any size napkin accepts (2**40), and cheap to refuse
            raise NapkinError(f"--set {match[1]}=...: size is out of range (at most 2**40)")
        sets[match[1]] = int(match[2])
    return sets


@app.callback(invoke_without_command=True)
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False) -> None:
    if version:
        typer.echo(f"napkin {__version__}")
        raise typer.Exit()


@app.command()
def analyze(
    diagram: Annotated[str, typer.Argument(help="A shipped diagram name (napkin diagrams list) or a "
                                                ".yaml file.")],
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU profile name or alias (napkin hardware "
                                                         "list), or a profile .yaml file.")] = "h100",
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", help="Override a size (q=16384) or pin a tile size (g_q=128); repeatable.")] = None,
    dtype: Annotated[Optional[str], typer.Option(help="Element type of arrays without their own: "
                                                      "fp16, bf16, fp8 or fp32.")] = None,
    cluster: Annotated[Optional[int], typer.Option(help="Model thread block clusters of this size "
                                                        "(a cross-transfer level, Theorem 3).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON "
                                                         "(napkin schema report).")] = False,
    as_latex: Annotated[bool, typer.Option("--latex", help="Print the symbolic model as LaTeX.")] = False,
) -> None:
    """Derive transfers, memory and FLOPs per level, pick tile sizes for a GPU, predict the time."""
    from analyzer.common import cache
    from analyzer.model.result import Analysis
    if as_json and as_latex:
        raise NapkinError("--json and --latex: each prints the whole analysis in its own form; pass one",
                          field="--latex")
    _check_dtypes([dtype] if dtype else [])
    if cluster is not None and cluster < 2:
        raise NapkinError(f"--cluster {cluster}: a cluster has at least 2 members")
    sets = _parse_sets(set_ or [])
    entry = _analysis_entry(diagram, gpu, {"sets": sets, "dtype": dtype, "cluster": cluster})
    text = cache.load("analyze", entry) if entry else None
    try:
        result = Analysis.model_validate_json(text) if text else None
    except ValueError:       # a damaged entry: a miss
        result = None
    if result is None:
        from analyzer import hardware
        from analyzer.model.analysis import analyze as run
        profile = hardware.load(gpu)
        result = run(diagram, profile, sets=sets, dtype=dtype, cluster=cluster)
        result = _with_expected(result, diagram, profile, sets, dtype)
        if entry:
            cache.store("analyze", entry, result.model_dump_json())
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    elif as_latex:
        from analyzer.report.analysis import latex
        typer.echo(latex(result))
    else:
        from analyzer.report.analysis import render
        _console().print(render(result))


def _analysis_entry(diagram: str, gpu: str, options: dict) -> str | None:
    """The cache entry of napkin analyze with these arguments (analyzer.common.cache): the diagram
    file's bytes, every shipped profile's (a shipped profile extends and is calibrated by others) and
    the options. None where the answer may depend on more (a profile file of the user's, which may
    extend files of the user's) or an argument is not a file napkin finds: the command then computes,
    and says what is wrong."""
    from analyzer.common import cache, resources
    from analyzer.hardware.names import profile_path as path_of
    if not cache.enabled():
        return None
    try:
        diagram_path = resources.resolve("diagrams", diagram, what="diagram")
        profile_path = path_of(gpu)
        shipped = resources.shipped("hardware")
        if profile_path.resolve() not in {p.resolve() for p in shipped.values()}:
            return None
        where = {"gpu": profile_path.stem, "diagram": str(diagram_path.resolve())}   # the report names both
        return cache.key("analyze", [diagram_path, *shipped.values()], {**options, **where})
    except (NapkinError, OSError):
        return None


def _with_expected(result, diagram: str, gpu, sets: dict, dtype: str | None):
    """The analysis (or configuration) with what the generated kernel is expected to take
    (analyzer.config.launch), or why napkin kernel generates none for it."""
    from analyzer.config.launch import expect
    try:
        return result.model_copy(update={"expected": expect(diagram, gpu, dtype=dtype, sets=sets)})
    except NapkinError as exc:
        return result.model_copy(update={"expected_absent": exc.message})


def _check_dtypes(dtypes: list[str]) -> list[str]:
    for dtype in dtypes:
        if dtype not in DTYPES:
            raise NapkinError(f"--dtype {dtype!r}: expected {', '.join(DTYPES)}")
    return dtypes


def _wrote(path) -> None:
    typer.echo(f"wrote {path}")


@app.command()
def expand(
    diagram: DiagramArg,
    kernel: Annotated[Optional[str], typer.Option(help="Kernel name (default: every kernel).")] = None,
    level: Annotated[Optional[str], typer.Option(help="Level whose relabelling to expand (default: "
                                                      "the diagram's lowest).")] = None,
) -> None:
    """Print a diagram's kernels as loop pseudocode: head, body per chunk, tail (Sections 5.1-5.2)."""
    from analyzer.config.expand import expand as run
    from analyzer.config.expand import render
    from analyzer.model.analysis import load
    typer.echo(render(run(load(diagram), kernel=kernel, level=level)))


@app.command()
def configure(
    diagram: DiagramArg,
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU profile name or alias, or a profile "
                                                         ".yaml file.")] = "h100",
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", help="A configuration named in the diagram file (napkin configure DIAGRAM "
                               "--list); default: derived from the tiles napkin analyze chooses.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", help="Set a size (q=16384) or a configuration variable (w_q=128, s_x=64, "
                            "N=3, stages=2, g_q=384); repeatable.")] = None,
    dtype: Annotated[Optional[str], typer.Option(help="Element type of arrays without their own.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the diagram's named configurations.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tables as JSON "
                                                         "(napkin schema configuration).")] = False,
    overhead: Annotated[float, typer.Option(help="Assumed overhead of non-tensor operations for the "
                                                 "overlap analysis, e.g. 0.66 for 66%.")] = 0.0,
    strategy: Annotated[Optional[str], typer.Option(help="fragment or staged (overrides the "
                                                         "configuration's).")] = None,
    overlap: Annotated[Optional[str], typer.Option(help="inter or intra (overrides the "
                                                        "configuration's).")] = None,
    strict: Annotated[bool, typer.Option(help="Exit with code 1 if the configuration does not "
                                              "fit (negative excess).")] = False,
) -> None:
    """Configuration, memory, compute and throughput tables for a GPU (Section 5, Appendix B)."""
    from analyzer.config.configure import configurations
    from analyzer.config.configure import configure as run
    _check_dtypes([dtype] if dtype else [])
    if list_:
        from analyzer.report.configure import render_list
        _console().print(render_list(configurations(diagram, dtype=dtype)))
        return
    from analyzer import hardware
    sets = _parse_sets(set_ or [])
    profile = hardware.load(gpu)
    result = run(diagram, profile, config=config, sets=sets, dtype=dtype,
                 overhead=overhead, strategy=strategy, overlap=overlap)
    result = _with_expected(result, diagram, profile, sets, dtype)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        from analyzer.report.configure import render
        _console().print(render(result))
    if strict and not result.fits:
        raise typer.Exit(1)


@plot_app.command("transfers")
def plot_transfers(diagram: DiagramArg, output: OutputOpt, gpu: GpusOpt = None,
                   dtype: Annotated[Optional[list[str]], typer.Option(
                       help="Element type; repeatable (default: the diagram's).")] = None,
                   set_: SetOpt = None) -> None:
    """H*(M) per GPU and element type, log-log, with memory limits and the chosen configuration."""
    from analyzer.plot.output import output_format, save
    output_format(output)
    check_target(output, "--output")
    from analyzer.plot.transfers import figure
    _wrote(save(figure(diagram, gpu or ["h100"], dtypes=_check_dtypes(dtype or []),
                       sets=_parse_sets(set_ or [])), output))


@plot_app.command("roofline")
def plot_roofline(diagram: DiagramArg, output: OutputOpt, gpu: GpusOpt = None,
                  dtype: Annotated[Optional[str], typer.Option(help="Element type.")] = None,
                  set_: SetOpt = None) -> None:
    """Arithmetic intensity against attainable throughput, with the chosen configuration's point."""
    from analyzer.plot.output import output_format, save
    output_format(output)
    check_target(output, "--output")
    from analyzer.plot.roofline import figure
    _check_dtypes([dtype] if dtype else [])
    _wrote(save(figure(diagram, gpu or ["h100"], dtype=dtype, sets=_parse_sets(set_ or [])), output))


@plot_app.command("schedule")
def plot_schedule(diagram: DiagramArg, output: OutputOpt,
                  gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU profile.")] = "h100",
                  config: Annotated[Optional[str], typer.Option("--config", "-c", help="A named "
                                                                "configuration.")] = None,
                  set_: SetOpt = None,
                  overhead: Annotated[float, typer.Option(
                      help="Assumed overhead of non-tensor operations, e.g. 0.66 for 66%.")] = 0.0,
                  overlap: Annotated[Optional[str], typer.Option(help="inter or intra (overrides "
                                                                      "the configuration's).")] = None,
                  ) -> None:
    """The clock-cycle overlap of warpgroups (Figures 34-37): pipelines as lanes, overhead hatched."""
    from analyzer.plot.output import output_format, save
    output_format(output)
    check_target(output, "--output")
    from analyzer.plot.schedule import figure
    _wrote(save(figure(diagram, gpu, config=config, sets=_parse_sets(set_ or []),
                       overhead=overhead, overlap=overlap), output))


@app.command()
def kernel(
    diagram: DiagramArg,
    output: Annotated[str, typer.Option("--output", "-o", help="File to write: a .py module (hopper, triton) "
                                                               "or a .cu file and its .py loader (cuda).")],
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU profile name or alias, or a profile "
                                                         ".yaml file.")] = "h100",
    backend: Annotated[Optional[str], typer.Option(
        help="hopper (warp-specialised Gluon for sm_90a: streamed softmax attention), triton (portable) or "
             "cuda; default: hopper where the GPU and the diagram allow it, else triton.")] = None,
    dtype: Annotated[Optional[str], typer.Option(help="fp16 or bf16: the element type the kernel is "
                                                      "configured for (default: the diagram's).")] = None,
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", help="A configuration named in the diagram file; default: the best legal "
                               "configuration napkin configure ranks.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", help="Pin a size or tile (d=64, g_q=128, s_x=64, stages=3); repeatable.")] = None,
) -> None:
    """Generate a standalone kernel that realises the diagram's configuration on a GPU."""
    from analyzer.codegen import generate
    from analyzer.codegen.files import check_kernel_target
    check_kernel_target(output, backend or "triton")      # hopper and triton both write a .py module
    with _progress("kernel") as progress:
        g = generate(diagram, gpu, backend=backend, dtype=dtype, config=config, sets=_parse_sets(set_ or []),
                     progress=progress)
    if g.note:
        typer.echo(f"note: {g.note}", err=True)
    for path in g.write(output):
        _wrote(path)


@app.command()
def sweep(
    diagram: DiagramArg,
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU profile name or alias, or a profile "
                                                         ".yaml file (h200-calibrated: fitted).")] = "h100",
    dtype: Annotated[str, typer.Option(help="fp16 or bf16.")] = "fp16",
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", "-s", help="A size of the weaved diagram (batch=4, heads=16, q=4096, d=128) or a "
                            "pinned tile (g_q=128); repeatable.")] = None,
    kernel: Annotated[Optional[str], typer.Option(help="Rank this kernel only.")] = None,
    backend: Annotated[Optional[str], typer.Option(
        help="hopper or triton: whose configurations to rank; default: as napkin kernel chooses.")] = None,
    top: Annotated[int, typer.Option(help="Show the fastest N (0: all).", min=0)] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ranking as JSON.")] = False,
) -> None:
    """Every legal configuration (tiles, warps, stages) with its predicted time, fastest first."""
    from analyzer.config.sweep import sweep as run
    from analyzer.report.analysis import sweep_text
    if dtype not in ("fp16", "bf16"):
        raise NapkinError(f"--dtype {dtype!r}: generated kernels take fp16 or bf16")
    with _progress("sweep") as progress:
        result = run(diagram, gpu, dtype=dtype, sets=_parse_sets(set_ or []), kernel=kernel, backend=backend,
                     progress=progress)
    if as_json:
        typer.echo(json.dumps([s.as_dict() for s in result], indent=2))
        return
    _console().print(sweep_text(result, top))


@app.command()
def calibrate(
    recording: Annotated[str, typer.Argument(help="A recording of measured configurations "
                                                  "(bench/results/sweep_h200.json).")],
    gpu: Annotated[str, typer.Option("--gpu", "-g",
                                     help="The profile the recording was swept on.")] = "h200",
    output: Annotated[Optional[str], typer.Option(
        "--output", "-o", help="Write the calibrated profile here (hardware/h200-calibrated.yaml).")] = None,
    report: Annotated[Optional[str], typer.Option(help="Write the validation report (markdown).")] = None,
    plot: Annotated[Optional[str], typer.Option(help="Write the predicted-against-measured scatter here "
                                                     "(.png, .svg or .pdf).")] = None,
    held_out: Annotated[Optional[list[str]], typer.Option(
        "--held-out", help="FAMILY=SIZE held out of the fit (default attention=8192, matmul=6144); "
                           "repeatable.")] = None,
    samples: Annotated[int, typer.Option(help="Bootstrap refits for the uncertainties.", min=2,
                                         max=1000)] = 40,
    registers: Annotated[Optional[str], typer.Option(
        "--registers", help="A compile recording (bench/results/compiled_h200.json): fit the "
                            "compiler's register count into the profile, and report it against "
                            "Tables 1 and 2.")] = None,
    kernel: Annotated[str, typer.Option(
        "--kernel", help="portable: the Triton kernels' model (a recording of bench/sweep_h200.py); hopper: "
                         "the Hopper kernel's (bench/hopper_sweep.py).")] = "portable",
    across: Annotated[Optional[str], typer.Option(
        "--across", help="With --kernel hopper: another GPU's recording and profile, RECORDING:GPU, to "
                         "carry the fit across GPUs in the report.")] = None,
) -> None:
    """Fit the model's stated assumptions to measured times; write a calibrated profile and a report."""
    if kernel not in ("portable", "hopper"):
        raise NapkinError(f"--kernel {kernel}: expected portable or hopper")
    if kernel == "hopper":
        for option, value in (("--plot", plot), ("--held-out", held_out), ("--registers", registers)):
            if value:
                raise NapkinError(f"{option} is for --kernel portable", hint="leave it out with --kernel hopper")
        _calibrate_hopper(recording, gpu, output, report, across)
        return
    from analyzer.calibrate.calibrate import calibrate as run
    from analyzer.report.calibration import write
    if plot:
        from analyzer.plot.output import output_format
        output_format(plot)
    for option, path in (("--output", output), ("--report", report), ("--plot", plot)):
        if path:
            check_target(path, option)
    sizes = None
    if held_out:
        sizes = {}
        for item in held_out:
            family, _, size = item.partition("=")
            if not family or not size.isdigit():
                raise NapkinError(f"--held-out {item!r}: expected FAMILY=SIZE, e.g. attention=8192")
            sizes[family] = int(size)
    with _progress("calibrate") as progress:
        result = run(recording, gpu, held_out_size=sizes, samples=samples, registers=registers,
                     progress=progress)
    words = ["napkin", "calibrate", recording, "--gpu", gpu]
    for flag, value in (("-o", output), ("--report", report), ("--plot", plot)):
        if value:
            words += [flag, value]
    words += [f"--held-out={h}" for h in held_out or []]
    if samples != 40:
        words += ["--samples", str(samples)]
    if registers:
        words += ["--registers", registers]
    for path in write(result, " ".join(words), output, report, plot):
        _wrote(path)
    cal = result.calibrated.calibration
    for name, value in cal.as_params().items():
        typer.echo(f"  {name} = {value:.4g}")


def _calibrate_hopper(recording: str, gpu: str, output: str | None, report: str | None, across: str | None) -> None:
    from analyzer.calibrate.hopper import calibrate as run
    from analyzer.report.hopper_calibration import write
    for option, path in (("--output", output), ("--report", report)):
        if path:
            check_target(path, option)
    other, other_gpu = None, None
    if across:
        other, _, other_gpu = across.rpartition(":")
        if not other or not other_gpu:
            raise NapkinError(f"--across {across!r}: expected RECORDING:GPU, e.g. "
                              "bench/results/hopper_sweep_h200.json:h200")
    with _progress("calibrate") as progress:
        result = run(recording, gpu, other=other, other_gpu=other_gpu, progress=progress)
    words = ["napkin", "calibrate", recording, "--gpu", gpu, "--kernel", "hopper"]
    for flag, value in (("-o", output), ("--report", report), ("--across", across)):
        if value:
            words += [flag, value]
    for path in write(result, " ".join(words), output, report):
        _wrote(path)
    for name, value in result.fitted.uncertainty.items():
        typer.echo(f"  {name} = {getattr(result.fitted.params, name):.4g} ± {value:.2g}")


@app.command()
def draw(diagram: DiagramArg, output: OutputOpt,
         kernel: Annotated[Optional[str], typer.Option(help="Show this kernel's relabellings "
                                                            "(default: the first).")] = None) -> None:
    """Draw the diagram in the neural-circuit style (columns, wires, levels, relabellings)."""
    from analyzer.plot.output import output_format, save
    output_format(output)
    check_target(output, "--output")
    from analyzer.plot.draw import figure
    _wrote(save(figure(diagram, kernel=kernel), output))


JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@app.command()
def schema(kind: Annotated[str, typer.Argument(help="diagram, profile, report or configuration")]) -> None:
    """Print the JSON Schema of diagram files, profile files, the analysis or the configuration report."""
    if kind == "diagram":
        from analyzer.diagram.schema import DiagramSpec as model
    elif kind == "profile":
        from analyzer.hardware import Profile as model
    elif kind == "report":
        from analyzer.model.result import Analysis as model
    elif kind == "configuration":
        from analyzer.config.result import ConfigurationReport as model
    else:
        raise NapkinError(f"unknown schema {kind!r}", hint="choose diagram, profile, report or "
                                                           "configuration")
    # pydantic writes JSON Schema draft 2020-12; saying so lets editors and validators pick the dialect
    typer.echo(json.dumps({"$schema": JSON_SCHEMA_DIALECT, **model.model_json_schema()}, indent=2))


@hardware_app.command("list")
def hardware_list() -> None:
    """List the shipped GPU profiles."""
    from rich.table import Table

    from analyzer.common.units import binary, si
    from analyzer.hardware import shipped_profiles
    from analyzer.report.analysis import row
    table = Table(show_edge=False, header_style="bold")
    for col in ("name", "aliases", "GPU", "SMs", "tensor fp16", "HBM", "smem / block"):
        table.add_column(col)
    for name, p in shipped_profiles().items():
        smem = next((lv for lv in p.levels if lv.name == "smem"), None)
        row(table, name, ", ".join(p.aliases), p.description, str(p.sm_count),
             si(p.tensor_flops_per_s.get("fp16", 0), "FLOP/s"),
             si(p.levels[0].bandwidth_bytes_per_s or 0, "B/s"),
             binary(smem.block_capacity_bytes) if smem else "-")
    _console().print(table)


@hardware_app.command("show")
def hardware_show(name: Annotated[str, typer.Argument(help="Profile name or alias.")]) -> None:
    """Print a profile file, with its source comments."""
    from analyzer.common import resources
    from analyzer.hardware import load_profile_file, profile_path
    path = resources.require_yaml(profile_path(name, field="NAME"), what="profile", field="NAME")
    load_profile_file(path)  # validate before showing: only profiles are printed
    typer.echo(path.read_text(encoding="utf-8").rstrip())


@diagrams_app.command("list")
def diagrams_list() -> None:
    """List the shipped diagrams."""
    from rich.table import Table

    from analyzer.common import resources
    from analyzer.diagram.graph import load_diagram
    from analyzer.report.analysis import row
    table = Table(show_edge=False, header_style="bold")
    for col in ("name", "title", "paper", "kernels"):
        table.add_column(col)
    for name, path in resources.shipped("diagrams").items():
        d = load_diagram(path)
        row(table, name, d.title, d.paper, ", ".join(k.name for k in d.kernels))
    _console().print(table)


@diagrams_app.command("show")
def diagrams_show(name: Annotated[str, typer.Argument(help="Diagram name or .yaml file.")]) -> None:
    """Print a diagram file (a shipped one by name), after validating it."""
    from analyzer.common import resources
    from analyzer.model.analysis import load
    path = resources.require_yaml(resources.resolve("diagrams", name, what="diagram", field="NAME"),
                                  what="diagram", field="NAME")
    load(str(path))  # validate before showing: only diagrams are printed
    typer.echo(path.read_text(encoding="utf-8").rstrip())


@diagrams_app.command("check")
def diagrams_check(file: Annotated[str, typer.Argument(help="A diagram name or .yaml file.")]) -> None:
    """Validate a diagram: its form, its graph, and every relabelling against the fusion theorem."""
    from analyzer.model.analysis import load
    from analyzer.model.fusion import schedule
    d = load(file)
    for kernel in d.kernels:
        for level in d.levels[1:]:
            schedule(d, kernel, level)
    typer.echo(f"{d.source}: ok ({len(d.ops)} ops, {len(d.kernels)} kernel(s), levels "
               f"{', '.join(d.levels)})")


def _usage_errors() -> tuple[type[Exception], ...]:
    """Usage-error classes: recent typer vendors click; older typer uses click itself."""
    classes: list[type[Exception]] = []
    try:
        from typer.exceptions import TyperException
        classes.append(TyperException)
    except ImportError:
        pass
    try:
        from click.exceptions import ClickException
        classes.append(ClickException)
    except ImportError:
        pass
    return tuple(classes)


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except NapkinError as exc:
        if os.environ.get("NAPKIN_DEBUG"):
            raise
        _fail(exc.one_line())
    except _usage_errors() as exc:   # typer's usage errors: unknown option, bad value
        if type(exc).__name__ == "NoArgsIsHelpError":   # bare `napkin hardware`: show the help
            print(exc.format_message())
            sys.exit(0)
        _fail(" ".join(exc.format_message().split()) + " (hint: see napkin --help)")
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(line: str) -> None:
    print(f"error: {line}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
