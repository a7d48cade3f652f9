"""napkin's command line as a test runs it: in this process, or as its own process.

`in_process` calls analyzer.cli.main, the function the `napkin` script and `python -m analyzer` call, with
the arguments in sys.argv, the current directory and the environment a test gives, and stdout and
stderr captured; it returns what a subprocess returns (exit code, stdout, stderr). An exception that
escapes main() is what the interpreter would print: a traceback on stderr and exit 1. Where a test
checks how main() ends, this is the whole of it at a fraction of a process's cost (a new interpreter
imports sympy, networkx and the model again: 1.5 to 2 s of a 2-core machine per call).

`in_subprocess` runs `python -m analyzer` itself, for what only a process shows: stdout that is a full
device or a closed pipe, the interpreter's last flush, the module's entry point.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from pathlib import Path

TIMEOUT = 120
COLUMNS = "100"      # the terminal width the tests' expected lines are written for


def in_process(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`napkin ARGS` run by analyzer.cli.main in this process, from folder `cwd`, with NAPKIN_DEBUG unset
    and COLUMNS=100 (and `env` on top): its exit code, stdout and stderr."""
    from analyzer.cli import main
    out, err = io.StringIO(), io.StringIO()
    changes = {"NAPKIN_DEBUG": None, "COLUMNS": COLUMNS, **(env or {})}
    saved = {name: os.environ.get(name) for name in changes}
    argv = sys.argv
    try:
        _set_environment(changes)
        sys.argv = ["napkin", *args]
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as end:
                code = _exit_code(end.code, err)
            except BaseException:  # noqa: BLE001 - what the interpreter prints of an uncaught exception
                err.write(traceback.format_exc())
                code = 1
    finally:
        sys.argv = argv
        _set_environment(saved)
    return subprocess.CompletedProcess(["napkin", *args], code, out.getvalue(), err.getvalue())


def in_subprocess(cwd: Path, *args: str, **run_options) -> subprocess.CompletedProcess:
    """`python -m analyzer ARGS` as its own process, from folder `cwd`, with NAPKIN_DEBUG unset and
    COLUMNS=100; stdout and stderr captured unless `run_options` says otherwise."""
    env = {k: v for k, v in os.environ.items() if k != "NAPKIN_DEBUG"}
    env["COLUMNS"] = COLUMNS
    options = {"capture_output": True, **run_options} if "stdout" not in run_options else run_options
    return subprocess.run([sys.executable, "-m", "analyzer", *args], cwd=cwd, env=env, text=True,
                          timeout=TIMEOUT, check=False, **options)


def _set_environment(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _exit_code(code: object, err: io.StringIO) -> int:
    """sys.exit's argument as the process's exit code: None is 0, a number itself, anything else is
    printed to stderr and exits 1 (as the interpreter does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)
    return 1
