"""The Hopper kernel's FP8 (e4m3) attention, without a GPU: which diagrams and kernels take fp8, the
module's quantisation (block scales, incoherent processing, the keys' stored order) against float64 on
the CPU, the order in which the kernel's registers hand P to P V against the order quantize stores K in,
and the kernels of its tables compiled for sm_90a. bench/hopper_fp8.py runs them against float64 on the
GPU and times them."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from analyzer import hardware
from analyzer.cli import app
from analyzer.codegen import generate
from analyzer.common.errors import NapkinError
from analyzer.config import hopper
from tests.kernels.helpers_kernel import written
from tests.kernels.hopper_build import INSTRUCTIONS, compiled

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
H100 = hardware.load("h100")
E4M3_HALF_ULP = 2.0 ** -4      # e4m3 keeps 3 bits of mantissa: a normal value rounds by at most 2^-4 of itself
E4M3_SUBNORMAL = 2.0 ** -9     # its subnormals' spacing (of a value scaled to at most 448)


@pytest.fixture(scope="module")
def fp8(tmp_path_factory):
    g = generate("attention", "h100", dtype="fp8")
    (path,) = g.write(tmp_path_factory.mktemp("fp8") / "attention_fp8.py")
    return g, path, written(g, path)


def test_fp8_is_the_hopper_attention_kernels(fp8):
    g, _, module = fp8
    assert g.backend == "hopper" and g.dtype == "fp8" and module.FP8 and module.LINEAR
    assert "quantize" in module.__all__ and "fp8 (" in g.source     # the header names the element type
    assert generate("causal_attention", "h100", dtype="fp8").backend == "hopper"
    # the other kernels take 16 bits, and say so (an A100 has the portable kernel alone)
    for diagram, gpu, backend, message in (("attention", "h100", "triton", "takes fp16 or bf16"),
                                           ("matmul", "h100", None, "takes fp16 or bf16"),
                                           ("bias_attention", "h100", "hopper", "adds a bias"),
                                           ("attention", "a100", None, "for attention on a Hopper GPU")):
        with pytest.raises(NapkinError, match=message):
            generate(diagram, gpu, backend=backend, dtype="fp8")


def test_the_command_refuses_fp8_in_one_line(tmp_path):
    from typer.testing import CliRunner
    result = CliRunner().invoke(app, ["kernel", "matmul", "--gpu", "h100", "--dtype", "fp8",
                                      "-o", str(tmp_path / "m.py")])
    assert result.exit_code == 1 and "'fp8': this kernel takes fp16 or bf16" in str(result.exception or result.output)
    assert not (tmp_path / "m.py").exists()


def _inputs(n_q=200, n_k=333, d=64, seed=0):
    """q, k and v whose rows (q, k) and columns (v) differ in scale by up to 2^6: blocks of unequal
    scales, where a scale applied to the wrong block is far outside e4m3's rounding."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, d, generator=g, dtype=torch.float64) for n in (n_q, n_k, n_k))
    q = q * 2.0 ** torch.randint(-3, 4, (1, 1, n_q, 1), generator=g)
    k = k * 2.0 ** torch.randint(-3, 4, (1, 1, n_k, 1), generator=g)
    v = v * 2.0 ** torch.randint(-3, 4, (1, 1, 1, d), generator=g)
    return q.half(), k.half(), v.half()


def _keys(module, stored_rows):
    """The key each stored row of k holds: the kernel's own function, run on integers."""
    return module._attn_fp8_keys.fn(np.arange(stored_rows))


def _dequantised(module, inputs, scales):
    """float64 q, k (in the keys' own order, its padding dropped) and v from quantize's e4m3 and scales."""
    (q8, k8, v8), (qs, ks, vs) = inputs, scales

    def rows(x, scale, block):
        return x.double() * scale.double().repeat_interleave(block, dim=2)[:, :, :x.shape[2], None]
    stored = rows(k8, ks, module.KEY_BLOCK)
    natural = torch.empty_like(stored)
    natural[:, :, torch.from_numpy(_keys(module, k8.shape[2]))] = stored
    return rows(q8, qs, module.QUANT_BLOCK), natural[:, :, :v8.shape[2]], v8.double() * vs.double()[:, :, None, :]


