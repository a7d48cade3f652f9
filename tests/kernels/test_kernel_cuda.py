"""The CUDA backend of `napkin kernel` (analyzer.codegen.cuda): generation, nvcc compilation (every
diagram for sm_80, one for sm_75 and sm_90 at -O3), the header, determinism, unrenderable primitives,
and the Python loader on a CPU-only machine. Correctness on a GPU runs only where torch sees one (marked gpu)."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.codegen.cuda import common, variants
from analyzer.codegen.cuda import loader as cuda_loader
from analyzer.codegen.cuda.limits import CudaLimits
from analyzer.common.errors import NapkinError
from analyzer.hardware import Profile

ATTENTION = ("attention", "mha", "gqa", "causal_attention", "band_attention", "sigmoid_attention", "softcap_attention",
             "attention_unfused")
DIAGRAMS = (*ATTENTION, "matmul", "rmsnorm_matmul", "mla_attention", "sink_attention")
ARCHS = ("75", "80", "90")


def generated(name: str, dtype: str = "fp16"):
    """The CUDA file of a shipped diagram for the H200, made once a process (helpers_kernel's cache)."""
    return cached(name, "cuda", dtype)


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _body(source: str) -> str:
    """The source without its leading comment block (the header names the command and dtype)."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if not line.startswith("//"))
    return "\n".join(lines[start:])


# -- generation --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DIAGRAMS)
def test_generates_cu_and_loader(name):
    g = generated(name)
    assert g.backend == "cuda"
    assert set(g.extra) == {".py"}
    assert 'extern "C" int napkin_' in g.source
    assert "mma.sync.aligned.m16n8k16" in g.source and "m16n8k8" in g.source
    assert "cp.async.cg.shared.global" in g.source and "ldmatrix" in g.source
    for k in g.kernels:
        assert f"napkin_{name}_{k.plan.name}(" in g.source
    compile(g.extra[".py"], f"{name}_cuda.py", "exec")   # the loader is valid Python


@pytest.mark.parametrize("name", ["attention", "attention_unfused", "matmul"])
def test_header_names_diagram_and_configuration(name):
    g = generated(name)
    head = [line for line in g.source.splitlines() if line.startswith("//")]
    text = "\n".join(head)
    assert f"napkin kernel {name} --gpu h200 --backend cuda --dtype fp16" in text
    assert f"Diagram: diagrams/{name}.yaml" in text
    for k in g.kernels:
        assert f"Kernel {k.plan.name!r}" in text
        for c in k.choices.values():
            assert f"{c.num_warps} warps, {c.num_stages} stages" in text    # napkin's configuration
    assert re.search(r"//\s+CUDA .*rows = \d+ \(\d+ warps x (16|32)\)", text)   # and CUDA's
    assert "m16n8k16" in text and "sm_75" in text


def test_header_states_clamps():
    g = generated("attention")
    text = "\n".join(line for line in g.source.splitlines() if line.startswith("//"))
    for c in g.kernels[0].choices.values():
        if c.tiles["g_q"] > variants.MAX_ROWS:
            assert f"g_q {c.tiles['g_q']} -> {variants.MAX_ROWS}" in text
    assert "clamped:" in text
    smem = [int(x) for x in re.findall(r"(\d+) KB shared memory", text)]
    assert smem and max(smem) <= g.cuda_limits.smem_per_block // 1024


def test_configs_in_loader_are_cuda_and_napkin_ones(tmp_path):
    g = generated("attention")
    g.write(tmp_path / "attention_cuda.cu")
    m = _import(tmp_path / "attention_cuda.py", "napkin_test_attention_cuda_configs")
    assert m.CONFIG is m.CONFIGS
    flash = m.CONFIGS["flash"]
    assert set(flash) == set(g.kernels[0].choices) == set(m.HEAD_DIMS)
    for key, entry in flash.items():
        assert entry["rows"] % 16 == 0 and entry["rows"] <= variants.MAX_ROWS
        assert entry["smem_bytes"] <= g.cuda_limits.smem_per_block
        assert entry["napkin"]["num_warps"] == g.kernels[0].choices[key].num_warps


def test_deterministic():
    a = generate("causal_attention", "h200", backend="cuda")
    b = generate("causal_attention", "h200", backend="cuda")
    assert a.source == b.source and a.extra == b.extra


def test_fp16_and_bf16_files_share_kernels():
    """One file runs both element types (the dtype is a launch argument): only the header differs."""
    a, b = generated("attention", "fp16"), generated("attention", "bf16")
    assert "--dtype bf16" in b.source
    assert _body(a.source) == _body(b.source)


@pytest.mark.parametrize(("gpu", "kb"), [("h200", 227), ("t4", 64)])
def test_shared_memory_limit_is_the_profiles(gpu, kb):
    """A block's shared memory is held to what the GPU profile allows a block (h200: 227 KB opt-in,
    t4: 64 KB), not to one GPU's figure: the h200 file uses more than sm_86's 99 KB."""
    g = generate("mla_attention", gpu, backend="cuda")
    assert g.cuda_limits == CudaLimits.of(hardware.load(gpu))
    assert g.cuda_limits.smem_per_block == kb * 1024
    m = {}
    exec(compile(g.extra[".py"].split("CONFIGS = ", 1)[1].split("\nCONFIG = ", 1)[0].join(["CONFIGS = ", ""]),
                 "configs", "exec"), m)
    smem = [v["smem_bytes"] for entry in m["CONFIGS"]["flash"].values() for v in entry["variants"]]
    assert max(smem) <= kb * 1024
    if gpu == "h200":
        assert max(smem) > 99 * 1024


@pytest.mark.parametrize("gpu", ["h200", "a100", "t4"])
def test_variants_keep_two_blocks_an_sm_where_they_can(gpu):
    """The share of an SM's shared memory that keeps two blocks resident (less CUDA's reserve a block,
    the SM's capacity beyond a block's maximum) bounds every variant that fits it; h200: 228 KB an SM,
    227 KB a block, so 113 KB."""
    limits = CudaLimits.of(hardware.load(gpu))
    reserve = limits.smem_per_sm - limits.smem_per_block
    share = limits.smem_per_sm // 2 - reserve
    assert limits.smem_budgets[0] == min(share, limits.smem_per_block)
    if gpu == "h200":
        assert limits.smem_budgets == (113 * 1024, 227 * 1024)
    g = generate("attention", gpu, backend="cuda")
    m = {}
    exec(compile(g.extra[".py"].split("CONFIGS = ", 1)[1].split("\nCONFIG = ", 1)[0].join(["CONFIGS = ", ""]),
                 "configs", "exec"), m)
    smem = [v["smem_bytes"] for entry in m["CONFIGS"]["flash"].values() for v in entry.get("variants", [entry])]
    assert smem and max(smem) <= limits.smem_budgets[0]


def _profile(**threads):
    data = hardware.load("h200").model_dump()
    data["threads"].update(threads)
    return Profile.model_validate(data)


def test_threads_per_block_bound_the_rows():
    """A GPU with at most 128 threads a block (four warps) gets blocks of at most 64 rows (a warp per 16
    rows at most), and the header says why napkin's 128 rows were clamped."""
    g = generate("matmul", _profile(per_block_max=128), backend="cuda")
    header = "\n".join(line for line in g.source.splitlines() if line.startswith("//"))
    assert g.cuda_limits.threads_per_block == 128
    blocks = [(int(r), int(w)) for r, w in re.findall(r"rows = (\d+) \((\d+) warps", header)]
    assert blocks and all(r <= 64 and w * 32 <= 128 for r, w in blocks)
    assert "g_a 128 -> 64 (at most 64 rows a block)" in header


