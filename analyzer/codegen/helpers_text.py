"""The text of the helper functions a generated module carries beside its wrapper (no diagram text in
them): the per-call configuration's check, and the test for an output that overlaps its inputs."""

from __future__ import annotations

# Checks a call's config= against CONFIG_KEYS (True: a power of two, False: a positive int, a tuple:
# one of its values); the module's own names only (its locals shadow nothing it
# calls: the module's globals are reserved, analyzer.codegen.names)
PER_KERNEL_HELPER = '''\
def _per_kernel(config, name="config"):
    """A call's `config` as {kernel: the configuration to launch, or None for CONFIGS' choice}, checked
    against CONFIG_KEYS before anything runs; `name` is the wrapper's parameter, for the messages."""
    if config is None:
        return dict.fromkeys(CONFIG_KEYS)
    if not isinstance(config, dict):
        raise ValueError(f"{name} must be a dict, not {type(config).__name__}")
    keyed = set(config) <= set(CONFIG_KEYS) or all(isinstance(entry, dict) for entry in config.values())
    if len(CONFIG_KEYS) == 1 and not keyed:
        config = dict.fromkeys(CONFIG_KEYS, config)  # the one kernel's configuration
    chosen = dict.fromkeys(CONFIG_KEYS)
    for kernel, entry in config.items():
        if kernel not in CONFIG_KEYS:
            raise ValueError(f"{name} names kernel {kernel!r}; this module's kernels are "
                             f"{', '.join(map(repr, CONFIG_KEYS))}")
        keys = CONFIG_KEYS[kernel]
        where = f"{name}[{kernel!r}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a dict with the keys {list(keys)}, "
                             f"not {type(entry).__name__}")
        problems = ([f"missing {key!r}" for key in keys if key not in entry]
                    + [f"unknown {key!r}" for key in entry if key not in keys])
        if problems:
            raise ValueError(f"{where} must have the keys {list(keys)}: {', '.join(problems)}")
        for key, rule in keys.items():
            value = entry[key]
            if isinstance(rule, tuple):  # one of these values
                if value not in rule:
                    raise ValueError(f"{where}[{key!r}] must be one of {rule}, not {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{where}[{key!r}] must be a positive int, not {value!r}")
            if rule and value & (value - 1):
                raise ValueError(f"{where}[{key!r}] must be a power of two, not {value}")
        chosen[kernel] = dict(entry)
    return chosen
'''


OVERLAP_HELPER = '''\
def _overlapping(tensor, others):
    """Whether `tensor` has elements that share memory with each other (a zero or overlapping stride)
    or with any of `others`: writing it would then change what the kernel reads, or race."""
    start = tensor.data_ptr()
    dims = sorted((s, n) for s, n in zip(tensor.stride(), tensor.shape) if n > 1)
    reach = 0
    for s, n in dims:
        if s <= reach:
            return True
        reach += s * (n - 1)
    end = start + (reach + 1) * tensor.element_size()
    for other in others:
        lo = other.data_ptr()
        hi = lo + (sum(s * (n - 1) for s, n in zip(other.stride(), other.shape)) + 1) * other.element_size()
        if other.numel() and lo < end and start < hi:
            return True
    return False
'''


__all__ = ["OVERLAP_HELPER", "PER_KERNEL_HELPER"]
