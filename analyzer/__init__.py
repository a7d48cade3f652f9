"""napkin: the method of "FlashAttention on a Napkin" as software.

Pipeline (one way): diagram file -> Diagram (pydantic) -> compiled graph -> per-level costs (sympy)
-> optimum and multi-level model -> prediction -> report.
"""

from analyzer.common.version import __version__

__all__ = ["__version__"]
