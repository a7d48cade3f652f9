"""Reading GPU profiles: by shipped name or alias (h100 -> h100-sxm5) or from a file, with `extends:`.

`load(name_or_path)` is the one way a command gets its profile; it is called once per command, and a
Profile passed in comes back as it is, so library functions take either.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import ValidationError

from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.common.validation import from_validation_error
from analyzer.common.yamlio import load_file
from analyzer.hardware.names import profile_path
from analyzer.hardware.profile import DOCS_HINT, ContractionFit, HopperFit, Profile


def load(gpu: str | Path | Profile, *, field: str | None = "--gpu") -> Profile:
    """The profile `gpu` names: a shipped profile's name or alias, or a profile file; a Profile is
    returned as it is. `field` is the option an error names."""
    if isinstance(gpu, Profile):
        return gpu
    path = profile_path(str(gpu), field=field)
    profile = load_profile_file(path)
    profile._source = resources.display("hardware", path)
    return profile


def load_profile_file(path: Path) -> Profile:
    data = _extended(load_file(path), path, ())
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, file=str(path), hint=DOCS_HINT) from None
    _check_fed(profile, str(path))
    return profile


def _check_fed(profile: Profile, source: str) -> None:
    """Every level that feeds another (each non-cross level but the lowest) has a bandwidth: without it
    no transfer into the level below can be timed, whatever the command."""
    chain = [(i, lv) for i, lv in enumerate(profile.levels) if lv.kind != "cross"]
    for (i, parent), (_, child) in zip(chain, chain[1:], strict=False):
        if parent.bandwidth_bytes_per_s is None:
            raise NapkinError(f"level {parent.name} has no bandwidth, and {child.name} is fed from it",
                              file=source, field=f"levels[{i}].bandwidth_bytes_per_s",
                              hint="the transfers it feeds cannot be timed without one; "
                                   "see docs/hardware-profiles.md")


def _extended(data, path: Path, seen: tuple[Path, ...]):
    """A profile may name another with `extends:` and give only what differs (a calibrated profile
    adds its calibration); the base's aliases are not inherited."""
    if not isinstance(data, dict) or "extends" not in data:
        return data
    base_name = data["extends"]
    if not isinstance(base_name, str):
        raise NapkinError(f"extends: {base_name!r} is no profile name", file=str(path), field="extends",
                          hint="name a shipped profile, such as h200")
    base_path = resources.shipped("hardware").get(base_name) or path.parent / base_name
    if not base_path.is_file():
        raise NapkinError(f"extends: no profile {base_name!r}", file=str(path), field="extends",
                          hint="name a shipped profile by its file name, such as h200")
    if base_path.resolve() in seen or base_path.resolve() == path.resolve():
        raise NapkinError(f"extends: {base_name} extends itself", file=str(path), field="extends")
    base = _extended(load_file(base_path), base_path, (*seen, path.resolve()))
    if not isinstance(base, dict):
        raise NapkinError(f"extends: {base_name} is not a profile", file=str(path), field="extends")
    own = {k: v for k, v in data.items() if k != "extends"}
    return {**{k: v for k, v in base.items() if k != "aliases"}, **own}


def shipped_profiles() -> dict[str, Profile]:
    return {stem: load_profile_file(p) for stem, p in resources.shipped("hardware").items()}


@cache
def _calibrated_siblings() -> dict[str, Path]:
    """Shipped profile name -> the shipped profile file that extends it with a calibration."""
    out: dict[str, Path] = {}
    for path in resources.shipped("hardware").values():
        data = load_file(path)
        if isinstance(data, dict) and isinstance(data.get("extends"), str) and "calibration" in data:
            out.setdefault(data["extends"], path)
    return out


def hopper_fit(profile: Profile) -> tuple[HopperFit, str] | None:
    """The Hopper kernel's fitted model for `profile`, with the name of the profile that carries it: the
    profile's own, or, for a shipped datasheet profile, that of the shipped calibrated profile that
    extends it (h100-calibrated for h100-sxm5), since the fit describes the GPU, not the file. None
    where no one measured the kernel on this GPU."""
    return _kernel_fit(profile, "hopper")


def contraction_fit(profile: Profile) -> tuple[ContractionFit, str] | None:
    """The Hopper contraction kernel's fitted model for `profile`, and the profile that carries it: its
    own, or its shipped calibrated sibling's (as hopper_fit). None where no one measured that kernel."""
    return _kernel_fit(profile, "contraction")


def chain_fit(profile: Profile) -> tuple[ContractionFit, str] | None:
    """The Hopper chain kernel's fitted model for `profile` (napkin calibrate --kernel chain), and the
    profile that carries it (as hopper_fit). None where no one swept the chain kernel on this GPU."""
    return _kernel_fit(profile, "chain")


def _kernel_fit(profile: Profile, name: str):
    """The calibration's fit `name` (hopper, contraction) of `profile`, else of its calibrated sibling."""
    own = getattr(profile.calibration, name) if profile.calibration else None
    if own is not None:
        return own, profile.name
    calibrated = calibrated_sibling(profile)
    fit = getattr(calibrated.calibration, name) if calibrated is not None and calibrated.calibration else None
    return (fit, calibrated.name) if fit is not None else None


def portable_model(profile: Profile) -> Profile:
    """The profile whose parameters model the portable (Triton) kernels on `profile`'s GPU: for a
    shipped datasheet profile, the shipped calibrated profile that extends it where that one holds the
    portable kernels' fit (h100-calibrated for h100-sxm5: `--gpu h100` ranks and predicts with what was
    measured, the datasheet's idealised bound beside it); else `profile` itself."""
    sibling = calibrated_sibling(profile)
    return sibling if sibling is not None and sibling.portable_fitted else profile


def calibrated_sibling(profile: Profile) -> Profile | None:
    """For a shipped datasheet profile, the shipped calibrated profile that extends it (h100-calibrated
    for h100-sxm5); None for any other profile."""
    sibling = _calibrated_siblings().get(profile.name)
    if sibling is None or profile.calibration is not None or not _is_shipped(profile):
        return None
    return _shipped(sibling)


def _is_shipped(profile: Profile) -> bool:
    """Whether `profile` is the shipped profile of its name, figure for figure: a user's file may reuse
    the name, and a profile built in code from a shipped one (other limits, the same name) is another GPU."""
    path = resources.shipped("hardware").get(profile.name)
    return path is not None and profile.model_dump() == _shipped(path).model_dump()


@cache
def _shipped(path: Path) -> Profile:
    return load_profile_file(path)
