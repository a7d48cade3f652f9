"""napkin calibrate: fit the model's stated assumptions to measured times (docs/validation.md)."""
