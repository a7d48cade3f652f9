"""Where the shipped data lives: diagrams/, hardware/, the recordings the calibrated profiles were
fitted to (bench/results/) and the documentation (docs/, which napkin report's pages link to).

In an installed wheel they are inside the package (analyzer/_data/, see pyproject.toml); in a
checkout they are in the repository. Never relative to the current directory.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from analyzer.common.errors import NapkinError

_PACKAGE = Path(__file__).resolve().parent.parent      # analyzer/


_CHECKOUT = {"diagrams": "diagrams", "hardware": "hardware", "recordings": "bench/results", "docs": "docs"}


def data_dir(kind: str) -> Path:
    """The folder holding the shipped `diagrams`, `hardware` or `recordings` files, or the `docs`."""
    for candidate in (_PACKAGE / "_data" / kind, _PACKAGE.parent / _CHECKOUT[kind]):
        if candidate.is_dir():
            return candidate
    raise NapkinError(f"the shipped {kind}/ folder is missing from this installation",
                      hint="reinstall napkin with `pip install .` from a checkout")


def shipped(kind: str) -> dict[str, Path]:
    """Shipped files of a kind by name (file stem), sorted."""
    return {p.stem: p for p in sorted(data_dir(kind).glob("*.yaml"))}


def recording(path: Path) -> Path:
    """`path`, or where it does not exist and names a shipped recording as README's commands do
    (bench/results/sweep_h200.json, or its bare file name), the shipped copy: the commands work from
    any folder, installed or not."""
    try:
        if path.exists() or path.is_absolute() or path.parts[:-1] not in ((), ("bench", "results")):
            return path
    except OSError:               # a name too long to look up: the caller says so
        return path
    try:
        shipped_copy = data_dir("recordings") / path.name
    except NapkinError:
        return path
    return shipped_copy if shipped_copy.is_file() else path


def display(kind: str, path: Path) -> str:
    """How to name a data file in output: `hardware/h100-sxm5.yaml` if shipped, else its path."""
    try:
        return f"{kind}/{path.resolve().relative_to(data_dir(kind).resolve())}"
    except ValueError:
        return str(path)


def resolve(kind: str, name_or_path: str, *, what: str, aliases: dict[str, str] | None = None,
            field: str | None = None) -> Path:
    """A shipped file by name (or alias), or a path to a .yaml file. `field` names the argument."""
    files = shipped(kind)
    key = name_or_path.lower()
    if aliases and key in aliases:
        key = aliases[key]
    if key in files:
        return files[key]
    path = Path(name_or_path)
    try:
        if path.suffix in (".yaml", ".yml") or "/" in name_or_path or path.exists():
            if path.is_dir():
                raise NapkinError(f"{_short(name_or_path)} is a folder, not a {what} file", field=field,
                                  hint=f"pass a {what} name or a .yaml file")
            if not path.is_file():
                raise NapkinError(f"no such file: {name_or_path}", field=field,
                                  hint=f"pass a {what} name or a .yaml file")
            return path
    except OSError as exc:     # a name longer than a file name may be (ENAMETOOLONG), ...
        raise NapkinError(f"{_short(name_or_path)!r} is no {what} name, nor a file napkin can look up "
                          f"({exc.strerror or exc})", field=field,
                          hint=f"pass a {what} name or a .yaml file") from None
    choices = sorted(set(files) | set(aliases or {}))
    close = difflib.get_close_matches(key, choices, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(choices)}"
    raise NapkinError(f"unknown {what} {_short(name_or_path)!r}", field=field, hint=hint)


def require_yaml(path: Path, *, what: str, field: str | None = None) -> Path:
    """`path` if it is a .yaml (or .yml) file: commands that print a file print only napkin's own."""
    if path.suffix not in (".yaml", ".yml"):
        raise NapkinError(f"{_short(str(path))!r} is not a {what} file (it does not end in .yaml)",
                          field=field, hint=f"pass a shipped {what} name or a {what} .yaml file")
    return path


def _short(text: str, most: int = 80) -> str:
    """`text`, its middle left out past `most` characters (a 300-character name in an error line)."""
    return text if len(text) <= most else f"{text[:most // 2]}...{text[-(most // 2 - 3):]}"
