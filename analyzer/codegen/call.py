"""What makes a generated wrapper's repeated call cheap and composable: its checks run once per call
signature (`signature_cache`: a later call of a signature whose checks passed takes what they found),
and the wrapper as a torch custom op (`custom_op`: one node of a torch.compile graph, recorded by a
CUDA graph capture). The host's cost of a call is what bench/host_cost.py measures.
"""

from __future__ import annotations

from analyzer.diagram.interface import Attention

INDENT = "    "

OP_DIGEST = "@@digest@@"     # checked_python writes the digest of the module's text in its place

CUSTOM_OP = '''\
def attention_op({param}):
    """This module's attention as a torch custom op (torch.library.custom_op), registered on first
    use: called as attention is, ({args}, causal), it stays one node of a torch.compile graph (its
    output's shape and element type come from the fake implementation below) and a CUDA graph capture
    records its launch; out= and a configuration of its own are the plain function's alone.{doc}"""
    if {key} in _OPS:
        return _OPS[{key}]
    name = OP_NAME{suffix}
{run}
    try:
        op = torch.library.custom_op(name, run, mutates_args=())
    except RuntimeError:  # registered by another import of this same text: the same op
        namespace, name = name.split("::")
        op = getattr(getattr(torch.ops, namespace), name)
    else:
        @op.register_fake
        def _fake({args}, causal={causal}):
            out = q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))
            return {fake}
    _OPS[{key}] = op
    return op'''

RUN = '''\
    def run({typed}, causal: bool = {causal}) -> torch.Tensor:
        return attention({args}, causal=causal)'''

RUN_LSE = '''\
    if lse:
        def run({typed}, causal: bool = {causal}) -> tuple[torch.Tensor, torch.Tensor]:
            return attention({args}, causal=causal, {flag}=True)
    else:
        def run({typed}, causal: bool = {causal}) -> torch.Tensor:
            return attention({args}, causal=causal)'''


def custom_op(r: Attention, extras: list[str], flag: str | None = None) -> list[str]:
    """`attention_op()`: the wrapper as a torch custom op, registered on first use, for torch.compile
    graphs; named by the digest of the module's text (OP_DIGEST), so that two modules' ops never meet.
    `extras`: the wrapper's names of the scores' other inputs; `flag`: the wrapper's return_lse, where
    it has one (`attention_op(lse=True)` is then the op that returns the output and the log-sum-exp)."""
    tensors = ["q", "k", "v", *extras]
    args, typed = ", ".join(tensors), ", ".join(f"{t}: torch.Tensor" for t in tensors)
    run = (RUN_LSE if flag else RUN).format(args=args, typed=typed, causal=r.causal, flag=flag)
    text = CUSTOM_OP.format(
        args=args, causal=r.causal, run=run, param="lse=False" if flag else "", key="lse" if flag else "False",
        suffix=' + ("_lse" if lse else "")' if flag else "",
        fake="(out, q.new_empty(q.shape[:3], dtype=torch.float32)) if lse else out" if flag else "out",
        doc=(f"\n    With lse=True the op returns (out, lse), as attention(..., {flag}=True) does (the op's name "
             "ends\n    with _lse).") if flag else "")
    return ["", "", f"OP_NAME = 'napkin::attention_{OP_DIGEST}'  # attention_op's name: this module's text's digest",
            "_OPS = {}  # attention_op's ops, once registered, by whether they return the log-sum-exp", "", "",
            *text.splitlines()]


def signature_cache(tensors: list[str], checks: list[str], known: list[str]) -> list[str]:
    """The wrapper's `checks` (lines of its body) run once per call signature: what they read of the
    `tensors` (type, shape, element type, device, layout), kept in _CHECKED with the locals `known`
    they leave, which a later call of the same signature takes instead of running them again."""
    signature = ", ".join(f"type({t}), {t}.shape, {t}.dtype, {t}.device, {t}.layout" for t in tensors) \
        + ', os.environ.get("TRITON_INTERPRET")'      # whether a CPU device is the interpreter's
    return [f"{INDENT}try:  # a signature whose checks passed before skips them: they read nothing else of the call",
            f"{INDENT * 2}signature = ({signature})",
            f"{INDENT}except AttributeError:  # not a tensor: the checks say which",
            f"{INDENT * 2}signature = None",
            f"{INDENT}known = _CHECKED.get(signature)",
            f"{INDENT}if known is None:",
            *(INDENT + line if line else line for line in checks),
            f"{INDENT * 2}if len(_CHECKED) >= CHECKED_KEPT:  # a long run of new signatures: start again",
            f"{INDENT * 3}_CHECKED.clear()",
            f"{INDENT * 2}_CHECKED[signature] = ({', '.join(known)})",
            f"{INDENT}else:",
            f"{INDENT * 2}{', '.join(known)} = known",
            f"{INDENT * 2}device, dtype = {tensors[0]}.device, {tensors[0]}.dtype"]


__all__ = ["CUSTOM_OP", "OP_DIGEST", "custom_op", "signature_cache"]
