"""Local attention in a band (query i sees keys i - 256 .. i + 256, not causal) from its diagram,
diagrams/band_attention.yaml, beside FlashAttention-4's window, FlexAttention's block mask and SDPA given the
band as a boolean mask, on one GPU, in one run: correctness first, then timing.

1. Checks against float64 on the GPU (`common.reference_attention` with `band`): napkin kernel's default
   module (the Hopper kernel on a Hopper GPU) and its portable Triton module at lengths 1 to 8192, head
   dims 64, 128 and 256, outlier and strided inputs; copies of the diagram with the band moved (100/37,
   0/300, 300/0: it cuts the key blocks elsewhere) and with a key axis of its own (1000 x 3000 and
   3000 x 1000, top-left aligned); Hopper configurations through config=; the peers timed below. Beside
   each error, that of attention without the band. Grouped heads: the diagram has none (the module's
   refusal is recorded).
2. Timing, 2 x 16 heads, hdim 128, bf16, 4k to 16k tokens: both napkin modules beside the model's
   prediction, FlashAttention-4 (`window_size=(256, 256)`, causal=False), FlexAttention, SDPA's bool mask.

    python bench/band_attention.py --gpu h100 --out bench/results

Writes band_attention_<gpu>.json and .md to --out ($OUT if set) after every step. FlashAttention-4 is optional:
without `flash_attn.cute` its rows say so. Without a GPU, or with --dry-run, it generates every module (and
the model's predictions) and stops.
"""

from __future__ import annotations

import argparse
import copy
import sys
from functools import partial
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.budgeted import TIMER, BudgetedRun, parse  # noqa: E402
from bench.common import (  # noqa: E402
    TOLERANCE,
    attention_inputs,
    environment,
    import_file,
    log,
    ratio,
    reference_attention,
    rel_err,
    timed,
)

DIAGRAM = "band_attention"
BATCH, HEADS, HEAD_DIM = 2, 16, 128
SEQLENS = (8192, 4096, 16384)            # the diagram's default length first: a run cut short keeps it
MOVED = ((100, 37), (0, 300), (300, 0))  # (before, after) of the copies: the band cuts blocks elsewhere
RECTANGLES = ((1000, 3000), (3000, 1000))   # (queries, keys) on the copies with a key axis of its own
HOPPER_CONFIGS = tuple({"WARPGROUPS": n, "BLOCK_X": x, "STAGES": 2, "OVERLAP": o, "SCHEDULE": s} for n, x, o, s in (
    (1, 128, "intra", "tiles"), (2, 128, "inter+intra", "tiles"), (2, 128, "inter", "tiles"),
    (3, 64, "none", "tiles"), (2, 64, "intra", "persistent")))      # through config=, on the (100, 37) band
PEERS = ("FlashAttention-4", "FlexAttention", "SDPA bool mask")


def band_of(data: dict) -> tuple[int, int]:
    """The diagram's (before, after), read from its band_mask op (the peers are given the same)."""
    op = next(o for o in data["ops"] if o["primitive"] == "band_mask")
    return int(op["before"]), int(op["after"])


def moved(data: dict, before: int, after: int, rectangle: bool) -> dict:
    """The diagram with another band, and with `rectangle` a key axis of its own (x need not be q)."""
    data = copy.deepcopy(data)
    data["name"] = f"{data['name']}_{before}_{after}" + ("_rect" if rectangle else "")
    for op in data["ops"]:
        if op["primitive"] == "band_mask":
            op["before"], op["after"] = before, after
    if rectangle:
        data["axes"]["x"] = {"default": data["axes"]["q"]["default"], "doc": "key positions"}
    return data


def predicted(run: Run, g, seq: int) -> tuple[str, float]:
    """The configuration module `g` launches for BATCH x HEADS problems of `seq` tokens at HEAD_DIM, and the
    model's microseconds for it (analyzer.config.launch.expected, as napkin analyze states it)."""
    from analyzer.config.launch import expected, sizes_of
    sizes = {**sizes_of(g, None), "batch": BATCH, "heads": HEADS, "q": seq, "d": HEAD_DIM}
    e = expected(g.as_launch, run.profile, sizes)
    return e.configuration, round(e.time_s * 1e6, 1)


