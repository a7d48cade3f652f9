"""napkin's version, as generated files and reports name it."""

__version__ = "0.1.0"