def test_warps_other_than_32_are_refused():
    with pytest.raises(NapkinError, match="warps of 64 threads"):
        CudaLimits.of(_profile(warp_size=64))


def test_prelude_and_loader_text_are_package_files():
    """The .cu's prelude and the loader's fixed text are files of the package (prelude.cuh,
    loader_template.py), copied as they are; the loader generates only the diagram's parts."""
    package = resources.files("analyzer.codegen.cuda")
    prelude = package.joinpath("prelude.cuh").read_text(encoding="utf-8")
    template = package.joinpath("loader_template.py").read_text(encoding="utf-8")
    g = generated("attention")
    assert prelude.strip("\n") in g.source
    for name in ("imports", "runtime"):
        assert cuda_loader.SECTIONS[name] in g.extra[".py"]
    assert "_SIGNATURES = {}" not in g.extra[".py"] and "napkin-loader:" not in g.extra[".py"]
    assert "ruff: noqa" not in g.extra[".py"]          # the template's own note stays behind
    assert {"_compile", "_library", "_LOCK", "torch"} <= set(cuda_loader.LOADER_GLOBALS)
    compile(template, "loader_template.py", "exec")


def test_unknown_primitive_is_named(monkeypatch):
    monkeypatch.setattr(common, "RENDERED", common.RENDERED - {"sigmoid"})
    with pytest.raises(NapkinError, match="'sigmoid'.*no CUDA renderer"):
        generate("sigmoid_attention", "h200", backend="cuda")


