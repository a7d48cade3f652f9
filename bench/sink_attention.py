"""Attention sinks (gpt-oss's learned logit a head in the softmax's denominator, weighing no value) from
their diagram, diagrams/sink_attention.yaml, beside FlashAttention-4's `learnable_sink` and the way a torch
user writes them, on one GPU, in one run: correctness first, then timing.

1. Checks (before any timing), against float64 on the GPU: the module napkin kernel generates for the
   diagram (on a Hopper GPU the Hopper kernel, which adds the head's sink to each row's sum), its CUDA
   module, and a grouped-query copy of the diagram
   (16 query heads on 2 key/value heads, a sink a query head, as gpt-oss); head dims 64 (gpt-oss's) and
   128, lengths 1, 17, 1000 and 4096, strided inputs, FlashAttention-3's outlier inputs, sinks given per
   head (broadcast over the batch) and per batch entry and head, sinks N(0, 1), large (N(0, 1) + 8: the
   sink takes most of the weight) and -inf (no sink: plain attention); then the peers timed below. Beside
   each error, that of plain attention (a kernel that ignored the sink fails where the sink matters).
2. Timing, 2 x 16 heads, bf16, causal, head dim 64 (and 128 at 8k), lengths 2k to 16k: napkin's sink
   module; napkin's plain causal attention from the same backend (what the sink costs) and from napkin
   kernel's default (the Hopper kernel); FlashAttention-4's CuTe forward with `learnable_sink` and without;
   FlexAttention with return_lse, its output rescaled by sigmoid(lse - sink) (what a user of torch writes:
   SDPA returns no lse); the eager reference (the scores with the sink as one more column, softmax, drop
   it) up to 4k. napkin's rows beside the model's prediction for the configuration each launches.

    python bench/sink_attention.py --gpu h100 --out bench/results

Writes sink_attention_<gpu>.json and .md to --out ($OUT if set) after every step (a run cut short keeps
what it measured). FlashAttention-4 is optional: without `flash_attn.cute` its rows say so. Without a GPU
the script generates every module and stops where CUDA is first needed (`--dry-run` stops there too).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.budgeted import BudgetedRun, parse  # noqa: E402
from bench.common import (  # noqa: E402
    REP_MS,
    TOLERANCE,
    WARMUP_MS,
    attention_inputs,
    environment,
    import_file,
    log,
    ratio,
    reference_attention,
    rel_err,
)

DIAGRAM = "sink_attention"
BATCH, HEADS = 2, 16
SEQLENS = (8192, 4096, 16384, 2048)     # the target's length first: a run cut short keeps it
EAGER_MAX = 4096                         # the eager reference holds (batch, heads, L, L + 1) scores
GROUPS = 8                               # query heads a key/value head in the grouped-query checks


def grouped(data: dict) -> dict:
    """The diagram with grouped-query heads: h key/value heads of g query heads each, a sink a query head
    (sinks: [h, g]); the call passes (batch, h g) sinks, as (batch, heads) for the query heads."""
    data = copy.deepcopy(data)
    data["name"] = f"{data['name']}_gqa"
    data["axes"] = {"h": {"default": 2, "doc": "key/value heads"}, "g": {"default": GROUPS, "doc": "query heads a "
                                                                         "key/value head"}, **data["axes"]}
    data["inputs"] = {"Q": ["h", "g", "q", "d"], "K": ["h", "x", "d"], "V": ["h", "x", "d"], "sinks": ["h", "g"]}
    for op in data["ops"]:
        op["output"] = ["h", "g", *op["output"]]
    data["kernels"] = [{"name": "flash", "partition": {"smem": {"group": {"h": "g_h", "g": "g_g", "q": "g_q"},
                                                               "stream": {"x": "s_x"}}}}]
    return data


class Run(BudgetedRun):
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        from analyzer.codegen import generate
        from analyzer.common import resources
        super().__init__(args, argv, "sink_attention.py", markdown, checks=[], timing=[], skipped=[], peers={})
        data = yaml.safe_load(resources.resolve("diagrams", DIAGRAM, what="diagram", field="DIAGRAM").read_text())
        gqa = self.tmp / f"{DIAGRAM}_gqa.yaml"
        gqa.write_text(yaml.safe_dump(grouped(data), sort_keys=False))
        self.g = generate(DIAGRAM, args.gpu, dtype="bf16")         # napkin kernel's default backend
        self.doc["napkin_kernel"] = {"backend": self.g.backend, "note": self.g.note,
                                     "configuration": self.g.expected.configuration}
        self.causal_g = generate("causal_attention", args.gpu, backend=self.g.backend, dtype="bf16")
        self.causal_default_g = generate("causal_attention", args.gpu, dtype="bf16")
        self.modules = {"sinks": (self.g, ".py"),
                        "sinks_cuda": (generate(DIAGRAM, args.gpu, backend="cuda"), ".cu"),
                        "sinks_gqa": (generate(str(gqa), args.gpu, backend=self.g.backend), ".py"),
                        "causal": (self.causal_g, ".py"), "causal_default": (self.causal_default_g, ".py")}
        for name, (g, suffix) in self.modules.items():
            g.write(self.tmp / f"sink_bench_{name}{suffix}")
        log(f"napkin kernel {DIAGRAM} --gpu {args.gpu}: {self.g.backend} ({self.g.note or 'no note'})")

    def load(self) -> None:
        """Import the written modules (the CUDA loader builds its .cu with nvcc at the first call)."""
        self.m = {name: import_file(self.tmp / f"sink_bench_{name}.py", f"sink_bench_{name}") for name in self.modules}


def flex():
    """FlexAttention, causal (a block mask built once a shape), returning lse: the output times
    sigmoid(lse - sink) is attention with the sink (torch's SDPA returns no lse)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.config.recompile_limit = 64      # one compile a shape
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def lower(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def call(q, k, v, sinks):
        key = (q.shape[-2], k.shape[-2])
        if key not in masks:
            masks[key] = create_block_mask(lower, None, None, key[0], key[1], device="cuda")
        out, lse = compiled(q, k, v, block_mask=masks[key], return_lse=True,
                            enable_gqa=q.shape[1] != k.shape[1])
        s = sinks.float().broadcast_to(q.shape[:2])[:, :, None]
        return (out.float() * torch.sigmoid(lse.float() - s)[..., None]).to(q.dtype)
    return call


def eager(q, k, v, sinks):
    """gpt-oss's reference way: the scaled, masked scores with the sink as one more column, softmax in
    fp32, the column dropped, then P V (a (batch, heads, L, L + 1) tensor in memory)."""
    import torch
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    n = s.shape[-1]
    s = s.masked_fill(torch.ones(s.shape[-2], n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    column = sinks.float().broadcast_to(q.shape[:2])[:, :, None, None].expand(*s.shape[:-1], 1)
    p = torch.softmax(torch.cat([s, column], -1), -1)[..., :-1]
    return p.to(q.dtype) @ v


def fa4(sink: bool):
    """FlashAttention-4's CuTe forward, causal, with `learnable_sink` (a sink a query head, (heads,): the
    same for every batch entry) or without; None where it is not installed."""
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError:
        return None
    import torch

    def call(q, k, v, sinks=None):
        kwargs = {}
        if sink:
            s = sinks if sinks.dim() == 1 else sinks[0]
            kwargs["learnable_sink"] = s.to(torch.bfloat16).contiguous()   # its interface asks bf16 (heads,)
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)
    return call


# ------------------------------------------------------------------------------------------ checks

def check_cases():
    cases = []
    for d in (64, 128):
        for seq in (1, 17, 1000, 4096):
            for sinks in ("normal", "large", "-inf"):
                cases.append({"kernel": "napkin", "d": d, "seq": seq, "dtype": "bf16", "strided": False,
                              "outlier": False, "sinks": sinks, "per": "heads", "groups": 1})
    base = {"d": 64, "seq": 1000, "dtype": "bf16", "strided": False, "outlier": False, "sinks": "normal",
            "per": "heads", "groups": 1}
    cases += [{**base, "kernel": "napkin", "strided": True, "per": "batch x heads"},
              {**base, "kernel": "napkin", "seq": 4500, "dtype": "fp16", "strided": True, "outlier": True},
              {**base, "kernel": "napkin", "sinks": "large", "outlier": True},
              {**base, "kernel": "napkin cuda"}, {**base, "kernel": "napkin cuda", "d": 128, "sinks": "large"},
              {**base, "kernel": "napkin cuda", "seq": 17, "sinks": "-inf"},
              {**base, "kernel": "napkin gqa", "groups": GROUPS}, {**base, "kernel": "napkin gqa", "groups": GROUPS,
                                                                    "seq": 4096, "sinks": "large"},
              {**base, "kernel": "FlashAttention-4"}, {**base, "kernel": "FlashAttention-4", "sinks": "large"},
              {**base, "kernel": "Flex + lse"}, {**base, "kernel": "Flex + lse", "groups": GROUPS},
              {**base, "kernel": "eager"}]
    return cases


def sinks_of(torch, c: dict, heads: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (heads,) if c["per"] == "heads" else (2, heads)
    s = torch.randn(shape, device="cuda", generator=gen)
    if c["sinks"] == "large":
        s = s + 8
    elif c["sinks"] == "-inf":
        s = torch.full(shape, float("-inf"), device="cuda")
    return s


def _check(run: Run, torch, fn, c: dict, seed: int) -> bool:
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    heads_kv = 2
    heads = heads_kv * c["groups"] if c["groups"] > 1 else 4
    q, k, v = attention_inputs(torch, 2, heads, heads if c["groups"] == 1 else heads_kv, c["seq"], c["seq"], c["d"],
                               dtype, c["strided"], c["outlier"], seed=seed)
    sinks = sinks_of(torch, c, heads, seed).to(dtype)     # the call's tensors share one element type
    ref = reference_attention(torch, q, k, v, True, False, sinks=sinks)
    plain = reference_attention(torch, q, k, v, True, False)     # no sink: what it must not give
    try:
        out = fn(q, k, v, sinks)
        torch.cuda.synchronize()
        err, error = rel_err(torch, out, ref), None
    except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
        err, error = float("inf"), repr(exc)[:300]
    row = {**c, "rel_err": err, "plain_rel_err": rel_err(torch, plain, ref), "ok": err < TOLERANCE, "error": error}
    run.doc["checks"].append(row)
    log(f"check {c['kernel']} d={c['d']} L={c['seq']} {c['dtype']} sinks={c['sinks']} per {c['per']} "
        f"groups={c['groups']} strided={c['strided']} outlier={c['outlier']}: {err:.2e} "
        f"(plain attention {row['plain_rel_err']:.2e}) {error or ''}")
    return row["ok"]


def checks(run: Run) -> bool:
    import torch
    m = run.m
    peers = {"napkin": lambda q, k, v, s: m["sinks"].attention(q, k, v, s, causal=True),
             "napkin cuda": lambda q, k, v, s: m["sinks_cuda"].attention(q, k, v, s, causal=True),
             "napkin gqa": lambda q, k, v, s: m["sinks_gqa"].attention(q, k, v, s, causal=True),
             "FlashAttention-4": fa4(True), "Flex + lse": flex(), "eager": eager}
    run.doc["peers"]["flash_attn.cute"] = peers["FlashAttention-4"] is not None
    ok = True
    for i, c in enumerate(check_cases()):
        fn = peers[c["kernel"]]
        if fn is None:
            run.doc["checks"].append({**c, "rel_err": None, "ok": None, "error": "flash_attn.cute is not installed"})
            continue
        good = _check(run, torch, fn, c, i)
        ok &= good or c["kernel"] not in ("napkin", "napkin cuda", "napkin gqa")    # a peer's failure: recorded
    run.save()
    return ok


# ------------------------------------------------------------------------------------------ timing

def predicted(run: Run, g, seq: int, d: int) -> tuple[str, float]:
    """The configuration module `g` launches for BATCH x HEADS problems of `seq` tokens at head dim `d`, and
    the model's seconds for it (analyzer.config.launch.expected, as napkin analyze states it)."""
    from analyzer.config.launch import expected, sizes_of
    sizes = {**sizes_of(g, None), "batch": BATCH, "heads": HEADS, "q": seq, "d": d}
    e = expected(g.as_launch, run.profile, sizes)
    return e.configuration, e.time_s


def timing(run: Run) -> None:
    import torch
    import triton

    m = run.m
    peer, with_sink, plain_fa4 = flex(), fa4(True), fa4(False)
    for d, seqs in ((64, SEQLENS), (128, (8192,))):
        for seq in seqs:
            if run.left() < 0:
                run.doc["skipped"].append({"d": d, "seqlen": seq})
                continue
            q, k, v = (torch.randn(BATCH, HEADS, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            sinks = torch.randn(HEADS, device="cuda").to(torch.bfloat16)
            timed = {"sink_napkin": lambda: m["sinks"].attention(q, k, v, sinks, causal=True),
                     "sink_fa4": (lambda: with_sink(q, k, v, sinks)) if with_sink else None,
                     "sink_flex": lambda: peer(q, k, v, sinks),
                     "sink_eager": (lambda: eager(q, k, v, sinks)) if seq <= EAGER_MAX else None,
                     "causal_napkin": lambda: m["causal"].attention(q, k, v, causal=True),
                     "causal_default": lambda: m["causal_default"].attention(q, k, v, causal=True),
                     "causal_fa4": (lambda: plain_fa4(q, k, v)) if plain_fa4 else None}
            row = {"d": d, "seqlen": seq}
            flops = 4 * BATCH * HEADS * seq * seq / 2 * d
            for name, fn in timed.items():
                if fn is None:
                    row[name] = None
                    row[f"{name}_error"] = ("flash_attn.cute is not installed" if "fa4" in name
                                            else f"not timed past {EAGER_MAX} tokens")
                    continue
                try:
                    s = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS) * 1e-3
                    row[f"{name}_us"] = round(s * 1e6, 1)
                    row[name] = round(flops / s / 1e12, 1)
                except Exception as exc:  # noqa: BLE001
                    row[name] = None
                    row[f"{name}_error"] = repr(exc)[:200]
            for g, name in ((run.g, "sink_napkin"), (run.causal_g, "causal_napkin"),
                            (run.causal_default_g, "causal_default")):
                label, s = predicted(run, g, seq, d)
                row[f"{name}_config"] = label
                row[f"{name}_predicted_us"] = round(s * 1e6, 1)
            log(f"timing d={d} L={seq}: " + ", ".join(f"{n} {row.get(f'{n}_us')} us" for n in timed))
            run.doc["timing"].append(row)
            run.save()
            del q, k, v
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------ report

def markdown(doc) -> str:
    env = doc.get("environment", {})
    gpu = env.get("gpu", f"not run on a GPU (profile {doc['profile']})")
    made = doc.get("napkin_kernel", {})
    lines = [f"# Attention sinks (causal, a sink a head) from their diagram ({gpu})", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; GPU: {gpu}; torch {env.get('torch')}, "
             f"triton {env.get('triton')}; timer: {doc['timer']}; FlashAttention-4 installed: "
             f"{doc['peers'].get('flash_attn.cute')}  ",
             f"napkin kernel {DIAGRAM} --gpu {doc['profile']}: the {made.get('backend')} module"
             + (f" (note: {made['note']})" if made.get("note") else ""), ""]
    checks = doc["checks"]
    ran = [c for c in checks if c.get("ok") is not None]
    bad = [c for c in ran if not c["ok"]]
    lines += [f"## Checks against float64: {len(ran) - len(bad)} of {len(ran)} within {TOLERANCE:g}", "",
              "Sinks N(0, 1), large (N(0, 1) + 8) or -inf, a head (or another set a batch entry); the grouped "
              f"rows have {GROUPS} query heads a key/value head and a sink a query head. Beside each, the error of "
              "plain attention (without the sink).", ""]
    for c in bad:
        lines.append(f"- FAILED {c['kernel']} d={c['d']} L={c['seq']} {c['dtype']} sinks={c['sinks']} per {c['per']}: "
                     f"{c['rel_err']:.2e} {c.get('error') or ''}")
    worst = max((c["rel_err"] for c in ran if c["kernel"].startswith("napkin")), default=0.0)
    plain = min((c["plain_rel_err"] for c in ran if c["seq"] > 1 and c["sinks"] != "-inf"), default=0.0)
    lines += [f"Largest relative error of napkin's kernels: {worst:.2e}; plain attention is off by at least "
              f"{plain:.2e} where a finite sink weighs (L > 1). Kernels checked: "
              f"{', '.join(sorted({c['kernel'] for c in ran}))}.", ""]
    lines += [f"## Timing: {BATCH} x {HEADS} heads, bf16, causal (TFLOP/s: 4 b h d L^2 / 2)", "",
              "| d | L | napkin sinks | FA4 sinks | Flex + lse | eager | napkin causal (same backend) | napkin causal "
              "(default) | FA4 causal | sinks / causal (napkin) | the same, predicted | FA4 / napkin (sinks) | "
              "measured / predicted (sinks) | config |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["timing"]:
        def us(name, r=r):
            return r.get(f"{name}_us")
        lines.append(
            f"| {r['d']} | {r['seqlen']} | {us('sink_napkin')} us | {us('sink_fa4')} us | {us('sink_flex')} us | "
            f"{us('sink_eager')} us | {us('causal_napkin')} us | {us('causal_default')} us | {us('causal_fa4')} us | "
            f"{ratio(us('sink_napkin'), us('causal_napkin'))} | "
            f"{ratio(r.get('sink_napkin_predicted_us'), r.get('causal_napkin_predicted_us'))} | "
            f"{ratio(us('sink_fa4'), us('sink_napkin'))} | "
            f"{ratio(us('sink_napkin'), r.get('sink_napkin_predicted_us'))} | {r.get('sink_napkin_config')} |")
    lines += ["", "sinks / causal is napkin's sink time over its plain causal time from the same backend: what the "
              "sink costs, measured and as the model predicts it. FA4 / napkin is FlashAttention-4's time over "
              "napkin's (above 1: napkin is faster)."]
    if doc["skipped"]:
        lines += ["", f"Skipped (budget): {doc['skipped']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv, __doc__.splitlines()[0], dry_run=True, out_from_env=True)
    run = Run(args, argv)
    if args.dry_run:
        run.save()
        log(f"dry run: generated {', '.join(run.modules)} in {run.tmp}")
        return 0
    import torch
    if not torch.cuda.is_available():
        run.save()
        log("no CUDA GPU: the modules are generated; checks and timing need one")
        return 2
    run.doc["environment"] = environment()
    run.load()
    ok = checks(run)
    if not ok:
        log("napkin's checks failed: no timing")
        run.save()
        return 1
    timing(run)
    run.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