@pytest.mark.parametrize("blocks", [True, False])
def test_quantize_rounds_each_value_once_within_e4m3(fp8, blocks):
    """Every value comes back within e4m3's rounding of itself (relative 2^-4, or the subnormal spacing
    of its block's scale), each block's largest magnitude at e4m3's largest, 448; per-tensor scales
    (blocks=False) are one number a head."""
    _, _, module = fp8
    q, k, v = _inputs()
    inputs, scales = module.quantize(q, k, v, blocks=blocks)
    (q8, k8, v8), (qs, ks, vs) = inputs, scales
    assert q8.dtype == k8.dtype == v8.dtype == torch.float8_e4m3fn
    assert qs.shape == (2, 3, -(-200 // module.QUANT_BLOCK)) and ks.shape == (2, 3, -(-333 // module.KEY_BLOCK))
    assert vs.shape == (2, 3, 64) and k8.shape[2] == 352 and v8.shape == v.shape and v8.stride(2) == 1
    for x, back, scale in zip((q, k, v), _dequantised(module, inputs, scales),
                              (qs.repeat_interleave(module.QUANT_BLOCK, 2)[:, :, :200, None],
                               None, vs[:, :, None, :]), strict=True):
        err = (back - x.double()).abs()
        bound = E4M3_HALF_ULP * x.double().abs() + (E4M3_SUBNORMAL / 2 * scale.double() if scale is not None
                                                     else E4M3_SUBNORMAL / 2 * ks.double().max())
        assert (err <= bound * (1 + 1e-9)).all()
    assert q8.float().abs().amax().item() == 448.0
    if blocks:      # every block of q reaches 448: its own scale
        per_block = torch.nn.functional.pad(q8.float().abs(), (0, 0, 0, 56)).view(2, 3, 4, 64, 64).amax(dim=(3, 4))
        assert (per_block == 448.0).all()
    else:
        for s in (qs, ks, vs):
            assert (s == s[:, :, :1]).all()


def test_the_kernels_registers_hand_p_v_the_keys_quantize_stores(fp8):
    """With FP8 the kernel renames each 32 columns of P in its registers (_attn_operand: a reshape and a
    permute of P in fp16, run here on numpy for the kernel's own text) so that P V reads them in the keys' order,
    and S's column c holds key _attn_fp8_keys(c): quantize must store k's row c as that key, and the two
    must agree, for every chunk the kernel takes."""
    _, _, module = fp8

    class Tensor(np.ndarray):
        def permute(self, dims):
            return self.transpose(dims).view(Tensor)

        def to(self, dtype):      # the values' type: the renaming is what is checked
            return self

    operand = module._attn_operand.fn
    gl = SimpleNamespace(convert_layout=lambda p, layout: p, float16="fp16")
    saved = operand.__globals__["gl"]
    operand.__globals__["gl"] = gl
    try:
        for chunk in (64, 128, 256):
            columns = np.arange(chunk)[None, :].view(Tensor)
            renamed = np.asarray(operand(columns, None, 1, chunk, True, None))[0]     # position a: column renamed[a]
            assert (_keys(module, chunk)[renamed] == np.arange(chunk)).all()   # ... which holds key a
            assert sorted(_keys(module, chunk)) == list(range(chunk))
    finally:
        operand.__globals__["gl"] = saved
    # quantize's k: row c is key _attn_fp8_keys(c), the padding past the last key zero
    k = torch.arange(70, dtype=torch.float64)[None, None, :, None].expand(1, 1, 70, 4).half()
    stored = module._key_order(k)
    keys = _keys(module, stored.shape[2])
    assert stored.shape[2] == 96
    assert all(stored[0, 0, c, 0].item() == (keys[c] if keys[c] < 70 else 0) for c in range(96))


def test_incoherent_processing_leaves_the_scores_and_spreads_an_outlier(fp8):
    """Q M (K M)^T = Q K^T for the random Hadamard matrix M (orthogonal), and a column of outliers
    spreads over every column, so the block's scale shrinks."""
    _, _, module = fp8
    m = module._hadamard(128, 3, "cpu").double()
    assert torch.allclose(m @ m.T, torch.eye(128, dtype=torch.float64), atol=1e-6)
    q, k, v = _inputs(d=128)
    q = q.clone()
    q[..., 5] *= 64                                         # one column of outliers
    (q8, k8, _), (qs, ks, _) = module.quantize(q, k, v, incoherent=True)
    _, (plain, _, _) = module.quantize(q, k, v)
    qd, kd, _ = _dequantised(module, (q8, k8, v), (qs, ks, torch.ones(2, 3, 128)))
    scores = q.double() @ k.double().transpose(2, 3)
    assert torch.linalg.norm(qd @ kd.transpose(2, 3) - scores) / torch.linalg.norm(scores) < 0.05
    assert qs.max() < plain.max() / 4


def test_the_wrapper_quantises_16_bit_inputs_and_refuses_the_cpu(fp8):
    """16-bit inputs pass the checks every wrapper makes and reach the GPU's (the e4m3 inputs' own checks
    follow it: bench/hopper_fp8.py holds them on the GPU)."""
    _, _, module = fp8
    q, k, v = _inputs()
    with pytest.raises(ValueError, match="runs on a Hopper GPU"):
        module.attention(q, k, v)
    with pytest.raises(TypeError, match="takes torch.float16, torch.bfloat16 or torch.float8_e4m3fn"):
        module.attention(q.float(), k.float(), v.float())


@pytest.mark.slow(seconds=20)    # four compiles for sm_90a in one process
def test_the_fp8_configurations_compile_for_sm90a(fp8):
    """The configurations the FP8 module's tables carry build for sm_90a with FP8's wgmma and without
    serialising it, in the SMEM Table 1 counts; ptxas spills at most one register, stored once and
    loaded twice (4 + 8 bytes, at head dim 128, two consumers, s_x = 128, which
    bench/results/hopper_fp8_h200.md times within 4 % of that head dim's fastest overlap)."""
    g, path, _ = fp8
    jobs = sorted({(d, tuple(c.entry().items())) for d, t in g.hopper.tables.items() for c in t.configs
                   if c.schedule == "tiles"})
    results = compiled(path, [{"entry": dict(e), "head_dim": d, "dtype": "fp8"} for d, e in jobs])
    for (d, e), result in zip(jobs, results, strict=True):
        e = dict(e)
        assert result["instructions"] == list(INSTRUCTIONS) and not result["local"] and not result["serialised"]
        assert result["spills"] <= 12
        c = hopper.configuration(H100, d, "fp8", warpgroups=e["WARPGROUPS"], chunk=e["BLOCK_X"], stages=e["STAGES"],
                                 overlap=e["OVERLAP"], schedule=e["SCHEDULE"])
        assert result["shared"] <= c.smem_bytes <= result["shared"] + 1024


def test_napkin_measure_refuses_the_fp8_kernel_in_one_line(fp8):
    """napkin measure checks a kernel against float64 within its type's accumulated rounding and times its
    wrapper: the FP8 kernel's inputs are quantised and its check is e4m3's, which bench/hopper_fp8.py
    makes; the command says so rather than hold it to the wrong tolerance."""
    from analyzer.measure.run import measurable
    g, _, _ = fp8
    with pytest.raises(NapkinError, match="napkin measure checks and times fp16 and bf16 kernels"):
        measurable(g)
    measurable(generate("attention", "h100"))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the quantising kernels on the CPU need "
                    "Triton's interpreter")
@pytest.mark.parametrize("shape", [(1, 2, 100, 70, 64), (1, 1, 130, 333, 128)])
def test_the_quantising_kernels_give_the_torch_operations_values(fp8, shape):
    """quantize's Triton kernels on the GPU (_quantize_rows: q's row blocks, k's in its stored key order;
    _quantize_columns: v's column scales, transposed) run here under Triton's interpreter against the
    torch operations: the same scales, and every e4m3 value the same but where the interpreter's own
    emulation of e4m3 rounds (a carry into the next binade dropped, a tie away from even, a subnormal
    truncated: the GPU's cvt.rn.satfinite rounds each to nearest even, as torch does; on an H200 v's
    values came out identical, bench/results/fp8_quantize_h200.md)."""
    _, _, module = fp8
    b, h, n_q, n_k, d = shape
    g = torch.Generator().manual_seed(n_q)
    q = torch.randn(b, h, n_q, d, generator=g).half() * 3
    k = torch.randn(b, n_k, h, d, generator=g).half().transpose(1, 2)          # strided
    v = torch.randn(b, h, n_k, d, generator=g).half()
    (q8, k8, v8), scales = module._quantized_on_gpu(q, k, v)
    (wq, wk, wv), want = module._quantized_by_torch(q, k, v)
    assert all(torch.equal(s, w) for s, w in zip(scales, want, strict=True))
    exact = (q.float() / want[0].repeat_interleave(module.QUANT_BLOCK, 2)[:, :, :n_q, None],
             module._key_order(k.float()) / want[1].repeat_interleave(module.KEY_BLOCK, 2)[:, :, :k8.shape[2], None],
             v.float() / want[2][:, :, None, :])
    for got, expected, value in zip((q8, k8, v8), (wq, wk, wv), exact, strict=True):
        assert got.shape == expected.shape and (v8.stride(2) == 1)
        u, w = got.float(), expected.float()
        emulated = (u * 2 == w) | ((u + w) / 2 == value) | ((value.abs() < 2 ** -6) & ((u - value).abs() < 2 ** -9))
        assert ((u == w) | emulated).all() and (u == w).float().mean() > 0.9


def test_the_fp8_module_whatever_the_diagram_names_its_arrays(tmp_path):
    """Arrays named like the FP8 module's own names (quantize, descale, tl, KEY_BLOCK, E4M3_MAX) reach
    it only as string keys: the module imports, quantize and the wrapper's descale are its own, and the
    16-bit call still quantises and reaches the GPU's check."""
    import yaml
    names = {"Q": "quantize", "K": "descale", "V": "tl", "S": "KEY_BLOCK", "O": "E4M3_MAX"}
    data = yaml.safe_load((ROOT / "diagrams" / "mha.yaml").read_text())
    data["inputs"] = {names[k]: v for k, v in data["inputs"].items()}
    for op in data["ops"]:
        op["name"] = names[op["name"]]
        op["inputs"] = [names[i] for i in op["inputs"]]
    data["outputs"] = [names[o] for o in data["outputs"]]
    source = tmp_path / "named.yaml"
    source.write_text(yaml.safe_dump(data, sort_keys=False))
    g = generate(str(source), "h100", dtype="fp8", sets={"d": 128})
    module = written(g, tmp_path)
    assert "t['quantize'], t['descale'], t['tl'], t['E4M3_MAX']" in g.source
    assert module.KEY_BLOCK == 128 and "descale=None" in g.source
    q, k, v = _inputs(d=128)
    (_, k8, _), (_, k_scale, _) = module.quantize(q, k, v)
    assert k8.shape[2] == 352 and k_scale.shape[2] == -(-333 // module.KEY_BLOCK)
    with pytest.raises(ValueError, match="runs on a Hopper GPU"):
        module.attention(q, k, v)
