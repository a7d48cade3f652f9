"""What the benchmarks under bench/ share: the generated kernels (written, imported and kept per
diagram), the configuration a napkin sweep row gives a kernel, compile workers, the timer, the GPU
state sampled beside each timing, the candidates of a recording that are timed again, and writing the
results.

Every script imports it one way, `from bench.common import ...`, after putting the checkout's root on
sys.path (so napkin need not be installed). A benchmark times a configuration by passing it to the
generated wrapper, `module.attention(q, k, v, config={"flash": {...}})` (docs/kernels.md, "A
configuration per call"); no module global is changed. torch, triton and analyzer are imported where
they are used, so that `--help` and the scripts' one-line refusals need none of them.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from analyzer.codegen.files import (
    import_file,  # the bench scripts' loader of a generated module
)

ROOT = Path(__file__).resolve().parent.parent
GPU = "h200"                                      # the profile the timed kernels are generated with
DTYPE = "fp16"
CAUSAL = {"attention": False, "causal_attention": True}     # the attention diagrams timed: causal?
WARMUP_MS, REP_MS = 25, 100                       # triton.testing.do_bench
TOLERANCE = 1e-2                                  # ||out - ref|| / ||ref|| against the reference
FP8_TOLERANCE = 8e-2    # e4m3: 2^-3/sqrt(12) = 3.6 % RMS a rounding, three reach the output: 6.2 %, bounded by 8 %


# ----------------------------------------------------------------------------------- plumbing

def log(message: str) -> None:
    print(message, flush=True)


def without_out(argv: list[str]) -> list[str]:
    """The arguments that shape the measurement: where the results were written is not one."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            out.append(a)
    return out


def command(script: str, argv: list[str] | None) -> str:
    """The command a results file records: `python bench/<script>` and its arguments but --out."""
    given = argv if argv is not None else sys.argv[1:]
    return (f"python bench/{script} " + " ".join(without_out(given))).strip()


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def save_results(out: Path, name: str, doc: Any, markdown: str) -> None:
    """`<name>.json` (the whole record) and `<name>.md` (the report) in `out`, each rewritten whole: a
    script saves after every step, so a run cut short keeps what it measured."""
    write_json(out / f"{name}.json", doc)
    (out / f"{name}.md").write_text(markdown)


# -------------------------------------------------------------------------- generated kernels



@dataclass(frozen=True)
class Loaded:
    """A generated Triton module, imported from `path`; `names`: per kernel, each partition symbol's
    key in a configuration (g_q -> TILE_Q, s_x -> BLOCK_X)."""

    module: Any
    path: Path
    names: dict[str, dict[str, str]]

    def configuration(self, kernel: str, row: Any) -> dict[str, int]:
        """The configuration of `kernel` that a napkin sweep row describes (tiles, warps, stages), as a
        call's config= takes it: the keys of the module's CONFIG_KEYS, a tile the row leaves out 1."""
        tiles = {**row.tiles, **row.woven}
        out = {key: int(tiles.get(symbol, 1)) for symbol, key in self.names[kernel].items()}
        return {**out, "num_warps": int(row.num_warps), "num_stages": int(row.num_stages)}


def written_module(g: Any, tmp: Path, name: str) -> Any:
    """Generated file `g` (analyzer.codegen.generate's) written into `tmp` as `name`.py and imported."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"{name}.py"
    g.write(path)
    return import_file(path, name)


def load_kernel(diagram: str, tmp: Path, gpu: str = GPU, dtype: str = DTYPE) -> Loaded:
    """Generate the Triton module of `diagram`, write it into `tmp` and import it."""
    from analyzer.codegen import generate
    from analyzer.codegen.triton import config_names
    g = generate(diagram, gpu, backend="triton", dtype=dtype)
    module = written_module(g, tmp, f"sweep_{diagram}")
    return Loaded(module, tmp / f"sweep_{diagram}.py", {k.plan.name: config_names(g, k) for k in g.kernels})


class Kernels:
    """The generated modules of one run, by diagram: each generated and imported once, into `tmp`."""

    def __init__(self, tmp: Path, gpu: str = GPU) -> None:
        self.tmp = tmp
        self.gpu = gpu
        self._loaded: dict[str, Loaded] = {}

    def __call__(self, diagram: str) -> Loaded:
        if diagram not in self._loaded:
            self._loaded[diagram] = load_kernel(diagram, self.tmp, self.gpu)
        return self._loaded[diagram]


def launched(module: Any, kernel: str, key: Any, size: dict[str, int]) -> dict[str, int]:
    """The configuration the wrapper launches for `kernel` without config= at a call's sizes: its CONFIGS
    entry (`key`: the head dim, or None), or that entry's by-size choice there."""
    entry = module.CONFIGS[kernel][key]
    return dict(module._sized(entry, size) if "by_size" in entry else entry)


def launched_by(module: Any, call: Callable[[], Any]) -> dict[str, Any]:
    """The configuration the module launches by itself for `call` (its by-size table's), seen as the call
    makes it."""
    seen, original = [], module._sized
    module._sized = lambda entry, size: seen.append(original(entry, size)) or seen[-1]
    try:
        call()
    finally:
        module._sized = original
    return dict(seen[-1])


# ----------------------------------------------------------------------------- compile workers

@dataclass(frozen=True)
class Compile:
    """One configuration to compile in a worker: the module's file and name, the kernel and its
    configuration, and the call that launches it (family "attention" or "matmul")."""

    path: str
    name: str
    kernel: str
    config: dict[str, int]
    family: str
    head_dim: int | None = None
    causal: bool = False
    # attention's (batch, query heads, key heads, query length, key length) to compile at: Triton
    # specialises integer arguments (equal to 1, divisible by 16), so a configuration compiled at one
    # shape may compile again at another
    shape: tuple[int, int, int, int, int] = (1, 2, 2, 512, 512)


def warm(job: Compile) -> dict[str, Any]:
    """Compile one configuration in a worker: run it once on a small input (fills Triton's cache).
    Returns what the compiler allotted (registers per thread, spilled bytes, SMEM) or the error."""
    import torch
    module = import_file(Path(job.path), job.name)
    config = {job.kernel: job.config}
    try:
        if job.family == "attention":
            batch, heads_q, heads_kv, seq_q, seq_k = job.shape
            q = torch.randn(batch, heads_q, seq_q, job.head_dim, device="cuda", dtype=torch.float16)
            k, v = (torch.randn(batch, heads_kv, seq_k, job.head_dim, device="cuda", dtype=torch.float16)
                    for _ in range(2))
            module.attention(q, k, v, causal=job.causal, config=config)
        else:
            a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
            module.matmul(a, a, config=config)
        torch.cuda.synchronize()
        return compiled_resources(module)
    except Exception as exc:  # noqa: BLE001 - a configuration that fails is data too
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def compiled_resources(module: Any) -> dict[str, Any]:
    """Registers per thread, spilled bytes and SMEM bytes of the kernels this process compiled from
    `module` (the largest of each, if several)."""
    from triton.runtime.jit import JITFunction
    out: dict[str, Any] = {}
    for fn in vars(module).values():
        if not isinstance(fn, JITFunction):
            continue
        for cache in getattr(fn, "device_caches", {}).values():
            kernels = cache[0] if isinstance(cache, tuple) else cache
            for compiled in getattr(kernels, "values", lambda: ())():
                try:
                    compiled._init_handles()
                    found = {"registers": int(compiled.n_regs), "spills": int(compiled.n_spills),
                             "shared_bytes": int(compiled.metadata.shared)}
                except Exception:  # noqa: BLE001 - an older or newer Triton: record nothing
                    continue
                out = {k: max(v, out.get(k, 0)) for k, v in found.items()}
    return out


def precompile(jobs: list[Compile], workers: int) -> dict[int, dict[str, Any]]:
    """Per job (by index): the compiler's resources, or {"error": ...}; nothing with one worker (the
    timing process then compiles as it goes). Identical jobs compile once."""
    if not jobs or workers <= 1:
        return {}
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    began = time.time()
    unique = {json.dumps(asdict(job), sort_keys=True, default=str): job for job in jobs}
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {key: pool.submit(warm, job) for key, job in unique.items()}
        done = {key: f.result() for key, f in futures.items()}
    log(f"  compiled {len(unique)} configurations in {time.time() - began:.0f} s with {workers} workers")
    return {i: done[json.dumps(asdict(job), sort_keys=True, default=str)] for i, job in enumerate(jobs)}


def resources(compiled: dict[int, dict[str, Any]], index: int) -> dict[str, Any]:
    return {k: v for k, v in compiled.get(index, {}).items() if k != "error"}


# --------------------------------------------------------------------------------------- timer

def timed(triton: Any, fn: Callable[[], Any], graph: bool = False, sampler: Sampler | None = None,
          rep_ms: float = REP_MS) -> dict[str, float]:
    """Median, 20th and 80th percentile seconds. graph: time replays of a captured CUDA graph, so
    that a kernel shorter than its Python launch is timed, not the launch. sampler: also the means of
    the SM clock, power and temperature sampled while it ran. rep_ms: the time each repetition runs
    (do_bench_cudagraph replays its graph ten times)."""
    t0 = time.monotonic()
    if graph:
        median, p20, p80 = triton.testing.do_bench_cudagraph(fn, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    else:
        median, p20, p80 = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=rep_ms,
                                                   quantiles=[0.5, 0.2, 0.8])
    state = sampler.window(t0, time.monotonic()) if sampler else {}
    return {"time_s": median * 1e-3, "time_s_p20": p20 * 1e-3, "time_s_p80": p80 * 1e-3, **state}


def timer_name(graph: bool) -> str:
    return "cudagraph" if graph else "do_bench"


def timer_text(attention_graph: bool, rep_ms: float = REP_MS) -> str:
    graph = f"triton.testing.do_bench_cudagraph(fn, rep={rep_ms:g})"
    plain = f"triton.testing.do_bench(fn, warmup={WARMUP_MS}, rep={rep_ms:g})"
    return (f"attention: {graph if attention_graph else plain}; matmul: {graph} (kernels shorter than "
            "their Python launch); median, 20th and 80th percentiles")


def nccl_rank(torch: Any, dist: Any) -> int:
    """This torchrun process's rank, its GPU the one LOCAL_RANK names, NCCL's process group started."""
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    return dist.get_rank()


def slowest_median(torch: Any, dist: Any, group: Any, run: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """Seconds of `run` (a collective, a ring) on the ranks of `group`: CUDA events around each call after a
    barrier, `warmup` calls left out, the median of `repeats`, the slowest rank's (torch.distributed)."""
    times = []
    for i in range(warmup + repeats):
        dist.barrier(group)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        run()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(begin.elapsed_time(end) * 1e-3)
    median = torch.tensor(sorted(times)[repeats // 2], device="cuda")
    dist.all_reduce(median, op=dist.ReduceOp.MAX, group=group)
    return float(median)


def rel_err(torch: Any, out: Any, ref: Any) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).norm() / ref.norm())


def nvcc_version() -> str | None:
    if shutil.which("nvcc") is None:
        return None
    try:
        out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=15,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    release = [line for line in out.splitlines() if "release" in line]
    return release[-1].split("release")[-1].strip() if release else out.strip()[-80:] or None


def attention_inputs(torch: Any, batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_k: int, d: int,
                     dtype: Any, strided: bool, outlier: bool, seed: int, e: int | None = None) -> tuple:
    """q, k, v of a check on the GPU: N(0, 1) in `dtype`; `strided`, (batch, seqlen, heads, dim) views
    transposed to (batch, heads, seqlen, dim); `outlier`, one value in a thousand 10x larger; `e`, v's
    own head dim (MLA)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def make(heads, seq, dim):
        shape = (batch, seq, heads, dim) if strided else (batch, heads, seq, dim)
        x = torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen)
        if outlier:
            x += 10 * torch.randn(shape, device="cuda", generator=gen) * (torch.rand(shape, device="cuda",
                                                                                     generator=gen) < 1e-3)
        x = x.to(dtype)
        return x.transpose(1, 2) if strided else x

    return make(heads_q, seq_q, d), make(heads_kv, seq_k, d), make(heads_kv, seq_k, e or d)


def reference_attention(torch: Any, q: Any, k: Any, v: Any, causal: bool, sigmoid: bool,
                        softcap: float | None = None, window: int | None = None, slopes: Any = None,
                        bias: Any = None, sinks: Any = None,
                        band: tuple[int | None, int | None] | None = None) -> Any:
    """float64 attention on the GPU: softmax(q k^T / sqrt(d)) v, or sigmoid(...) v; `softcap`: the scores
    bounded to softcap tanh(s / softcap) first (Gemma 2); `window` (with `causal`): query i sees keys
    i - window + 1 .. i only; `slopes` (broadcast to (batch, heads)): ALiBi's bias - m |i - j| added to
    the scaled scores; `bias`: a tensor added to the scaled scores (SDPA's float attn_mask); `sinks`
    (broadcast to (batch, heads)): a logit a head in the softmax's denominator that weighs no value
    (gpt-oss's attention sinks), one more key column dropped after the softmax; `band` (before, after):
    query i sees keys i - before .. i + after only (None: every key on that side)."""
    q, k, v = q.double(), k.double(), v.double()
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if slopes is not None:
        i = torch.arange(q.shape[2], device=q.device, dtype=torch.float64)
        j = torch.arange(k.shape[2], device=q.device, dtype=torch.float64)
        m = slopes.double().broadcast_to(q.shape[:2])
        scores = scores - m[:, :, None, None] * (i[:, None] - j[None, :]).abs()
    if bias is not None:
        scores = scores + bias.double()
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if causal:   # top-left aligned, as SDPA's is_causal
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        if window is not None:
            keep = keep.triu(-(window - 1))
        scores = scores.masked_fill(~keep, float("-inf"))
    if band is not None:     # top-left aligned too
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device)
        keep = keep if band[0] is None else keep.triu(-band[0])
        keep = keep if band[1] is None else keep.tril(band[1])
        scores = scores.masked_fill(~keep, float("-inf"))
    if sinks is not None and not sigmoid:
        column = sinks.double().broadcast_to(q.shape[:2])[:, :, None, None].expand(*scores.shape[:-1], 1)
        probs = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.sigmoid(scores) if sigmoid else torch.softmax(scores, dim=-1)
    return probs @ v


def causal_bias(torch: Any, bias: Any, causal: bool) -> Any:
    """The bias with the causal mask folded in as -inf, for SDPA (which takes a mask or is_causal)."""
    if not causal:
        return bias
    keep = torch.ones(bias.shape[-2:], dtype=torch.bool, device=bias.device).tril()
    return bias.masked_fill(~keep, float("-inf"))


def sdpa_bias(q: Any, k: Any, v: Any, bias: Any) -> Any:
    """SDPA's cuDNN backend with a float attn_mask (a bias, any causal mask already folded in)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    bias = bias if bias.dim() == 4 else bias.reshape(*(1,) * (4 - bias.dim()), *bias.shape)   # cuDNN takes 4-D
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def fa4_softcap(cap: float | None, window: int | None, causal: bool = True) -> Callable[..., Any] | None:
    """FlashAttention-4's CuTe forward (FlashAttention-3's design on sm90) with a softcap and a sliding
    window (query i sees keys i - window + 1 .. i), on (batch, heads, seqlen, dim) tensors; None where it
    is not installed."""
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError:
        return None

    def call(q, k, v):
        out, _ = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal,
                                 window_size=(None, None) if window is None else (window - 1, 0),
                                 softcap=cap or 0.0)
        return out.transpose(1, 2)
    return call


def hopper_predicted(profile: Any, g: Any, seq: int, d: int, dtype: str, instances: int) -> tuple[str, float]:
    """The configuration generated Hopper module `g` launches for `instances` (batch x heads) attention
    problems of `seq` queries and keys at head dim `d` (the cell its _sized reads), and the model's seconds
    for it (its chain of scores and value head dim, as the module's own)."""
    from analyzer.config.hopper import HopperParams, predicted_time
    from analyzer.config.hopper_table import chosen_at, table_point
    params, chain, e, causal = HopperParams.of(profile), g.hopper.scores, g.hopper.value_dim, g.roles.causal
    length, alike, per_key = table_point(seq, seq, instances)
    chosen = chosen_at(profile, d, dtype, causal=causal, length=length, instances=alike, ratio=per_key,
                       params=params, scores=chain, value_dim=e)
    return chosen.label(), predicted_time(profile, chosen, d, dtype, seq_q=seq, seq_k=seq, instances=instances,
                                          causal=causal, params=params, scores=chain, value_dim=e)


def ratio(a: float | None, b: float | None) -> str:
    """a / b to two decimals for a report, or '-' where either is missing."""
    return f"{a / b:.2f}" if a and b else "-"


def environment() -> dict[str, Any]:
    import torch
    import triton
    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "triton": triton.__version__,
            "python": sys.version.split()[0]}


# ---------------------------------------------------------------------------------- GPU state

FIELDS = ("sm_clock_mhz", "power_w", "temperature_c")
QUERY = "clocks.sm,power.draw,temperature.gpu"


class Sampler:
    """The GPU's SM clock, power draw and temperature, sampled in the background while kernels are timed:

        with Sampler() as s:
            t0 = time.monotonic(); ...time a kernel...; t1 = time.monotonic()
            state = s.window(t0, t1)      # {"sm_clock_mhz": ..., "power_w": ..., "temperature_c": ...}

    NVML (pynvml, nvidia-ml-py) where importable, else `nvidia-smi --query-gpu` once per period. A sample
    is stamped when it is read, so a window's means carry up to one period of lag."""

    def __init__(self, period_s: float = 0.05, device: int = 0) -> None:
        self.period_s, self.device = period_s, device
        self.samples: list[tuple[float, tuple[float, ...]]] = []
        self.source = "none"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._read = self._reader()

    def _reader(self) -> Callable[[], tuple[float, ...]] | None:
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.device)
            self.source = "NVML"
            return lambda: (float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                            float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)))
        except Exception:  # noqa: BLE001 - no NVML bindings: fall back to nvidia-smi
            pass
        if shutil.which("nvidia-smi"):
            self.source = "nvidia-smi"
            query = ["nvidia-smi", f"--id={self.device}", f"--query-gpu={QUERY}",
                     "--format=csv,noheader,nounits"]

            def read() -> tuple[float, ...]:
                line = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout
                return tuple(float(x) for x in line.strip().split(","))
            return read
        return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), self._read()))
            except Exception:  # noqa: BLE001 - one failed read loses one sample
                pass
            self._stop.wait(self.period_s)

    def __enter__(self) -> Sampler:
        if self._read is not None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def window(self, t0: float, t1: float) -> dict[str, float | None]:
        """Means of the samples read between t0 and t1 (monotonic seconds); None where none was."""
        inside = [v for t, v in self.samples if t0 <= t <= t1]
        return {f: (statistics.fmean(v[i] for v in inside) if inside else None)
                for i, f in enumerate(FIELDS)}


