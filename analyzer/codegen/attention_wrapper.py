"""The attention wrapper's text (`attention(q, k, v, causal=..., out=None, config=None)`), laid out and
checked as torch.nn.functional.scaled_dot_product_attention is called: its checks, the output, the
scores' other inputs broadcast, and the tensors and strides its launchers take (analyzer.codegen.pymodule
.wrapper writes the rest)."""

from __future__ import annotations

import textwrap

from analyzer.codegen.call import signature_cache
from analyzer.codegen.escape import py_doc, py_str
from analyzer.codegen.helpers_text import OVERLAP_HELPER
from analyzer.codegen.names import Scope
from analyzer.codegen.wrapper_text import INDENT, common_checks, config_check, config_doc
from analyzer.diagram.interface import Attention

# The docstring's lines on return_lse (the parameter's name may differ where a score input takes it)
LSE_DOC = """{indent}With {flag}=True it returns (out, lse): lse is each query row's log-sum-exp of its scores (natural
{indent}log, float32, (batch, heads, seqlen); -inf for a row that sees no key), what merges the outputs of
{indent}attention over parts of the keys (context parallelism)."""

# The docstring's lines on FP8 (an FP8 module's wrapper alone)
FP8_DOC = """{indent}FP8 (e4m3, FlashAttention-3's): 16-bit q, k and v are quantised in the call (quantize, block
{indent}scales); e4m3 ones, as quantize(q, k, v) returns them, come with {flag}=(q_scale, k_scale, v_scale),
{indent}its scales, and give a bfloat16 output unless `out` is float16."""

# What an FP8 wrapper does once the checks have passed: the inputs in e4m3 and their scales, the output's type
FP8_INPUTS = """\
if dtype == torch.float8_e4m3fn:     # quantised by the caller: the output in 16 bits
    if {flag} is None:
        raise ValueError("e4m3 q, k and v take {flag}=(q_scale, k_scale, v_scale), as quantize() returns them")
    dtype = out.dtype if isinstance(out, torch.Tensor) and out.dtype in DTYPES[:2] else torch.bfloat16
elif {flag} is not None:
    raise ValueError("{flag} is for e4m3 q, k and v (quantize's); 16-bit ones are quantised in the call")
else:
    (q, k, v), {flag} = quantize(q, k, v)
if len({flag}) != 3 or not all(isinstance(s, torch.Tensor) and s.dtype == torch.float32 and s.is_contiguous()
                               and s.device == device for s in {flag}) \\
        or {flag}[0].shape != (batch, heads_q, -(-seq_q // QUANT_BLOCK)) \\
        or {flag}[1].shape != (batch, heads_kv, -(-seq_k // KEY_BLOCK)) \\
        or {flag}[2].shape != (batch, heads_kv, v.shape[3]):
    raise ValueError("{flag} must be quantize()'s float32 scales of these q, k and v (contiguous, on their device)")
"""

def _head_dim_checks(g, r: Attention) -> str:
    """The wrapper's checks of the head dims, indented as the wrapper's body (dedented with it): one
    head-dim axis for q, k and v, or (multi-head latent attention) a value axis of its own, at most as
    wide as the value dim the file is configured for."""
    if r.value_dim == r.head_dim:
        return textwrap.indent(textwrap.dedent(f"""\
        if k.shape[3] != head_dim or v.shape[3] != head_dim:
            raise ValueError(f"head dims differ: q {{head_dim}}, k {{k.shape[3]}}, v {{v.shape[3]}} "
                             {py_str(f"(the diagram has one head-dim axis {r.head_dim})")})"""), "    ")
    widest = g.value_dim
    lines = """\
    if k.shape[3] != head_dim:
        raise ValueError(f"q and k head dims differ: {head_dim} and {k.shape[3]}")
    value_dim = v.shape[3]"""
    if widest is not None:
        lines += f"""
    if value_dim > {int(widest)}:
        raise ValueError(f"v's head dim {{value_dim}} is wider than the {int(widest)} this file is configured "
                         {py_str(f"for (regenerate with --set {r.value_dim}=N)")})"""
    return textwrap.indent(textwrap.dedent(lines), "    ")


