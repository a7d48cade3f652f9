"""Write the standalone Python module of the Hopper contraction kernel: header, the Gluon kernel
(analyzer.codegen.hopper.contraction: the helpers once, an entry point a kernel of the diagram), each
kernel's tail rendered from its plan, the configurations by problem size (analyzer.config.contraction),
the launchers that build the TMA descriptors, and the torch wrapper (analyzer.codegen.pymodule).

Which configured diagrams it realises is analyzer.config.contraction.realise's to say.
"""

from __future__ import annotations

from analyzer.codegen.escape import py_comment, py_doc, py_str
from analyzer.codegen.helpers_text import PER_KERNEL_HELPER
from analyzer.codegen.hopper import chain_module
from analyzer.codegen.hopper.chain import HELPERS as CHAIN_HELPERS
from analyzer.codegen.hopper.chain import render_chain
from analyzer.codegen.hopper.contraction import HELPERS, TANH, render_kernel
from analyzer.codegen.hopper.elementwise import OpIds, load, ops, read_params, unpacked
from analyzer.codegen.hopper.module import PLAN_HELPERS, TMA_HELPERS
from analyzer.codegen.names import Scope
from analyzer.codegen.pymodule import (
    MODULE_GLOBALS,
    checked_python,
    guarded_imports,
    header,
    module_ids,
    sized_helpers,
    wrapper,
)
from analyzer.config.chain import Chain
from analyzer.config.contraction import Structure, Table

GLOBALS = (*MODULE_GLOBALS, *HELPERS, *CHAIN_HELPERS, "_chain_plan", "gluon", "gl", "mbarrier", "tma", "warpgroup_mma", "warpgroup_mma_wait",
           "fence_async_shared", "TensorDescriptor", "GL_DTYPES", "REGISTER_CAP", "CONSUMER_REGISTERS", "BANDS",
           "_tma_ready", "_tma_able", "_descriptor", "_sm_count", "knobs", "driver", "_Plan", "_PLANS",
           "PLANS_KEPT", "_plan", "_unbound", "_bound")

# The tail's fixed locals and the entry point's fixed parameters: what a diagram's names never take
TAIL_LOCALS = ("acc", "acc2", "rows", "cols", "size_m", "size_n", "extras", "TAIL", "out", "a", "a_op", "a_rows",
               "ks", "kvec", "stat", "row_sum", "v_desc", "v_smem", "KV", "PRO", "a_desc", "b_desc",
               "b2_desc", "c_desc", "size_k", "BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUPS", "BAND", "A_T",
               "B_T", "B2", "CONSUMER_REGS", "tiles", "a_smem", "b_smem", "b2_smem", "c_smem", "ready", "empty",
               "descs", "smem", "bars", "sched", "s")

def tail_branch(st: Structure, p, module: Scope) -> tuple[list[str], list[str], tuple[str, ...], list[str]]:
    """One kernel's branches of _mm_prologue and _mm_tail: their lines (indented for the branch), the
    parameters both unpack from `extras` (the entry point's, in order) and what its launcher passes for
    them (expressions of the launcher's t, scale)."""
    ids = OpIds(module, TAIL_LOCALS)
    params, passed = read_params(ids, p, st.reads, (*st.prologue, *st.tail))
    unpack = unpacked(params)
    return (_prologue_lines(st, p, ids, unpack), _tail_lines(st, p, ids, unpack), tuple(params), passed)


