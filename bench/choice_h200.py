"""The model's chosen configuration against the fastest measured ones, timed again head to head on one
GPU (docs/validation.md, "The choice, timed again").

A sweep (bench/sweep_h200.py) times each configuration once, one after another. The fastest of some
thirty timings is biased fast (each carries its own noise, and the minimum picks the luckiest), and
the clock can drift between the first configuration and the last. So the ratio "model's choice over
best measured" of a sweep mixes the model's error with the timer's. This script separates them: per
problem size of a recording it takes the configuration each given profile ranks first (napkin sweep's
choice, the rule of napkin calibrate's report), the one the Triton kernel `napkin kernel` generates with
the last profile launches there ("napkin kernel": its by-size table's), and the K fastest of the
recording, checks each against
the reference once, and times them again in R interleaved rounds (the order rotates every round),
with the sweep's timer. It reports each candidate's median over the rounds, the spread of the rounds,
and each profile's chosen / best ratio, per round and overall.

    python bench/choice_h200.py [--recording bench/results/sweep_h200.json]
        [--gpu h200 --gpu hardware/h200-calibrated.yaml] [--top 4] [--rounds 5]
        [--diagrams attention,causal_attention,matmul] [--out DIR]

Output: choice_h200.json (meta, one entry per size) and choice_h200.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import sweep_h200 as sweep_bench  # noqa: E402 - the sweep's kernels, compile workers and timer
from gpu_state import FIELDS, Sampler  # noqa: E402 - the SM clock and power beside each timing

WITHIN = 1.05                      # the target: the choice within 5 % of the best


# ------------------------------------------------------------------------------ what to time

def candidates(recording: Path, gpus: list[str], top: int) -> list[dict[str, Any]]:
    """Per problem size: its raw records to time (each profile's first choice and the `top` fastest
    measured), and which one each profile chose."""
    from analyzer import hardware
    from analyzer.calibrate.calibrate import KERNEL, first_choices, kernel_choices
    from analyzer.calibrate.record import load_recording
    from analyzer.calibrate.validate import shape_of
    rec = load_recording(recording)
    raw = json.loads(recording.read_text())["records"]
    ok = [(r, d) for r, d in zip(rec.records, raw, strict=True) if r.status == "ok"]
    choices = {g: first_choices([r for r, _ in ok], hardware.load(g))[0] for g in gpus}
    # what the Triton kernel napkin kernel generates with the last profile launches at each size
    choices[KERNEL] = kernel_choices([r for r, _ in ok], hardware.load(gpus[-1]))
    sizes: dict[tuple, list] = {}
    for r, d in ok:
        sizes.setdefault(shape_of(r), []).append((r, d))
    out = []
    for shape, rows in sorted(sizes.items()):
        rows.sort(key=lambda rd: rd[0].time_s)
        by_key = {r.config_key: (r, d) for r, d in rows}
        chosen = {g: choices[g][shape] for g in choices}
        keys = list(dict.fromkeys([r.config_key for r, _ in rows[:top]]
                                  + [k for k in chosen.values() if k in by_key]))
        timer = rows[0][1].get("timer") or ("cudagraph" if shape[0] == "matmul" else "do_bench")
        out.append({"shape": list(shape), "sizes": rows[0][0].sizes, "timer": timer, "chosen": chosen,
                    "sweep_best": rows[0][0].config_key,
                    "candidates": [{"key": k, "config": by_key[k][1]["config"],
                                    "sweep_s": by_key[k][0].time_s} for k in keys]})
    return out


# ------------------------------------------------------------------------------------ timing

def prepare(size: dict, state) -> tuple:
    """The kernel module, its CONFIGS slot, the call and the reference output of one problem size."""
    import torch
    family, diagram, hdim, n = size["shape"]
    module, path, _ = state["modules"].setdefault(diagram, sweep_bench.load_kernel(diagram, state["tmp"]))
    if family == "attention":
        causal = sweep_bench.DIAGRAMS[diagram]
        s = size["sizes"]
        q, k, v = (torch.randn(s["batch"], s["heads"], n, hdim, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        call = partial(module.attention, q, k, v, causal=causal)
        return module, path, ("flash", hdim), call, ref, size.get("timer") == "cudagraph"
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    return module, path, ("gemm", None), partial(module.matmul, a, b), torch.matmul(a, b), True


def checked(size: dict, module, kernel: str, key, call, ref) -> list[dict]:
    """The candidates that match the reference, each checked once (a failure is recorded on it)."""
    import torch
    live = []
    for c in size["candidates"]:
        module.CONFIGS[kernel][key] = c["config"]
        try:
            c["rel_err"] = sweep_bench.rel_err(torch, call(), ref)
            if not c["rel_err"] < sweep_bench.TOLERANCE:
                raise RuntimeError(f"relative error {c['rel_err']:.3g} against the reference")
            live.append(c)
        except Exception as exc:  # noqa: BLE001 - a configuration that fails is reported, not timed
            c["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return live


def rotations(live: list, rounds: int):
    """(round, candidate) in `rounds` rounds whose order rotates by one every round."""
    for r in range(rounds):
        for c in live[r % len(live):] + live[:r % len(live)]:
            yield r, c


def time_size(size: dict, rounds: int, state) -> None:
    """Check every candidate once, then time them in `rounds` rotating rounds (in place)."""
    import torch
    import triton
    module, _, (kernel, key), call, ref, graph = prepare(size, state)
    original = dict(module.CONFIGS[kernel][key])
    live = checked(size, module, kernel, key, call, ref)
    for c in live:
        c["times_s"], c["gpu_states"] = [], []
    for _, c in rotations(live, rounds):
        module.CONFIGS[kernel][key] = c["config"]
        timing = sweep_bench.bench(triton, call, graph=graph, sampler=state.get("sampler"))
        c["times_s"].append(timing["time_s"])
        c["gpu_states"].append({f: timing.get(f) for f in FIELDS})
    module.CONFIGS[kernel][key] = original
    summarise(size)
    torch.cuda.empty_cache()


def summarise(size: dict) -> None:
    """Medians, the spread of the rounds, the best candidate, and each choice's ratio to it."""
    import statistics
    timed = [c for c in size["candidates"] if c.get("times_s")]
    for c in timed:
        c["median_s"] = statistics.median(c["times_s"])
        c["spread"] = (max(c["times_s"]) - min(c["times_s"])) / c["median_s"]
        c["over_sweep"] = c["median_s"] / c["sweep_s"]
    if not timed:
        return
    best = min(timed, key=lambda c: c["median_s"])
    size["best"] = best["key"]
    by_key = {c["key"]: c for c in timed}
    size["ratio"], size["ratio_rounds"] = {}, {}
    for gpu, key in size["chosen"].items():
        c = by_key.get(key)
        if c is None:
            continue
        size["ratio"][gpu] = c["median_s"] / best["median_s"]
        size["ratio_rounds"][gpu] = [a / b for a, b in zip(c["times_s"], best["times_s"], strict=True)]
    sweep_best = min(c["sweep_s"] for c in size["candidates"])
    size["sweep_ratio"] = {g: next(c["sweep_s"] for c in size["candidates"] if c["key"] == k) / sweep_best
                           for g, k in size["chosen"].items() if k in by_key}


