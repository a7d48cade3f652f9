"""The Gluon text of the warp-specialised attention kernel for Hopper (sm_90a): attention.gluon beside this
module, and the parts of it that the diagram and its configurations decide.

The kernel realises the configuration analyzer.config.hopper derives (Sections 5.5-5.7 and 6): one
producer warp issuing TMA loads into a ring of SMEM stages synchronised by mbarriers, N consumer
warpgroups running wgmma with the accumulators in registers, and the overlap the configuration names.
Its text is attention.gluon (package data, a string.Template of Gluon source), whose identifiers are the
generator's own (reserved in the module's scope: HELPERS, analyzer.codegen.hopper.module), so nothing a
diagram names reaches it; the diagram decides what the kernel computes through the plan the module
checks (causal or not, grouped heads, the scale), its constexprs, and the chain of scores between the
two contractions (analyzer.config.scores), which `score_function` renders from the diagram's ops: the
only text that differs from one attention diagram to another. `partitions` writes the warp_specialize
call for each number of consumer warpgroups the configurations use.
"""

from __future__ import annotations

from importlib import resources
from string import Template

from analyzer.codegen.escape import py_comment, py_doc
from analyzer.config.scores import MASKS, SOFTMAX, Scores

# The module-level names this text defines; the module's scope never hands them out
HELPERS = ("_attn_ring", "_attn_turns", "_attn_turn", "_attn_place", "_attn_tile", "_attn_producer", "_attn_load",
           "_attn_scores", "_attn_probabilities", "_attn_qk", "_attn_v", "_attn_operand", "_attn_fp8_keys",
           "_attn_descale", "_attn_step", "_attn_consumer", "_attn_tanh", "_attn_exp2", "_attn_rescale",
           "_attn_e4m3", "_attn_alibi_cols", "_attn_setup", "_attn_queries", "_attn_head", "_attn_last_pv",
           "_attn_epilogue", "_attn_steps", "_attn_keep", "_attn_band")

# The kernel's text: attention.gluon (package data beside this module) without its note, everything from
# the first @gluon.jit on; $kernel, $scores and $partitions are what render_kernel fills in
TEMPLATE = resources.files(__package__).joinpath("attention.gluon").read_text(encoding="utf-8")
KERNEL = Template("@gluon.jit\n" + TEMPLATE.split("\n@gluon.jit\n", 1)[1].rstrip("\n"))

# The warp_specialize call for one number of consumer warpgroups: the consumers, then the producer, each
# with the grouped values the kernel gathers before it (attention.gluon)
PARTITION = Template('''\
${indent}gl.warp_specialize([
${consumers}
${indent}    (_attn_producer, (descs, smem, bars, sched, bias_rows, ROWS, BLOCK_X, STAGES, GROUPS, RIGHT, LEFT,
${indent}                      BALANCE, PREFETCH, SPLIT, BIAS, FP8)),
${indent}], [${warps}], [${regs}])''')

CONSUMER = Template('''\
${indent}    (_attn_consumer, (descs, smem, bars, turns, sched, scales, slopes, sinks, lses, ROWS, BLOCK_X, STAGES,
${indent}                      GROUPS, ${group}, RIGHT, LEFT, BALANCE, PREFETCH, ALIBI, BIAS, SINK, INTRA, INTER,
${indent}                      SOFTMAX, SPLIT, LSE, descales, FP8, QUANT, KEY_BLOCK, LINEAR, EXP2,
${indent}                      LAZY)),''')


# The Gluon of each elementwise op on the scores (analyzer.config.scores.SFU_PER_SCORE counts its cost)
SCORE_OPS = {
    "scale": ("s = s * score_scale", "multiplied by its factor (an argument)"),
    "relu": ("s = gl.maximum(s, 0.0)", "max(v, 0)"),
    "exp": ("s = gl.exp2(s * 1.4426950408889634)", "exp(v) = exp2(v log2 e): one exp2 a score"),
    "sigmoid": ("s = 0.5 * _attn_tanh(0.5 * s) + 0.5", "1/(1 + exp(-v)) = tanh(v/2)/2 + 1/2: one tanh a score"),
    "tanh": ("s = _attn_tanh(s)", "one tanh a score"),
    "softcap": ("s = {cap} * _attn_tanh(s * {inverse})", "cap tanh(v / cap): one tanh a score"),
    "alibi": ("s = s - slope * gl.abs(rows.to(gl.float32)[:, None] - cols.to(gl.float32)[None, :])",
              "ALiBi's v - m |i - j|, m the head's slope: positions as floats (exact below 2^24), a subtract and "
              "a multiply-add a score"),
    "add": ("s = s + bias.to(gl.float32)", "plus the chunk's tile of the bias (landed in SMEM with V)"),
    "alibi shifted": ("s = s + _attn_alibi_cols(slope, slope_cols, col0, cols, ALIBI)[None, :]",
                      "ALiBi's v - m |i - j| as v + m (j - r), r the tile's first row (_attn_alibi_cols: held "
                      "or recomputed a chunk): the softmax ignores the row's part, -m (i - r), and the mask keeps "
                      "j <= i; one add a score"),
}
TANHS = ("sigmoid", "tanh", "softcap")     # the ops that call _attn_tanh

