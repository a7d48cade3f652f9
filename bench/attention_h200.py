"""Benchmark napkin's generated attention kernels on one NVIDIA H200, in one run.

    python bench/attention_h200.py [--quick] [--only triton|cuda] [--skip-flex] [--budget-s 520] [--out DIR]

What is measured, all in the same process on the same GPU:

1. Environment: GPU name, SM count, torch/triton/CUDA/cuDNN/nvcc versions, clocks read with
   nvidia-smi (read only; no clock or GPU setting is changed).
2. Ceilings: device-to-device copy bandwidth of a 1 GiB buffer (read + write bytes counted) and
   torch.matmul TFLOP/s at 8192^3 in fp16 and bf16 on random data.
3. Correctness of every generated kernel (`analyzer.codegen.generator`, Triton and CUDA backends)
   before timing: relative error ||out - ref|| / ||ref|| < 1e-2 against a float64 reference computed
   on the GPU from the upcast inputs, fresh random inputs per check, N(0, 1) inputs and the
   FlashAttention-3 outlier inputs N(0, 1) + N(0, 100) * Bernoulli(0.001), sequence lengths
   1, 17, 1000, 4096, head dims 64, 128 (256 when the kernel's CONFIG lists it, else it must raise
   ValueError), fp16 and bf16, non-contiguous inputs, grouped-query heads, sigmoid attention, and
   matmul at shapes that are not multiples of the blocks.
4. Timing on the FlashAttention-3 forward grid: 16k tokens (batch = 16384 // seqlen), hidden 2048
   (hdim 64: 32 heads, hdim 128: 16 heads), seqlen 512 ... 16k, causal and not, fp16 and bf16.
   Ours (Triton and CUDA, from the "attention" or "causal_attention" diagram) against torch SDPA
   forced to FLASH_ATTENTION and to CUDNN_ATTENTION, and torch.compile'd FlexAttention (compiled
   per shape, timed while the budget allows). Each number is the median of
   triton.testing.do_bench(fn, warmup=25, rep=100) on random normal inputs; TFLOP/s counts
   4 * batch * heads * seqlen^2 * hdim FLOPs, halved when causal. Beside ours: napkin's predicted
   time (`analyzer.config.predict`) and predicted time / measured time.
5. Targets per row: hdim 128, seqlen >= 4096, fp16, not causal: ours >= 1.5x SDPA flash and
   >= 0.9x SDPA cuDNN; every other row: ours >= SDPA flash. For the best of our backends and for
   each backend alone.

Writes attention_h200.json (everything) and attention_h200.md (the report) into --out (default:
$OUT if set, else bench/results/), and prints the report; the timing table is at the end.
A kernel that fails is recorded in its cell and the run goes on; work that does not fit the
budget is skipped and listed.

Why one module: it is the whole round in the order it runs on the GPU (environment, ceilings,
generation, correctness, timing), every phase sharing one Run that the budget's watchdog can cut
short; what the rounds share is bench/common.py, and this round's report is bench/attention_report.py.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))     # napkin and bench.common from this checkout, installed or not

from bench.attention_report import (  # noqa: E402
    DTYPES,
    OTHER_DIAGRAMS,
    OURS,
    TIMED_DIAGRAMS,
    TOLERANCE,
    Budget,
    CheckCase,
    Shape,
    attention_check_cases,
    evaluate_targets,
    fa3_grid,
    matmul_check_cases,
    priority_order,
    render_markdown,
    supported_head_dims,
    tflops,
)
from bench.common import (  # noqa: E402
    REP_MS,
    WARMUP_MS,
    command,
    import_file,
    log,
    nvcc_version,
    reference_attention,
    save_results,
)

DEFAULT_GPU = "h200-calibrated"   # napkin's profile for generate() and predict(): fitted to sweep_h200
DEVICE = "cuda"
COPY_BYTES = 1 << 30
MATMUL_N = 8192
RESERVE_S = 20.0                  # kept for writing the report
CHECKS_SHARE = 0.45               # checks of the timed kernels stop at this share of the budget
FLEX_FIRST_ESTIMATE_S = 45.0      # first Flex compile in a process, until one is observed
OVERRUN_S = 45.0                  # hard stop: at budget + this, write what is there and exit 1
NAME = "attention_h200"           # attention_h200.json and attention_h200.md in --out


# ------------------------------------------------------------------------------------ plumbing

def fail(message: str) -> None:
    """One line on stderr, exit code 1."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def short_error(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GpuLost(RuntimeError):
    """The CUDA context no longer works (e.g. after an illegal memory access)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    default_out = os.environ.get("OUT") or str(BENCH_DIR / "results")
    parser = argparse.ArgumentParser(
        description="Correctness and speed of napkin's generated attention kernels on an H200, "
                    "against torch SDPA (flash, cuDNN) and FlexAttention, with napkin's predictions.")
    parser.add_argument("--out", default=default_out,
                        help="output folder for attention_h200.json and .md (default: $OUT if set, "
                             "else bench/results/)")
    parser.add_argument("--budget-s", type=float, default=520.0,
                        help="wall-clock budget in seconds; optional work past it is skipped and "
                             "recorded (default: 520)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: hdim 128, seqlen 4096, fp16, causal and not, few checks")
    parser.add_argument("--only", choices=OURS, help="run only this backend of ours")
    parser.add_argument("--skip-flex", action="store_true", help="do not time FlexAttention")
    parser.add_argument("--seed", type=int, default=0, help="base random seed (default: 0)")
    parser.add_argument("--gpu", default=DEFAULT_GPU,
                        help="napkin's GPU profile (name or .yaml file) that configures the generated "
                             f"kernels and predicts their time (default: {DEFAULT_GPU}, fitted by "
                             "napkin calibrate to bench/results/sweep_h200.json; h200: the datasheet)")
    return parser.parse_args(argv)


# --------------------------------------------------------------------------------- predictions

def _plain(value: Any) -> Any:
    """JSON-friendly scalars out of sympy/numpy values."""
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    try:
        number = float(value)
        return int(number) if number.is_integer() else number
    except (TypeError, ValueError):
        return str(value)


def predict_shape(gpu: str, diagram: str, dtype: str, batch: int, heads: int, seqlen: int,
                  hdim: int) -> dict:
    """napkin's prediction for one timing row, as a plain dict (runs in a worker process)."""
    started = time.perf_counter()
    try:
        from analyzer.config.predict import predict
        p = predict(diagram, gpu=gpu, dtype=dtype, batch=batch, heads=heads, kv_heads=heads,
                    seqlen_q=seqlen, seqlen_k=seqlen, head_dim=hdim)
        tiles = {str(k): _plain(v) for k, v in dict(p.tiles or {}).items()}
        out = {"time_s": float(p.time_s), "flops": float(p.flops), "bound": str(p.bound),
               "tiles": tiles}
    except Exception as exc:  # noqa: BLE001 - a failed prediction is a result
        out = {"error": short_error(exc)}
    out["compute_s"] = round(time.perf_counter() - started, 3)
    return out


