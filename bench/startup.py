"""How long napkin's commands take from the shell, against the time Python takes to import napkin's
dependencies: ratios in one run, on the CPU (no GPU needed).

    python bench/startup.py [--runs 7] [--out DIR]

Each command runs `--runs` times in a fresh process, interleaved with the others so that a slow moment
of the machine falls on all of them alike; the median wall time of each is reported, and its ratio to
the median import time. Targets (the issue "One model, one answer"): napkin analyze attention --gpu h100
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
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = parser.parse_args()
    napkin = shutil.which("napkin")
    if napkin is None:
        print("error: napkin is not installed in this environment (pip install .)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        runs = commands(napkin, Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.runs):
            for name, argv in runs.items():
                began = time.perf_counter()
                subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - began)
    base = statistics.median(times["import dependencies"])
    rows = [{"command": name, "median_s": statistics.median(t), "min_s": min(t), "max_s": max(t),
             "ratio_to_import": statistics.median(t) / base} for name, t in times.items()]
    meta = {"machine": cpu(), "python": platform.python_version(), "date": date.today().isoformat(),
            "command": f"python bench/startup.py --runs {args.runs}", "runs": args.runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "startup.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = ["# napkin's commands against importing its dependencies", "",
             f"`{meta['command']}` on {meta['machine']}, Python {meta['python']}, {meta['date']}; median "
             f"of {args.runs} fresh processes each, interleaved.", "",
             "| command | median | min | max | x import |", "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| `{r['command']}` | {r['median_s']:.2f} s | {r['min_s']:.2f} s | {r['max_s']:.2f} s | "
              f"{r['ratio_to_import']:.2f} |" for r in rows]
    (out / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
