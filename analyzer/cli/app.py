"""The Typer application, the options its commands share, and main(): how napkin ends.

Exit codes (docs/cli.md, "Errors"): 0 done; 1 an input or the model refused (a diagram or profile
file, a recording, a configuration that does not fit: NapkinError), or stdout refused the output
(`> /dev/full`); 2 the command line is wrong (click's usage errors, and UsageError: a malformed --set or one whose value is no size,
options that conflict, an option given twice that takes one value, an -o that names no file); 3 a
check asked for failed (`napkin configure --strict`); 130 interrupted; 141 stdout's reader went away
(`napkin ... | head -1`), quietly, as a shell reports a tool that SIGPIPE ended. Every error is one
line on stderr; set NAPKIN_DEBUG=1 to see a traceback instead.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
from typing import Annotated, Literal, Optional

import typer

from analyzer.common.errors import NapkinError, UsageError
from analyzer.common.version import __version__

# rich_markup_mode=None: click's plain help, which shows choices ([fp16|bf16]) and no type for a flag
app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="FlashAttention on a Napkin: diagrams in, GPU performance models out.")
hardware_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="GPU profiles (hardware/*.yaml).")
diagrams_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Shipped diagrams (diagrams/*.yaml).")
plot_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                       help="Plots; the output's extension picks PNG, SVG or PDF.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(diagrams_app, name="diagrams")
app.add_typer(plot_app, name="plot")

# The exit codes: docs/cli.md's table, which tests/unit/test_cli_conventions.py holds to these
DONE = 0
REFUSED = 1                # an input or the model refused (NapkinError), or stdout refused the output
USAGE = 2                  # the command line is wrong (click's convention)
CHECK_FAILED = 3           # a check the command was asked for failed (--strict)
INTERRUPTED = 130          # Ctrl-C (128 + SIGINT)
OUTPUT_CLOSED = 141        # stdout's reader went away (128 + SIGPIPE, what a shell reports of `yes | head -1`)
EXIT_CODES = (DONE, REFUSED, USAGE, CHECK_FAILED, INTERRUPTED, OUTPUT_CLOSED)

SET = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=(.*)$")
DIGITS = re.compile(r"^[0-9]+$")
NUMBER = re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$")   # 4096; -5, 1.5, 1e3 are no size
RANGE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=([0-9]{1,15})\.\.([0-9]{1,15})$")   # q=1024..32768: doubling
LIST = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=([0-9]{1,15}(?:,[0-9]{1,15})+)$")     # q=1000,3000,5000
MAX_POINTS = 64            # sizes x GPUs of one comparison: each is a whole analysis
DTYPES = ("fp16", "bf16", "fp8", "fp32")
Dtype = Literal["fp16", "bf16", "fp8", "fp32"]       # arrays' element types (analyzer.common.dtypes)
KernelDtype = Literal["fp16", "bf16", "fp8"]        # what the generated kernels take (fp8: Hopper attention)
MeasuredDtype = Literal["fp16", "bf16"]             # what napkin measure checks and times
Backend = Literal["hopper", "hopper-contraction", "triton", "cuda"]
Strategy = Literal["fragment", "staged"]             # Section 5.5: where the softmax's rescale runs
Overlap = Literal["inter", "intra"]                  # Section 5.7: how warpgroups overlap

def shipped_diagrams(incomplete: str) -> list[str]:
    """Shell completion of a diagram argument: the shipped diagrams' names."""
    from analyzer.common import resources
    return sorted(n for n in resources.shipped("diagrams") if n.startswith(incomplete))


def gpu_names() -> str:
    """The shipped profiles, each with its aliases: `a100 (a100-sxm4, a100-80gb), ..., t4 (tesla-t4)`,
    read from hardware/ when a help is shown (the file names and their `aliases:`, without the schema
    and sympy)."""
    from analyzer.common import resources
    from analyzer.hardware.names import aliases
    named: dict[str, list[str]] = {}
    for alias, stem in aliases().items():
        named.setdefault(stem, []).append(alias)
    return ", ".join(stem + (f" ({', '.join(named[stem])})" if stem in named else "")
                     for stem in sorted(resources.shipped("hardware")))


def shipped_gpus(incomplete: str) -> list[str]:
    """Shell completion of --gpu: the shipped profiles' names and their aliases."""
    from analyzer.common import resources
    from analyzer.hardware.names import aliases
    return sorted(n for n in {*resources.shipped("hardware"), *aliases()} if n.startswith(incomplete))


