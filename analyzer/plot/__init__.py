"""Plots of the model (matplotlib, headless): transfers H*(M), roofline, warpgroup schedule, diagram.

Every module builds a matplotlib Figure without pyplot (no display needed) and `save` writes it in
the format the output file's extension names.
"""
