"""Settings every test runs under, read before any test module imports numpy or torch."""

import os

# One BLAS (OpenBLAS, MKL) and OpenMP thread: a fit then adds its floating-point sums in one order on a
# given machine, and BLAS threads do not spin beside the tests on a machine of two cores. The libraries
# read these when they load: pytest and its plugins import neither numpy nor torch before this file.
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_threads] = "1"

# napkin analyze keeps its results on disk (analyzer.common.cache): off for the suite, so that a test
# computes what it checks and writes nothing outside its own folders; tests/unit/test_cache.py turns
# it on in a folder of its own
os.environ["NAPKIN_CACHE"] = "off"