def extra_shape(r: Attention, axes: tuple[str, ...], *, shown: bool = False) -> list[str]:
    """The call's shape of an extra input of the scores with diagram axes `axes` (the wrapper's size names,
    or with `shown` as messages and docs name them): (batch, heads), then its own sequence axes in the
    diagram's order."""
    seqs = {r.seq_q: "seq_q", r.seq_k: "seq_k"}
    return ["batch", "heads" if shown else "heads_q", *(seqs[a] for a in axes if a in seqs)]


def _band_doc(r: Attention) -> str:
    """The end of the wrapper's first sentence: which keys a query sees under a sliding window or a band."""
    if r.window:
        return f", with a sliding window:\n{INDENT}query i sees keys i - {r.window - 1} .. i only."
    if r.band is None or r.causal:
        return "."
    first = "0" if r.band.before is None else f"i - {r.band.before}"
    last = "the last" if r.band.after is None else f"i + {r.band.after}"
    return f", with a band:\n{INDENT}query i sees keys {first} .. {last} only."


def attention_wrapper(g, r: Attention, head_dims: list[int] | None, param: str | None, keys: str | None,
                       device: str | None, strides: bool, scope: Scope,
                       returned: tuple[str, str] | None = None, descale: str | None = None) -> list[str]:
    """The wrapper's lines up to its launches; `returned`: the names of its `return_lse` parameter and of
    the tensor that takes the rows' log-sum-exp, where the kernels write it (else None); `descale`: an
    FP8 module's parameter that takes e4m3 inputs' scales (else None)."""
    d = g.diagram
    extras = [scope("{}", n, case="lower") for n in r.extras]   # after `config`: an extra named so gets another
    params = ", ".join(["q", "k", "v", *extras])
    q_axes, k_axes, v_axes, o_axes = (d.arrays[n].axes for n in (r.query, r.key, r.value, r.output))
    dims = repr(tuple(head_dims)) if head_dims is not None else "None  # any: no kernel keeps d whole"
    other = ("non-causal" if r.causal else "causal")
    realises = py_str(f"this kernel realises {g.source_file}, which is "
                      f"{'causal' if r.causal else 'not causal'}; generate the {other} diagram for "
                      f"causal={not r.causal}")
    types = "(torch.float16, torch.bfloat16, torch.float8_e4m3fn)" if descale else "(torch.float16, torch.bfloat16)"
    lines = [f"DTYPES = {types}", f"HEAD_DIMS = {dims}",
             "_CHECKED = {}  # a call signature whose checks passed -> what they found (the wrapper's sizes)",
             "CHECKED_KEPT = 4096  # signatures kept", "", "",
             *OVERLAP_HELPER.splitlines(), "", "",
             f"def attention({params}, causal={r.causal}, out=None" + (f", {param}=None" if param else "")
             + (f", {returned[0]}=False" if returned else "") + (f", {descale}=None" if descale else "") + "):",
             f'{INDENT}"""{py_doc(d.title)}: (batch, heads, seqlen, head_dim) tensors, laid out and called as',
             f"{INDENT}torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal={r.causal}"
             + (", enable_gqa=True" if r.group else "") + ")"
             + _band_doc(r),
             f"{INDENT}k and v may have fewer heads than q when the diagram has a query group axis"
             f" ({r.group or 'this one has none'}). `out`, if given, receives the result."
             + (f"\n{INDENT}v's last dimension is the value head dim ({py_doc(r.value_dim)}), which may differ "
                "from q's and k's; so does the output's." if r.value_dim != r.head_dim else "")
             + "".join(f"\n{INDENT}{a}: the diagram's {py_doc(n)}, of shape "
                       f"({', '.join(extra_shape(r, d.arrays[n].axes, shown=True))}) or any shape that broadcasts to it."
                       for n, a in zip(r.extras, extras, strict=True))
             + (f"\n{config_doc(g, param, keys)}" if param else "")
             + (f"\n{LSE_DOC.format(indent=INDENT, flag=returned[0])}" if returned else "")
             + (f"\n{FP8_DOC.format(indent=INDENT, flag=descale)}" if descale else "") + '"""',
             f"{INDENT}if not isinstance(causal, bool):",
             f"{INDENT}    raise TypeError(f\"causal must be True or False, not {{causal!r}}\")",
             f"{INDENT}if {'not ' if r.causal else ''}causal:",
             f"{INDENT}    raise ValueError({realises})"]
    if param:
        lines.append(config_check(param))
    start = len(lines)        # the checks, which a call signature passes once (_signature_cache)
    # the keys: k's; an FP8 module's e4m3 k is stored padded to KEY_ORDER keys (quantize), so v's
    keys = ("_, heads_kv, _, _ = k.shape\n    seq_k = v.shape[2]" if descale else "_, heads_kv, seq_k, _ = k.shape")
    stored = ("k.shape[2] != (-(-seq_k // KEY_ORDER) * KEY_ORDER if k.dtype == torch.float8_e4m3fn else seq_k)"
              if descale else "v.shape[2] != seq_k")
    lines += [INDENT + x for x in common_checks(["q", "k", "v", *extras], device,
                                                takes="torch.float16, torch.bfloat16 or torch.float8_e4m3fn"
                                                if descale else "torch.float16 or torch.bfloat16")]
    lines += [INDENT + x for x in textwrap.dedent(f"""\
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be 4-D (batch, heads, seqlen, head_dim); got "
                         f"{{tuple(q.shape)}}, {{tuple(k.shape)}}, {{tuple(v.shape)}}")
    batch, heads_q, seq_q, head_dim = q.shape
    {keys}
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError(f"batch sizes differ: q {{batch}}, k {{k.shape[0]}}, v {{v.shape[0]}}")
{_head_dim_checks(g, r)}
    if v.shape[1] != heads_kv or {stored}:
        raise ValueError(f"k and v differ in heads or seqlen: {{tuple(k.shape)}} vs {{tuple(v.shape)}}")
    if HEAD_DIMS is not None and head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim {{head_dim}} is not supported: this file is configured for "
                         f"head dims {{HEAD_DIMS}} " {py_str(f"(regenerate with --set {r.head_dim}=N)")})
    if seq_q == 0 or seq_k == 0 or batch == 0 or heads_q == 0:
        raise ValueError("empty sequences, batches or heads: nothing to attend over")
    """).splitlines()]
    if r.group:
        lines += [INDENT + x for x in textwrap.dedent("""\
        if heads_q % heads_kv:
            raise ValueError(f"q has {heads_q} heads, not a multiple of k's {heads_kv} (grouped-query)")
        group = heads_q // heads_kv
        """).splitlines()]
    else:
        lines += [INDENT + x for x in textwrap.dedent("""\
        if heads_kv != heads_q:
            raise ValueError(f"q has {heads_q} heads but k and v have {heads_kv}; generate the "
                             "grouped-query diagram (gqa) for fewer key/value heads")
        """).splitlines()]
    sizes = {"batch": "batch", r.seq_q: "seq_q", r.seq_k: "seq_k", r.head_dim: "head_dim"}
    if r.value_dim != r.head_dim:
        sizes[r.value_dim] = "value_dim"
    if r.heads:
        sizes[r.heads] = "heads_kv"
    else:
        sizes["heads"] = "heads_q"
    if r.group:
        sizes[r.group] = "group"
    lines.append(f"{INDENT}size = {{{', '.join(f'{py_str(a)}: {v}' for a, v in sizes.items())}}}")
    lines.append(f"{INDENT}shape = (batch, heads_q, seq_q, v.shape[3])")
    # every local the checks leave that the rest of the wrapper reads
    found = ["batch", "heads_q", "seq_q", "head_dim", "heads_kv", "seq_k", "size", "shape",
             *(["group"] if r.group else []), *(["value_dim"] if r.value_dim != r.head_dim else [])]
    lines[start:] = signature_cache(["q", "k", "v", *extras], lines[start:], found)
    if descale:
        lines += [INDENT + x for x in FP8_INPUTS.format(flag=descale).splitlines()]
    lines += [INDENT + x for x in textwrap.dedent("""\
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=device)
    elif not isinstance(out, torch.Tensor) or tuple(out.shape) != shape or out.dtype != dtype \\
            or out.device != device or out.is_meta or out.layout != torch.strided:
        raise ValueError(f"out must be a {dtype} tensor of shape {shape} on {device}")
    elif _overlapping(out, (q, k, v)):
        raise ValueError("out shares memory with itself (a zero or overlapping stride) or with q, k or v; "
                         "pass a tensor of its own")
    """).splitlines()]
    if returned:
        flag, lse = returned
        lines += [f"{INDENT}if not isinstance({flag}, bool):",
                  f"{INDENT * 2}raise TypeError(f\"{flag} must be True or False, not {{{flag}!r}}\")",
                  f"{INDENT}{lse} = torch.empty((batch, heads_q, seq_q), dtype=torch.float32, device=device) "
                  f"if {flag} else None"]
    for name, a in zip(r.extras, extras, strict=True):    # broadcast to the call's shape: a view, no copy
        shape = ", ".join(extra_shape(r, d.arrays[name].axes))
        shown = ", ".join(extra_shape(r, d.arrays[name].axes, shown=True))
        lines += [INDENT + x for x in textwrap.dedent(f"""\
        try:
            {a} = {a}.broadcast_to(({shape},))
        except RuntimeError:
            raise ValueError({py_str(a + " must broadcast to (" + shown + ") = ")} + str(({shape},))
                             + "; got shape "
                             + str(tuple({a}.shape))) from None
        if _overlapping(out, ({a},)):
            raise ValueError({py_str("out shares memory with " + a + "; pass a tensor of its own")})
        """).splitlines()]

    def dims_of(axes, tensor, seq):
        parts = []
        for a in axes:
            if a == "batch":
                parts.append(f"{py_str(a)}: {tensor}.stride(0)")
            elif a == "heads":
                parts.append(f"{py_str(a)}: {tensor}.stride(1)")
            elif a == r.heads:
                mult = " * group" if (r.group and tensor in ("q", "out", *extras)) else ""
                parts.append(f"{py_str(a)}: {tensor}.stride(1){mult}")
            elif a == r.group:
                parts.append(f"{py_str(a)}: {tensor}.stride(1)")
            elif a == seq:
                parts.append(f"{py_str(a)}: {tensor}.stride(2)")
            else:
                parts.append(f"{py_str(a)}: {tensor}.stride(3)")
        return "{" + ", ".join(parts) + "}"

    def extra_dims(axes, tensor):
        """An extra's strides: (batch, heads) as q's, then its sequence axes from dimension 2 on."""
        own = [a for a in axes if a in (r.seq_q, r.seq_k)]
        parts = [f"{py_str(a)}: {tensor}.stride({2 + own.index(a)})" for a in own]
        head = dims_of([a for a in axes if a not in own], tensor, None)[1:-1]
        return "{" + ", ".join([p for p in (head,) if p] + parts) + "}"

    lines.append(f"{INDENT}t = {{{py_str(r.query)}: q, {py_str(r.key)}: k, {py_str(r.value)}: v, "
                 + "".join(f"{py_str(n)}: {a}, " for n, a in zip(r.extras, extras, strict=True))
                 + f"{py_str(r.output)}: out}}")
    if not strides:
        return lines
    lines.append(f"{INDENT}stride = {{")
    for name, tensor, axes, seq in ((r.query, "q", q_axes, r.seq_q), (r.key, "k", k_axes, r.seq_k),
                                    (r.value, "v", v_axes, r.seq_k), (r.output, "out", o_axes, r.seq_q)):
        lines.append(f"{INDENT * 2}{py_str(name)}: {dims_of(axes, tensor, seq)},")
    for name, a in zip(r.extras, extras, strict=True):
        lines.append(f"{INDENT * 2}{py_str(name)}: {extra_dims(d.arrays[name].axes, a)},")
    lines.append(f"{INDENT}}}")
    return lines


def lse_stride(r: Attention, axis: str, tensor: str = "lse") -> str:
    """The stride along the diagram's `axis` of the call's (batch, heads, seqlen) log-sum-exp `tensor`, as
    a launcher reads it: a grouped-query diagram's key/value heads step over the group's query heads."""
    if axis == "batch":
        return f"{tensor}.stride(0)"
    if axis == r.heads and r.group:
        return f"{tensor}.stride(1) * size[{py_str(r.group)}]"
    if axis in ("heads", r.heads, r.group):
        return f"{tensor}.stride(1)"
    if axis == r.seq_q:
        return f"{tensor}.stride(2)"
    raise ValueError(f"{axis!r} is no axis of the rows of the log-sum-exp")


__all__ = ["attention_wrapper", "extra_shape", "lse_stride"]
