"""GPU profiles (hardware/*.yaml): the schema of the numbers a prediction takes (profile), and the one
way to load one, `load(name_or_path)` (load)."""

from analyzer.hardware.files import (
                                       aliases,
                                       calibrated_sibling,
                                       hopper_fit,
                                       load,
                                       load_profile_file,
                                       profile_path,
                                       shipped_profiles,
)
from analyzer.hardware.profile import (
                                       SCALARS,
                                       Calibration,
                                       Estimate,
                                       HopperFit,
                                       LevelProfile,
                                       Profile,
                                       RegisterRelation,
)

__all__ = ["SCALARS", "Calibration", "Estimate", "HopperFit", "LevelProfile", "Profile", "RegisterRelation", "aliases", "calibrated_sibling", "hopper_fit",
           "load", "load_profile_file", "profile_path", "shipped_profiles"]
