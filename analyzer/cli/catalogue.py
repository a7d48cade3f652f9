"""napkin schema, hardware and diagrams: what napkin ships and reads."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from analyzer.cli.app import (
    OneValue,
    app,
    console,
    diagrams_app,
    hardware_app,
    shipped_diagrams,
    shipped_gpus,
)

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@app.command(cls=OneValue)
def schema(kind: Annotated[Literal["diagram", "profile", "report", "comparison", "configuration", "sweep",
                                   "measurement"],
                           typer.Argument(metavar="KIND", help="Which file or output.")]) -> None:
    """Print the JSON Schema of diagram files, profile files, or the JSON of analyze, configure, sweep or
    measure."""
    if kind == "diagram":
        from analyzer.diagram.schema import DiagramSpec as model
    elif kind == "profile":
        from analyzer.hardware import Profile as model
    elif kind == "report":
        from analyzer.model.result import Analysis as model
    elif kind == "comparison":
        from analyzer.model.result import Comparison as model
    elif kind == "configuration":
        from analyzer.config.result import ConfigurationReport as model
    elif kind == "sweep":
        from analyzer.config.sweep_result import SweepReport as model
    else:
        from analyzer.measure.result import Measurement as model
    # pydantic writes JSON Schema draft 2020-12; saying so lets editors and validators pick the dialect
    typer.echo(json.dumps({"$schema": JSON_SCHEMA_DIALECT, **model.model_json_schema()}, indent=2))


@hardware_app.command("list", cls=OneValue)
def hardware_list() -> None:
    """List the shipped GPU profiles."""
    from rich.table import Table

    from analyzer.common.units import binary, si
    from analyzer.hardware import shipped_profiles
    from analyzer.report.tables import row
    table = Table(show_edge=False, header_style="bold")
    for col in ("name", "aliases", "GPU", "SMs", "tensor fp16", "HBM", "smem / block"):
        table.add_column(col)
    for name, p in shipped_profiles().items():
        smem = next((lv for lv in p.levels if lv.name == "smem"), None)
        row(table, name, ", ".join(p.aliases), p.description, str(p.sm_count),
             si(p.tensor_flops_per_s.get("fp16", 0), "FLOP/s"),
             si(p.levels[0].bandwidth_bytes_per_s or 0, "B/s"),
             binary(smem.block_capacity_bytes) if smem else "-")
    console().print(table)


@hardware_app.command("show", cls=OneValue)
def hardware_show(name: Annotated[str, typer.Argument(metavar="GPU", autocompletion=shipped_gpus, help="Profile name or alias.")]) -> None:
    """Print a profile file, with its source comments."""
    from analyzer.common import resources
    from analyzer.hardware import load_profile_file, profile_path
    path = resources.require_yaml(profile_path(name, field="NAME"), what="profile", field="NAME")
    load_profile_file(path)  # validate before showing: only profiles are printed
    typer.echo(path.read_text(encoding="utf-8").rstrip())


@diagrams_app.command("list", cls=OneValue)
def diagrams_list() -> None:
    """List the shipped diagrams."""
    from rich.table import Table

    from analyzer.common import resources
    from analyzer.diagram.graph import load_diagram
    from analyzer.report.tables import row
    table = Table(show_edge=False, header_style="bold")
    for col in ("name", "title", "paper", "kernels"):
        table.add_column(col)
    for name, path in resources.shipped("diagrams").items():
        d = load_diagram(path)
        row(table, name, d.title, d.paper, ", ".join(k.name for k in d.kernels))
    console().print(table)


@diagrams_app.command("show", cls=OneValue)
def diagrams_show(name: Annotated[str, typer.Argument(metavar="DIAGRAM", autocompletion=shipped_diagrams, help="Diagram name or .yaml file.")]) -> None:
    """Print a diagram file (a shipped one by name), after validating it."""
    from analyzer.common import resources
    from analyzer.model.analysis import load
    path = resources.require_yaml(resources.resolve("diagrams", name, what="diagram", field="NAME"),
                                  what="diagram", field="NAME")
    load(str(path))  # validate before showing: only diagrams are printed
    typer.echo(path.read_text(encoding="utf-8").rstrip())


@diagrams_app.command("check", cls=OneValue)
def diagrams_check(file: Annotated[str, typer.Argument(metavar="DIAGRAM", autocompletion=shipped_diagrams, help="A diagram name or .yaml file.")]) -> None:
    """Validate a diagram: its form, its graph, every relabelling against the fusion theorem, and its
    axes' sizes at its defaults."""
    from analyzer.model.analysis import check_axis_sizes, load
    from analyzer.model.fusion import schedule
    d = load(file)
    check_axis_sizes(d, d.defaults)      # as napkin analyze does at them
    for kernel in d.kernels:
        for level in d.levels[1:]:
            schedule(d, kernel, level)
    typer.echo(f"{d.source}: ok ({len(d.ops)} ops, {len(d.kernels)} kernel(s), levels "
               f"{', '.join(d.levels)})")