def test_write_gives_cu_and_importable_loader(tmp_path):
    g = generated("attention")
    written = g.write(tmp_path / "attention_cuda.cu")
    assert [p.name for p in written] == ["attention_cuda.cu", "attention_cuda.py"]
    m = _import(tmp_path / "attention_cuda.py", "napkin_test_attention_cuda")
    assert callable(m.attention) and isinstance(m.CONFIGS, dict)
    assert m._CU == (tmp_path / "attention_cuda.cu").resolve()


# -- the loader on a CPU-only machine ------------------------------------------------------------------

torch = pytest.importorskip("torch")

from helpers_kernel import generated as cached  # noqa: E402


@pytest.mark.parametrize("name", ATTENTION)
def test_loader_refuses_cpu_tensors(tmp_path, name):
    g = generated(name)
    g.write(tmp_path / f"{name}_cuda.cu")
    m = _import(tmp_path / f"{name}_cuda.py", f"napkin_test_{name}_cuda_cpu")
    heads_kv = 2 if name == "gqa" else 4
    q = torch.randn(1, 4, 8, 64, dtype=torch.float16)
    kv = torch.randn(1, heads_kv, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="CUDA GPU"):
        m.attention(q, kv, kv, causal=name == "causal_attention")
    # the same checks as the Triton module, before any launch
    with pytest.raises(TypeError, match="float16 or torch.bfloat16"):
        m.attention(q.float(), kv.float(), kv.float(), causal=name == "causal_attention")
    with pytest.raises(ValueError, match="causal"):
        m.attention(q, kv, kv, causal=name != "causal_attention")


