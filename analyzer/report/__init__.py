"""Text reports of the results (rich tables, LaTeX, markdown): napkin analyze, sweep, configure and
calibrate's report."""