def precompile(sizes: list[dict], state, workers: int) -> None:
    """Warm Triton's cache with every candidate's kernel, in parallel, before anything is timed."""
    jobs = []
    for s in sizes:
        family, diagram, hdim, _ = s["shape"]
        _, path, _ = state["modules"].setdefault(diagram, sweep_bench.load_kernel(diagram, state["tmp"]))
        kernel, key = ("flash", hdim) if family == "attention" else ("gemm", None)
        jobs += [(str(path), f"sweep_{diagram}", kernel, key, c["config"], family, hdim or None,
                  sweep_bench.DIAGRAMS.get(diagram, False)) for c in s["candidates"]]
    sweep_bench.precompile(list({json.dumps(j, sort_keys=True, default=str): j for j in jobs}.values()),
                           workers)


# ------------------------------------------------------------------------------------ output

def labels(doc: dict) -> list[str]:
    """Whose choices were timed: each profile's first choice, then the generated kernel's."""
    return list(doc["sizes"][0]["chosen"]) if doc["sizes"] else doc["meta"]["gpus"]


def table(doc: dict) -> str:
    gpus = labels(doc)
    head = ["family", "diagram", "hdim", "size", "timed", "best, timed again", "round spread"]
    for g in gpus:
        head += [f"{Path(g).stem}: choice / best, sweep", f"{Path(g).stem}: timed again (rounds)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in doc["sizes"]:
        family, diagram, hdim, n = s["shape"]
        timed = [c for c in s["candidates"] if c.get("times_s")]
        if not timed:
            continue
        spread = sorted(c["spread"] for c in timed)[len(timed) // 2]
        cells = [family, diagram, str(hdim or ""), str(n), str(len(timed)),
                 " ".join(s["best"].split(" ")[2:]) or s["best"], f"{100 * spread:.1f} %"]
        for g in gpus:
            if g not in s.get("ratio", {}):
                cells += ["not timed", ""]
                continue
            rounds = s["ratio_rounds"][g]
            cells += [f"{s['sweep_ratio'][g]:.3f}",
                      f"**{s['ratio'][g]:.3f}** ({min(rounds):.3f}-{max(rounds):.3f})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def totals(doc: dict) -> str:
    lines = []
    for g in labels(doc):
        sweep = [s["sweep_ratio"][g] for s in doc["sizes"] if g in s.get("sweep_ratio", {})]
        again = [s["ratio"][g] for s in doc["sizes"] if g in s.get("ratio", {})]
        lines.append(f"- {Path(g).stem} (`{g}`): within {100 * (WITHIN - 1):.0f} % of the best at "
                     f"{sum(x <= WITHIN for x in sweep)} of {len(sweep)} sizes by the sweep, at "
                     f"{sum(x <= WITHIN for x in again)} of {len(again)} timed again; worst "
                     f"{max(again, default=float('nan')):.3f}.")
    drift = sorted(c["over_sweep"] for s in doc["sizes"] for c in s["candidates"] if "over_sweep" in c)
    if drift:
        lines.append(f"- Timed again over the sweep's time, per candidate: median "
                     f"{drift[len(drift) // 2]:.3f}, range {drift[0]:.3f}-{drift[-1]:.3f}.")
    return "\n".join(lines) + "\n"


def save(doc: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "choice_h200.json").write_text(json.dumps(doc, indent=1) + "\n")
    m = doc["meta"]
    (out / "choice_h200.md").write_text(
        f"# The model's choice, timed again on {m.get('gpu', '?')} ({m['date']})\n\n"
        f"`{m['command']}`: per size, each profile's first choice, the configuration the Triton kernel "
        f"`napkin kernel` generates with the last profile launches there (`napkin kernel`), and the "
        f"{m['top']} fastest of "
        f"`{m['recording']}`, timed in {m['rounds']} interleaved rounds ({m['timer']}). Ratios are "
        "medians over the rounds; in brackets, the lowest and highest round.\n\n"
        + totals(doc) + "\n" + table(doc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", default=str(ROOT / "bench" / "results" / "sweep_h200.json"))
    parser.add_argument("--gpu", action="append", help="a profile whose choice to time (repeatable; "
                                                       "default: h200 and hardware/h200-calibrated.yaml)")
    parser.add_argument("--top", type=int, default=4, help="the fastest measured configurations to time")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--diagrams", default="", help="comma-separated diagrams (default: all)")
    parser.add_argument("--budget-s", type=float, default=3600.0, help="stop timing after")
    parser.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1))
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "results")))
    args = parser.parse_args(argv)
    gpus = args.gpu or ["h200", "hardware/h200-calibrated.yaml"]
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    recording = Path(args.recording)
    wanted = {d for d in args.diagrams.split(",") if d}
    sizes = [s for s in candidates(recording, gpus, args.top) if not wanted or s["shape"][1] in wanted]
    given = argv if argv is not None else sys.argv[1:]
    doc = {"meta": {"date": datetime.date.today().isoformat(),
                    "command": ("python bench/choice_h200.py "
                                + " ".join(sweep_bench.without_out(given))).strip(),
                    "recording": os.path.relpath(recording, ROOT), "gpus": gpus, "top": args.top,
                    "rounds": args.rounds,
                    "timer": "the recording's, per size (each size's `timer`): "
                             + sweep_bench.timer_text(any(s["timer"] == "cudagraph" for s in sizes
                                                          if s["shape"][0] == "attention")),
                    **sweep_bench.environment()},
           "sizes": sizes}
    state = {"tmp": Path(tempfile.mkdtemp()), "modules": {}}
    precompile(sizes, state, args.workers)
    deadline = time.time() + args.budget_s
    out = Path(args.out)
    with Sampler() as state["sampler"]:
        for s in sizes:
            if time.time() > deadline:
                sweep_bench.log(f"  budget spent: {s['shape']} and later not timed")
                break
            began = time.time()
            time_size(s, args.rounds, state)
            sweep_bench.log(f"  {s['shape']}: {len(s['candidates'])} timed in {time.time() - began:.0f} s, "
                            + ", ".join(f"{g} {r:.3f}" for g, r in s.get("ratio", {}).items()))
            save(doc, out)                          # after every size: a run cut short keeps what it timed
    print(totals(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