def _prologue_lines(st: Structure, p, ids: OpIds, unpack: str) -> list[str]:
    """The prologue's branch: A's chunk `a` (fp32) -> the contractions' first operand, and the row sum."""
    if not st.in_registers:
        return ["a_op = a  # no prologue: A goes to wgmma as it landed"]
    at = {st.m: ("a_rows", "size_m", "[:, None]"), st.k: ("ks", "size_k", "[None, :]")}
    vals = {st.a: "a"}
    if st.kvec:         # the vector along the stream: its chunk landed with A's (KV), in fp32
        vals[st.kvec] = "kvec"
    lines = [unpack]
    for x in dict.fromkeys(x for o in st.prologue for x in o.inputs if x in st.reads):
        lines.append(load(ids, x, p.tiles_of[x], at))
        vals[x] = ids.value(x)
    lines += ops(st.prologue, vals, ids)
    for op in st.sums:       # a running sum a row over the stream, item by item (summed across once a tile);
        # chunks past the end landed as zeros
        lines.append(f"stat = stat + {vals[op.inputs[0]]}  # {py_comment(op.name)}: sum over {py_comment(st.k)}")
    lines.append(f"a_op = {vals[st.a_op]}")
    return lines


def _tail_lines(st: Structure, p, ids: OpIds, unpack: str) -> list[str]:
    lines = [unpack]
    vals = {st.dots[0]: "acc"}
    if len(st.dots) > 1:
        vals[st.dots[1]] = "acc2"
    for op in st.sums:
        vals[op.name] = "stat[:, None]"     # the rows' sums, summed across the columns
    at = {st.m: ("rows", "size_m", "[:, None]"), st.n: ("cols", "size_n", "[None, :]")}
    for x in dict.fromkeys(x for o in st.tail for x in o.inputs if x in st.reads):
        lines.append(load(ids, x, p.tiles_of[x], at))
        vals[x] = ids.value(x)
    lines += ops(st.tail, vals, ids)
    lines.append(f"out = {vals[st.output]}")
    return lines


def tail_function(branches: list[tuple[str, list[str], list[str]]], source: str) -> str:
    """_mm_prologue and _mm_tail: a branch a kernel (its name, its prologue's and its tail's lines),
    chosen by the constexpr TAIL."""
    out = ["@gluon.jit",
           "def _mm_prologue(a, a_rows, ks, kvec, stat, size_m, size_k, extras, TAIL: gl.constexpr):",
           f'    """The ops of {py_doc(source)} before each kernel\'s contractions, on a consumer\'s chunk of A in '
           "registers (fp32; a_rows and ks its rows and its columns of the stream; kvec the chunk of the vector "
           "along the stream that rode the ring with it): the contractions' first operand, and `stat` with the "
           'chunk added to the running sum a row (item by item), where the kernel has one."""']
    for i, (kernel, prologue, _) in enumerate(branches):
        out.append(f"    {'if' if i == 0 else 'elif'} TAIL == {i}:  # kernel {py_comment(repr(kernel))}")
        out += [f"        {line}" for line in prologue]
    out += ["    return a_op, stat", "", "", "@gluon.jit",
            "def _mm_tail(acc, acc2, stat, rows, cols, size_m, size_n, extras, TAIL: gl.constexpr):",
            f'    """The ops of {py_doc(source)} after each kernel\'s contractions, on the finished accumulators '
            "(acc, and acc2 where a second contraction shares A) and the rows' running sum (stat) in registers: "
            'a branch a kernel (TAIL). rows and cols are the tile\'s indices, extras what the branch reads '
            'besides (its entry point\'s)."""']
    for i, (kernel, _, tail) in enumerate(branches):
        out.append(f"    {'if' if i == 0 else 'elif'} TAIL == {i}:  # kernel {py_comment(repr(kernel))}")
        out += [f"        {line}" for line in tail]
    out.append("    return out")
    return "\n".join(out)


