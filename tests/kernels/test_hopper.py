"""The Hopper backend: which diagrams it realises, its configurations' legality against what the compiler
did on an H100, the generated source compiled for sm_90a without a GPU, and the wrapper's refusals."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.common.errors import NapkinError
from analyzer.config import hopper, warp_specialised
from tests.kernels.hopper_build import INSTRUCTIONS, compiled, compiled_each

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
H100 = hardware.load("h100")


@pytest.mark.parametrize("diagram, realised", [
    ("attention", True), ("mha", True), ("gqa", True), ("causal_attention", True),
    ("sigmoid_attention", True), ("mla_attention", True), ("attention_unfused", False),
    ("matmul", False), ("linear_attention", False)])
def test_which_diagrams_the_hopper_kernel_realises(diagram, realised):
    """Streamed attention with one head dim whose scores pass through a chain the kernel renders
    (analyzer.config.scores: tests/kernels/test_score_chains.py), and nothing else."""
    from analyzer.config.kernels import configure_kernels
    assert (hopper.realisable(configure_kernels(diagram, H100, sized=False)) is None) == realised


def test_default_backend_on_hopper():
    """Hopper profiles get the warp-specialised kernel where it realises the diagram, the portable
    Triton module elsewhere; other GPUs the Triton module."""
    assert generate("mha", "h200").backend == "hopper"
    assert generate("sigmoid_attention", "h100").backend == "hopper"
    assert generate("mla_attention", "h100").backend == "hopper"
    assert generate("linear_attention", "h100").backend == "triton"
    assert generate("mha", "a100").backend == "triton"


@pytest.mark.parametrize("diagram, gpu, message", [
    ("attention_unfused", "h100", "has 3 kernels"),
    ("linear_attention", "h200", "not attention-shaped"),
    ("matmul", "h100", "not attention-shaped"),
    ("attention", "a100", "no warpgroup MMA and TMA")])
def test_backend_hopper_refused(diagram, gpu, message):
    with pytest.raises(NapkinError, match=message):
        generate(diagram, gpu, backend="hopper")


# What ptxas and the launch did with configurations of the kernel on an H100 SXM5 (2026-11-25, the
# exploratory round before bench/hopper_attention.py; fp16): (head dim, N, s_x, stages) -> ran or not
MEASURED = {
    (64, 3, 128, 2): True, (64, 2, 128, 3): True, (64, 3, 64, 2): True, (64, 2, 64, 3): True,
    (128, 2, 128, 2): True, (128, 2, 64, 3): True, (128, 1, 128, 3): True, (128, 3, 64, 2): True,
    (256, 2, 64, 2): True, (256, 1, 64, 3): True, (256, 1, 64, 2): True,
    (256, 3, 64, 2): False,     # ptxas: insufficient registers (128) for the instruction, 158 needed
    (256, 2, 64, 3): False,     # 262512 bytes of SMEM, 232448 the limit
}
# Ran, but the register rule refuses it: REGISTER_RESERVE is a bound, not an exact count
CONSERVATIVE = {(64, 2, 256, 2)}


@pytest.mark.parametrize("key", sorted(MEASURED))
def test_legality_matches_the_compiler(key):
    d, n, chunk, stages = key
    c = hopper.configuration(H100, d, "fp16", warpgroups=n, chunk=chunk, stages=stages, overlap="intra")
    assert hopper.legal(H100, c) == MEASURED[key]


@pytest.mark.parametrize("key", sorted(CONSERVATIVE))
def test_legality_is_conservative(key):
    d, n, chunk, stages = key
    c = hopper.configuration(H100, d, "fp16", warpgroups=n, chunk=chunk, stages=stages, overlap="intra")
    assert not hopper.legal(H100, c)


def test_registers_split_as_table_2():
    """setmaxnreg: the producer keeps 24; the consumers share the rest in steps of 8 (FlashAttention-3
    gives 240 each to two consumers and 160 to three)."""
    ws = warp_specialised
    assert ws.registers_per_consumer(H100, 2) == 240
    assert ws.registers_per_consumer(H100, 3) == 160
    for n in (1, 2, 3, 4):
        cap = ws.register_cap(H100, n)
        assert cap * (n + 1) * 128 <= H100.registers.per_sm
        assert n * ws.registers_per_consumer(H100, n) + ws.PRODUCER_REGISTERS <= cap * (n + 1)


def test_model_prefers_overlap_when_the_softmax_is_slow():
    """Section 6, the paper's model (66 % overhead): one warpgroup without overlap leaves the tensor
    cores idle; intra overlap hides the softmax under the next QK^T; two warpgroups saturate them. The
    calibrated model says what the H100 measured: a lone warpgroup with no overlap scheduled runs well
    ahead of the serial period, about halfway to intra's (lone_overlap 0.52 with the fitted soft overlap,
    which already charges intra's period for what it fails to hide)."""
    def time(n, overlap, params=hopper.HopperParams()):
        c = hopper.configuration(H100, 128, "fp16", warpgroups=n, chunk=128, stages=2, overlap=overlap)
        return hopper.predicted_time(H100, c, 128, "fp16", seq_q=16384, seq_k=16384, instances=1024,
                                     params=params)
    assert time(1, "intra") < time(1, "none")
    assert time(2, "inter") < time(1, "intra")
    assert time(2, "inter+intra") == pytest.approx(time(2, "inter"))
    fitted = hopper.HopperParams.of(H100)
    assert 0.3 < fitted.lone_overlap <= 1
    assert time(1, "none", fitted) == pytest.approx(time(1, "intra", fitted), rel=1 - fitted.lone_overlap + 1e-9)


