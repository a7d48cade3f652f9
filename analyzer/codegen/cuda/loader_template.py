# ruff: noqa: F401 - `math` is for the generated wrapper's scale factors, which follow this text
"""The fixed text of every CUDA loader `napkin kernel --backend cuda` writes beside its .cu file.

Package data: analyzer.codegen.cuda.loader reads it as text, never imports it, and copies its sections
into each loader in order: `imports` as it is, `torch` inside a try whose ImportError says how to
install it (analyzer.codegen.pymodule.guarded_imports), `signatures` replaced by the diagram's
launchers (the only generated part of this text), `runtime` as it is; the diagram's configurations,
launchers and wrapper follow. Each section starts at a line `# napkin-loader: <name>`; what precedes
the first is this note, which the loaders do not carry. It is a real module so that linters and
readers see it whole.
"""

# napkin-loader: imports
import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import threading
from pathlib import Path

# napkin-loader: torch
import torch

# napkin-loader: signatures
_SIGNATURES: dict[str, tuple[int, int, int]] = {}  # launcher -> (pointers, int64 sizes and strides, float scales)
# napkin-loader: runtime
_LOCK = threading.Lock()
_CU = Path(__file__).resolve().with_suffix(".cu")
_DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}
_LIBS = {}                 # compute capability -> the loaded library
_CURRENT = [None]          # the device the library's runtime was last set to


def _nvcc():
    """nvcc: $NAPKIN_NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin, PATH, /usr/local/cuda/bin."""
    candidates = [os.environ.get("NAPKIN_NVCC")]
    candidates += [os.path.join(os.environ[v], "bin", "nvcc") for v in ("CUDA_HOME", "CUDA_PATH")
                   if os.environ.get(v)]
    candidates += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise RuntimeError("nvcc (the CUDA compiler) was not found; it compiles " + str(_CU) + " on first "
                       "use. Put it on PATH or set NAPKIN_NVCC or CUDA_HOME")


def _cache_dirs():
    """Where compiled libraries live: $NAPKIN_CUDA_CACHE, next to this file, ~/.cache/napkin."""
    if os.environ.get("NAPKIN_CUDA_CACHE"):
        yield Path(os.environ["NAPKIN_CUDA_CACHE"])
    yield _CU.parent / "__napkin_cuda__"
    yield Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "napkin"


def _compile(arch):
    """The library for compute capability `arch` (e.g. "90"), compiled once per source hash."""
    if not _CU.is_file():
        raise RuntimeError(f"{_CU} is missing: the CUDA source is written next to this loader "
                           "(Generated.write)")
    source = _CU.read_bytes()
    # the key skips the header comment: files that differ only there (fp16 and bf16) share a library
    lines = source.splitlines(keepends=True)
    body = b"".join(lines[next((i for i, x in enumerate(lines) if not x.startswith(b"//")), 0):])
    nvcc = _nvcc()
    flags = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
             "-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    digest = hashlib.sha256(body + " ".join([nvcc, *flags]).encode()).hexdigest()[:24]
    name = f"napkin-sm{arch}-{digest}.so"
    for folder in _cache_dirs():
        if (folder / name).is_file():
            return folder / name
    problems = []
    for folder in _cache_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.touch()
        except OSError as exc:
            problems.append(f"{folder}: {exc}")
            continue
        proc = subprocess.run([nvcc, *flags, "-o", str(tmp), str(_CU)], capture_output=True, text=True)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"nvcc failed to compile {_CU} for sm_{arch}:\n"
                               + (proc.stderr or proc.stdout)[-6000:])
        os.replace(tmp, folder / name)
        return folder / name
    raise RuntimeError("no writable folder for the compiled kernels: " + "; ".join(problems)
                       + " (set NAPKIN_CUDA_CACHE)")


def _library(device):
    """The compiled kernels for `device` (a CUDA torch.device), compiled with nvcc on first use."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    arch = f"{major}{minor}"
    lib = _LIBS.get(arch)
    if lib is None:
        with _LOCK:
            lib = _LIBS.get(arch)
            if lib is None:
                lib = ctypes.CDLL(str(_compile(arch)))
                lib.napkin_error_string.restype = ctypes.c_char_p
                lib.napkin_error_string.argtypes = [ctypes.c_int]
                lib.napkin_set_device.restype = ctypes.c_int
                lib.napkin_set_device.argtypes = [ctypes.c_int]
                for fn, (n_ptr, n_int, n_float) in _SIGNATURES.items():
                    f = getattr(lib, fn)
                    f.restype = ctypes.c_int
                    f.argtypes = ([ctypes.c_void_p] * n_ptr + [ctypes.c_int64] * n_int
                                  + [ctypes.c_float] * n_float + [ctypes.c_int, ctypes.c_void_p])
                _LIBS[arch] = lib
    if _CURRENT[0] != index:
        _check(lib, lib.napkin_set_device(index), "cudaSetDevice")
        _CURRENT[0] = index
    return lib


def _check(lib, code, what):
    if code != 0:
        message = lib.napkin_error_string(code).decode(errors="replace")
        raise RuntimeError(f"CUDA kernel {what} failed: {message} (code {code})")


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream
