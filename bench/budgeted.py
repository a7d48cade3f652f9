"""What the budgeted bench scripts share: their command line (--gpu, --out, --budget-s, and --dry-run where
they have one) and the run's clock, profile, scratch folder, record, generated modules and saving.

A script's own `Run` derives from `BudgetedRun`, giving its record's fields and its markdown, and adds
the modules it generates (`written` writes one and imports it) and what it measures."""

from __future__ import annotations

import argparse
import datetime
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import REP_MS, WARMUP_MS, command, import_file, save_results

TIMER = f"triton.testing.do_bench(warmup={WARMUP_MS}, rep={REP_MS}), median"


def heading(doc: dict, title: str) -> list[str]:
    """A record's markdown opening: its title with the GPU, then the command, date, versions and timer."""
    env = doc["environment"]
    return [f"# {title} ({env.get('gpu')})", "", f"Command: `{doc['command']}`  ",
            f"Date: {doc['date']}; GPU: {env.get('gpu')}; torch {env.get('torch')}, triton {env.get('triton')}; "
            f"timer: {doc['timer']}", ""]


def parse(argv: list[str] | None, description: str, *, budget_s: float = 420.0, dry_run: bool = False,
          out_from_env: bool = False, quick: str | None = None) -> argparse.Namespace:
    """The script's arguments: --gpu (the profile its kernels are generated for), --out, --budget-s (when
    it stops timing), with `dry_run` --dry-run; `out_from_env`: --out defaults to $OUT where it is set;
    `quick`: a --quick flag, its help that text (what the script leaves out with it)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--gpu", default="h100", help="the profile the kernels are generated for")
    out = os.environ.get("OUT", "bench/results") if out_from_env else "bench/results"
    ap.add_argument("--out", type=Path, default=Path(out))
    ap.add_argument("--budget-s", type=float, default=budget_s, help="stop timing after this many seconds")
    if dry_run:
        ap.add_argument("--dry-run", action="store_true", help="generate the modules and stop (no GPU needed)")
    if quick:
        ap.add_argument("--quick", action="store_true", help=quick)
    return ap.parse_args(argv)


class BudgetedRun:
    """The run's clock, profile, scratch folder (/tmp/napkin_<script>) and record: the command, the date,
    the profile, the timer, then `record`'s fields (which may replace the timer's)."""

    def __init__(self, args: argparse.Namespace, argv: list[str] | None, script: str,
                 render: Callable[[dict], str], **record: Any) -> None:
        from analyzer import hardware
        self.args = args
        self.profile = hardware.load(args.gpu)
        self.start = time.monotonic()
        self.name = Path(script).stem
        self.render = render
        self.tmp = Path("/tmp") / f"napkin_{self.name}"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.doc = {"command": command(script, argv), "date": datetime.date.today().isoformat(),
                    "profile": args.gpu, "timer": TIMER, **record}

    def written(self, g: Any, name: str, suffix: str = ".py") -> Any:
        """Generated file `g` written into the scratch folder as `name` (a .cu file's .py loader beside
        it) and its Python module imported."""
        paths = g.write(self.tmp / f"{name}{suffix}")
        return import_file(next(p for p in paths if p.suffix == ".py"), name)

    def left(self) -> float:
        """Seconds of the timing budget left."""
        return self.args.budget_s - (time.monotonic() - self.start)

    def save(self) -> None:
        save_results(self.args.out, f"{self.name}_{self.args.gpu}", self.doc, self.render(self.doc))
