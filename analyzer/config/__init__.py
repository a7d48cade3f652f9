"""Hardware-aware configuration (paper Section 5, Section 6, Appendix B).

    kernel schedule -> loop form (expand) -> variables below SMEM (lowering) -> configuration and
    maximum tables (tables) -> compute analysis (compute) -> throughput (throughput) -> warpgroup
    overlap (overlap); `configure` runs the pipeline for a diagram, a GPU and a configuration.
"""