def test_golden_source():
    """Regenerate with NAPKIN_REGOLD=1 after a deliberate change, and review the diff."""
    source = generate("mha", "h100", dtype="fp16").source
    path = GOLDEN / "mha_h100_hopper_fp16.py"
    if os.environ.get("NAPKIN_REGOLD") == "1":
        path.write_text(source)
    assert source == path.read_text()


def test_kernel_text_is_a_package_file():
    """The Gluon text is attention.gluon, package data beside analyzer.codegen.hopper.kernel (the wheel
    ships the package's files): a module carries it from its first @gluon.jit on, the diagram deciding
    only its three placeholders. HELPERS names every function it defines (the module's scope reserves
    them), and the ring's stage and phase are written once, in _attn_ring, which every wait on K or V
    takes them from."""
    import ast
    import re
    from importlib import resources

    from analyzer.codegen.hopper import kernel
    text = resources.files("analyzer.codegen.hopper").joinpath("attention.gluon").read_text(encoding="utf-8")
    assert kernel.KERNEL.get_identifiers() == ["scores", "kernel", "partitions"]
    note, body = text.split("\n@gluon.jit\n", 1)
    assert all(line.startswith("#") or not line for line in note.splitlines())
    sources = [generate(name, "h100").source for name in ("mha", "sigmoid_attention")]     # without, with tanh
    for source in sources:
        assert all(part.strip("\n") in source for part in re.split(r"\$\w+", body))
        # every $ left is an inline PTX operand ($0, $1, ...), none a placeholder of the template
        assert note not in source and not re.search(r"\$(?!\d)", source) and "$$" not in source
        assert source.count("// STAGES) & 1") == 1 and source.count("% STAGES") == 1
        waits = re.findall(r"mbarrier\.wait\((\w+)\.index\((\w+)\), (\w+)", source)
        assert waits and all(f"{s}, {phase} = _attn_ring(" in source for _, s, phase in waits)
    defined = {node.name for source in sources for node in ast.parse(source).body
               if isinstance(node, ast.FunctionDef) and any("gluon.jit" in ast.unparse(d) for d in node.decorator_list)}
    assert defined - {"_mha_flash", "_sigmoid_attention_flash"} == set(kernel.HELPERS)


def test_the_wrapper_speaks_to_the_hopper_kernel():
    """The torch wrapper the module shares with the Triton one names this kernel's configuration keys,
    passes no strides (the TMA descriptors read them off the tensors) and tests `causal` as a bool."""
    source = generate("causal_attention", "h100").source
    assert "CONFIG_KEYS lists (WARPGROUPS, BLOCK_X, STAGES, OVERLAP, SCHEDULE)" in source
    assert "stride = {" not in source and "stride[" not in source
    assert "def _launch_flash(t, size, scale, cfg=None, lse=None, descale=None):" in source
    assert "    if not causal:\n        raise ValueError(" in source and "causal !=" not in source


def _configs(g):
    """Every (head dim, configuration) generated file `g` carries in its CONFIGS."""
    return [(d, c.entry()) for d, table in g.hopper.tables.items() for c in table.configs]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hopper")
    out = {}
    for name in ("mha", "causal_attention", "gqa"):
        g = generate(name, "h100")
        (path,) = g.write(tmp / f"hopper_{name}.py")
        out[name] = (g, path)
    return out


