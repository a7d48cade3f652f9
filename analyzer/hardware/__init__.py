"""GPU profiles (hardware/*.yaml): the schema of the numbers a prediction takes (profile), the one
way to load one, `load(name_or_path)` (files), and which file a name or alias names (names).

The names below are imported on first use (PEP 562), so that `analyzer.hardware.names` can be used
without importing the profile schema and sympy with it.
"""

from __future__ import annotations

from analyzer.common.lazy import lazy_exports

_HOME = {
    "aliases": "names", "profile_path": "names",
    "calibrated_sibling": "files", "chain_fit": "files", "contraction_fit": "files", "hopper_fit": "files",
    "load": "files", "load_profile_file": "files", "portable_model": "files", "shipped_profiles": "files",
    "SCALARS": "profile", "Calibration": "profile", "ContractionFit": "profile", "Estimate": "profile", "HopperFit": "profile",
    "HeldOut": "profile", "held_out_fit": "profile",
    "LevelProfile": "profile", "Profile": "profile", "RegisterRelation": "profile",
}

__all__ = sorted(_HOME)


__getattr__ = lazy_exports(__name__, _HOME, globals())