class Run(BudgetedRun):
    """The run's modules, record and clock."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None) -> None:
        from analyzer.codegen import generate
        from analyzer.common import resources
        data = yaml.safe_load(resources.resolve("diagrams", DIAGRAM, what="diagram", field="DIAGRAM").read_text())
        self.band = band_of(data)
        super().__init__(args, argv, "band_attention.py", markdown, band=list(self.band),
                         timer=f"common.timed: {TIMER}",
                         checks=[], not_checked=[], timing=[], skipped=[], peers={})
        # diagram files by (before, after, rectangle): the shipped one and the yaml-edited copies
        files = {(*self.band, False): DIAGRAM}
        for before, after, rectangle in [(b, a, False) for b, a in MOVED] + [(*self.band, True), (100, 37, True)]:
            copied = moved(data, before, after, rectangle)
            path = self.tmp / f"{copied['name']}.yaml"
            path.write_text(yaml.safe_dump(copied, sort_keys=False))
            files[(before, after, rectangle)] = str(path)
        self.generated = {}          # (kind, before, after, rectangle) -> Generated; kind "napkin" or "napkin triton"
        for key, diagram in files.items():
            self.generated[("napkin", *key)] = generate(diagram, args.gpu, dtype="bf16")   # napkin kernel's default
            self.generated[("napkin triton", *key)] = generate(diagram, args.gpu, backend="triton", dtype="bf16")
        self.g = self.generated[("napkin", *self.band, False)]
        self.doc["napkin_kernel"] = {"backend": self.g.backend, "note": self.g.note,
                                     "configuration": self.g.expected.configuration if self.g.expected else None}
        self.paths = {}
        for key, g in self.generated.items():
            name = f"band_bench_{key[0].replace(' ', '_')}_{key[1]}_{key[2]}" + ("_rect" if key[3] else "")
            self.paths[key] = (next(p for p in g.write(self.tmp / f"{name}.py") if p.suffix == ".py"), name)
        self.doc["predicted"] = {seq: {kind: predicted(self, self.generated[(kind, *self.band, False)], seq)
                                       for kind in ("napkin", "napkin triton")} for seq in SEQLENS}
        log(f"napkin kernel {DIAGRAM} --gpu {args.gpu}: {self.g.backend} ({self.g.note or 'no note'}); "
            f"{len(self.generated)} modules in {self.tmp}; predicted (configuration, us): {self.doc['predicted']}")

    def load(self) -> None:
        self.m = {key: import_file(path, name) for key, (path, name) in self.paths.items()}

    def napkin(self, kind: str, before: int, after: int, rectangle: bool = False, config=None):
        """napkin's call for that band; a band that hides every later key (after 0) is causal."""
        module = self.m[(kind, before, after, rectangle)]
        return lambda q, k, v: module.attention(q, k, v, causal=after == 0, config=config)


def fa4(before: int, after: int):
    """FlashAttention-4's CuTe forward with the band as its window (not causal); None where not installed."""
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError:
        return None

    def call(q, k, v):
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=False,
                              window_size=(before, after))
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)
    return call