def contraction_module(g) -> str:
    """The module of kernel file `g` (its `contraction` tables: a Table a kernel)."""
    ids = module_ids(g, GLOBALS)
    tables: tuple[Table, ...] = g.contraction.tables
    out = ['"""' + py_doc(f"{g.diagram.name}: a Gluon kernel for Hopper (sm_90a) generated by napkin from "
                          f"{g.source_file}.") + '"""', ""]
    out += ["# " + py_comment(line)
            for line in header(g, ids.wrapper, configurations=_configuration_lines(g, tables))]
    out += ["", "import math", "import os", ""]
    out += guarded_imports(["import torch", "import triton", "from triton import knobs",
                            "from triton.runtime import driver", "from triton.experimental import gluon",
                            "from triton.experimental.gluon import language as gl",
                            "from triton.experimental.gluon.language.nvidia.hopper import (",
                            "    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)",
                            "from triton.experimental.gluon.nvidia.hopper import TensorDescriptor"],
                           "torch and Triton with Gluon")
    out += ["", f"__all__ = [{py_str(ids.wrapper)}]", "", ""]
    branches, entries, passed = [], [], {}
    mids, chain_entries = [], []
    warpgroups = tuple(sorted(g.contraction.register_cap))
    for k, t in zip(g.kernels, tables, strict=True):
        if isinstance(t.structure, Chain):
            lines, params, given = chain_module.mid_branch(t.structure, k.plan, ids.scope)
            mids.append((k.plan.name, lines))
            chain_entries.append((ids.jit[k.plan.name], warpgroups, params))
        else:
            prologue, tail, params, given = tail_branch(t.structure, k.plan, ids.scope)
            branches.append((k.plan.name, prologue, tail))
            entries.append((ids.jit[k.plan.name], warpgroups, params))
        passed[k.plan.name] = given
    kernels = []
    if entries:
        kernels.append(render_kernel(tail_function(branches, g.source_file), entries))
    if chain_entries:
        kernels.append(render_chain(chain_module.mid_function(mids, g.source_file), chain_entries))
    text = "\n\n\n".join(kernels)
    if "_mm_tanh(" in text:      # a tail's or a chain's ops run tanh on the SFU: the helper, once a module
        text += TANH
    out.append(text)
    out += ["", ""]
    out += _configs(g, tables)
    out += _launcher_helpers() if entries else []
    out += [*chain_module.CHAIN_PLAN.splitlines(), "", ""] if chain_entries else []
    for k, t in zip(g.kernels, tables, strict=True):
        if isinstance(t.structure, Chain):
            out += chain_module.chain_launcher(g, ids, k.plan, t.structure, t, passed[k.plan.name])
        else:
            out += _launcher(g, ids, k.plan, t.structure, passed[k.plan.name])
    keys = ", ".join(tables[0].configs[0].entry())
    out += wrapper(g, ids, config=keys, strides=False)
    return checked_python("\n".join(out).rstrip() + "\n", g.source_file)


def _configuration_lines(g, tables: tuple[Table, ...]) -> dict[str, list[str]]:
    """The header's lines on each kernel's configurations: the model's choice by problem size."""
    out = {}
    for t in tables:
        if isinstance(t.structure, Chain):
            out[t.kernel] = chain_module.chain_configuration_lines(g, t)
            continue
        lines = ["  Hopper contraction kernel: one producer warp (TMA loads into a ring of SMEM stages, "
                 "mbarriers), consumer warpgroups (wgmma, the tail on the accumulators in registers), "
                 f"persistent blocks; tail: {', '.join(f'{o.name} ({o.primitive.name})' for o in t.structure.tail) or 'none'}",
                 "  by problem size (the call's nearest size, each axis alike):", "      size  config"]
        lines += [f"    {n:>6}  {chr(65 + i):>6}" for n, i in zip(t.lengths, t.cells, strict=True)]
        lines += [f"    {chr(65 + i)}: {c.label()}" for i, c in enumerate(t.configs)]
        lines.append(f"  from the configurations ranked by the contraction kernel's model ({g.gpu}; "
                     "analyzer.config.contraction)")
        out[t.kernel] = lines
    return out


def _entry(c) -> str:
    return "{" + ", ".join(f"{py_str(k)}: {v!r}" for k, v in c.entry().items()) + "}"


