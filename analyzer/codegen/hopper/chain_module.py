"""The parts of a generated Hopper contraction module that its chain kernels add (analyzer.config.chain):
`_ch_mid`, each chain kernel's ops between its two contractions rendered from its plan, the header's
lines on its configuration, and its launcher (analyzer.codegen.hopper.contraction_module writes the rest).
"""

from __future__ import annotations

from analyzer.codegen.escape import py_comment, py_doc, py_str
from analyzer.codegen.hopper.elementwise import OpIds, load, ops, read_params, unpacked
from analyzer.codegen.names import Scope
from analyzer.config.chain import Chain
from analyzer.config.contraction import Table

INFINITE_AT_ZERO = ("reciprocal", "rsqrt", "div")     # ops between the contractions that make inf or nan of 0

# _ch_mid's fixed locals and the entry point's fixed names: what a diagram's names never take
MID_LOCALS = ("h", "rows", "cols", "fvec", "size_m", "size_f", "extras", "MID", "out", "a_desc", "b1_desc",
              "b2_desc", "v_desc", "c_desc", "ROWS", "BLOCK_F", "STAGES", "GROUPS", "B1_T", "B2_T", "FV",
              "CONSUMER_REGS", "tiles", "a_smem", "b1_smem", "b2_smem", "v_smem", "c_smem", "a_ready", "a_empty",
              "b1_ready", "b1_empty", "b2_ready", "b2_empty", "descs", "smem", "bars", "sched", "s")


def mid_branch(ch: Chain, p, module: Scope) -> tuple[list[str], tuple[str, ...], list[str]]:
    """One chain kernel's branch of _ch_mid: its lines, the parameters it unpacks from `extras` (the entry
    point's, in order) and what its launcher passes for them; the diagram's names claimed in a scope of
    the kernel's own under `module`."""
    ids = OpIds(module, MID_LOCALS)
    params, passed = read_params(ids, p, ch.reads, ch.mid)
    lines = [unpacked(params)]
    vals = {ch.dots[0]: "h"}
    if ch.fvec:         # the vector along the stream: its chunk landed with B1's (FV), in fp32
        vals[ch.fvec] = "fvec"
    at = {ch.m: ("rows", "size_m", "[:, None]"), ch.f: ("cols", "size_f", "[None, :]")}
    for x in ch.reads:
        lines.append(load(ids, x, p.tiles_of[x], at))
        vals[x] = ids.value(x)
    lines += ops(ch.mid, vals, ids)
    last = ch.mid[-1].name if ch.mid else ch.dots[0]
    # Columns past the stream's end landed as zeros in B1 (so H is 0 there) and B2 (so they weigh nothing in
    # the second contraction), and the loaded vectors read 0 there: only an op that makes an infinity of a
    # zero (0 x inf is nan) needs them selected away. Elsewhere no select: one on H's values as they are
    # keeps P as 16-bit halves packed at the second wgmma, under the next chunk's first, and ptxas then
    # serialises every wgmma of the loop (C7514; linear attention ran 1.6x slower, bench/chain_probe.py).
    if any(o.primitive.name in INFINITE_AT_ZERO for o in ch.mid):
        lines.append(f"out = gl.where(cols[None, :] < size_f, {vals[last]}, 0.0)")
    else:
        lines.append(f"out = {vals[last]}")
    return lines, tuple(params), passed


def mid_function(branches: list[tuple[str, list[str]]], source: str) -> str:
    """_ch_mid: a branch a chain kernel (its name, its lines), chosen by the constexpr MID."""
    out = ["@gluon.jit", "def _ch_mid(h, rows, cols, fvec, size_m, size_f, extras, MID: gl.constexpr):",
           f'    """The ops of {py_doc(source)} between each chain kernel\'s contractions, on a consumer\'s chunk of '
           "the first one's result in registers (h, fp32; rows and cols its rows and its columns of the stream; "
           "fvec the chunk of the vector along the stream that rode the ring with B1): "
           'what the second contraction takes. extras: what the branch reads besides (its entry point\'s)."""']
    for i, (kernel, lines) in enumerate(branches):
        out.append(f"    {'if' if i == 0 else 'elif'} MID == {i}:  # kernel {py_comment(repr(kernel))}")
        out += [f"        {line}" for line in lines]
    out.append("    return out")
    return "\n".join(out)


def chain_configuration_lines(g, t: Table) -> list[str]:
    """The header's lines on a chain kernel's configuration."""
    ch: Chain = t.structure
    c = t.configs[0]
    mid = ", ".join(f"{o.name} ({o.primitive.name})" for o in ch.mid)
    mid = f"then {mid} in registers" if mid else "converted in registers"
    return ["  Hopper chain kernel: one producer warp (each consumer's rows of "
            f"{ch.a} once a tile, chunks of {ch.b1} and {ch.b2} into a ring of SMEM stages, mbarriers), consumer "
            f"warpgroups ({ch.dots[0]} on wgmma, {mid} under the previous chunk's {ch.dots[1]} on wgmma), "
            "persistent blocks",
            f"  every problem size: {c.label()}, chosen by the chain kernel's model at the diagram's sizes ({g.gpu}; "
            "analyzer.config.chain); made for whole axes up to "
            f"{ch.k} = {c.width_k} and {ch.n} = {c.width_n}"]


