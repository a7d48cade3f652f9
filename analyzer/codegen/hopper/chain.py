"""The Gluon text of the warp-specialised chain kernel for Hopper (sm_90a): chain.gluon beside this module,
and the parts of it that the diagram and its configurations decide.

The kernel realises two contractions, the second fed by the first through the diagram's elementwise ops
(analyzer.config.chain says which kernels): attention's producer and consumers (analyzer.codegen.hopper.kernel)
with the softmax replaced by the diagram's ops, `_ch_mid`, rendered from the plan by
analyzer.codegen.hopper.contraction_module; nothing a diagram names reaches the text but through the
module's scope (analyzer.codegen.names).
"""

from __future__ import annotations

from string import Template

from analyzer.codegen.hopper.contraction import helpers_and_entry
from analyzer.codegen.hopper.kernel import partitions

# The module-level names this text defines; the module's scope never hands them out
HELPERS = ("_ch_ring", "_ch_load", "_ch_producer", "_ch_vector", "_ch_consumer", "_ch_mid")

HELPER_TEXT, ENTRY = helpers_and_entry("chain.gluon", "# --- the entry point: one a chain kernel of the diagram ---")

PARTITION = Template('''\
${indent}gl.warp_specialize([
${consumers}
${indent}    (_ch_producer, (descs, smem, bars, sched, ROWS, BLOCK_F, STAGES, GROUPS, B1_T, B2_T, FV)),
${indent}], [${warps}], [${regs}])''')

CONSUMER = Template('''\
${indent}    (_ch_consumer, (descs, smem, bars, sched, extras, ROWS, BLOCK_F, STAGES, GROUPS, ${group}, B1_T, B2_T,
${indent}                    MID, FV)),''')


def render_chain(mid: str, entries: list[tuple[str, tuple[int, ...], tuple[str, ...]]]) -> str:
    """The chain kernel's text: the helpers with `mid` the text of _ch_mid (a branch a chain kernel), then
    an entry point a chain kernel in `entries`' order (its name, the numbers of consumer warpgroups its
    configurations use, and the parameters its branch of _ch_mid reads, in the order it unpacks them)."""
    out = [HELPER_TEXT.substitute(mid=mid)]
    for index, (name, warpgroups, params) in enumerate(entries):
        extras = "(" + ", ".join(params) + ",)" if params else "(size_m,)"
        out.append(ENTRY.substitute(kernel=name, partitions=partitions(warpgroups, PARTITION, CONSUMER),
                                    params="".join(f" {p}," for p in params), extras=extras, index=index))
    return "\n\n\n".join(out)


__all__ = ["HELPERS", "HELPER_TEXT", "render_chain"]