def distinct_gpus(gpus: list[str] | None) -> tuple[list[str], list[str]]:
    """The --gpu values of a command that compares GPUs (default h100), each profile once, in the order
    given, and a note for each value dropped: an alias and the profile it names (h100, h100-sxm5), or one
    name twice, are one GPU, and comparing it with itself says nothing. Dropped rather than refused, as
    a package manager takes a package named twice: a list built by a script still runs."""
    from analyzer.common import resources
    from analyzer.hardware.names import profile_path
    first: dict[object, str] = {}
    notes = []
    for name in gpus or ["h100"]:
        path = profile_path(name)
        key = path.resolve()
        if key in first:
            notes.append(f"--gpu {name} names {first[key]}'s profile again ({resources.display('hardware', path)}): "
                         "it is compared once")
        else:
            first[key] = name
    return list(first.values()), notes


def compared_gpus(gpus: list[str] | None) -> list[str]:
    """distinct_gpus, its notes on stderr (stdout may be JSON)."""
    names, notes = distinct_gpus(gpus)
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    return names


DiagramArg = Annotated[str, typer.Argument(metavar="DIAGRAM", autocompletion=shipped_diagrams, help="A shipped diagram name (napkin diagrams "
                                                                   "list) or a .yaml file.")]
GpuOpt = Annotated[str, typer.Option("--gpu", "-g", metavar="GPU", autocompletion=shipped_gpus, help="GPU profile name or alias "
                                                                        "(napkin hardware list), or a "
                                                                        "profile .yaml file.")]
GpusOpt = Annotated[Optional[list[str]], typer.Option(
    "--gpu", "-g", metavar="GPU", autocompletion=shipped_gpus,
    help="GPU profile name or alias, or a profile .yaml file; repeatable.")]
SetOpt = Annotated[Optional[list[str]], typer.Option(
    "--set", "-s", metavar="NAME=VALUE", help="Override a size (q=16384) or pin a tile size (g_q=128); "
                                              "repeatable.")]
OutputOpt = Annotated[str, typer.Option("--output", "-o", metavar="FILE", help="Output file: .png, .svg or .pdf.")]


class OneValue(typer.core.TyperCommand):
    """A command whose single-valued options refuse to be given twice: click keeps the last of
    `--gpu h100 --gpu a100` silently, and the user meant one of them (or a command that compares)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:  # noqa: ANN001 - click's signature
        if not ctx.resilient_parsing:          # completion parses partial lines: let it
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            seen: set[str] = set()
            for param in order:
                if isinstance(param, typer.core.TyperOption) and not param.multiple and not param.is_flag:
                    if param.name in seen:
                        raise UsageError(f"{param.opts[0]} given twice: it takes one value",
                                         hint="pass it once" + ("; napkin analyze compares GPUs side by side"
                                                                if param.opts[0] == "--gpu" else ""))
                    seen.add(param.name)
        return super().parse_args(ctx, args)

    def format_options(self, ctx, formatter) -> None:  # noqa: ANN001 - click's signature
        """As typer's, less the `<str>` it prints after an argument's name (its help says what it is),
        and with the shipped GPUs after the help of each argument or option that takes one."""
        records = {"argument": [], "option": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name in records:
                name, text = record
                if param.metavar == "GPU":      # before click's `[default: h100]` or `[required]`
                    own, bracket, rest = text.partition("  [")
                    text = f"{own} Shipped: {gpu_names()}." + (bracket + rest if bracket else "")
                records[param.param_type_name].append(
                    (name.removesuffix(" <str>") if param.param_type_name == "argument" else name, text))
        for title, kind in (("Arguments", "argument"), ("Options", "option")):
            if records[kind]:
                with formatter.section(title):
                    formatter.write_dl(records[kind])


def progress_bar(title: str):
    from analyzer.report.terminal import progress
    return progress(title)


def console():
    from analyzer.report.terminal import console
    return console()


def parse_sets(items: list[str]) -> dict[str, int]:
    """--set NAME=N, each N a size: a whole number from 1 to 2**40. A value that is no size is a wrong
    command line (exit 2) in every command and form, whatever the diagram; a NAME the diagram lacks is
    the diagram's to refuse (exit 1), as an unknown GPU is."""
    sets: dict[str, int] = {}
    for item in items:
        match = SET.match(item.strip())
        if not match or not NUMBER.match(match[2]):
            raise UsageError(f"--set {item!r}: expected NAME=NUMBER, e.g. --set q=4096 (napkin analyze also "
                             "takes a range, q=1024..32768, or a list, q=1000,3000)")
        sets[match[1]] = size(match[1], match[2])
    return sets


