"""Which shipped profile file a GPU name or alias names (h100 -> hardware/h100-sxm5.yaml).

Apart from the profile schema (analyzer.hardware.profile, which imports sympy), so that a command
answered from napkin's result cache (analyzer.common.cache) finds its profile file without importing
the model.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from analyzer.common import resources
from analyzer.common.yamlio import load_file


@cache
def aliases() -> dict[str, str]:
    """Alias (lower case) -> the stem of the shipped profile that declares it in its `aliases:`. A
    profile's own aliases only: one that `extends:` another does not inherit the base's."""
    table: dict[str, str] = {}
    for stem, path in resources.shipped("hardware").items():
        data = load_file(path)
        declared = data.get("aliases") if isinstance(data, dict) else None
        for alias in declared if isinstance(declared, list) else []:
            if isinstance(alias, str):
                table[alias.lower()] = stem
    return table


def profile_path(name_or_path: str, *, field: str | None = "--gpu") -> Path:
    """The file of a shipped profile by name or alias (h100 -> h100-sxm5), or a given profile file."""
    return resources.resolve("hardware", name_or_path, what="GPU", aliases=aliases(), field=field)