class Predictor:
    """Predictions computed in worker processes while the GPU works; inline if that fails."""

    def __init__(self, gpu: str, shapes: list[Shape], workers: int = 4) -> None:
        self._gpu = gpu
        self._futures: dict[Shape, Any] = {}
        self._pool: ProcessPoolExecutor | None = None
        try:
            self._pool = ProcessPoolExecutor(max_workers=workers,
                                             mp_context=multiprocessing.get_context("spawn"))
            for shape in shapes:
                self._futures[shape] = self._pool.submit(predict_shape, *self._args(shape))
        except Exception as exc:  # noqa: BLE001
            log(f"  predictions run inline ({short_error(exc)})")

    def _args(self, shape: Shape) -> tuple:
        return self._gpu, shape.diagram, shape.dtype, shape.batch, shape.heads, shape.seqlen, shape.hdim

    def get(self, shape: Shape, timeout_s: float) -> dict:
        future = self._futures.get(shape)
        if future is not None:
            try:
                result = future.result(timeout=max(1.0, timeout_s))
            except Exception:  # noqa: BLE001 - fall back to computing it here
                result = None
            if result is not None:
                return self._with_tflops(shape, result)
        return self._with_tflops(shape, predict_shape(*self._args(shape)))

    @staticmethod
    def _with_tflops(shape: Shape, result: dict) -> dict:
        if result.get("time_s"):
            result["tflops"] = shape.flops / result["time_s"] / 1e12   # the grid's FLOP count
        return result

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


# ----------------------------------------------------------------------------------- the run

