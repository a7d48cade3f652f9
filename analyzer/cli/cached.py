"""Which answers of the command line the result cache holds (analyzer.common.cache), and under what key:
napkin analyze's analysis and napkin kernel's generated files, for a shipped or user's diagram on a
shipped GPU profile."""

from __future__ import annotations

from analyzer.common.errors import NapkinError


def entry(kind: str, diagram: str, gpu: str, options: dict) -> str | None:
    """The cache entry of command `kind` with these arguments: the diagram file's bytes, every shipped
    profile's (a shipped profile extends and is calibrated by others) and the options. None where the
    answer may depend on more (a profile file of the user's, which may extend files of the user's) or an
    argument is not a file napkin finds: the command then computes, and says what is wrong."""
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
        where = {"gpu": profile_path.stem, "diagram": str(diagram_path.resolve())}   # the answers name both
        return cache.key(kind, [diagram_path, *shipped.values()], {**options, **where})
    except (NapkinError, OSError):
        return None
