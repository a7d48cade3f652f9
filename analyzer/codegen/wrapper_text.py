"""Text every generated wrapper shares: literals of names, the checks of its tensors, and the lines on its
`config` parameter (analyzer.codegen.pymodule writes the wrapper, analyzer.codegen.attention_wrapper
attention's)."""

from __future__ import annotations

import textwrap

from analyzer.codegen.escape import py_str

INDENT = "    "


def str_tuple(items) -> str:
    """A tuple of string literals, as repr would write it."""
    return "(" + ", ".join(py_str(n) for n in items) + ("," if len(items) == 1 else "") + ")"


def str_list(names) -> str:
    return "[" + ", ".join(py_str(n) for n in names) + "]"


def config_doc(g, param: str, keys: str) -> str:
    """The wrapper's docstring on its `config` parameter (spelled `param`), as indented lines; `keys`:
    what a kernel's configuration holds, as the docstring names it."""
    alone = (", or (one kernel here) that kernel's dict alone" if len(g.kernels) == 1 else
             "; a kernel it leaves out keeps CONFIGS' choice")
    text = (f"`{param}`, if given, is the configuration to launch instead of CONFIGS' choice: a dict of "
            f"kernel names to dicts with the keys CONFIG_KEYS lists ({keys}){alone}.")
    return "\n".join(INDENT + line for line in textwrap.wrap(text, 100))


def config_check(param: str) -> str:
    """The wrapper's line that checks its `config` (spelled `param`) into {kernel: configuration or None}."""
    name = "" if param == "config" else f", {py_str(param)}"
    return (f"{INDENT}{param} = _per_kernel({param}{name})  # kernel -> its configuration, "
            "or None for CONFIGS' choice")


def common_checks(tensors: list[str], device: str | None = None,
                  takes: str = "torch.float16 or torch.bfloat16") -> list[str]:
    """Checks every wrapper makes before launch: tensors, element types, one device. `tensors`: the
    wrapper's parameter names (identifiers), which its messages name too; `device`: see `wrapper`;
    `takes`: the element types (DTYPES) as the message names them."""
    first = tensors[0]
    first_types, last_types = takes.rsplit(" or ", 1)     # the message over two lines
    first_types += " or "
    if device:
        where = ('if device.type != "cuda":\n'
                 f'    raise ValueError(f"the tensors are on {{device}}; this kernel runs on {device}")')
    else:
        where = ('if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":\n'
                 '    raise ValueError(f"the tensors are on {device}; this kernel runs on a CUDA GPU "\n'
                 '                     "(or on the CPU under TRITON_INTERPRET=1)")')
    where = textwrap.indent(where, "    ")
    return textwrap.dedent(f"""\
    for name, tensor in zip({str_tuple(tensors)}, ({', '.join(tensors)},)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{{name}} must be a torch.Tensor, not {{type(tensor).__name__}}")
        if tensor.dtype not in DTYPES:
            raise TypeError(f"{{name}} has dtype {{tensor.dtype}}; this kernel takes {first_types}"
                            "{last_types}")
        if tensor.is_meta or tensor.layout != torch.strided:
            raise ValueError(f"{{name}} must be a dense tensor with data (not meta or sparse)")
        if tensor.device != {first}.device:
            raise ValueError(f"{{name}} is on {{tensor.device}} but {first} is on {{{first}.device}}")
        if tensor.dtype != {first}.dtype:
            raise TypeError(f"{{name}} has dtype {{tensor.dtype}} but {first} has {{{first}.dtype}}")
    device = {first}.device
{where}
    dtype = {first}.dtype
    """).splitlines()


__all__ = ["INDENT", "common_checks", "config_check", "config_doc", "str_list", "str_tuple"]