def flex(before: int, after: int):
    """FlexAttention, compiled, with the band as its mask_mod and a block mask built once a shape."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def band(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= before) & (kv_idx - q_idx <= after)

    torch._dynamo.config.recompile_limit = 64      # one compile a shape
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def call(q, k, v):
        key = (q.shape[-2], k.shape[-2])
        if key not in masks:
            masks[key] = create_block_mask(band, None, None, key[0], key[1], device="cuda")
        return compiled(q, k, v, block_mask=masks[key])
    return call


def sdpa(before: int, after: int):
    """SDPA with the band as a boolean attn_mask (True: attend), built once a shape; torch picks the backend."""
    import torch
    import torch.nn.functional as F
    masks = {}

    def call(q, k, v):
        key = (q.shape[-2], k.shape[-2])
        if key not in masks:
            i = torch.arange(key[0], device="cuda")[:, None]
            j = torch.arange(key[1], device="cuda")[None, :]
            masks[key] = (i - j <= before) & (j - i <= after)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=masks[key])
    return call


def peer(name: str, before: int, after: int):
    return {"FlashAttention-4": fa4, "FlexAttention": flex, "SDPA bool mask": sdpa}[name](before, after)


# ------------------------------------------------------------------------------------------ checks

def check_cases(band: tuple[int, int], hopper: bool) -> list[dict]:
    base = {"band": band, "rect": False, "d": HEAD_DIM, "dtype": "bf16", "strided": False, "outlier": False,
            "config": None}
    cases = []
    for kind in ("napkin", "napkin triton"):
        for seq in (1, 17, 1000, 4096, 8192):
            cases.append({**base, "kernel": kind, "seq_q": seq, "seq_k": seq})
        for d in (64, 256):
            cases.append({**base, "kernel": kind, "seq_q": 1000, "seq_k": 1000, "d": d})
        cases += [{**base, "kernel": kind, "seq_q": 4096, "seq_k": 4096, "outlier": True},
                  {**base, "kernel": kind, "seq_q": 1000, "seq_k": 1000, "strided": True},
                  {**base, "kernel": kind, "seq_q": 5000, "seq_k": 5000, "dtype": "fp16", "strided": True,
                   "outlier": True}]
        for b in MOVED:
            cases += [{**base, "kernel": kind, "band": b, "seq_q": seq, "seq_k": seq} for seq in (1, 17, 1000, 4096)]
        for b in (band, (100, 37)):
            cases += [{**base, "kernel": kind, "band": b, "rect": True, "seq_q": sq, "seq_k": sk}
                      for sq, sk in RECTANGLES]
    if hopper:      # the Hopper kernel's own configurations, on a band that cuts 64- and 128-key chunks
        cases += [{**base, "kernel": "napkin", "band": (100, 37), "seq_q": 1000, "seq_k": 1000, "config": c}
                  for c in HOPPER_CONFIGS]
    for name in PEERS:
        cases += [{**base, "kernel": name, "seq_q": seq, "seq_k": seq} for seq in (1000, 4096)]
        cases.append({**base, "kernel": name, "band": (100, 37), "seq_q": 1000, "seq_k": 1000})
    return cases


def bites(c: dict) -> bool:
    """Whether the band hides any key from any query at this shape."""
    before, after = c["band"]
    return before < c["seq_q"] - 1 or after < c["seq_k"] - 1


def _check(run: Run, torch, fn, c: dict, seed: int) -> bool:
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[c["dtype"]]
    q, k, v = attention_inputs(torch, 2, 3, 3, c["seq_q"], c["seq_k"], c["d"], dtype, c["strided"], c["outlier"],
                               seed=seed)
    ref = reference_attention(torch, q, k, v, False, False, band=tuple(c["band"]))
    plain = reference_attention(torch, q, k, v, False, False)      # no band: what it must not give
    # queries the band leaves no key (3000 x 1000: past 1000 + before) have no softmax: left out of the error,
    # and what the kernel writes there recorded and checked
    seen = ref.isfinite().all(-1)
    empty = None
    try:
        out = fn(q, k, v)
        torch.cuda.synchronize()
        err, error = rel_err(torch, out[seen], ref[seen]), None
        abs_err = float((out[seen].double() - ref[seen]).abs().max())
        if not seen.all():
            rest = out[~seen].double()
            empty = "nan" if rest.isnan().all() else "0" if (rest == 0).all() else "other"
    except Exception as exc:  # noqa: BLE001 - a failure is a result of the check
        err, abs_err, error = float("inf"), float("inf"), repr(exc)[:300]
    # a keyless query's row is 0, as FlashAttention writes it (not 0 / 0)
    row = {**c, "band": list(c["band"]), "rel_err": err, "max_abs_err": abs_err,
           "ok": err < TOLERANCE and empty in (None, "0"),
           "unbanded_rel_err": rel_err(torch, plain[seen], ref[seen]), "keyless_queries": int((~seen).sum()),
           "keyless_out": empty, "error": error}
    run.doc["checks"].append(row)
    log(f"check {c['kernel']} band={c['band']} {c['seq_q']}x{c['seq_k']} d={c['d']} {c['dtype']} "
        f"strided={c['strided']} outlier={c['outlier']} config={c['config']}: {err:.2e} (max abs {abs_err:.2e}; "
        f"without the band {row['unbanded_rel_err']:.2e}; keyless queries {row['keyless_queries']}: {empty}) "
        f"{error or ''}")
    return row["ok"]


def checks(run: Run) -> bool:
    import torch
    peers = {name: peer(name, *run.band) for name in PEERS}
    run.doc["peers"]["flash_attn.cute"] = peers["FlashAttention-4"] is not None
    ok = True
    for i, c in enumerate(check_cases(run.band, run.g.backend == "hopper")):
        if c["kernel"].startswith("napkin"):
            fn = run.napkin(c["kernel"], *c["band"], c["rect"], c["config"])
        else:
            fn = peers[c["kernel"]] if tuple(c["band"]) == run.band else peer(c["kernel"], *c["band"])
        if fn is None:
            run.doc["checks"].append({**c, "rel_err": None, "ok": None, "error": "flash_attn.cute is not installed"})
            continue
        good = _check(run, torch, fn, c, i)
        ok &= good or not c["kernel"].startswith("napkin")       # a peer's failure: recorded, not fatal
    # grouped heads: the diagram has no query group axis, so the module must refuse 2 key/value heads for 4
    q, k, v = attention_inputs(torch, 1, 4, 2, 64, 64, HEAD_DIM, torch.bfloat16, False, False, seed=0)
    try:
        run.napkin("napkin", *run.band)(q, k, v)
        refusal = "none: the module ran with fewer key/value heads"
    except (ValueError, TypeError) as exc:
        refusal = str(exc)
    run.doc["not_checked"].append({"case": "grouped heads (4 query heads on 2 key/value heads)",
                                   "why": "the diagram has no query group axis", "module_says": refusal})
    run.save()
    return ok


# ------------------------------------------------------------------------------------------ timing

def timing(run: Run) -> None:
    import torch
    import triton

    from analyzer.config.scores import pairs
    from analyzer.diagram.interface import Band
    calls = {"napkin": run.napkin("napkin", *run.band), "napkin_triton": run.napkin("napkin triton", *run.band),
             "fa4": fa4(*run.band), "flex": flex(*run.band), "sdpa_mask": sdpa(*run.band)}
    for seq in SEQLENS:
        if run.left() < 0:
            run.doc["skipped"].append({"seqlen": seq})
            continue
        q, k, v = (torch.randn(BATCH, HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * BATCH * HEADS * pairs(seq, seq, Band(*run.band)) * HEAD_DIM
        row = {"seqlen": seq, "flops": flops}
        out = ours = None
        for name, fn in calls.items():
            if fn is None:
                row[name], row[f"{name}_error"] = None, "flash_attn.cute is not installed"
                continue
            try:
                out = fn(q, k, v)
                ours = out if name == "napkin" else ours
                if ours is not None and name != "napkin":    # agreement with napkin's output (no float64 here)
                    row[f"{name}_rel_to_napkin"] = rel_err(torch, out, ours)
                t = timed(triton, partial(fn, q, k, v))
                row[f"{name}_us"] = round(t["time_s"] * 1e6, 1)
                row[f"{name}_us_p20_p80"] = [round(t["time_s_p20"] * 1e6, 1), round(t["time_s_p80"] * 1e6, 1)]
                row[name] = round(flops / t["time_s"] / 1e12, 1)
            except Exception as exc:  # noqa: BLE001
                row[name], row[f"{name}_error"] = None, repr(exc)[:200]
        for kind, (label, us) in run.doc["predicted"][seq].items():
            row[f"{kind.replace(' ', '_')}_config"], row[f"{kind.replace(' ', '_')}_predicted_us"] = label, us
        timed_peers = [(row[f"{p}_us"], p) for p in ("fa4", "flex", "sdpa_mask") if row.get(f"{p}_us")]
        if timed_peers:
            row["best_peer_us"], row["best_peer"] = min(timed_peers)
        log(f"timing L={seq}: " + ", ".join(f"{n} {row.get(f'{n}_us')} us" for n in calls)
            + f"; predicted napkin {row['napkin_predicted_us']} us")
        run.doc["timing"].append(row)
        run.save()
        del q, k, v, out, ours
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------ report

def markdown(doc) -> str:
    env = doc.get("environment", {})
    gpu = env.get("gpu", f"not run on a GPU (profile {doc['profile']})")
    made = doc.get("napkin_kernel", {})
    before, after = doc["band"]
    lines = [f"# Band attention (keys i - {before} .. i + {after}, not causal) from its diagram ({gpu})", "",
             f"Command: `{doc['command']}`  ", f"Date: {doc['date']}; GPU: {gpu}; torch {env.get('torch')}, "
             f"triton {env.get('triton')}; timer: {doc['timer']}; FlashAttention-4 installed: "
             f"{doc['peers'].get('flash_attn.cute')}  ",
             f"napkin kernel {DIAGRAM} --gpu {doc['profile']}: the {made.get('backend')} module"
             + (f" (note: {made['note']})" if made.get("note") else ""), ""]
    checks = doc["checks"]
    ran = [c for c in checks if c.get("ok") is not None]
    bad = [c for c in ran if not c["ok"]]
    lines += [f"## Checks against float64: {len(ran) - len(bad)} of {len(ran)} within {TOLERANCE:g} (relative)", "",
              f"Bands (before, after): the diagram's ({before}, {after}) and copies with "
              f"{', '.join(f'({b}, {a})' for b, a in MOVED)}; unequal lengths (queries x keys, top-left aligned) on "
              "copies whose key axis is its own. Beside each, the error of attention without the band.", ""]
    for c in bad:
        lines.append(f"- FAILED {c['kernel']} band={c['band']} {c['seq_q']}x{c['seq_k']} d={c['d']} {c['dtype']} "
                     f"config={c['config']}: {c['rel_err']:.2e} {c.get('error') or ''}")
    ours = [c for c in ran if c["kernel"].startswith("napkin")]
    worst = max((c["rel_err"] for c in ours), default=0.0)
    worst_abs = max((c["max_abs_err"] for c in ours), default=0.0)
    unbanded = min((c["unbanded_rel_err"] for c in ran if bites(c)), default=0.0)
    lines += [f"Largest error of napkin's kernels: {worst:.2e} relative, {worst_abs:.2e} absolute; where the band "
              f"hides keys, attention without it is off by at least {unbanded:.2e}. Kernels checked: "
              f"{', '.join(sorted({c['kernel'] for c in ran}))}.", ""]
    for c in checks:
        if c.get("ok") is None:
            lines.append(f"- not run: {c['kernel']} band={c['band']} {c['seq_q']}x{c['seq_k']}: {c['error']}")
    keyless = sorted({f"{c['kernel']}: {c['keyless_out']}" for c in ran if c.get("keyless_out")})
    if keyless:
        lines.append(f"- queries that see no key (left out of the error) get: {'; '.join(keyless)}")
    for n in doc["not_checked"]:
        lines.append(f"- not checked: {n['case']}: {n['why']} (the module says: {n['module_says']})")
    lines += ["", f"## Timing: {BATCH} x {HEADS} heads, d = {HEAD_DIM}, bf16 (TFLOP/s: 4 b h d x the band's pairs, "
              "analyzer.config.scores.pairs)", "",
              "| L | napkin | predicted | measured / predicted | napkin portable | predicted | FA4 window | "
              "FlexAttention | SDPA bool mask | napkin TFLOP/s | best peer | napkin / best peer (throughput) "
              "| config |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["timing"]:
        def us(name, r=r):
            return r.get(f"{name}_us")
        lines.append(
            f"| {r['seqlen']} | {us('napkin')} us | {r.get('napkin_predicted_us')} us | "
            f"{ratio(us('napkin'), r.get('napkin_predicted_us'))} | {us('napkin_triton')} us | "
            f"{r.get('napkin_triton_predicted_us')} us | {us('fa4')} us | {us('flex')} us | {us('sdpa_mask')} us | "
            f"{r.get('napkin')} | {r.get('best_peer')} | {ratio(r.get('best_peer_us'), us('napkin'))} | "
            f"{r.get('napkin_config')} |")
    lines += ["", "napkin / best peer is napkin's throughput over the fastest peer's (FA4, Flex, SDPA), the peer's "
              "time over napkin's: above 1, napkin is faster. Errors of rows that did not run are in the JSON."]
    lines += ["", "The model's prediction (napkin's default module; its portable module): " + "; ".join(
        f"{seq}: {p['napkin'][1]} us ({p['napkin'][0]}); {p['napkin triton'][1]} us ({p['napkin triton'][0]})"
        for seq, p in doc.get("predicted", {}).items())]
    if doc["skipped"]:
        lines += ["", f"Skipped (budget): {doc['skipped']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv, __doc__.splitlines()[0], dry_run=True, out_from_env=True)
    run = Run(args, argv)
    if args.dry_run:
        run.save()
        log(f"dry run: generated {len(run.generated)} modules in {run.tmp}")
        return 0
    import torch
    if not torch.cuda.is_available():
        run.save()
        log("no CUDA GPU: the modules are generated; checks and timing need one")
        return 2
    run.doc["environment"] = environment()
    run.load()
    if not checks(run):
        log("napkin's checks failed: no timing")
        run.save()
        return 1
    timing(run)
    run.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