def _check_compiled(result, entry, d, dtype="fp16"):
    assert result["instructions"] == list(INSTRUCTIONS)
    assert not result["local"]                                    # nothing spilled to local memory
    c = hopper.configuration(H100, d, dtype, warpgroups=entry["WARPGROUPS"], chunk=entry["BLOCK_X"],
                             stages=entry["STAGES"], overlap=entry["OVERLAP"], schedule=entry["SCHEDULE"])
    assert result["spills"] == 0                                   # ptxas: no spill stores or loads
    # the SMEM napkin counts bounds what the compiler allocates, by the partitions' arguments and alignment
    assert result["shared"] <= c.smem_bytes <= result["shared"] + 1024
    assert result["shared"] <= H100.level("smem").block_capacity_bytes


def _covering(jobs):
    """Jobs picked one at a time, each taking the most values not yet taken, until their configurations
    take every value the kernel branches on at least once: each module (causal masks, grouped heads),
    element type, head dim, warpgroup count (its branch and register split), chunk, stage count,
    overlap and schedule; where two take as many, the one that allocates more SMEM (nearer the limit),
    then the first."""
    def values(job):
        name, d, e, dtype = job
        return {("module", name), ("dtype", dtype), ("head_dim", d),
                *((key, e[key]) for key in ("WARPGROUPS", "BLOCK_X", "STAGES", "OVERLAP", "SCHEDULE"))}

    def smem(job):
        _, d, e, dtype = job
        return hopper.configuration(H100, d, dtype, warpgroups=e["WARPGROUPS"], chunk=e["BLOCK_X"],
                                    stages=e["STAGES"], overlap=e["OVERLAP"], schedule=e["SCHEDULE"]).smem_bytes

    todo, picked = set().union(*map(values, jobs)), []
    while todo:
        best = max(jobs, key=lambda job: (len(values(job) & todo), smem(job)))
        picked.append(best)
        todo -= values(best)
    return [job for job in jobs if job in picked]


@pytest.mark.slow(seconds=25)    # eight compiles for sm_90a in one process, about 3 s of Triton and ptxas each
def test_configurations_of_every_kind_compile_for_sm90a(generated):
    """The configurations the mha module carries (every head dim, every size), and the causal (masks,
    block skipping) and grouped-query modules' at head dim 128, the latter in bf16, build for sm_90a: as
    many of them as take every warpgroup count, chunk, stage count, overlap, schedule, head dim, element
    type and module once (_covering: fewer than half of them), and the prefetch schedule no ranking offers
    (config= runs it: two query buffers and the output's own, the largest at head dim 128 within 3 KB of
    the block's limit), with no spill and the SMEM Table 1 counts. The legality of the rest is the model's, which test_legality_matches_the_compiler holds to
    what the compiler did on an H100."""
    jobs = [(name, d, e, dtype) for name, dtype in (("mha", "fp16"), ("causal_attention", "fp16"), ("gqa", "bf16"))
            for d, e in _configs(generated[name][0]) if name == "mha" or d == 128]
    # config= may launch any legal configuration: the kernel has a branch, and the module registers, for
    # every warpgroup count one has (the causal kernel's too: its mask's 8 registers leave 4 consumers of 112
    # legal at head dim 64, s_x = 64)
    for name, causal in (("mha", False), ("causal_attention", True)):
        g = generated[name][0]
        legal = {c.warpgroups for d in (64, 128, 256) for c in hopper.candidates(H100, d, "fp16", causal=causal)}
        assert set(g.hopper.register_cap) == legal == {1, 2, 3, 4}
        assert all(f"GROUPS == {n}:" in g.source for n in legal)
    picked = _covering(jobs)
    assert {e["WARPGROUPS"] for _, _, e, _ in picked} == {1, 2, 3, 4} and len(picked) < len(jobs)
    picked += [(name, 128, {"WARPGROUPS": 2, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap, "SCHEDULE": "prefetch"},
                "fp16") for name, chunk, overlap in (("mha", 128, "intra"), ("causal_attention", 64, "inter+intra"))]
    # the three modules' jobs in one process: one start-up of torch and Triton
    results = compiled_each([{"module": str(generated[n][1]), "entry": e, "head_dim": d, "dtype": t}
                             for n, d, e, t in picked])
    assert {n for n, _, _, _ in picked} == set(generated)
    for (_, d, e, t), result in zip(picked, results, strict=True):
        _check_compiled(result, e, d, t)


