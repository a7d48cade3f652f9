"""Pure helpers of bench/attention_h200.py: the benchmark grid, the correctness cases, FLOP counts,
the time budget, the targets and the markdown report.

Standard library only, so that the report can be built and tested without a GPU, torch or triton.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# The FlashAttention-3 forward benchmark: 16k tokens in total, hidden size 2048.
FA3_TOKENS = 16384
FA3_HIDDEN = 2048
FA3_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
DTYPES = ("fp16", "bf16")

OURS = ("triton", "cuda")                         # our backends, in report order
PEERS = ("sdpa_flash", "sdpa_cudnn", "flex")
TIMED_DIAGRAMS = ("attention", "causal_attention")
OTHER_DIAGRAMS = ("mha", "gqa", "sigmoid_attention")
CAUSAL_DIAGRAMS = frozenset({"causal_attention"})
GQA_HEADS, GQA_KV_HEADS = 16, 4

TOLERANCE = 1e-2                                  # ||out - ref|| / ||ref|| against float64
CHECK_SEQLENS = (1, 17, 1000, 4096)
DISTRIBUTIONS = ("normal", "outlier")             # outlier: randn + 10*randn*bernoulli(0.001)

# Targets: on the FA3 headline rows ours must beat SDPA's FlashAttention by 1.5x and come within
# 0.9x of cuDNN; on every other row ours must at least match SDPA's FlashAttention.
STRICT = {"vs_flash": 1.5, "vs_cudnn": 0.9}
BASIC = {"vs_flash": 1.0, "vs_cudnn": None}


# --------------------------------------------------------------------------------------- grid

@dataclass(frozen=True)
class Shape:
    """One row of the timing grid."""

    hdim: int
    seqlen: int
    causal: bool
    dtype: str

    @property
    def batch(self) -> int:
        return max(1, FA3_TOKENS // self.seqlen)

    @property
    def heads(self) -> int:
        return FA3_HIDDEN // self.hdim

    @property
    def flops(self) -> float:
        return attention_flops(self.batch, self.heads, self.seqlen, self.hdim, self.causal)

    @property
    def diagram(self) -> str:
        return "causal_attention" if self.causal else "attention"

    def as_dict(self) -> dict[str, Any]:
        return {"hdim": self.hdim, "seqlen": self.seqlen, "causal": self.causal, "dtype": self.dtype,
                "batch": self.batch, "heads": self.heads, "flops": self.flops}

    @property
    def label(self) -> str:
        return f"d={self.hdim} L={self.seqlen} {'causal' if self.causal else 'full'} {self.dtype}"


def attention_flops(batch: int, heads: int, seqlen: int, hdim: int, causal: bool) -> float:
    """FLOPs of the forward pass as FlashAttention counts them: 4*b*h*L^2*d, halved when causal."""
    flops = 4.0 * batch * heads * seqlen * seqlen * hdim
    return flops / 2 if causal else flops


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def fa3_grid(quick: bool = False) -> list[Shape]:
    """The timing rows. quick: hdim 128, seqlen 4096, fp16, causal and not."""
    if quick:
        return [Shape(128, 4096, causal, "fp16") for causal in (False, True)]
    return [Shape(d, L, c, dt) for d in HEAD_DIMS for c in (False, True) for dt in DTYPES
            for L in FA3_SEQLENS]


def report_order(shape: Shape | dict) -> tuple:
    """The table order: hdim, causal, dtype, seqlen."""
    get = shape.get if isinstance(shape, dict) else lambda k: getattr(shape, k)
    return (get("hdim"), bool(get("causal")), DTYPES.index(get("dtype")) if get("dtype") in DTYPES
            else len(DTYPES), get("seqlen"))


def priority_order(shapes: Iterable[Shape]) -> list[Shape]:
    """Timing order when the budget may run out: fp16 first, hdim 128 first, non-causal first."""
    return sorted(shapes, key=lambda s: (s.dtype != "fp16", s.hdim != 128, s.causal, s.seqlen))


# --------------------------------------------------------------------------- correctness cases

@dataclass(frozen=True)
class CheckCase:
    """One correctness check of an attention kernel against a float64 reference."""

    seqlen: int
    hdim: int
    dtype: str
    dist: str = "normal"
    layout: str = "contiguous"                   # or "transposed": q, k, v are (B, L, H, D).transpose(1, 2)
    batch: int = 2
    heads: int = 3
    kv_heads: int = 3
    causal: bool = False
    expect_error: str | None = None              # the exception type the kernel must raise, if any

    @property
    def name(self) -> str:
        parts = [f"L={self.seqlen}", f"d={self.hdim}", self.dtype, self.dist]
        if self.layout != "contiguous":
            parts.append(self.layout)
        if self.heads != self.kv_heads:
            parts.append(f"h={self.heads}/{self.kv_heads}")
        parts.append("causal" if self.causal else "full")
        if self.expect_error:
            parts.append(f"-> {self.expect_error}")
        return " ".join(parts)


def _check_case(diagram: str, seqlen: int, hdim: int, dtype: str, dist: str = "normal",
                layout: str = "contiguous", **extra: Any) -> CheckCase:
    if diagram == "gqa":
        batch, heads, kv_heads = 1, GQA_HEADS, GQA_KV_HEADS
    elif seqlen >= 4096:
        batch, heads, kv_heads = 1, 2, 2
    else:
        batch, heads, kv_heads = 2, 3, 3
    extra.setdefault("causal", diagram in CAUSAL_DIAGRAMS)
    return CheckCase(seqlen, hdim, dtype, dist, layout, batch, heads, kv_heads, **extra)


def attention_check_cases(diagram: str, *, quick: bool, head_dims: Iterable[int]) -> list[CheckCase]:
    """The checks of one attention kernel. head_dims: what the generated CONFIG says it supports;
    hdim 256 is checked when listed there, otherwise it must be refused with a ValueError."""
    case = lambda *a, **k: _check_case(diagram, *a, **k)
    if quick:
        cases = [case(17, 128, "fp16"), case(4096, 128, "fp16"), case(1000, 128, "fp16", "outlier"),
                 case(1000, 128, "fp16", layout="transposed")]
    else:
        cases = [case(L, d, dt, dist) for dist in DISTRIBUTIONS for dt in DTYPES for d in HEAD_DIMS
                 for L in CHECK_SEQLENS]
        cases += [case(1000, d, dt, layout="transposed") for dt in DTYPES for d in HEAD_DIMS]
        if 256 in set(head_dims):
            cases += [case(L, 256, dt) for dt in DTYPES for L in (17, 1000, 4096)]
            cases.append(case(1000, 256, "fp16", "outlier"))
        else:
            cases.append(case(17, 256, "fp16", expect_error="ValueError"))
    if diagram in CAUSAL_DIAGRAMS:
        cases.append(case(17, 128, "fp16", causal=False, expect_error="ValueError"))
    return cases


def matmul_check_cases(quick: bool) -> list[tuple[int, int, int, str]]:
    """(M, N, K, dtype) for matmul(a, b) with a: (M, K), b: (K, N); includes non-multiples of blocks."""
    if quick:
        return [(1000, 1000, 1000, "fp16")]
    return [(m, n, k, dt) for dt in DTYPES
            for (m, n, k) in ((1000, 1000, 1000), (4096, 4096, 4096), (777, 1500, 333))]


def supported_head_dims(configs: Any, module_config: Any, module_head_dims: Any = None) -> set[int]:
    """Head dims a generated kernel says it supports: every "head_dim"/"head_dims" value in g.configs
    or the module's CONFIG, integer keys anywhere in CONFIG (configurations keyed by head dim, e.g.
    {"flash": {64: {...}, 128: {...}}}), and the module's HEAD_DIMS."""
    dims: set[int] = set()

    def walk(node: Any, int_keys: bool) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("head_dim", "head_dims"):
                    add(value)
                    continue
                if int_keys and isinstance(key, int) and not isinstance(key, bool):
                    dims.add(key)
                walk(value, int_keys)
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item, int_keys)

    def add(value: Any) -> None:
        values = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
        dims.update(int(v) for v in values if _is_int(v))

    walk(configs, int_keys=False)
    walk(module_config, int_keys=True)
    if module_head_dims is not None:
        add(module_head_dims)
    return dims


