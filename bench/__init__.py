"""napkin's GPU benchmarks: scripts run as `python bench/<script>.py`, and the helpers they share
(bench.common; bench.attention_report is attention_h200.py's report). Each script puts the checkout's
root on sys.path and imports `from bench.common import ...`; bench/README.md says what each measures."""
