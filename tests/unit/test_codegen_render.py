"""What the Triton and CUDA backends share (analyzer.codegen.render): the primitives both render, the
spelling tables each supplies, the elementwise expressions and the order in which a plan is walked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from analyzer.codegen import render
from analyzer.codegen.cuda import common as cuda_common
from analyzer.codegen.names import PlanIds, Scope
from analyzer.codegen.triton import kernel as triton_backend
from analyzer.common.errors import NapkinError
from analyzer.config.kernels import configure_kernels

SPELLINGS = {"triton": triton_backend.SPELLING, "cuda": cuda_common.SPELLING}


def test_both_backends_render_the_same_primitives():
    expected = {*render.STRUCTURAL, *render.UNARY, *render.BINARY}
    assert set(triton_backend.RENDERED) == set(cuda_common.RENDERED) == expected


def test_a_spelling_must_cover_every_elementwise_primitive():
    table = dict(triton_backend.SPELLING.unary)
    del table["gelu"]
    with pytest.raises(NapkinError, match="must cover"):
        render.Spelling(unary=table, binary=triton_backend.SPELLING.binary, zero="0", neg_inf="-inf",
                        log2e="1.44", number="{!r}")


@pytest.fixture(scope="module")
def plans():
    """A streamed plan with an online softmax (attention) and one with a sum beside its contraction
    (rmsnorm_matmul)."""
    return {name: configure_kernels(name, "h200", sized=False).kernels[0].plan
            for name in ("attention", "rmsnorm_matmul")}


class _Recorder(render.PlanWalk):
    """Records the walk instead of writing code."""

    def __init__(self, p):
        super().__init__(p)
        self.log = []

    def comment(self, text):
        self.log.append("comment")

    def primitive(self, op, *, masked):
        self.log.append(("op", op.name, masked))

    def accumulate(self, r, *, masked):
        self.log.append(("acc", r.op.name, masked))

    def init(self, r):
        self.log.append(("init", r.op.name))

    def finish(self, r):
        self.log.append(("finish", r.op.name))

    def loop_head(self):
        self.log.append("loop_head")

    def chunks_open(self):
        self.log.append("chunks_open")

    def pass_open(self, *, masked, span):
        self.log.append(("pass", masked))
        self.vals["seen"] = masked            # each pass starts from the values before the loop

    def pass_close(self, *, masked, span):
        self.log.append(("end", masked))

    def chunks_close(self):
        self.log.append("chunks_close")


@pytest.mark.parametrize("name", ["attention", "rmsnorm_matmul"])
def test_the_walk_is_head_loop_of_two_passes_then_tail(plans, name):
    p = plans[name]
    s = p.schedule
    w = _Recorder(p)
    w.walk()
    log = w.log
    reducers = [r.op.name for r in s.reducers]
    paired = {r.softmax.name for r in s.reducers if r.softmax is not None}
    body = [("acc", o.name) if o.name in reducers else ("op", o.name) for o in s.body if o.name not in paired]
    head = [("op", o.name, True) for o in s.head if o.name not in paired]
    at = log.index("loop_head")
    assert log[at + 1:at + 1 + len(head)] == head
    assert [e[1] for e in log if e[0] == "init"] == reducers
    first, second = log.index(("pass", False)), log.index(("pass", True))
    assert [e[:2] for e in log[first + 1:log.index(("end", False))]] == body
    assert all(e[2] is False for e in log[first + 1:log.index(("end", False))])
    assert [e[:2] for e in log[second + 1:log.index(("end", True))]] == body
    assert log.index("chunks_open") < first < second < log.index("chunks_close")
    assert [e[1] for e in log if e[0] == "finish"] == reducers
    assert "seen" not in w.vals                     # the values after the loop are those before it
    assert all(o.name not in {e[1] for e in log if isinstance(e, tuple) and len(e) > 1} for o in s.ops
               if o.name in paired)                 # a softmax folded into its contraction is not written


def test_softmax_folded_into_its_contraction_streams_its_input(plans):
    (r,) = plans["attention"].schedule.reducers          # softmax_dot: online, its own operands
    assert render.is_online(r)
    assert render.streamed_operands(r) == (*r.op.inputs, r.op) and render.sink_of(r) is None
    softmax = SimpleNamespace(name="P", inputs=("S",))  # softmax S -> P, then P . V: S is streamed
    folded = SimpleNamespace(op=SimpleNamespace(inputs=("P", "V"), operands=("P", "V"),
                                                primitive=SimpleNamespace(name="dot")), softmax=softmax)
    assert render.is_online(folded)
    assert render.streamed_operands(folded) == ("S", "V", softmax)


@pytest.mark.parametrize(("backend", "expected"), [
    ("triton", {"exp": "tl.exp(a)", "add": "a + b", "shift": "a + 1e-06", "scale": "a * scale_y",
                "zero": "0.0", "neg_inf": "float('-inf')"}),
    ("cuda", {"exp": "napkin::exp_(a)", "add": "a + b", "shift": "a + 1e-06f", "scale": "a * scale_y",
              "zero": "0.f", "neg_inf": "(-INFINITY)"}),
])
def test_pointwise_and_neutral_elements_in_each_spelling(backend, expected):
    spell = SPELLINGS[backend]

    class Op:
        def __init__(self, prim, **applied):
            self.name = "y"
            self.primitive = type("P", (), {"name": prim})()
            self.applied = type("A", (), applied)()

    ids = PlanIds(Scope())
    for prim in ("exp", "add", "shift", "scale"):
        op = Op(prim, offset=1e-6, scale=2)
        assert render.pointwise(spell, op, ["a", "b"], ids) == expected[prim]
    assert render.neutral(spell, "sum") == expected["zero"]
    assert render.neutral(spell, "max") == render.neutral(spell, "softmax") == expected["neg_inf"]