METHOD = {
    "timer": f"triton.testing.do_bench(fn, warmup={WARMUP_MS}, rep={REP_MS}, return_mode='median'), ms",
    "inputs": "torch.randn in the benchmarked dtype, SDPA layout (batch, heads, seqlen, head_dim)",
    "grid": "FlashAttention-3: batch = 16384 // seqlen, heads = 2048 // hdim",
    "flops": "4 * batch * heads * seqlen^2 * hdim, halved when causal",
    "correctness": f"||out - ref|| / ||ref|| < {TOLERANCE:g}, ref in float64 on the GPU; timed cells "
                   "also compare ours with SDPA's output at the timed shape",
    "prediction_ratio": "predicted time / measured time",
    "copy_bandwidth": "dst.copy_(src) of 1 GiB, read + write bytes counted",
}


@dataclass
class Kernel:
    """One generated kernel: (diagram, backend, dtype) and its imported module or the error."""

    diagram: str
    backend: str
    dtype: str
    module: Any = None
    configs: list = field(default_factory=list)
    head_dims: set = field(default_factory=set)
    path: str | None = None
    error: str | None = None
    source: str | None = field(default=None, repr=False)
    failures: int = 0             # failed numerical checks (wrong or non-finite output, exceptions)
    contract_failures: int = 0    # failed API checks (an expected ValueError not raised)

    @property
    def correct(self) -> bool:
        return self.module is not None and self.failures == 0

    def record(self) -> dict:
        config = getattr(self.module, "CONFIG", None)
        return {"diagram": self.diagram, "backend": self.backend, "dtype": self.dtype,
                "path": self.path, "error": self.error, "configs": self.configs,
                "module_config": config, "head_dims": sorted(self.head_dims)}


class Run:
    """State of one benchmark run: the libraries, the budget, the results and where they go."""

    def __init__(self, args: argparse.Namespace, budget: Budget, torch: Any, triton: Any,
                 api: Any) -> None:
        self.args, self.budget, self.torch, self.triton, self.api = args, budget, torch, triton, api
        self.backends = [args.only] if args.only else list(OURS)
        self.out_dir = Path(args.out).expanduser().resolve()
        self.work_dir = Path(tempfile.mkdtemp(prefix="napkin_bench_"))
        self.kernels: dict[tuple[str, str, str], Kernel] = {}
        self.results: dict[str, Any] = {
            "meta": {"command": command("attention_h200.py", None),
                     "args": {k: v for k, v in vars(args).items() if k != "out"}, "backends": self.backends, "gpu_profile": args.gpu,
                     "started_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                     "budget_s": args.budget_s, "work_dir": str(self.work_dir),
                     "method": METHOD},
            "environment": {}, "ceilings": {}, "kernels": [], "checks": [], "timings": [],
            "targets": {}, "skipped": self.budget.skipped, "fatal": None}
        self._seed = args.seed

    def dtype(self, name: str) -> Any:
        return {"fp16": self.torch.float16, "bf16": self.torch.bfloat16}[name]

    def next_seed(self) -> int:
        self._seed += 1
        self.torch.manual_seed(self._seed)
        return self._seed

    def bench_ms(self, fn: Callable[[], Any]) -> float:
        return float(self.triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS,
                                                  return_mode="median"))

    def ensure_gpu(self, context: str) -> None:
        """Raise GpuLost when the CUDA context stopped working after an error in context."""
        try:
            self.torch.cuda.synchronize()
            self.torch.ones(1, device=DEVICE).add_(1).item()
        except Exception as exc:  # noqa: BLE001
            raise GpuLost(f"after {context}: {short_error(exc)}") from exc

    def save(self) -> None:
        meta = self.results["meta"]
        meta["elapsed_s"] = round(self.budget.elapsed(), 1)
        meta["finished_utc"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        self.results["kernels"] = [k.record() for k in self.kernels.values()]
        self.results["targets"] = evaluate_targets(self.results["timings"], self.backends)
        save_results(self.out_dir, NAME, self.results, render_markdown(self.results))




# -------------------------------------------------------------------------------- environment

NVIDIA_SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem",
                     "clocks.max.mem", "clocks.applications.graphics", "power.limit",
                     "temperature.gpu", "persistence_mode")


def _smi_query(fields: tuple[str, ...], uuid: str | None) -> list[str] | None:
    """One read-only `nvidia-smi --query-gpu` of the GPU with this uuid (else the first GPU)."""
    base = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    for cmd in ([[*base, "-i", uuid]] if uuid else []) + [base]:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            return [v.strip() for v in proc.stdout.strip().splitlines()[0].split(",")]
    return None


