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
    module whole, in the order the workers' collection gives (pytest_collection_modifyitems: longest
    first), not reordered by how many tests a module has (xdist's --loadscope-reorder, its default,
    which sent a module of one 50 s test last, to run while the other worker sat idle)."""
    asked = any(a == "-d" or a.startswith("--dist") for a in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not asked:
        config.option.dist = "loadfile"
        if not any(a.endswith("loadscope-reorder") for a in config.invocation_params.args):
            config.option.loadscopereorder = False


SLOW_S = 5.0      # a test marked slow without its seconds
QUICK_S = 0.3     # a test not marked slow


def seconds(item) -> float:
    """About how long a test takes on a 2-core machine: `@pytest.mark.slow(seconds=N)`'s N, a few seconds
    for a test marked slow without one, a fraction of a second for any other."""
    mark = item.get_closest_marker("slow")
    return QUICK_S if mark is None else float(mark.kwargs.get("seconds", SLOW_S))


def pytest_collection_modifyitems(config, items):
    """On a worker of `pytest -n N`: the modules that take longest first (by `seconds`), so that the
    workers take the longest work first and end on short modules, neither waiting long for the other
    (the longest-processing-time-first rule: a module is sent whole, as --dist loadfile sends it)."""
    if hasattr(config, "workerinput"):
        cost = Counter()
        for item in items:
            cost[item.path] += seconds(item)
        items.sort(key=lambda item: -cost[item.path])
