"""The Gluon text of the warp-specialised contraction kernel for Hopper (sm_90a): contraction.gluon beside
this module, and the parts of it that the diagram and its configurations decide.

The kernel realises a contraction streamed over its contracted axis with the diagram's elementwise ops
after it (a matmul, a matmul with a bias and an activation, an MLP's down-projection): one producer warp
issuing TMA loads of A's and B's chunks into a ring of SMEM stages synchronised by mbarriers, N
consumer warpgroups each contracting its rows of the tile on wgmma with the accumulator in registers,
the diagram's tail on the finished accumulator in registers, and a TMA store; the blocks are
persistent, one an SM, and walk the tiles in bands (analyzer.config.contraction configures it). What
the diagram decides is `_mm_tail` (the ops after the contraction, rendered by `tail_function` from the
plan) and the entry point's parameters for the arrays and scales the tail reads; nothing a diagram names
reaches the text but through the module's scope (analyzer.codegen.names).
"""

from __future__ import annotations

from importlib import resources
from string import Template

from analyzer.codegen.hopper.kernel import partitions

# The module-level names this text defines; the module's scope never hands them out
HELPERS = ("_mm_ring", "_mm_tile", "_mm_producer", "_mm_consumer", "_mm_prologue", "_mm_tail", "_mm_tanh")


def helpers_and_entry(name: str, marker: str) -> tuple[Template, Template]:
    """A Gluon template file beside this module (package data) without its note, everything from the
    first @gluon.jit on, as two templates: the helpers (once a module) and, from the `marker` line on,
    the entry point (once a kernel)."""
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    body, entry = ("@gluon.jit\n" + text.split("\n@gluon.jit\n", 1)[1]).split(marker + "\n")
    return Template(body.rstrip("\n")), Template(entry.rstrip("\n"))


HELPER_TEXT, ENTRY = helpers_and_entry("contraction.gluon", "# --- the entry point: one a kernel of the diagram ---")

# The warp_specialize call for one number of consumer warpgroups: the consumers, then the producer
PARTITION = Template('''\
${indent}gl.warp_specialize([
${consumers}
${indent}    (_mm_producer, (descs, smem, bars, sched, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUPS, BAND, A_T, B_T,
${indent}                    B2, KV)),
${indent}], [${warps}], [${regs}])''')

CONSUMER = Template('''\
${indent}    (_mm_consumer, (descs, smem, bars, sched, extras, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUPS, ${group},
${indent}                    BAND, A_T, B_T, B2, TAIL, PRO, KV)),''')

TANH = '''


@gluon.jit
def _mm_tanh(x):
    """tanh on the special function unit: PTX tanh.approx.f32 (sm_75 and later), one operation; its
    relative error is about 2^-11, below the fp16 and bf16 rounding of the output that follows."""
    return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=gl.float32, is_pure=True,
                                     pack=1)'''


def render_kernel(tail: str, entries: list[tuple[str, tuple[int, ...], tuple[str, ...]]]) -> str:
    """The kernel text: the helpers with `tail` the text of _mm_prologue and _mm_tail (a branch a kernel
    each), then an entry
    point a kernel, in `entries`' order (its name, the numbers of consumer warpgroups its configurations
    use, and the parameters its branch of the tail reads, in the order that branch unpacks them)."""
    out = [HELPER_TEXT.substitute(tail=tail)]
    for index, (name, warpgroups, params) in enumerate(entries):
        listed = "".join(f"{p}, " for p in params)
        # the tuple the consumers pass on; a kernel whose tail reads nothing passes size_m, unused
        extras = "(" + ", ".join(params) + ",)" if params else "(size_m,)"
        out.append(ENTRY.substitute(kernel=name, partitions=partitions(warpgroups, PARTITION, CONSUMER),
                                    params=listed, extras=extras,
                                    index=index))
    return "\n\n\n".join(out)


__all__ = ["ENTRY", "HELPERS", "HELPER_TEXT", "TANH", "helpers_and_entry", "render_kernel"]