def test_wrapper_refuses_before_launch(generated):
    torch = pytest.importorskip("torch")
    from tests.kernels.helpers_kernel import written
    g, path = generated["mha"]
    module = written(g, path.parent)
    q = torch.zeros(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="must be one of"):
        module.attention(q, q, q, config={"WARPGROUPS": 2, "BLOCK_X": 64, "STAGES": 2, "OVERLAP": "pingpong",
                                         "SCHEDULE": "tiles"})
    with pytest.raises(ValueError, match="runs on a CUDA GPU|runs on a Hopper GPU"):
        module.attention(q, q, q)


def test_a_later_call_rebinds_the_first_calls_checked_descriptors(generated):
    """The launcher plans a call signature once (_plan, kept in _PLANS) and makes a later call's TMA
    descriptors from the first call's, checked by TensorDescriptor, with its own tensors (_bound): the
    fields TensorDescriptor makes for them, from a template that keeps no tensor alive (_unbound). A
    tensor the TMA engine cannot address gets a copy of its own: a contiguous view at an odd offset too,
    which .contiguous() would return as it is (bench/host_cost.py checks the plans on the GPU)."""
    torch = pytest.importorskip("torch")
    from tests.kernels.helpers_kernel import written
    g, path = generated["mha"]
    module = written(g, path.parent)
    block = [1, 1, 64, 64]
    first, later = torch.zeros(1, 2, 128, 64, dtype=torch.float16), torch.ones(1, 2, 128, 64, dtype=torch.float16)
    template = module._unbound(module._descriptor(first, block))
    assert template["base"] is None
    rebound = module._bound(template, later)
    assert type(rebound) is module.TensorDescriptor and rebound.base is later
    assert vars(rebound) == vars(module._descriptor(later, block))
    view = torch.zeros(8 * 64 + 1, dtype=torch.float16)[1:].view(1, 1, 8, 64)     # 2 bytes past an aligned base
    assert view.is_contiguous() and not module._tma_able(view)
    ready = module._tma_ready(view)
    assert module._tma_able(ready) and torch.equal(ready, view)
    assert module.PLANS_KEPT > 0 and module._PLANS == {}


@pytest.mark.parametrize("diagram, sets, head_dim, length, instances", [
    ("mha", {"q": 4096, "x": 4096, "h": 16, "batch": 1}, 128, 4096, 16),
    ("causal_attention", {"q": 1024, "batch": 4, "heads": 8, "d": 64}, 64, 1024, 32)])
def test_sweep_ranks_what_the_kernel_launches(diagram, sets, head_dim, length, instances):
    """napkin sweep and napkin kernel agree: at a point of the by-size grid the sweep's first
    configuration is the one the generated module launches there."""
    from analyzer.config.sweep import sweep
    (s,) = sweep(diagram, "h100", sets=sets)
    assert s.backend == "hopper" and len(s.rows) > 1
    assert s.rows[0].config == generate(diagram, "h100").hopper.tables[head_dim].at(length, instances)
    fastest = min(r.time_s for r in s.rows)
    assert s.rows[0].time_s <= fastest * (1 + hopper.ALIKE)       # the choice is among the fastest


@pytest.mark.parametrize("name", ["mha", "causal_attention", "gqa"])
def test_the_module_reads_the_cell_the_model_prices(generated, name):
    """The generated _sized and HopperTable.at(table_point(...)) agree at random calls, cross-attention's
    among them: the wrapper's arithmetic is generated text, the table's lookup Python."""
    pytest.importorskip("torch")
    from analyzer.config.hopper_table import table_point
    from tests.kernels.helpers_kernel import written
    g, path = generated[name]
    module = written(g, path.parent)
    r, kernel = g.roles, g.kernels[0].plan.name
    rng = random.Random(7)
    for head_dim, t in g.hopper.tables.items():
        for _ in range(150):
            batch, heads, seq_q = rng.randint(1, 16), rng.randint(1, 64), rng.choice([1, 77, 300, 1000, 4096, 30000])
            seq_k = seq_q if r.causal else rng.choice([seq_q, 1, 77, 200, 9000])
            size = {"batch": batch, r.seq_q: seq_q, r.seq_k: seq_k, r.head_dim: head_dim}
            if r.group:
                size[r.heads], size[r.group] = heads, 1
            else:
                size[r.heads or "heads"] = heads
            length, rows, ratio = table_point(seq_q, seq_k, batch * heads)
            assert module._sized(module.CONFIGS[kernel][head_dim], size) == t.at(length, rows, ratio).entry()