def _is_int(value: Any) -> bool:
    try:
        return int(value) == float(value)
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------------- budget

class Budget:
    """Wall-clock budget of the run; remembers what was skipped and why."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s = float(total_s)
        self._clock = clock
        self._start = clock()
        self.skipped: list[dict[str, Any]] = []

    def elapsed(self) -> float:
        return self._clock() - self._start

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def allows(self, need_s: float) -> bool:
        return self.left() >= need_s

    def before(self, fraction: float) -> bool:
        """True while less than fraction of the budget is spent."""
        return self.elapsed() < fraction * self.total_s

    def skip(self, what: str, reason: str = "over budget") -> dict[str, Any]:
        self.skipped.append({"what": what, "reason": reason, "at_s": round(self.elapsed(), 1)})
        return {"skipped": reason}


# ------------------------------------------------------------------------------------ targets

def requirement(row: dict) -> dict[str, Any]:
    """The target of a timing row (a dict with hdim, seqlen, dtype, causal)."""
    strict = (row["hdim"] == 128 and row["seqlen"] >= 4096 and row["dtype"] == "fp16"
              and not row["causal"])
    req = dict(STRICT if strict else BASIC)
    req["text"] = (f">={req['vs_flash']:g}x flash, >={req['vs_cudnn']:g}x cuDNN" if strict
                   else f">={req['vs_flash']:g}x flash")
    return req


def usable_tflops(cell: dict | None) -> float | None:
    """TFLOP/s of a cell that was measured and (for ours) found correct; else None."""
    if not cell or "tflops" not in cell or cell.get("correct") is False:
        return None
    return float(cell["tflops"])


def failed(cell: dict | None) -> bool:
    """A cell whose kernel raised or produced a wrong result (as opposed to skipped or not run)."""
    return bool(cell) and ("error" in cell or cell.get("correct") is False)


def best_of(row: dict, backends: Iterable[str]) -> tuple[str | None, float | None]:
    """The fastest usable of our backends in a row."""
    best: tuple[str | None, float | None] = (None, None)
    for backend in backends:
        value = usable_tflops(row.get("cells", {}).get(backend))
        if value is not None and (best[1] is None or value > best[1]):
            best = (backend, value)
    return best


def evaluate_target(row: dict, backends: Iterable[str]) -> dict[str, Any]:
    """met: True, False, or None when it cannot be decided (a peer or our cell missing)."""
    backends = list(backends)
    cells = row.get("cells", {})
    req = requirement(row)
    backend, ours = best_of(row, backends)
    result: dict[str, Any] = {"backend": backend, "ours_tflops": ours, "comparisons": []}
    if ours is None:
        any_failed = any(failed(cells.get(b)) for b in backends)
        result["met"] = False if any_failed else None
        result["why"] = "our kernel failed" if any_failed else "ours not measured"
        return result
    verdicts = []
    for peer, factor in (("sdpa_flash", req["vs_flash"]), ("sdpa_cudnn", req["vs_cudnn"])):
        if factor is None:
            continue
        theirs = usable_tflops(cells.get(peer))
        ratio = ours / theirs if theirs else None
        ok = None if ratio is None else ratio >= factor
        verdicts.append(ok)
        result["comparisons"].append({"peer": peer, "required": factor, "ratio": ratio, "met": ok})
    result["met"] = False if False in verdicts else (None if None in verdicts else True)
    return result


def evaluate_targets(rows: list[dict], selected: Iterable[str]) -> dict[str, Any]:
    """Targets per row for the best of the selected backends and for each backend alone."""
    selected = [b for b in OURS if b in set(selected)]
    views = {"best": selected, **{b: [b] for b in selected}}
    out_rows = []
    for row in sorted(rows, key=report_order):
        entry = {k: row[k] for k in ("hdim", "seqlen", "causal", "dtype")}
        entry["requirement"] = requirement(row)["text"]
        for view, backends in views.items():
            entry[view] = evaluate_target(row, backends)
        out_rows.append(entry)
    summary = {view: {"met": sum(r[view]["met"] is True for r in out_rows),
                      "not_met": sum(r[view]["met"] is False for r in out_rows),
                      "undecided": sum(r[view]["met"] is None for r in out_rows),
                      "rows": len(out_rows)} for view in views}
    return {"definition": {"strict_rows": "hdim 128, seqlen >= 4096, fp16, not causal",
                           "strict": STRICT, "other_rows": BASIC,
                           "compared": "TFLOP/s of the same run; ours only if its output was correct"},
            "summary": summary, "rows": out_rows}


# ----------------------------------------------------------------------------------- markdown

class _Notes:
    """Numbered footnotes for error messages, shared when identical."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def ref(self, text: str) -> str:
        if text not in self.items:
            self.items.append(text)
        return f"err[{self.items.index(text) + 1}]"


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _tf(value: float) -> str:
    """TFLOP/s for the table: whole numbers, two significant digits below 10."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _cell(cell: dict | None, notes: _Notes) -> str:
    if not cell:
        return "-"
    if "error" in cell:
        return notes.ref(cell["error"])
    if "skipped" in cell:
        return "skip"
    text = _tf(float(cell["tflops"])) if "tflops" in cell else "-"
    return f"{text} ✗" if cell.get("correct") is False else text


def _mark(met: bool | None) -> str:
    return {True: "yes", False: "no", None: "n/a"}[met]


def _environment_line(env: dict) -> str:
    smi = env.get("nvidia_smi") or {}
    parts = [(f"{env.get('gpu', '?')} ({env.get('sm_count', '?')} SMs, "
              f"{_fmt(env.get('memory_gib'))} GiB, cc {env.get('compute_capability', '?')})"),
             (f"torch {env.get('torch', '?')} (CUDA {env.get('torch_cuda', '?')}, "
              f"cuDNN {env.get('cudnn', '?')})"),
             f"triton {env.get('triton', '?')}", f"nvcc {env.get('nvcc') or 'n/a'}"]
    if smi:
        parts.append(f"driver {smi.get('driver_version', '?')}")
        parts.append(f"SM clock {smi.get('clocks.sm', '?')}/{smi.get('clocks.max.sm', '?')} MHz, "
                     f"memory clock {smi.get('clocks.mem', '?')}/{smi.get('clocks.max.mem', '?')} MHz, "
                     f"power limit {smi.get('power.limit', '?')} W")
    return "; ".join(parts)


def _ceilings_line(ceilings: dict) -> str:
    parts = []
    copy = ceilings.get("copy") or {}
    if "tb_per_s" in copy:
        parts.append(f"device copy {copy['tb_per_s']:.2f} TB/s (read+write bytes)")
    for dtype in DTYPES:
        mm = ceilings.get(f"matmul_{dtype}") or {}
        if "tflops" in mm:
            parts.append(f"torch.matmul {mm.get('n', 8192)}^3 {dtype} {mm['tflops']:.0f} TFLOP/s")
        elif "error" in mm or "skipped" in mm:
            parts.append(f"matmul {dtype}: {mm.get('error') or mm.get('skipped')}")
    if "error" in copy:
        parts.append(f"copy: {copy['error']}")
    return "; ".join(parts) or "not measured"


def check_summary(checks: list[dict]) -> list[dict[str, Any]]:
    """Per (diagram, backend): counts, worst relative error and the first failure."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for check in checks:
        key = (check.get("diagram", "?"), check.get("backend", "?"))
        g = groups.setdefault(key, {"diagram": key[0], "backend": key[1], "passed": 0, "failed": 0,
                                    "skipped": 0, "worst_rel_err": None, "first_failure": None})
        if check.get("skipped"):
            g["skipped"] += 1
            continue
        if check.get("passed"):
            g["passed"] += 1
        else:
            g["failed"] += 1
            if g["first_failure"] is None:
                detail = check.get("error") or check.get("raised") or f"rel err {_fmt(check.get('rel_err'), 3)}"
                g["first_failure"] = f"{check.get('case', '')}: {detail}"
        err = check.get("rel_err")
        if err is not None and (g["worst_rel_err"] is None or err > g["worst_rel_err"]):
            g["worst_rel_err"] = err
    return list(groups.values())


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def skip_summary(skipped: list[dict]) -> str:
    """'check gqa cuda x29, flex x16 (over budget)': counts by kind and reason."""
    counts: dict[str, int] = {}
    for item in skipped:
        words = str(item.get("what", "?")).split()
        kind = " ".join(words[:3] if words[:1] == ["check"] else words[:1])
        key = f"{kind} ({item.get('reason', '?')})"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{key.replace(' (', f' x{n} (', 1)}" for key, n in counts.items())