# ---------------------------------------------------------- a recording's candidates, timed again

def candidates(recording: Path, gpus: list[str], top: int) -> list[dict[str, Any]]:
    """Per problem size of a sweep recording: the raw records to time again (each profile's first
    choice, what the Triton kernel `napkin kernel` generates with the last profile launches there, and
    the `top` fastest measured), and which one each of those chose."""
    from analyzer import hardware
    from analyzer.calibrate.calibrate import KERNEL, first_choices, kernel_choices
    from analyzer.calibrate.record import load_recording
    from analyzer.calibrate.validate import shape_of
    rec = load_recording(recording)
    raw = json.loads(recording.read_text())["records"]
    ok = [(r, d) for r, d in zip(rec.records, raw, strict=True) if r.status == "ok"]
    choices = {g: first_choices([r for r, _ in ok], hardware.load(g))[0] for g in gpus}
    choices[KERNEL] = kernel_choices([r for r, _ in ok], hardware.load(gpus[-1]))
    sizes: dict[tuple, list] = {}
    for r, d in ok:
        sizes.setdefault(shape_of(r), []).append((r, d))
    out = []
    for shape, rows in sorted(sizes.items()):
        rows.sort(key=lambda rd: rd[0].time_s)
        by_key = {r.config_key: (r, d) for r, d in rows}
        chosen = {g: choices[g][shape] for g in choices}
        keys = list(dict.fromkeys([r.config_key for r, _ in rows[:top]]
                                  + [k for k in chosen.values() if k in by_key]))
        timer = rows[0][1].get("timer") or ("cudagraph" if shape[0] == "matmul" else "do_bench")
        out.append({"shape": list(shape), "sizes": rows[0][0].sizes, "timer": timer, "chosen": chosen,
                    "sweep_best": rows[0][0].config_key,
                    "candidates": [{"key": k, "config": by_key[k][1]["config"],
                                    "sweep_s": by_key[k][0].time_s} for k in keys]})
    return out


