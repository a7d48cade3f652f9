"""How long napkin's commands take from the shell, against the time Python takes to import napkin's
dependencies: ratios in one run, on the CPU (no GPU needed).

    python bench/startup.py [--runs 7] [--out DIR]

Each command runs `--runs` times cold and `--runs` times warm, each in a fresh process, interleaved with
the others so that a slow moment of the machine falls on all of them alike. Cold runs find napkin's result
cache (analyzer.common.cache) empty, a new folder each time, as a first-time user does (napkin analyze
computes and stores its answer); warm runs share one folder that the first of them filled (napkin
analyze reads its answer). Each is reported as the median of its runs. Each is reported with its ratio to the median import
time. Targets (the issue "One model, one answer"): napkin analyze attention --gpu h100
within 1.5x the import time, napkin kernel attention --gpu h100 within 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

DEPENDENCIES = "sympy, networkx, numpy, pydantic, matplotlib, typer, yaml, scipy, rich"


def commands(napkin: str, out: Path) -> dict[str, list[str]]:
    return {
        "import dependencies": [sys.executable, "-c", f"import {DEPENDENCIES}"],
        "napkin --version": [napkin, "--version"],
        "napkin analyze attention --gpu h100": [napkin, "analyze", "attention", "--gpu", "h100"],
        "napkin kernel attention --gpu h100": [napkin, "kernel", "attention", "--gpu", "h100", "-o",
                                               str(out / "attention.py")],
        "napkin sweep attention --gpu h100": [napkin, "sweep", "attention", "--gpu", "h100"],
    }


def cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="cold and warm runs of each command")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: at least 1")
    napkin = shutil.which("napkin")
    if napkin is None:
        print("error: napkin is not installed in this environment (pip install .)", file=sys.stderr)
        return 1
    os.environ.pop("NAPKIN_CACHE", None)
    with tempfile.TemporaryDirectory() as tmp:
        runs = commands(napkin, Path(tmp))
        times: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in runs}
        for i in range(args.runs + 1):          # round 0 fills the warm cache and is not counted
            for name, argv in runs.items():
                for state in ("cold", "warm"):
                    folder = Path(tmp) / (f"cold-{i}-{len(times[name]['cold'])}" if state == "cold" else "warm")
                    env = {**os.environ, "NAPKIN_CACHE_DIR": str(folder)}
                    began = time.perf_counter()
                    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
                    if i > 0:
                        times[name][state].append(time.perf_counter() - began)
    base = statistics.median(times["import dependencies"]["warm"] + times["import dependencies"]["cold"])
    rows = []
    for name, t in times.items():
        cold, warm = statistics.median(t["cold"]), statistics.median(t["warm"])
        rows.append({"command": name, "cold_s": cold, "cold_min_s": min(t["cold"]), "cold_max_s": max(t["cold"]),
                     "warm_median_s": warm, "warm_min_s": min(t["warm"]), "warm_max_s": max(t["warm"]),
                     "cold_ratio": cold / base, "warm_ratio": warm / base})
    meta = {"machine": cpu(), "python": platform.python_version(), "date": date.today().isoformat(),
            "command": f"python bench/startup.py --runs {args.runs}", "runs": args.runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "startup.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = ["# napkin's commands against importing its dependencies", "",
             f"`{meta['command']}` on {meta['machine']}, Python {meta['python']}, {meta['date']}: "
             f"the median of {args.runs} fresh processes each, interleaved; cold with an empty result cache "
             "(a first run), warm with a filled one (a repeated run); x import is the ratio to the median "
             "import time.", "",
             "| command | cold | x import | cold min-max | warm | x import | warm min-max |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| `{r['command']}` | {r['cold_s']:.2f} s | {r['cold_ratio']:.2f} | "
              f"{r['cold_min_s']:.2f}-{r['cold_max_s']:.2f} s | {r['warm_median_s']:.2f} s | "
              f"{r['warm_ratio']:.2f} | {r['warm_min_s']:.2f}-{r['warm_max_s']:.2f} s |" for r in rows]
    (out / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