def nvidia_smi(uuid: str | None) -> dict[str, str] | None:
    """Clocks, power limit and driver as nvidia-smi reports them; None when unavailable.
    Fields this driver does not know are left out (queried one by one if the batch fails)."""
    if shutil.which("nvidia-smi") is None:
        return None
    values = _smi_query(NVIDIA_SMI_FIELDS, uuid)
    if values is not None:
        return dict(zip(NVIDIA_SMI_FIELDS, values))
    single = {f: _smi_query((f,), uuid) for f in NVIDIA_SMI_FIELDS}
    return {f: v[0] for f, v in single.items() if v} or None


def gpu_uuid(props: Any) -> str | None:
    uuid = getattr(props, "uuid", None)
    if not uuid:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def environment(run: Run) -> dict[str, Any]:
    torch = run.torch
    props = torch.cuda.get_device_properties(0)
    uuid = gpu_uuid(props)
    return {"gpu": props.name, "sm_count": props.multi_processor_count,
            "memory_gib": props.total_memory / 2**30, "compute_capability": f"{props.major}.{props.minor}",
            "uuid": uuid, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "triton": run.triton.__version__,
            "python": sys.version.split()[0], "nvcc": nvcc_version(), "nvidia_smi": nvidia_smi(uuid),
            "is_h200": "H200" in props.name}


# ---------------------------------------------------------------------------------- ceilings

