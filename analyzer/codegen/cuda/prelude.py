"""The fixed C++ of every .cu file: the prelude (prelude.cuh, package data beside this module: headers,
error codes, numeric types, the mma, ldmatrix and cp.async wrappers, swizzle, reductions, elementwise
functions, device queries) and what follows it before the kernels (helpers and the error strings)."""

from __future__ import annotations

from importlib import resources

from analyzer.codegen.escape import cpp_str

# The prelude, as a .cu file carries it
PRELUDE = resources.files(__package__).joinpath("prelude.cuh").read_text(encoding="utf-8").strip("\n")

ERRORS = {   # launcher return codes besides cudaError_t (negative; NAPKIN_ERR_* in the prelude)
    -1: "bf16 kernels need tensor cores of compute capability 8.0 or newer (sm_80+); on this GPU "
        "only fp16 runs",
    -2: "the kernel needs more shared memory a block than this GPU allows",
    -3: "no compiled variant of the kernel for these sizes (a whole axis is larger than the "
        "kernel's extents)",
    -4: "dtype code must be 0 (fp16) or 1 (bf16)",
    -5: "too many blocks for one launch, or an axis longer than 2**31 - 1",
}


def file_code() -> list[str]:
    """What the .cu defines after the prelude besides the kernels: helpers and the error strings."""
    out = ["static inline __host__ __device__ int64_t napkin_min64(int64_t a, int64_t b) "
           "{ return a < b ? a : b; }",
           "static inline __host__ __device__ int64_t napkin_max64(int64_t a, int64_t b) "
           "{ return a < b ? b : a; }",
           "static constexpr __host__ __device__ int napkin_round8(int n) { return (n + 7) / 8 * 8; }",
           "",
           'extern "C" const char* napkin_error_string(int code)',
           "{",
           "  switch (code) {"]
    out += [f"    case {code}: return {cpp_str(text)};" for code, text in ERRORS.items()]
    out += ["    default: return cudaGetErrorString((cudaError_t)code);", "  }", "}"]
    return out


__all__ = ["PRELUDE", "ERRORS", "file_code"]