TANH = '''


@gluon.jit
def _attn_tanh(x):
    """tanh on the special function unit: PTX tanh.approx.f32 (sm_75 and later), one operation where
    1/(1 + exp(-v)) takes two (an exp and a reciprocal); its relative error is about 2^-11, below
    fp16's and bf16's rounding of the probabilities that follow."""
    return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=gl.float32, is_pure=True,
                                     pack=1)'''


def score_function(scores: Scores, source: str) -> str:
    """`_attn_scores`: the ops of the diagram `source` on a chunk of scores, in its order, one line each."""
    lines = ["@gluon.jit",
             "def _attn_scores(s, score_scale, slope, slope_cols, bias, rows, col0, cols, size_x,",
             "                 MASKED: gl.constexpr, ALIBI: gl.constexpr):",
             f'    """The scores\' ops of {py_doc(source)}, in its order; '
             + ("none: the online softmax follows." if not scores.ops else
                ("the online softmax follows." if scores.softmax else "their values weight V as they are."))
             + " Where MASKED, the keys past size_x are masked too." + '"""']
    folded = scores.folded
    # The keys' end joins every mask's bound (min(i + right, size_x - 1) a row, one compare a score, not
    # two); the ops after a mask carry its -inf to what the normalisation ignores (analyzer.config.scores),
    # so it is the same as masking them after every op. Without a mask the end is masked after the ops.
    masked = any(o.primitive in MASKS for o in scores.ops)
    for op in scores.ops:
        if folded and op.primitive == "scale":
            lines.append(f"    # {py_comment(op.name)}: scale, folded into the softmax's exp2 factor (the ops after it are "
                         "linear in it)")
            continue
        if op.primitive in MASKS:       # only where a chunk may hold masked keys: outside the mask's band
            # the band's edges are whole numbers of the diagram's, written as int literals
            words = []
            last = "size_x - 1"
            if op.right is not None:
                last = "gl.minimum(rows" + (f" + {int(op.right)}" if op.right else "") + ", size_x - 1)"
                words.append("after the query" if op.right == 0 else f"more than {int(op.right)} keys after it")
            if op.window is not None:
                code = f"_attn_band(s, cols, rows - {int(op.window)}, {last})"
                words.append(f"more than {int(op.window) - 1} keys before it")
            else:
                code = f"_attn_keep(s, cols, {last})"
            what = "-inf " + " or ".join(words) + " or past the keys' end"
            lines += [f"    if MASKED:  # {py_comment(op.name)}: {op.primitive}, {what}",
                      f"        s = {code}"]
            continue
        code, what = SCORE_OPS[op.lowering]
        if op.cap is not None:      # a number of the diagram, written as a literal (repr of a float)
            code = code.format(cap=repr(float(op.cap)), inverse=repr(1 / float(op.cap)))
        lines.append(f"    {code}  # {py_comment(op.name)}: {op.primitive}, {what}")
    if not masked:
        ignored = 'float("-inf")' if scores.softmax else "0.0"
        lines += ["    if MASKED:  # the keys past the end weigh nothing",
                  f"        s = gl.where(cols[None, :] < size_x, s, {ignored})"]
    lines.append("    return s")
    text = "\n".join(lines)
    return text + (TANH if any(o.primitive in TANHS for o in scores.ops) else "")


def partitions(warpgroups: tuple[int, ...], partition: Template = PARTITION, consumer: Template = CONSUMER) -> str:
    """The kernel's warp_specialize call for each number of consumer warpgroups its configurations use
    (a branch per number: Gluon takes the partitions as a literal list, one tuple of arguments each);
    `partition` and `consumer` are the kernel's call and consumer entry (the contraction kernel has its own)."""
    out = []
    for i, n in enumerate(sorted(set(warpgroups))):
        keyword = "if" if i == 0 else "elif"
        body = partition.substitute(
            indent="        ",
            consumers="\n".join(consumer.substitute(indent="        ", group=g) for g in range(n)),
            warps=", ".join(["4"] * (n - 1) + ["1"]),
            regs=", ".join(["CONSUMER_REGS"] * (n - 1) + ["24"]))
        out.append(f"    {keyword} GROUPS == {n}:\n{body}")
    out.append("    else:\n        gl.static_assert(False, \"no partition list for this many consumer warpgroups\")")
    return "\n".join(out)


def render_kernel(name: str, warpgroups: tuple[int, ...], scores: Scores = SOFTMAX, source: str = "") -> str:
    """The kernel text, its entry point named `name` (claimed in the module's scope), its chain of scores
    `scores` read off the diagram file `source`."""
    return KERNEL.substitute(kernel=name, partitions=partitions(warpgroups), scores=score_function(scores, source))


__all__ = ["HELPERS", "SCORE_OPS", "render_kernel", "score_function"]