def test_matmul_loader_refuses_cpu_tensors(tmp_path):
    generated("matmul").write(tmp_path / "matmul_cuda.cu")
    m = _import(tmp_path / "matmul_cuda.py", "napkin_test_matmul_cuda_cpu")
    a = torch.randn(8, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA GPU"):
        m.matmul(a, a.t().contiguous())


# -- nvcc -----------------------------------------------------------------------------------------------

NVCC = shutil.which("nvcc")


def _compile(path: Path, archs: tuple[str, ...] = ARCHS, *, ptx: bool = False,
             optimise: bool = True, device_only: bool = False) -> tuple[Path, int, str]:
    """nvcc on `path` for `archs`: to an object file, or with `ptx` (one architecture) only through the
    C++ front end and NVVM, which check the whole file, host code too, but not ptxas's assembly; with
    `device_only` (one architecture) to a cubin: the front end checks the whole file and NVVM and ptxas
    the device code, but the host compiler does not build the launchers (two fifths of the time).
    `optimise=False` runs NVVM and ptxas at -O0: the same C++, the same instructions and inline PTX
    checked, in a sixth of the time (mla_attention for sm_80: 11 s instead of 65 s), but not what -O3
    does to registers and SMEM."""
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    if ptx:
        output = ["-ptx", "-o", str(path.with_suffix(".ptx"))]
    elif device_only:
        output = ["-cubin", "-o", str(path.with_suffix(".cubin"))]
    else:
        output = ["-c", "-o", str(path.with_suffix(".o"))]
    level = ["-O3"] if optimise else ["-O0", "-Xcicc", "-O0", "-Xptxas", "-O0"]
    proc = subprocess.run([NVCC, *level, "-std=c++17", "-t", str(len(archs)), *gencode, *output, str(path)],
                          capture_output=True, text=True, check=False)
    return path, proc.returncode, proc.stderr[-4000:]


# The architecture every diagram compiles for: sm_80 takes the path sm_90 takes too (prelude.cuh's
# NAPKIN_ASYNC: cp.async into `stages` buffers, m16n8k16 fp16 and bf16 mma)
EVERY = ("80",)
# The diagram that compiles at -O3 as the loader builds it, for both paths: its three kernels (two mma,
# one row-wise) take sm_75's path (plain loads, one buffer, two m16n8k8 for each m16n8k16) where a
# kernel's buffers and products differ, and sm_90's, the H100's build, which is sm_80's path
ALL_ARCHS = "attention_unfused"
BOTH_PATHS = ("75", "90")


# on 2 cores: cicc and ptxas at -O0, 1 s to 3 s a diagram, 5 s for mla_attention's 24 kernels; at -O3,
# attention_unfused's two architectures 7 s
NVCC_S = {ALL_ARCHS: 7, "mla_attention": 5}


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow(seconds=NVCC_S.get(n, 2))) for n in DIAGRAMS])
def test_nvcc_compiles_every_diagram_for_sm80_and_one_for_sm75_and_sm90(tmp_path, name):
    """Every diagram, fp16 and bf16, compiles for sm_80, and attention_unfused for sm_75 and sm_90 (one
    nvcc call a file). The architectures differ only in prelude.cuh's NAPKIN_ASYNC, which every kernel
    meets through the same mma, copy and buffer code, sm_90 taking sm_80's: one diagram of mma and
    row-wise kernels compiles both paths at -O3, as napkin's loader builds them (for sm_75, and for
    sm_90 as on an H100), host code and all, every diagram the path its GPUs take at -O0 to a cubin (the
    same C++ through the front end, the same inline PTX through NVVM and ptxas; the launchers' host
    code the front end checks, the host compiler builds attention_unfused's). The two element types'
    files differ only in their header comment, so each distinct body is compiled once."""
    archs = BOTH_PATHS if name == ALL_ARCHS else EVERY
    files: dict[str, Path] = {}
    for dtype in ("fp16", "bf16"):
        source = generated(name, dtype).source
        digest = hashlib.sha256(_body(source).encode()).hexdigest()
        if digest not in files:
            files[digest] = tmp_path / f"{name}_{dtype}.cu"
            files[digest].write_text(source)
    whole = name == ALL_ARCHS          # the loader's build, host code too; the others their device code
    results = [_compile(path, archs, optimise=whole, device_only=not whole) for path in files.values()]
    failures = [f"{path.name}:\n{err}" for path, rc, err in results if rc != 0]
    assert not failures, "\n\n".join(failures)


# -- on a GPU -------------------------------------------------------------------------------------------