def render_checks(checks: list[dict]) -> list[str]:
    lines = [f"## Correctness (||out-ref||/||ref|| against float64 on the GPU, tolerance {TOLERANCE:g})",
             "", "| diagram | backend | passed | failed | skipped | worst rel err | first failure |",
             "|---|---|---|---|---|---|---|"]
    for g in check_summary(checks):
        worst = "-" if g["worst_rel_err"] is None else f"{g['worst_rel_err']:.1e}"
        lines.append(f"| {g['diagram']} | {g['backend']} | {g['passed']} | {g['failed']} | "
                     f"{g['skipped']} | {worst} | {_one_line(g['first_failure'] or '')} |")
    return lines


def _predicted(row: dict, selected: list[str], notes: _Notes) -> str:
    pred = row.get("prediction") or {}
    if "error" in pred:
        return notes.ref(f"prediction: {pred['error']}")
    if "tflops" not in pred:
        return "-"
    _, ours = best_of(row, selected)
    text = _tf(pred["tflops"])
    return f"{text} ({ours / pred['tflops']:.2f})" if ours else text


def render_timings(rows: list[dict], targets: dict, selected: list[str]) -> tuple[list[str], _Notes]:
    notes = _Notes()
    per_row = {(t["hdim"], t["seqlen"], t["causal"], t["dtype"]): t for t in targets.get("rows", [])}
    lines = ["## Forward attention, TFLOP/s (FA3 grid: 16k tokens, hidden 2048; do_bench median)", "",
             ("| hdim | seqlen | causal | dtype | ours triton | ours cuda | SDPA flash | SDPA cuDNN "
              "| Flex | predicted | target | met (best / triton) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=report_order):
        cells = row.get("cells", {})
        shown = [_cell(cells.get(name), notes) for name in OURS + PEERS]
        target = per_row.get((row["hdim"], row["seqlen"], row["causal"], row["dtype"]), {})
        met = f"{_mark(target.get('best', {}).get('met'))} / " + (
            _mark(target["triton"]["met"]) if "triton" in target else "-")
        lines.append(f"| {row['hdim']} | {row['seqlen']} | {'yes' if row['causal'] else 'no'} | "
                     f"{row['dtype']} | " + " | ".join(shown) +
                     f" | {_predicted(row, selected, notes)} | {requirement(row)['text']} | {met} |")
    return lines, notes


def render_markdown(results: dict) -> str:
    """The report: environment, ceilings, correctness summary, timing table, footnotes."""
    meta = results.get("meta", {})
    selected = [b for b in OURS if b in meta.get("backends", OURS)]
    targets = results.get("targets") or evaluate_targets(results.get("timings", []), selected)
    lines = ["# napkin attention kernels on " + str(results.get("environment", {}).get("gpu", "GPU")), "",
             (f"`{meta.get('command', 'python bench/attention_h200.py')}`, {meta.get('started_utc', '')}, "
              f"{_fmt(meta.get('elapsed_s'))} s of a {_fmt(meta.get('budget_s'))} s budget."), "",
             f"**Environment:** {_environment_line(results.get('environment', {}))}.", "",
             f"**Ceilings (same run):** {_ceilings_line(results.get('ceilings', {}))}.", ""]
    if results.get("fatal"):
        lines += [f"**Run stopped early:** {_one_line(results['fatal'], 300)}", ""]
    lines += render_checks(results.get("checks", [])) + [""]
    table, notes = render_timings(results.get("timings", []), targets, selected)
    lines += table + [""]
    lines.append("Cells: TFLOP/s (4·b·h·L²·d, halved when causal), median of "
                 "`triton.testing.do_bench(warmup=25, rep=100)`; ✗ = output wrong (not counted); "
                 "skip = over budget; - = not run. predicted: the model's TFLOP/s with the profile "
                 f"`{meta.get('gpu_profile', 'h200')}`, which also configured our kernels "
                 "(predicted time / measured time of our best).")
    summary = targets.get("summary", {})
    if summary:
        lines.append("Targets met: " + "; ".join(
            f"{view} {s['met']}/{s['rows']} ({s['not_met']} not met, {s['undecided']} n/a)"
            for view, s in summary.items()) + ".")
    for i, text in enumerate(notes.items, 1):
        lines.append(f"- err[{i}] {_one_line(text, 300)}")
    skipped = results.get("skipped", [])
    if skipped:
        lines.append(f"Skipped ({len(skipped)}, listed in the JSON): {skip_summary(skipped)}.")
    return "\n".join(lines) + "\n"