def size(name: str, number: str) -> int:
    """The size a --set gives `name`, from its `number` (digits, or any other number: -5, 1.5, 1e3)."""
    shown = f"--set {name}={number if len(number) <= 15 else number[:12] + '...'}"
    if not DIGITS.match(number) or not number.strip("0"):
        raise UsageError(f"{shown}: sizes are positive whole numbers, written in digits",
                         hint=f"e.g. --set {name}=4096")
    from analyzer.common.expr import MAX_SIZE
    if len(number) > 15 or int(number) > MAX_SIZE:   # 15 digits: far beyond 2**40, and cheap to refuse
        raise UsageError(f"{shown}: size is out of range (at most 2**40)")
    return int(number)


def parse_size_ranges(items: list[str]) -> tuple[dict[str, int], dict[str, list[int]]]:
    """--set values: single ones (q=4096), and ranges: q=1024..32768 (doubling from the first while
    at most the last) or q=1000,3000,5000 (as listed). Every size in them is checked as a single one."""
    single, ranged = [], {}
    for item in items:
        text = item.strip()
        if m := RANGE.match(text):
            first, last = int(m[2]), int(m[3])
            if first < 1 or last < first:
                raise UsageError(f"--set {text!r}: a range runs from a positive size up to a larger one")
            size(m[1], m[3])
            ranged[m[1]] = [first << k for k in range((last // first).bit_length()) if first << k <= last]
        elif m := LIST.match(text):
            ranged[m[1]] = [size(m[1], v) for v in m[2].split(",")]
        else:
            single.append(item)
    return parse_sets(single), ranged


@app.callback(invoke_without_command=True)
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False) -> None:
    if version:
        typer.echo(f"napkin {__version__}")
        raise typer.Exit()


def check_dtypes(dtypes: list[str]) -> list[str]:
    for dtype in dtypes:
        if dtype not in DTYPES:
            raise UsageError(f"--dtype {dtype!r}: expected {', '.join(DTYPES)}")
    return dtypes


def wrote(path) -> None:
    typer.echo(f"wrote {path}")


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


class StdoutLost(Exception):
    """stdout refused napkin's output (a full disk, a closed pipe). Not an OSError, so that neither click
    nor a command takes it for a file of its own: it reaches main() whatever wrote."""

    def __init__(self, code: int | None, strerror: str | None) -> None:
        super().__init__(strerror)
        self.errno = code
        self.strerror = strerror


class _Stdout(io.RawIOBase):
    """stdout's file descriptor, whose write errors are StdoutLost."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: bytes) -> int:
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            raise
        except OSError as exc:
            raise StdoutLost(exc.errno, exc.strerror) from None


def _guard_stdout() -> None:
    """Write stdout through _Stdout, so that a failed write is told from napkin's own errors. Only the
    process's own stdout on POSIX: a test's capture or another program's stream is left alone."""
    out = sys.stdout
    if os.name != "posix" or out is None or out is not sys.__stdout__:
        return
    try:
        fd = out.fileno()
        out.flush()
    except (OSError, ValueError):
        return
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_Stdout(fd)), encoding=out.encoding, errors=out.errors,
                                  line_buffering=out.line_buffering)


def main() -> None:
    _guard_stdout()
    try:
        code = app(standalone_mode=False)
        sys.stdout.flush()
    except StdoutLost as exc:
        _stdout_lost(exc)
    except NapkinError as exc:
        if os.environ.get("NAPKIN_DEBUG"):
            raise
        _fail(exc.one_line(), USAGE if isinstance(exc, UsageError) else REFUSED)
    except _usage_errors() as exc:   # typer's usage errors: unknown option, bad value
        if type(exc).__name__ == "NoArgsIsHelpError":   # bare `napkin hardware`: show the help
            try:
                print(exc.format_message(), flush=True)
            except StdoutLost as lost:
                _stdout_lost(lost)
            sys.exit(DONE)
        _fail(" ".join(exc.format_message().split()) + " (hint: see napkin --help)",
              getattr(exc, "exit_code", USAGE))
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED)
    sys.exit(code if isinstance(code, int) else DONE)


def _stdout_lost(exc: StdoutLost) -> None:
    """stdout refused the output: quietly where its reader went away (`| head -1`), as command-line
    tools do, else one error line."""
    _discard_stdout()
    if exc.errno == errno.EPIPE:
        sys.exit(OUTPUT_CLOSED)
    _fail(f"stdout: cannot write the output ({exc.strerror or 'error ' + str(exc.errno)}); it is "
          "incomplete", REFUSED, hint="free some space, or send the output elsewhere")


def _discard_stdout() -> None:
    """What napkin has not written to stdout yet goes to /dev/null, so that Python's last flush at exit
    does not fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


def _fail(line: str, code: int, hint: str | None = None) -> None:
    try:
        sys.stdout.flush()       # what the command printed before it failed, ahead of the error line
    except StdoutLost:
        _discard_stdout()
    print(f"error: {line}" + (f" (hint: {hint})" if hint else ""), file=sys.stderr)
    sys.exit(code)
