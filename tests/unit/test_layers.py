"""The package's structure (docs/architecture.md): layers as folders, every import pointing down.

Two independent checks of the same contracts: import-linter runs pyproject.toml's contracts, and a walk
of every module's syntax tree holds each import against the layers read from the same file. The walk
also sees what import-linter does not judge: imports inside functions (only the CLI may defer one, to
start fast), cycles between modules, and modules too long to read without a stated reason.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "analyzer"
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
LONG = 600                     # lines; a longer module says why at its top
LONG_REASON = "Why one module:"  # the docstring paragraph that says why
DEFERRED = "analyzer.cli"      # its modules import a command's pipeline when it runs: `napkin --help` stays fast


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _target(module: str, node: ast.ImportFrom | ast.Import, alias: ast.alias) -> str:
    """The analyzer module an import names (a name imported from a package resolves to its module
    where there is one)."""
    if isinstance(node, ast.Import):
        name = alias.name
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
        name = f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _imports() -> list[tuple[str, str, bool, int]]:
    """(importer, imported, inside a function, line) for every import of an analyzer module."""
    out = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for alias in node.names:
                target = _target(module, node, alias)
                if target.startswith("analyzer") and target != module:
                    out.append((module, target, id(node) not in top, node.lineno))
    return out


IMPORTS = _imports()


def _layer_of(layers: list[str]):
    """module -> the index of its layer (0: the top), or None for a module outside every layer."""
    table = {m.strip(): i for i, layer in enumerate(layers) for m in layer.split("|")}

    def layer(module: str) -> int | None:
        parts = module.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in table:
                return table[".".join(parts[:n])]
        return None
    return layer


def test_import_linter_contracts_hold():
    cli = pytest.importorskip("importlinter.cli")
    assert cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


@pytest.mark.parametrize("contract", [c for c in CONTRACTS if c["type"] == "layers"], ids=lambda c: c["name"])
def test_every_import_points_down(contract):
    layer = _layer_of(contract["layers"])
    assert all(layer(m) is not None for m in MODULES if m not in ("analyzer", "analyzer.__main__")), \
        "every package module belongs to a layer"
    upward = [f"{a} (line {n}) imports {b}" for a, b, _, n in IMPORTS
              if layer(a) is not None and layer(b) is not None and layer(b) < layer(a)]
    siblings = [f"{a} (line {n}) imports {b}" for a, b, _, n in IMPORTS
                if layer(a) == layer(b) and a.split(".")[1] != b.split(".")[1]]
    assert not upward, upward
    assert not siblings, siblings


def test_the_walk_sees_an_upward_import():
    """The check above can fail: config importing the report is upward."""
    layer = _layer_of(next(c for c in CONTRACTS if c["type"] == "layers")["layers"])
    assert layer("analyzer.config.tables") > layer("analyzer.report.analysis")
    assert layer("analyzer.codegen.generator") == layer("analyzer.calibrate.fit")


def test_no_import_inside_a_function():
    """A deferred import hides a cycle or a layer break from a reader; only the CLI defers, for speed."""
    deferred = [f"{a} (line {n}) imports {b}" for a, b, inside, n in IMPORTS if inside and a != DEFERRED and not a.startswith(DEFERRED + ".")]
    assert not deferred, deferred


def test_no_cycle_between_modules():
    graph = nx.DiGraph((a, b) for a, b, _, _ in IMPORTS)
    cycles = [c for c in nx.simple_cycles(graph) if len(c) > 1]
    assert not cycles, cycles


BENCH = {f"bench.{p.stem}": p for p in sorted((ROOT / "bench").glob("*.py"))}


@pytest.mark.parametrize("module", sorted({**MODULES, **BENCH}))
def test_a_long_module_says_why(module):
    text = {**MODULES, **BENCH}[module].read_text()
    if len(text.splitlines()) > LONG:
        assert LONG_REASON in (ast.get_docstring(ast.parse(text)) or ""), \
            f"{module} has {len(text.splitlines())} lines: split it, or say why at its top ({LONG_REASON!r})"
