"""How long napkin's commands take from the shell, against the time Python takes to import napkin's
dependencies: ratios in one run, on the CPU (no GPU needed).

    python bench/startup.py [--runs 7] [--out DIR]

Each command runs `--runs` times in a fresh process, interleaved with the others so that a slow moment
of the machine falls on all of them alike, with napkin's result cache (analyzer.common.cache) in a new
empty folder: the first run of each is cold (napkin analyze computes and stores its answer), the median
of the others warm (napkin analyze reads it). Each is reported with its ratio to the median import
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
    parser.add_argument("--runs", type=int, default=7, help="runs of each command (at least 2)")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs: at least 2 (one cold, one warm)")
    napkin = shutil.which("napkin")
    if napkin is None:
        print("error: napkin is not installed in this environment (pip install .)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NAPKIN_CACHE_DIR"] = str(Path(tmp) / "cache")
        os.environ.pop("NAPKIN_CACHE", None)
        runs = commands(napkin, Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.runs):
            for name, argv in runs.items():
                began = time.perf_counter()
                subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - began)
    base = statistics.median(times["import dependencies"])
    rows = [{"command": name, "cold_s": t[0], "warm_median_s": statistics.median(t[1:]), "warm_min_s": min(t[1:]),
             "warm_max_s": max(t[1:]), "cold_ratio": t[0] / base, "warm_ratio": statistics.median(t[1:]) / base}
            for name, t in times.items()]
    meta = {"machine": cpu(), "python": platform.python_version(), "date": date.today().isoformat(),
            "command": f"python bench/startup.py --runs {args.runs}", "runs": args.runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "startup.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = ["# napkin's commands against importing its dependencies", "",
             f"`{meta['command']}` on {meta['machine']}, Python {meta['python']}, {meta['date']}: "
             f"{args.runs} fresh processes each, interleaved; cold is the first (an empty result cache), "
             "warm the median of the others.", "",
             "| command | cold | x import | warm | x import | warm min-max |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| `{r['command']}` | {r['cold_s']:.2f} s | {r['cold_ratio']:.2f} | {r['warm_median_s']:.2f} s | "
              f"{r['warm_ratio']:.2f} | {r['warm_min_s']:.2f}-{r['warm_max_s']:.2f} s |" for r in rows]
    (out / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
