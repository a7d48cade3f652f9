"""Does the fastest configuration depend on the clock the GPU holds under sustained load?

The choice, timed again (bench/choice_h200.py) found the head-dim-64 candidates slowing by 2-9 % from
the first round to the later ones while others held their time, and it is among those candidates that
the model's choice misses the 5 % target. This script times the candidates of chosen sizes in
interleaved rounds, as choice_h200.py does, with both of Triton's timers (do_bench, the sweep's, and
do_bench_cudagraph), and samples the SM clock, the power draw and the temperature during every timing
(bench/common.py, Sampler). Time x clock is then each timing in SM cycles: if the candidates' order by cycles
differs from their order by time, the clock, not the kernel, decides it.

    python bench/clocks_h200.py [--sizes attention:64:1024,causal_attention:64:8192]
        [--gpu hardware/h200-calibrated.yaml] [--top 4] [--rounds 7] [--out DIR]

Output: clocks_h200.json (every timing with its clock, power and temperature) and clocks_h200.md.
"""

from __future__ import annotations

import argparse
import datetime
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
    REP_MS,
    WARMUP_MS,
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
)

SIZES = ("attention:64:1024,attention:64:2048,attention:64:8192,"
         "causal_attention:64:4096,causal_attention:64:8192,causal_attention:64:16384")
TIMERS = {"do_bench": False, "cudagraph": True}      # timer -> graph


def time_size(size: dict, rounds: int, kernels: Kernels, sampler: Sampler) -> None:
    """Check every candidate once, then time it with both timers in `rounds` rotating rounds."""
    import torch
    import triton
    problem = prepare(size, kernels)
    live = checked(size, problem)
    for c in live:
        c["timings"] = []
    for r, c in rotations(live, rounds):
        call = problem.launch(c["config"])
        for timer, graph in TIMERS.items():
            timing = timed(triton, call, graph=graph, sampler=sampler)
            c["timings"].append({"round": r, "timer": timer, "time_s": timing["time_s"],
                                 **{f: timing.get(f) for f in FIELDS}})
    torch.cuda.empty_cache()


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def table(size: dict) -> list[str]:
    """Per candidate and timer: median time, clock, power and cycles, and each over the best."""
    _, diagram, hdim, n = size["shape"]
    rows = []
    for timer in TIMERS:
        stats = []
        for c in size["candidates"]:
            ts = [t for t in c.get("timings", []) if t["timer"] == timer]
            if not ts:
                continue
            cycles = median(t["time_s"] * t["sm_clock_mhz"] * 1e6 for t in ts if t["sm_clock_mhz"])
            first, later = ts[0]["time_s"], median(t["time_s"] for t in ts[1:])
            stats.append((c["key"], median(t["time_s"] for t in ts), median(t["sm_clock_mhz"] for t in ts),
                          median(t["power_w"] for t in ts), cycles, later / first if later else None))
        best_t = min(s[1] for s in stats)
        best_c = min((s[4] for s in stats if s[4]), default=None)
        for key, t, clock, power, cycles, drift in stats:
            mark = " (chosen)" if key == size["chosen"] else ""
            rows.append(f"| {diagram} d{hdim} {n} | {timer} | "
                        f"{' '.join(key.split(' ')[2:])}{mark} | {t * 1e6:.1f} | {t / best_t:.3f} | "
                        f"{_fmt(clock, '.0f')} | {_fmt(power, '.0f')} | "
                        f"{_fmt(cycles and best_c and cycles / best_c, '.3f')} | {_fmt(drift, '.3f')} |")
    return rows


def save(doc: dict, out: Path) -> None:
    m = doc["meta"]
    lines = [f"# Time and clock of the contested candidates on {m.get('gpu', '?')} ({m['date']})", "",
             f"`{m['command']}`: per size, the calibrated profile's choice and the {m['top']} fastest of "
             f"`{m['recording']}`, timed in {m['rounds']} interleaved rounds with each timer; the SM "
             f"clock, power and temperature sampled during every timing ({m['sampler']}). Medians "
             "over the rounds; cycles = time x SM clock; drift = later rounds' median over the first "
             "round's time.", "",
             "| size | timer | configuration | time (us) | / best | SM clock (MHz) | power (W) | "
             "cycles / best | drift |", "|---|---|---|---|---|---|---|---|---|"]
    for s in doc["sizes"]:
        if any(c.get("timings") for c in s["candidates"]):
            lines += table(s)
    save_results(out, "clocks_h200", doc, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", default=str(ROOT / "bench" / "results" / "sweep_h200.json"))
    parser.add_argument("--gpu", default="hardware/h200-calibrated.yaml", help="the profile whose choice to time")
    parser.add_argument("--sizes", default=SIZES, help="comma-separated diagram:head_dim:size")
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1))
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "results")))
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    wanted = {tuple(w.split(":")) for w in args.sizes.split(",") if w}
    sizes = [s for s in candidates(Path(args.recording), [args.gpu], args.top)
             if (s["shape"][1], str(s["shape"][2]), str(s["shape"][3])) in wanted]
    for s in sizes:
        s["chosen"] = s["chosen"][args.gpu]
    kernels = Kernels(Path(tempfile.mkdtemp()))
    precompile_candidates(sizes, kernels, args.workers)
    with Sampler() as sampler:
        doc = {"meta": {"date": datetime.date.today().isoformat(), "command": command("clocks_h200.py", argv),
                        "recording": os.path.relpath(args.recording, ROOT), "profile": args.gpu,
                        "top": args.top, "rounds": args.rounds, "sampler": sampler.source,
                        "timers": {"do_bench": f"triton.testing.do_bench(fn, warmup={WARMUP_MS}, "
                                               f"rep={REP_MS})",
                                   "cudagraph": f"triton.testing.do_bench_cudagraph(fn, rep={REP_MS})"},
                        **environment()},
               "sizes": sizes}
        for s in sizes:
            began = time.time()
            time_size(s, args.rounds, kernels, sampler)
            log(f"  {s['shape']}: {len(s['candidates'])} candidates in {time.time() - began:.0f} s")
            save(doc, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