def _configs(g, tables: tuple[Table, ...]) -> list[str]:
    lines = ["# The configuration of each kernel by problem size: a row per length in LENGTHS (the diagram's default",
             "# sizes scaled alike, the geometric mean of each point's; a call takes the nearest to the geometric",
             "# mean of its sizes, in log2), each an index",
             "# into 'configs'. BLOCK_M x BLOCK_N: a tile of the output; BLOCK_K: a chunk of the contracted axis;",
             "# STAGES: the ring's SMEM buffers; WARPGROUPS: consumer warpgroups, BLOCK_M / WARPGROUPS rows each;",
             "# a chain kernel's BLOCK_F: a chunk of the axis its two contractions stream.",
             f"LENGTHS = {tables[0].lengths!r}", "INSTANCES = (1,)", "CONFIGS = {"]
    for t in tables:
        lines += [f"    {py_str(t.kernel)}: {{", "        None: {", "            'configs': ("]
        lines += [f"                {_entry(c)},  # {chr(65 + i)}" for i, c in enumerate(t.configs)]
        lines += ["            ),", "            'by_size': ("]
        lines += [f"                ({i!r},),  # length {n}" for n, i in zip(t.lengths, t.cells, strict=True)]
        lines += ["            ),", "        },", "    },"]
    lines += ["}", "CONFIG = CONFIGS  # the same, under the short name",
              "# What a call's config= gives a kernel: these keys; True: a power of two, False: a positive int",
              "CONFIG_KEYS = {"]
    lines += [f"    {py_str(t.kernel)}: {{" + ", ".join(f"{py_str(key)}: {_power_of_two(t, key)!r}"
                                                 for key in t.configs[0].entry()) + "}," for t in tables]
    lines += ["}",
              "# Per number of consumer warpgroups: the registers a thread at launch (maxnreg), and what",
              "# setmaxnreg gives a consumer thread (the producer keeps 24): the register file of " + py_comment(g.gpu),
              f"REGISTER_CAP = {g.contraction.register_cap!r}",
              f"CONSUMER_REGISTERS = {g.contraction.consumer_registers!r}",
              "GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}"]
    lines += sized_helpers(g)
    lines += ["", "", *PER_KERNEL_HELPER.splitlines()]
    lines += ["", "", *TMA_HELPERS.splitlines(), "", "", *PLAN_HELPERS.splitlines(), "", ""]
    return lines


def _power_of_two(t: Table, key: str) -> bool:
    """Whether a call's config= must give `key` as a power of two: the tiles and chunks (TMA boxes,
    gl.arange), but not a chain kernel's rows, 64 a consumer warpgroup (_chain_plan checks them)."""
    return key.startswith("BLOCK") and not (isinstance(t.structure, Chain) and key == "BLOCK_M")


def _launcher_helpers() -> list[str]:
    body = '''\
def _band(block_m, block_n, sms):
    """Row tiles per band of the persistent blocks' walk: one wave covers a square of the output
    (analyzer.config.plan.band_rows, Theorem 2)."""
    return max(1, round(math.sqrt(sms * block_n / block_m)))


def _plan(kernel, a, b, b2, v, c, entry, size, cfg, a_t, b_t, pro):
    """The launch plan of a call signature: the configuration (CONFIGS' choice at the call's sizes where
    cfg is None), checked against the register file, and what follows from it."""
    if a.device.type != "cuda" or torch.cuda.get_device_capability(a.device)[0] != 9:
        raise ValueError(f"this kernel runs on a Hopper GPU (sm_90), not on {a.device}; generate it with "
                         "--backend triton for other GPUs or the interpreter")
    if cfg is None:
        cfg = _sized(entry, size)
    groups = cfg['WARPGROUPS']
    if groups not in REGISTER_CAP or cfg['BLOCK_M'] % groups or cfg['BLOCK_M'] // groups not in (64, 128):
        raise ValueError(f"config WARPGROUPS={groups}, BLOCK_M={cfg['BLOCK_M']}: each of {sorted(REGISTER_CAP)} "
                         "consumer warpgroups takes 64 or 128 rows")
    rows = cfg['BLOCK_M'] // groups
    bk, bn = cfg['BLOCK_K'], cfg['BLOCK_N']
    box_b = [bn, bk] if b_t else [bk, bn]
    boxes = ([bk, rows] if a_t else [rows, bk], box_b, box_b if b2 is not None else None,
             [bk] if v is not None else None, [rows, bn])
    size_m, size_n = c.shape
    tiles = triton.cdiv(size_m, cfg['BLOCK_M']) * triton.cdiv(size_n, bn)
    sms = _sm_count(a.device)
    grid = (min(tiles, sms),)  # a block an SM, each taking every grid-th tile
    constexprs = dict(BLOCK_M=cfg['BLOCK_M'], BLOCK_N=bn, BLOCK_K=bk, STAGES=cfg['STAGES'], GROUPS=groups,
                      BAND=_band(cfg['BLOCK_M'], bn, sms), A_T=a_t, B_T=b_t, B2=b2 is not None, PRO=pro,
                      KV=v is not None, CONSUMER_REGS=CONSUMER_REGISTERS[groups])
    copied = tuple(x is not None and not _tma_able(x) for x in (a, b, b2, v, c))
    return _Plan(kernel, cfg, grid, boxes, constexprs, copied)
'''
    return [*body.splitlines(), "", ""]