@dataclass(frozen=True)
class Problem:
    """One problem size of a recording, ready to time: the kernel whose configuration the candidates
    vary, the call on fixed inputs (config= given per candidate), its reference output, and whether
    the recording timed it by CUDA graph replays."""

    kernel: str
    call: Callable[..., Any]
    ref: Any
    graph: bool

    def launch(self, config: dict[str, int]) -> Callable[[], Any]:
        """The call that launches the kernel with `config`."""
        return partial(self.call, config={self.kernel: config})


def prepare(size: dict[str, Any], kernels: Kernels) -> Problem:
    """The inputs, the call and the reference output of one size of `candidates`."""
    import torch
    family, diagram, hdim, n = size["shape"]
    module = kernels(diagram).module
    if family == "attention":
        causal = CAUSAL[diagram]
        s = size["sizes"]
        q, k, v = (torch.randn(s["batch"], s["heads"], n, hdim, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return Problem("flash", partial(module.attention, q, k, v, causal=causal), ref,
                       size.get("timer") == "cudagraph")
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    return Problem("gemm", partial(module.matmul, a, b), torch.matmul(a, b), True)


def checked(size: dict[str, Any], problem: Problem) -> list[dict[str, Any]]:
    """The candidates that match the reference, each checked once (a failure is recorded on it)."""
    import torch
    live = []
    for c in size["candidates"]:
        try:
            c["rel_err"] = rel_err(torch, problem.launch(c["config"])(), problem.ref)
            if not c["rel_err"] < TOLERANCE:
                raise RuntimeError(f"relative error {c['rel_err']:.3g} against the reference")
            live.append(c)
        except Exception as exc:  # noqa: BLE001 - a configuration that fails is reported, not timed
            c["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return live


def rotations(live: list, rounds: int) -> Iterator[tuple[int, Any]]:
    """(round, candidate) in `rounds` rounds whose order rotates by one every round."""
    for r in range(rounds):
        for c in live[r % len(live):] + live[:r % len(live)]:
            yield r, c


def precompile_candidates(sizes: list[dict[str, Any]], kernels: Kernels, workers: int) -> None:
    """Warm Triton's cache with every candidate's kernel, in parallel, before anything is timed."""
    jobs = []
    for s in sizes:
        family, diagram, hdim, _ = s["shape"]
        loaded = kernels(diagram)
        kernel = "flash" if family == "attention" else "gemm"
        jobs += [Compile(str(loaded.path), loaded.module.__name__, kernel, c["config"], family,
                         hdim or None, CAUSAL.get(diagram, False)) for c in s["candidates"]]
    precompile(jobs, workers)
