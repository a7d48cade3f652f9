"""The `napkin` command: parse arguments, call the library, print. Nothing else lives here.

    app          the Typer application, the options commands share, and main() (exit codes)
    analysis     analyze, expand, configure, sweep
    outputs      kernel, draw, plot, report
    calibration  calibrate
    measurement  measure, hardware draft
    catalogue    schema, hardware, diagrams

Each command imports its pipeline when it runs, so that `napkin --help` starts fast.
"""

from analyzer.cli import analysis, calibration, catalogue, measurement, outputs  # noqa: F401 - they register the commands
from analyzer.cli.app import app, main

__all__ = ["app", "main"]