def _launcher(g, ids, p, st: Structure, passed: list[str]) -> list[str]:
    name = ids.jit[p.name]
    second = f"t[{py_str(st.bs[1])}]" if len(st.bs) > 1 else "None"
    vector = f"t[{py_str(st.kvec)}]" if st.kvec else "None"
    size_k = f"size[{py_str(p.dim(st.k).axes[0])}]"
    extras = "".join(f", {x}" for x in passed)
    body = f'''\
def {ids.launch[p.name]}(t, size, scale, cfg=None):
    """Kernel {py_doc(repr(p.name))}: {py_doc(' and '.join(f'{st.a} . {b}' for b in st.bs))} over {py_doc(st.k)},
    then its tail, into {py_doc(st.output)}. t, size, scale map names to tensors and numbers (the TMA
    descriptors read the strides off the tensors); cfg is the configuration to launch (checked by
    _per_kernel), None for CONFIGS' choice. A call signature is planned once (_plan, kept in _PLANS)."""
    a, b, b2, v, c = t[{py_str(st.a)}], t[{py_str(st.bs[0])}], {second}, {vector}, t[{py_str(st.output)}]
    odd = (a.data_ptr() | b.data_ptr() | c.data_ptr() | sum(x.data_ptr() for x in (b2, v) if x is not None)) & 15
    key = ({py_str(p.name)}, None if cfg is None else tuple(cfg.items()), a.shape, a.stride(), b.shape, b.stride(),
           None if b2 is None else b2.stride(), None if v is None else v.stride(), c.stride(), a.dtype, a.device,
           not odd)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= PLANS_KEPT:      # a long run of new signatures: start again
            _PLANS.clear()
        plan = _PLANS[key] = _plan({name}, a, b, b2, v, c, CONFIGS[{py_str(p.name)}][None], size, cfg, {st.a_t},
                                   {st.b_t[0]}, {st.in_registers})
    if odd:   # a base the TMA engine cannot address: copies of their own, and descriptors made for them
        ops = tuple(x if x is None else _tma_ready(x) for x in (a, b, b2, v, c))
    else:     # a copy where the strides are not TMA's (16-byte multiples, the last 1)
        ops = tuple(_tma_ready(x) if copied else x for x, copied in zip((a, b, b2, v, c), plan.copied))
    descs = plan.descriptors(ops, fresh=bool(odd))
    plan.launch((*descs, c.shape[0], c.shape[1], {size_k}{extras}), a.device)
    if ops[4] is not c:
        c.copy_(ops[4])
'''
    return [*body.splitlines(), "", ""]


__all__ = ["contraction_module", "tail_branch", "tail_function"]
