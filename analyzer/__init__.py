"""napkin: the method of "FlashAttention on a Napkin" as software.

Pipeline (one way): diagram file -> Diagram (pydantic) -> compiled graph -> per-level costs (sympy)
-> optimum and multi-level model -> prediction -> report.
"""

__version__ = "0.1.0"
