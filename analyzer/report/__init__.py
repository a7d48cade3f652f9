"""Text reports of the results (rich tables, LaTeX, markdown): napkin analyze, sweep, configure and
calibrate's report; and napkin report's self-contained HTML page (page, html)."""