def _reference(q, k, v, causal=False, sigmoid=False, softcap=None, band=None):
    """`band` (before, after): query i sees keys i - before .. i + after only."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    if band is not None:
        L, S = s.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=s.device).triu(-band[0]).tril(band[1])
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.sigmoid(s) if sigmoid else torch.softmax(s, -1)
    return p @ v


@pytest.mark.gpu
@pytest.mark.skipif(NVCC is None or not torch.cuda.is_available(), reason="needs nvcc and a CUDA GPU")
@pytest.mark.parametrize("name", ATTENTION)
def test_attention_matches_reference_on_gpu(tmp_path, name):
    generated(name).write(tmp_path / f"{name}_cuda.cu")
    m = _import(tmp_path / f"{name}_cuda.py", f"napkin_test_{name}_cuda_gpu")
    torch.manual_seed(0)
    dtypes = [torch.float16] + ([torch.bfloat16] if torch.cuda.get_device_capability()[0] >= 8 else [])
    for dtype in dtypes:
        for (batch, heads, heads_kv, seq, dim) in [(2, 2, 2, 17, 64), (1, 2, 2, 1000, 128), (1, 1, 1, 1, 128)]:
            if name == "gqa":
                heads, heads_kv = 4, 2
            q = torch.randn(batch, heads, seq, dim, device="cuda", dtype=dtype)
            k = torch.randn(batch, heads_kv, seq, dim, device="cuda", dtype=dtype)
            v = torch.randn(batch, heads_kv, seq, dim, device="cuda", dtype=dtype)
            out = m.attention(q, k, v, causal=name == "causal_attention")
            ref = _reference(q, k, v, name == "causal_attention", name == "sigmoid_attention",
                             50.0 if name == "softcap_attention" else None,
                             (256, 256) if name == "band_attention" else None)
            assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(NVCC is None or not torch.cuda.is_available(), reason="needs nvcc and a CUDA GPU")
def test_matmul_matches_reference_on_gpu(tmp_path):
    generated("matmul").write(tmp_path / "matmul_cuda.cu")
    m = _import(tmp_path / "matmul_cuda.py", "napkin_test_matmul_cuda_gpu")
    for rows, inner, cols in [(777, 333, 1500), (3000, 200, 2100)]:   # one ragged band; three bands
        a = torch.randn(rows, inner, device="cuda", dtype=torch.float16)
        b = torch.randn(inner, cols, device="cuda", dtype=torch.float16)
        ref = a.double() @ b.double()
        assert ((m.matmul(a, b).double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(NVCC is None or not torch.cuda.is_available(), reason="needs nvcc and a CUDA GPU")
def test_rmsnorm_matmul_matches_reference_on_gpu(tmp_path):
    """The norm primitives (shift, rsqrt) and a streamed sum beside the contraction, in CUDA."""
    generated("rmsnorm_matmul").write(tmp_path / "rmsnorm_cuda.cu")
    m = _import(tmp_path / "rmsnorm_cuda.py", "napkin_test_rmsnorm_cuda_gpu")
    for rows, inner, cols in [(1, 1, 1), (777, 333, 1500), (300, 4096, 640)]:
        x = torch.randn(rows, inner, device="cuda", dtype=torch.float16)
        g = (torch.rand(inner, device="cuda") + 0.5).half()
        w = (torch.randn(inner, cols, device="cuda") / inner ** 0.5).half()
        xd = x.double()
        ref = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * g.double()) @ w.double()
        assert ((m.rmsnorm_matmul(x, g, w).double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(NVCC is None or not torch.cuda.is_available(), reason="needs nvcc and a CUDA GPU")
def test_mla_attention_matches_reference_on_gpu(tmp_path):
    """Values with a head dim of their own (192 for q and k, 128 for v), in CUDA."""
    generated("mla_attention").write(tmp_path / "mla_cuda.cu")
    m = _import(tmp_path / "mla_cuda.py", "napkin_test_mla_cuda_gpu")
    for (batch, heads, seq, dim, value) in [(2, 2, 17, 192, 128), (1, 2, 1000, 192, 128), (1, 1, 1, 64, 64)]:
        q = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16)
        k = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16)
        v = torch.randn(batch, heads, seq, value, device="cuda", dtype=torch.float16)
        ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) * dim ** -0.5, -1) @ v.double()
        assert ((m.attention(q, k, v).double() - ref).norm() / ref.norm()).item() < 1e-2
