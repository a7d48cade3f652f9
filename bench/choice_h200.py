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
        [--gpu h200 --gpu hardware/h200-calibrated.yaml] [--top 4] [--rounds 5] [--rep-ms MS]
        [--diagrams attention,causal_attention,matmul] [--out DIR]

Output: choice_<gpu>.json (meta, one entry per size) and choice_<gpu>.md, named after the recording
(sweep_h100.json: choice_h100). --rep-ms: as the recording's sweep took it (bench/sweep_h200.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))          # napkin and bench.common from this checkout, installed or not

from bench.common import (  # noqa: E402
    FIELDS,
    GPU,
    REP_MS,
    Kernels,
    Sampler,
    candidates,
    checked,
    command,
    environment,
    log,
    precompile_candidates,
    prepare,
    rotations,
    save_results,
    timed,
    timer_text,
)

WITHIN = 1.05                      # the target: the choice within 5 % of the best


# ------------------------------------------------------------------------------------ timing

def time_size(size: dict, rounds: int, kernels: Kernels, sampler: Sampler | None,
              rep_ms: float = REP_MS) -> None:
    """Check every candidate once, then time them in `rounds` rotating rounds (in place)."""
    import torch
    import triton
    problem = prepare(size, kernels)
    live = checked(size, problem)
    for c in live:
        c["times_s"], c["gpu_states"] = [], []
    for _, c in rotations(live, rounds):
        timing = timed(triton, problem.launch(c["config"]), graph=problem.graph, sampler=sampler,
                       rep_ms=rep_ms)
        c["times_s"].append(timing["time_s"])
        c["gpu_states"].append({f: timing.get(f) for f in FIELDS})
    summarise(size)
    torch.cuda.empty_cache()


def summarise(size: dict) -> None:
    """Medians, the spread of the rounds, the best candidate, and each choice's ratio to it."""
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
    m = doc["meta"]
    save_results(
        out, Path(m["recording"]).stem.replace("sweep", "choice", 1), doc,
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
    parser.add_argument("--rep-ms", type=float, default=REP_MS,
                        help=f"milliseconds each of a timing's ten graph replays runs (default {REP_MS})")
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
    doc = {"meta": {"date": datetime.date.today().isoformat(), "command": command("choice_h200.py", argv),
                    "recording": os.path.relpath(recording, ROOT), "gpus": gpus, "top": args.top,
                    "rounds": args.rounds,
                    "timer": "the recording's, per size (each size's `timer`): "
                             + timer_text(any(s["timer"] == "cudagraph" for s in sizes
                                              if s["shape"][0] == "attention"), args.rep_ms),
                    **environment()},
           "sizes": sizes}
    kernels = Kernels(Path(tempfile.mkdtemp()), json.loads(recording.read_text())["meta"].get("profile", GPU))
    precompile_candidates(sizes, kernels, args.workers)
    deadline = time.time() + args.budget_s
    out = Path(args.out)
    with Sampler() as sampler:
        for s in sizes:
            if time.time() > deadline:
                log(f"  budget spent: {s['shape']} and later not timed")
                break
            began = time.time()
            time_size(s, args.rounds, kernels, sampler, args.rep_ms)
            log(f"  {s['shape']}: {len(s['candidates'])} timed in {time.time() - began:.0f} s, "
                + ", ".join(f"{g} {r:.3f}" for g, r in s.get("ratio", {}).items()))
            save(doc, out)                          # after every size: a run cut short keeps what it timed
    print(totals(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
