"""Which answers of the command line the result cache holds (analyzer.common.cache), under what key, and
in what form: napkin analyze's analysis and napkin kernel's generated files, for a shipped or user's
diagram on a shipped GPU profile."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from analyzer.common.errors import NapkinError

M = TypeVar("M", bound=BaseModel)


class KernelFiles(BaseModel):
    """What napkin kernel writes, before -o names it: the backend, the source, its companions by
    suffix (CUDA: the .py loader) and the note it prints."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    source: str
    extra: dict[str, str]
    note: str | None


def answer(kind: str, diagram: str, gpu: str, options: dict, model: type[M], compute: Callable[[], M]) -> M:
    """Command `kind`'s answer for these arguments: read from the cache where it holds a valid one (a
    damaged entry is a miss), else computed and stored."""
    from analyzer.common import cache
    name = entry(kind, diagram, gpu, options)
    text = cache.load(kind, name) if name else None
    try:
        result = model.model_validate_json(text) if text else None
    except ValueError:
        result = None
    if result is None:
        result = compute()
        if name:
            cache.store(kind, name, result.model_dump_json())
    return result


def entry(kind: str, diagram: str, gpu: str, options: dict) -> str | None:
    """The cache entry of command `kind` with these arguments: the diagram file's bytes, every shipped
    profile's (a shipped profile extends and is calibrated by others) and the options. None where the
    answer may depend on more (a profile file of the user's, which may extend files of the user's) or an
    argument is not a file napkin finds: the command then computes, and says what is wrong.

    The diagram and the GPU are keyed as they were given as well as by the files they name: an answer
    may show them as given (napkin kernel's `regenerate with` line names the diagram so, and a profile
    given as a file), so `attention`, `diagrams/attention.yaml` and `./diagrams/attention.yaml` are three
    entries. Keying on the spelling costs a repeated command nothing; storing answers without the path
    and putting it back on the way out would need the inverse of every escaper it passes through (a
    shell word, a Python comment and docstring, JSON), and a wrong inverse is a wrong answer."""
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
        where = {"gpu": gpu, "gpu_file": profile_path.stem, "diagram": diagram,
                 "diagram_file": str(diagram_path.resolve())}
        return cache.key(kind, [diagram_path, *shipped.values()], {**options, **where})
    except (NapkinError, OSError, ValueError):
        return None