def test_sweep_backend_hopper_refused_where_it_cannot_be_realised():
    from analyzer.config.sweep import sweep
    with pytest.raises(NapkinError, match="not attention-shaped"):
        sweep("matmul", "h100", backend="hopper")
    (s,) = sweep("mla_attention", "h100")             # V's head dim of its own: the kernel takes it apart
    assert s.backend == "hopper"
    (s,) = sweep("sigmoid_attention", "h100")          # its chain of scores is one the kernel renders
    assert s.backend == "hopper"


def test_a_tile_keeps_the_portable_kernel_and_a_named_configuration_runs_as_it_can():
    """A tile (--set g_q=128) is the portable kernel's: asked for without a backend it gets it, and with
    --backend hopper it is refused, not silently dropped. A configuration the diagram names runs on the
    Hopper kernel where it can: FlashAttention-3's fp16 one (one warpgroup of 128 rows, s_x 128, intra)
    as two consumers of wgmma's 64 rows; the paper's staged FP8 one only on the portable kernel."""
    assert generate("attention", "h100", sets={"g_q": 128}).backend == "triton"
    assert generate("attention", "h100", sets={"d": 64}).backend == "hopper"      # a size, not a tile
    with pytest.raises(NapkinError, match="--set s_x pins a tile"):
        generate("attention", "h100", backend="hopper", sets={"s_x": 64})
    g = generate("attention", "h100", config="fa3_fp16_intra")
    assert g.backend == "hopper" and list(g.hopper.tables) == [128]
    (c,) = g.hopper.tables[128].configs
    assert (c.warpgroups, c.rows, c.chunk, c.stages, c.overlap) == (2, 64, 128, 2, "intra")
    assert "HEAD_DIMS = (128,)" in g.source and "--config fa3_fp16_intra" in g.source
    assert generate("attention", "h100", config="napkin_hopper").backend == "triton"
    with pytest.raises(NapkinError, match="staged strategy"):
        generate("attention", "h100", config="napkin_hopper", backend="hopper")
    with pytest.raises(NapkinError, match="fp8"):
        generate("attention", "h100", config="fa3_fp8_intra", backend="hopper")


@pytest.mark.slow(seconds=5)
def test_any_array_kernel_and_text_names_stay_data(tmp_path):
    """The Hopper module whatever the diagram names things: arrays named like the module's own globals
    and the kernel's helpers, a kernel named like its launcher, a title that would run code. The names
    reach the module only as string keys, the text only through the escapers; the module imports
    without running the text, and its kernel still compiles for sm_90a."""
    import yaml
    names = {"Q": "torch", "K": "gl", "V": "tma", "S": "CONFIGS", "O": "q"}
    run = "__import__('builtins').__setattr__('NAPKIN_CANARY', 1)"
    text = (Path(__file__).resolve().parents[2] / "diagrams" / "mha.yaml").read_text()
    data = yaml.safe_load(text)
    data.update(title=f'"""\n{run}\n#', doc=f"\n{run}\n")
    data["inputs"] = {names[k]: v for k, v in data["inputs"].items()}
    for op in data["ops"]:
        op["name"] = names[op["name"]]
        op["inputs"] = [names[i] for i in op["inputs"]]
    data["outputs"] = [names[o] for o in data["outputs"]]
    data["kernels"][0]["name"] = "launch"
    source = tmp_path / "adversarial.yaml"
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    g = generate(str(source), "h100", sets={"d": 128})
    assert g.backend == "hopper"
    (path,) = g.write(tmp_path / "adversarial_hopper.py")
    from tests.kernels.helpers_kernel import written
    module = written(g, tmp_path)
    import builtins
    assert not hasattr(builtins, "NAPKIN_CANARY")
    assert "t['torch'], t['gl'], t['tma'], t['q']" in g.source and "scale['q']" in g.source
    entry = next(c.entry() for c in g.hopper.tables[128].configs if c.warpgroups == 2)
    (result,) = compiled(path, [{"entry": entry, "head_dim": 128, "dtype": "fp16"}])
    assert result["instructions"] == list(INSTRUCTIONS) and result["spills"] == 0
    assert callable(module.attention)
