"""The generated attention as a torch custom op (`attention_op()`): one node of a torch.compile graph,
run here by Triton's interpreter on the CPU; bench/host_cost.py runs the Hopper module's op compiled and
captured in a CUDA graph on the GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from helpers_kernel import generated, rel_err, written  # noqa: E402


@pytest.mark.slow(seconds=6)    # dynamo tracing and the interpreter's runs
def test_the_op_stays_one_node_of_a_compiled_graph_and_matches_the_call(tmp_path):
    """torch.compile(fullgraph=True) traces through the op without a break (its fake implementation gives
    the output's shape and type), and the compiled function returns what the plain call does; a second
    import of the same text finds its op registered, not a clash."""
    m = written(generated("bias_attention"), tmp_path)
    op = m.attention_op()
    assert m.attention_op() is op and m.OP_NAME.startswith("napkin::attention_")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 64, generator=gen).half() for _ in range(3))
    bias = torch.randn(1, 2, 40, 40, generator=gen).half()

    @torch.compile(backend="eager", fullgraph=True)    # dynamo traces the op with its fake
    def scaled(q, k, v, bias):
        return op(q, k, v, bias) * 2

    assert rel_err(scaled(q, k, v, bias), 2 * m.attention(q, k, v, bias).double()) < 1e-3
    again = written(generated("bias_attention"), tmp_path)
    assert again.OP_NAME == m.OP_NAME and callable(again.attention_op())