CHAIN_PLAN = '''\
def _chain_plan(kernel, a, b1, b2, v, c, entry, size, cfg, b1_t, b2_t, widths):
    """The launch plan of a chain kernel's call signature: the configuration (CONFIGS' where cfg is None),
    checked against the register file and the widths of the whole axes it was made for."""
    if a.device.type != "cuda" or torch.cuda.get_device_capability(a.device)[0] != 9:
        raise ValueError(f"this kernel runs on a Hopper GPU (sm_90), not on {a.device}; generate it with "
                         "--backend triton for other GPUs or the interpreter")
    if cfg is None:
        cfg = _sized(entry, size)
    groups = cfg['WARPGROUPS']
    if groups not in REGISTER_CAP or cfg['BLOCK_M'] != 64 * groups:
        raise ValueError(f"config WARPGROUPS={groups}, BLOCK_M={cfg['BLOCK_M']}: each of {sorted(REGISTER_CAP)} "
                         "consumer warpgroups takes 64 rows")
    k, n = a.shape[1], c.shape[1]
    wk, wn = (1 << max(4, (w - 1).bit_length()) for w in (k, n))
    if wk > widths[0] or wn > widths[1]:
        raise ValueError(f"this chain kernel was configured for whole axes of at most {widths[0]} and {widths[1]}, "
                         f"not {k} and {n}: generate it again with --set at these sizes")
    bf = cfg['BLOCK_F']
    boxes = ([64, wk], [bf, wk] if b1_t else [wk, bf], [wn, bf] if b2_t else [bf, wn], [bf] if v is not None else None,
             [64, wn])
    tiles = triton.cdiv(a.shape[0], cfg['BLOCK_M'])
    grid = (min(tiles, _sm_count(a.device)),)  # a block an SM, each taking every grid-th tile
    constexprs = dict(ROWS=64, BLOCK_F=bf, STAGES=cfg['STAGES'], GROUPS=groups, B1_T=b1_t, B2_T=b2_t,
                      FV=v is not None, CONSUMER_REGS=CONSUMER_REGISTERS[groups])
    copied = tuple(x is not None and not _tma_able(x) for x in (a, b1, b2, v, c))
    return _Plan(kernel, cfg, grid, boxes, constexprs, copied)'''


def chain_launcher(g, ids, p, ch: Chain, t: Table, passed: list[str]) -> list[str]:
    name = ids.jit[p.name]
    c = t.configs[0]
    size_f = f"size[{py_str(p.dim(ch.f).axes[0])}]"
    vector = f"t[{py_str(ch.fvec)}]" if ch.fvec else "None"
    extras = "".join(f", {x}" for x in passed)
    body = f'''\
def {ids.launch[p.name]}(t, size, scale, cfg=None):
    """Kernel {py_doc(repr(p.name))}: {py_doc(ch.dots[0])} = {py_doc(ch.a)} . {py_doc(ch.b1)} over {py_doc(ch.k)}, its
    ops, then {py_doc(ch.dots[1])} over {py_doc(ch.f)} with {py_doc(ch.b2)}, chained in registers. t, size, scale map
    names to tensors and numbers; cfg is the configuration to launch (checked by _per_kernel), None for
    CONFIGS' choice. A call signature is planned once (_chain_plan, kept in _PLANS)."""
    a, b1, b2, v, c = t[{py_str(ch.a)}], t[{py_str(ch.b1)}], t[{py_str(ch.b2)}], {vector}, t[{py_str(ch.output)}]
    odd = (a.data_ptr() | b1.data_ptr() | b2.data_ptr() | c.data_ptr() | (0 if v is None else v.data_ptr())) & 15
    key = ({py_str(p.name)}, None if cfg is None else tuple(cfg.items()), a.shape, a.stride(), b1.shape, b1.stride(),
           b2.shape, b2.stride(), None if v is None else v.stride(), c.shape, c.stride(), a.dtype, a.device, not odd)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= PLANS_KEPT:      # a long run of new signatures: start again
            _PLANS.clear()
        plan = _PLANS[key] = _chain_plan({name}, a, b1, b2, v, c, CONFIGS[{py_str(p.name)}][None], size, cfg,
                                         {ch.b1_t}, {ch.b2_t}, ({c.width_k}, {c.width_n}))
    if odd:   # a base the TMA engine cannot address: copies of their own, and descriptors made for them
        ops = tuple(x if x is None else _tma_ready(x) for x in (a, b1, b2, v, c))
    else:     # a copy where the strides are not TMA's (16-byte multiples, the last 1)
        ops = tuple(_tma_ready(x) if copied else x for x, copied in zip((a, b1, b2, v, c), plan.copied))
    descs = plan.descriptors(ops, fresh=bool(odd))
    plan.launch((*descs, c.shape[0], {size_f}{extras}), a.device)
    if ops[4] is not c:
        c.copy_(ops[4])
'''
    return [*body.splitlines(), "", ""]


__all__ = ["CHAIN_PLAN", "MID_LOCALS", "chain_configuration_lines", "chain_launcher", "mid_branch", "mid_function"]
