"""Settings every test runs under, read before any test module imports numpy or torch."""

import os
from collections import Counter

# One BLAS (OpenBLAS, MKL) and OpenMP thread: a fit then adds its floating-point sums in one order on a
# given machine, and BLAS threads do not spin beside the tests on a machine of two cores. The libraries
# read these when they load: pytest and its plugins import neither numpy nor torch before this file.
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_threads] = "1"

# napkin analyze keeps its results on disk (analyzer.common.cache): off for the suite, so that a test
# computes what it checks and writes nothing outside its own folders; tests/unit/test_cache.py turns
# it on in a folder of its own
os.environ["NAPKIN_CACHE"] = "off"


def pytest_configure(config):
    """`pytest -n N` sends tests to its workers one at a time (pytest-xdist's --dist load), so the tests of
    a module that share something costly (a module fixture, a cached calibration, generated kernels)
    would each make it on both workers. Where no --dist is asked for, loadfile instead: a worker takes a
    module whole."""
    asked = any(a == "-d" or a.startswith("--dist") for a in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not asked:
        config.option.dist = "loadfile"


def pytest_collection_modifyitems(config, items):
    """On a worker of `pytest -n N`: the modules with the most tests marked slow first, so that the
    workers take the longest work first and end on short modules, neither waiting long for the other."""
    if hasattr(config, "workerinput"):
        slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
        items.sort(key=lambda item: -slow[item.path])
