"""An additive bias read from memory (`add` with an input of the call, diagrams/bias_attention.yaml): the
call's tensor and its broadcast, what the Hopper kernel loads and the model counts for it, which biases
the Hopper kernel refuses, and the portable kernel against float64 under Triton's interpreter. The Hopper
module runs against float64 on an H100 in bench/bias_attention.py (it compiles for sm_90a in
test_allocation)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.common import resources
from analyzer.common.errors import NapkinError
from analyzer.config import hopper
from analyzer.config.kernels import configure_kernels
from analyzer.config.scores import ScoreOp, Scores

H100 = hardware.load("h100")


def _data() -> dict:
    return yaml.safe_load(resources.shipped("diagrams")["bias_attention"].read_text())


def _write(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "bias.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_the_bias_is_an_input_of_the_call_and_one_add_in_the_chain():
    c = configure_kernels("bias_attention", H100, sized=False)
    assert c.roles.extras == ("B",) and c.diagram.arrays["B"].axes == ("batch", "heads", "q", "x")
    chain = hopper.scores(c)
    assert [o.primitive for o in chain.ops] == ["scale", "add", "causal_mask"]
    assert chain.bias.name == "Sb" and chain.vector_per_score == 1 and not chain.folded


def test_the_kernel_holds_a_tile_of_the_bias_a_consumer_and_stage_and_the_model_reads_it_from_memory():
    """SMEM: stages x N tiles of 64 rows x s_x beside the plain kernel's; the loads of a chunk: K and V
    from L2 and the block's rows of the bias from HBM, and a request a row of them."""
    plain = hopper.configuration(H100, 128, "fp16", warpgroups=2, chunk=64, stages=2, overlap="intra")
    add = Scores((ScoreOp("Sb", "add"),))
    biased = hopper.configuration(H100, 128, "fp16", warpgroups=2, chunk=64, stages=2, overlap="intra", scores=add)
    assert biased.smem_bytes - plain.smem_bytes == 2 * 2 * 64 * 64 * 2
    with_bias = hopper.chunk_times(H100, plain, 128, "fp16", scores=add)["loads"]
    without = hopper.chunk_times(H100, plain, 128, "fp16")["loads"]
    params = hopper.HopperParams.of(H100)                 # as fitted
    hbm = H100.level("gmem").bandwidth_bytes_per_s * params.bias_efficiency
    rows = 128 * params.bias_row_clocks / H100.clocks.tensor_hz
    assert params.bias_row_clocks > 0
    assert with_bias - without == pytest.approx(128 * 64 * 2 * H100.sm_count / hbm + rows)


def test_a_bias_not_laid_along_both_sequences_takes_the_portable_kernel(tmp_path):
    """A bias by key alone (a padding mask as numbers) is attention the portable module realises; the
    Hopper kernel loads its bias by query and key tiles and says so."""
    data = _data()
    data["inputs"]["B"] = ["x"]
    path = _write(tmp_path, data)
    assert generate(path, "h100").backend == "triton"
    with pytest.raises(NapkinError, match="not laid along both q and x"):
        generate(path, "h100", backend="hopper")


def test_two_biases_are_refused_by_the_hopper_kernel(tmp_path):
    data = _data()
    data["inputs"]["C"] = ["q", "x"]
    ops = data["ops"]
    i = next(n for n, o in enumerate(ops) if o["primitive"] == "add")
    ops.insert(i + 1, {"name": "Sc", "primitive": "add", "inputs": ["Sb", "C"], "output": ["q", "x"]})
    ops[i + 2] = dict(ops[i + 2], inputs=["Sc"])
    path = _write(tmp_path, data)
    with pytest.raises(NapkinError, match="two biases"):
        generate(path, "h100", backend="hopper")


# -- the portable kernel under Triton's interpreter -------------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(3, 70, 70), (2, 3, 70, 70), (70, 70)])
def test_the_portable_kernel_matches_float64(tmp_path, shape):
    """A bias per head (broadcast over the batch), per batch entry and head, and one for all; 70 tokens."""
    pytest.importorskip("triton")
    from helpers_kernel import written
    m = written(generate("bias_attention", "a100", backend="triton"), tmp_path)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 70, 64, generator=g).half() for _ in range(3))
    bias = (torch.randn(*shape, generator=g) * 2).half()
    out = m.attention(q, k, v, bias, causal=True)
    s = q.double() @ k.double().transpose(-1, -2) * 64 ** -0.5 + bias.double()
    s = s.masked_fill(torch.ones(70, 70, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.softmax(s, -1) @ v.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