def copy_bandwidth(run: Run) -> dict[str, Any]:
    torch = run.torch
    src = torch.randn(COPY_BYTES // 4, device=DEVICE, dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = run.bench_ms(lambda: dst.copy_(src))
    moved = 2 * COPY_BYTES
    return {"bytes": COPY_BYTES, "bytes_moved": moved, "ms": ms, "tb_per_s": moved / (ms * 1e-3) / 1e12}


def matmul_ceiling(run: Run, dtype: str) -> dict[str, Any]:
    torch = run.torch
    a = torch.randn(MATMUL_N, MATMUL_N, device=DEVICE, dtype=run.dtype(dtype))
    b = torch.randn(MATMUL_N, MATMUL_N, device=DEVICE, dtype=run.dtype(dtype))
    c = torch.empty_like(a)
    ms = run.bench_ms(lambda: torch.matmul(a, b, out=c))
    return {"n": MATMUL_N, "ms": ms, "tflops": tflops(2.0 * MATMUL_N**3, ms)}


def measure_ceilings(run: Run) -> None:
    jobs: dict[str, Callable[[], dict]] = {"copy": lambda: copy_bandwidth(run)}
    for dt in DTYPES:
        jobs[f"matmul_{dt}"] = lambda dt=dt: matmul_ceiling(run, dt)
    for name, job in jobs.items():
        result = guarded(run, job, f"ceiling {name}")
        run.results["ceilings"][name] = result
        log(f"  {name}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in result.items()))
        run.torch.cuda.empty_cache()


# ------------------------------------------------------------------------------- generation

def generate_kernel(run: Run, diagram: str, backend: str, dtype: str) -> Kernel:
    """Generate, write and import one kernel; a module with the same source is reused."""
    kernel = Kernel(diagram, backend, dtype)
    try:
        g = run.api.generate(diagram, gpu=run.args.gpu, backend=backend, dtype=dtype)
        kernel.configs = list(g.configs or [])
        kernel.source = g.source
        twin = next((k for k in run.kernels.values() if k.module is not None and k.diagram == diagram
                     and k.backend == backend and k.source == g.source), None)
        if twin is not None:
            kernel.module, kernel.path = twin.module, twin.path
        else:
            suffix = ".cu" if backend == "cuda" else ".py"
            target = run.work_dir / f"{diagram}_{backend}_{dtype}{suffix}"
            g.write(target)
            module_path = target.with_suffix(".py")
            kernel.path = str(target)
            kernel.module = import_file(module_path, f"napkin_bench_{diagram}_{backend}_{dtype}")
        entry = "matmul" if diagram == "matmul" else "attention"
        if not callable(getattr(kernel.module, entry, None)):
            raise TypeError(f"generated module has no {entry}() function")
        kernel.head_dims = supported_head_dims(kernel.configs, getattr(kernel.module, "CONFIG", None),
                                               getattr(kernel.module, "HEAD_DIMS", None))
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        kernel.module, kernel.error = None, short_error(exc)
    return kernel


def kernel_for(run: Run, diagram: str, backend: str, dtype: str) -> Kernel:
    key = (diagram, backend, dtype)
    if key not in run.kernels:
        run.kernels[key] = generate_kernel(run, diagram, backend, dtype)
        kernel = run.kernels[key]
        state = kernel.error or ("ok" if diagram == "matmul" else f"ok, head dims {sorted(kernel.head_dims)}")
        log(f"  generated {diagram} {backend} {dtype}: {state}")
    return run.kernels[key]


# ------------------------------------------------------------------------------- correctness

def make_qkv(run: Run, case: CheckCase) -> tuple[Any, Any, Any]:
    """Fresh random q, k, v for a check case; transposed layout gives non-contiguous tensors."""
    torch = run.torch
    run.next_seed()

    def tensor(heads: int) -> Any:
        shape = (case.batch, case.seqlen, heads, case.hdim) if case.layout == "transposed" else \
            (case.batch, heads, case.seqlen, case.hdim)
        x = torch.randn(shape, device=DEVICE, dtype=torch.float32)
        if case.dist == "outlier":
            spikes = torch.bernoulli(torch.full(shape, 0.001, device=DEVICE))
            x = x + 10.0 * torch.randn(shape, device=DEVICE) * spikes
        x = x.to(run.dtype(case.dtype))
        return x.transpose(1, 2) if case.layout == "transposed" else x

    return tensor(case.heads), tensor(case.kv_heads), tensor(case.kv_heads)


def compare(torch: Any, out: Any, ref: Any) -> dict[str, Any]:
    if tuple(out.shape) != tuple(ref.shape):
        return {"passed": False, "error": f"shape {tuple(out.shape)} != {tuple(ref.shape)}"}
    finite = bool(torch.isfinite(out).all().item())
    rel = float(((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item())
    return {"rel_err": rel, "finite": finite, "out_dtype": str(out.dtype).replace("torch.", ""),
            "passed": finite and rel < TOLERANCE}


def run_attention_case(run: Run, kernel: Kernel, case: CheckCase) -> dict[str, Any]:
    torch = run.torch
    q, k, v = make_qkv(run, case)
    if case.expect_error:
        try:
            kernel.module.attention(q, k, v, causal=case.causal)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            ok = type(exc).__name__ == case.expect_error
            return {"passed": ok, "raised": short_error(exc)}
        return {"passed": False, "error": f"expected {case.expect_error}, nothing raised"}
    out = kernel.module.attention(q, k, v, causal=case.causal)
    torch.cuda.synchronize()
    ref = reference_attention(torch, q, k, v, case.causal, kernel.diagram == "sigmoid_attention")
    return compare(torch, out, ref)


def run_matmul_case(run: Run, kernel: Kernel, m: int, n: int, k: int) -> dict[str, Any]:
    torch = run.torch
    run.next_seed()
    a = torch.randn(m, k, device=DEVICE, dtype=run.dtype(kernel.dtype))
    b = torch.randn(k, n, device=DEVICE, dtype=run.dtype(kernel.dtype))
    out = kernel.module.matmul(a, b)
    torch.cuda.synchronize()
    return compare(torch, out, a.double() @ b.double())


def record_check(run: Run, kernel: Kernel, case_name: str, body: Callable[[], dict],
                 numeric: bool = True) -> None:
    """Run one check and append it; numeric=False for API contract checks (expected exceptions),
    whose failure is reported but does not disqualify the kernel's timings."""
    entry: dict[str, Any] = {"diagram": kernel.diagram, "backend": kernel.backend,
                             "dtype": kernel.dtype, "case": case_name}
    started = time.perf_counter()
    try:
        entry.update(body())
    except Exception as exc:  # noqa: BLE001 - a failing kernel is a result
        entry.update({"passed": False, "error": short_error(exc)})
    entry["seconds"] = round(time.perf_counter() - started, 3)
    run.results["checks"].append(entry)
    if not entry["passed"]:
        kernel.failures += numeric
        kernel.contract_failures += not numeric
        if kernel.failures + kernel.contract_failures <= 3:
            log(f"  FAIL {kernel.diagram} {kernel.backend} {kernel.dtype} {case_name}: "
                f"{entry.get('error') or entry.get('raised') or entry.get('rel_err')}")
        run.ensure_gpu(f"check {kernel.diagram} {kernel.backend} {case_name}")


def generation_failed(run: Run, kernel: Kernel) -> None:
    run.results["checks"].append({"diagram": kernel.diagram, "backend": kernel.backend,
                                  "dtype": kernel.dtype, "case": f"generate {kernel.dtype}",
                                  "passed": False, "error": kernel.error})


def check_diagram(run: Run, diagram: str, backend: str, may_run: Callable[[], bool]) -> None:
    """All checks of one diagram on one backend, both dtypes."""
    kernels = {dt: kernel_for(run, diagram, backend, dt) for dt in DTYPES}
    for kernel in kernels.values():
        if kernel.module is None:
            generation_failed(run, kernel)
    if diagram == "matmul":
        cases = [((m, n, k), dt) for m, n, k, dt in matmul_check_cases(run.args.quick)]
    else:
        dims = set().union(*(k.head_dims for k in kernels.values()))
        cases = [(c, c.dtype) for c in attention_check_cases(diagram, quick=run.args.quick, head_dims=dims)]
    for case, dt in cases:
        kernel = kernels[dt]
        if kernel.module is None:
            continue
        name = f"M={case[0]} N={case[1]} K={case[2]} {dt}" if diagram == "matmul" else case.name
        if not may_run():
            run.budget.skip(f"check {diagram} {backend} {name}")
            run.results["checks"].append({"diagram": diagram, "backend": backend, "dtype": dt,
                                          "case": name, "skipped": "over budget", "passed": None})
            continue
        if diagram == "matmul":
            record_check(run, kernel, name, lambda c=case, k=kernel: run_matmul_case(run, k, *c))
        else:
            record_check(run, kernel, name, lambda c=case, k=kernel: run_attention_case(run, k, c),
                         numeric=case.expect_error is None)
    run.torch.cuda.empty_cache()
    mine = [c for c in run.results["checks"] if c["diagram"] == diagram and c["backend"] == backend]
    log(f"  {diagram} {backend}: {sum(c['passed'] is True for c in mine)} checks passed, "
        f"{sum(c['passed'] is False for c in mine)} failed, {sum(c['passed'] is None for c in mine)} skipped")


def core_checks(run: Run) -> None:
    """The timed kernels on every backend, then the other triton diagrams and matmul."""
    plan = [(d, b) for b in run.backends for d in TIMED_DIAGRAMS]
    if not run.args.quick and "triton" in run.backends:
        plan += [(d, "triton") for d in (*OTHER_DIAGRAMS, "matmul")]
    elif run.args.quick and "triton" in run.backends:
        plan.append(("matmul", "triton"))
    may_run = lambda: run.budget.before(CHECKS_SHARE) and run.budget.allows(RESERVE_S)
    for diagram, backend in plan:
        check_diagram(run, diagram, backend, may_run)
        run.save()


def optional_checks(run: Run) -> None:
    """The other diagrams on the CUDA backend, when the budget leaves room."""
    if run.args.quick or "cuda" not in run.backends:
        return
    for diagram in OTHER_DIAGRAMS:
        check_diagram(run, diagram, "cuda", lambda: run.budget.allows(RESERVE_S + 90))
        run.save()


# ------------------------------------------------------------------------------------ timing

def rel_diff(torch: Any, out: Any, ref: Any) -> float:
    return float(((out.float() - ref.float()).norm() / ref.float().norm()).item())


def measure(run: Run, fn: Callable[[], Any], flops: float) -> dict[str, Any]:
    ms = run.bench_ms(fn)
    return {"ms": ms, "tflops": tflops(flops, ms)}


def guarded(run: Run, body: Callable[[], dict], context: str) -> dict[str, Any]:
    """Run one measurement; an exception becomes its error (unless the GPU context is gone)."""
    try:
        return body()
    except Exception as exc:  # noqa: BLE001
        run.ensure_gpu(f"{context} ({short_error(exc, 200)})")
        return {"error": short_error(exc)}


def sdpa_cell(run: Run, backend_name: str, q: Any, k: Any, v: Any, shape: Shape) -> tuple[dict, Any]:
    torch = run.torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)
    fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=shape.causal)
    box: dict[str, Any] = {}

    def body() -> dict:
        with sdpa_kernel(backend):
            box["out"] = fn()
            return measure(run, fn, shape.flops)

    return guarded(run, body, f"SDPA {backend_name} {shape.label}"), box.get("out")


def ours_cell(run: Run, backend: str, q: Any, k: Any, v: Any, shape: Shape, peer_out: Any) -> dict:
    kernel = kernel_for(run, shape.diagram, backend, shape.dtype)
    if kernel.module is None:
        return {"error": f"generate: {kernel.error}"}
    fn = lambda: kernel.module.attention(q, k, v, causal=shape.causal)

    def body() -> dict:
        out = fn()
        diff = None if peer_out is None else rel_diff(run.torch, out, peer_out)
        del out
        cell = measure(run, fn, shape.flops)
        cell["rel_err_vs_sdpa"] = diff
        cell["checks_passed"] = kernel.correct
        cell["correct"] = kernel.correct and (diff is None or diff < TOLERANCE)
        return cell

    return guarded(run, body, f"{backend} {shape.label}")


def row_inputs(run: Run, shape: Shape) -> tuple[Any, Any, Any]:
    run.next_seed()
    size = (shape.batch, shape.heads, shape.seqlen, shape.hdim)
    return tuple(run.torch.randn(size, device=DEVICE, dtype=run.dtype(shape.dtype)) for _ in range(3))


def time_row(run: Run, shape: Shape, predictor: Predictor) -> dict[str, Any]:
    row = shape.as_dict()
    cells: dict[str, Any] = {}
    q, k, v = row_inputs(run, shape)
    cells["sdpa_flash"], flash_out = sdpa_cell(run, "FLASH_ATTENTION", q, k, v, shape)
    cells["sdpa_cudnn"], cudnn_out = sdpa_cell(run, "CUDNN_ATTENTION", q, k, v, shape)
    peer_out = flash_out if flash_out is not None else cudnn_out
    for backend in run.backends:
        cells[backend] = ours_cell(run, backend, q, k, v, shape, peer_out)
    del q, k, v, flash_out, cudnn_out, peer_out
    row["cells"] = cells
    row["prediction"] = predictor.get(shape, timeout_s=min(60.0, run.budget.left() - RESERVE_S))
    predicted_s = row["prediction"].get("time_s")
    for backend in run.backends:
        if predicted_s and "ms" in cells[backend]:
            cells[backend]["predicted_over_measured"] = predicted_s / (cells[backend]["ms"] * 1e-3)
    return row


def skipped_row(run: Run, shape: Shape, reason: str) -> dict[str, Any]:
    row = shape.as_dict()
    run.budget.skip(f"timing {shape.label}", reason)
    row["skipped"] = reason
    row["cells"] = {name: {"skipped": reason} for name in (*run.backends, "sdpa_flash", "sdpa_cudnn")}
    return row


def show(row: dict) -> str:
    parts = []
    for name, cell in row["cells"].items():
        if "tflops" in cell:
            parts.append(f"{name} {cell['tflops']:.0f}{'' if cell.get('correct', True) else ' WRONG'}")
        elif "error" in cell:
            parts.append(f"{name} error")
    pred = row.get("prediction") or {}
    if "tflops" in pred:
        parts.append(f"predicted {pred['tflops']:.0f}")
    return ", ".join(parts)


def core_timing(run: Run, shapes: list[Shape], predictor: Predictor) -> None:
    for shape in priority_order(shapes):
        if not run.budget.allows(RESERVE_S):
            row = skipped_row(run, shape, "over budget")
        else:
            row = time_row(run, shape, predictor)
            log(f"  {shape.label}: {show(row)}")
        run.results["timings"].append(row)
        run.torch.cuda.empty_cache()
        run.save()


def flex_timing(run: Run, shapes: list[Shape]) -> None:
    """FlexAttention compiled per shape, fp16 and hdim 128 first, while the budget allows."""
    if run.args.skip_flex:
        return
    rows = {(r["hdim"], r["seqlen"], r["causal"], r["dtype"]): r for r in run.results["timings"]}
    estimate = FLEX_FIRST_ESTIMATE_S
    for shape in priority_order(shapes):
        row = rows[(shape.hdim, shape.seqlen, shape.causal, shape.dtype)]
        if row.get("skipped"):
            row["cells"]["flex"] = {"skipped": row["skipped"]}
            continue
        if not run.budget.allows(RESERVE_S + estimate):
            row["cells"]["flex"] = run.budget.skip(f"flex {shape.label}")
            continue
        started = time.perf_counter()
        row["cells"]["flex"] = guarded(run, partial(flex_cell, run, shape), f"flex {shape.label}")
        run.torch.cuda.empty_cache()
        took = time.perf_counter() - started
        estimate = max(10.0, took)
        log(f"  flex {shape.label}: {show({'cells': {'flex': row['cells']['flex']}})} "
            f"(compiled and timed in {took:.1f} s)")
        run.save()


def flex_cell(run: Run, shape: Shape) -> dict[str, Any]:
    torch = run.torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    q, k, v = row_inputs(run, shape)
    torch._dynamo.reset()         # one compile per shape, no recompile limits
    compiled = torch.compile(flex_attention, dynamic=False)
    mask = None
    if shape.causal:
        mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, shape.seqlen, shape.seqlen,
                                 device=DEVICE)
    fn = lambda: compiled(q, k, v, block_mask=mask)
    fn()
    return measure(run, fn, shape.flops)


# -------------------------------------------------------------------------------------- main

def load_torch() -> tuple[Any, Any]:
    """torch and triton, or a one-line error when there is no CUDA device."""
    try:
        import torch
    except ImportError as exc:
        fail(f"torch is not importable ({exc})")
    with warnings.catch_warnings():           # keep the error to one line
        warnings.simplefilter("ignore")
        available = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if not available:
        fail("no CUDA device: this benchmark needs an NVIDIA GPU (an H200)")
    try:
        import triton
        import triton.testing  # noqa: F401  (do_bench)
    except ImportError as exc:
        fail(f"triton is not importable ({exc})")
    return torch, triton


def load_api() -> Any:
    """napkin's generate() (analyzer.codegen) and predict() (analyzer.config.predict), or a one-line
    error."""
    try:
        from analyzer.codegen import generate
        from analyzer.config.predict import predict
    except Exception as exc:  # noqa: BLE001
        fail(f"napkin's kernel generator is missing: cannot import it from {REPO_ROOT} "
             f"({short_error(exc, 200)})")
    return SimpleNamespace(generate=generate, predict=predict)


def check_profile(gpu: str) -> None:
    """The --gpu profile loads, or a one-line error before any GPU work."""
    from analyzer import hardware
    from analyzer.common.errors import NapkinError
    try:
        hardware.load(gpu)
    except NapkinError as exc:
        fail(str(exc))


def start_watchdog(run: Run) -> threading.Timer:
    """At budget + OVERRUN_S (a hung kernel or compile), write the results so far and exit 1."""

    def stop() -> None:
        run.results["fatal"] = (f"stopped {OVERRUN_S:.0f} s past the {run.args.budget_s:.0f} s budget "
                                "(a kernel, compile or reference hung or ran long); results are partial")
        try:
            run.save()
            print(render_markdown(run.results), flush=True)
        finally:
            print(f"error: {run.results['fatal']}", file=sys.stderr, flush=True)
            os._exit(1)

    timer = threading.Timer(max(1.0, run.budget.left() + OVERRUN_S), stop)
    timer.daemon = True
    timer.start()
    return timer


def phase(run: Run, title: str) -> None:
    log(f"[{run.budget.elapsed():6.1f} s] {title}")


def execute(run: Run) -> None:
    shapes = fa3_grid(run.args.quick)
    phase(run, "predictions (worker processes)")
    predictor = Predictor(run.args.gpu, priority_order(shapes))
    try:
        phase(run, "environment")
        env = run.results["environment"] = environment(run)
        log(f"  {env['gpu']}, {env['sm_count']} SMs" + ("" if env["is_h200"] else
                                                        " (not an H200: targets were set for one)"))
        phase(run, "ceilings")
        measure_ceilings(run)
        run.save()
        phase(run, "correctness")
        core_checks(run)
        phase(run, f"timing {len(shapes)} rows")
        core_timing(run, shapes, predictor)
        phase(run, "more correctness (cuda)")
        optional_checks(run)
        phase(run, "FlexAttention")
        flex_timing(run, shapes)
        run.results["environment"]["nvidia_smi_end"] = nvidia_smi(run.results["environment"].get("uuid"))
    finally:
        predictor.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget = Budget(args.budget_s)          # counts from here: imports are part of the run
    check_profile(args.gpu)
    torch, triton = load_torch()
    api = load_api()
    run = Run(args, budget, torch, triton, api)
    log(f"napkin attention benchmark: backends {', '.join(run.backends)}, budget {args.budget_s:.0f} s, "
        f"out {run.out_dir}")
    watchdog = start_watchdog(run)
    code = 0
    try:
        execute(run)
    except GpuLost as exc:
        run.results["fatal"] = f"CUDA context lost, remaining work not run: {exc}"
        code = 1
    except Exception as exc:  # noqa: BLE001 - write what was measured before giving up
        run.results["fatal"] = f"{short_error(exc)}\n{traceback.format_exc()}"
        code = 1
    watchdog.cancel()
    run.save()
    print(flush=True)
    print(render_markdown(run.results), flush=True)
    log(f"wrote {run.out_dir / (NAME + '.json')} and {run.out_dir / (NAME + '.md')}")
    return code


if __name__ == "__main__":
    sys.exit(main())
