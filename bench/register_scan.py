"""The Hopper attention kernel's register rule held against what ptxas does, for every attention diagram
the kernel takes: each configuration near the rule's edge (its count of registers a consumer thread needs
at most 24 above what setmaxnreg gives it) compiled for sm_90a, and the bytes ptxas spills. No GPU: Triton's
compiler with a Hopper target (tests.kernels.hopper_build), one process.

The rule (analyzer.config.hopper.configuration) counts the output accumulator, one chunk's scores and the
previous chunk's probabilities, a reserve, the causal mask's indices, and what the ops a diagram adds to the
scores hold (analyzer.config.scores.REGISTERS_PER_SCORE and RECOMPUTED_PER_SCORE, fitted to this scan:
ALiBi's vector held where it fits, else recomputed a chunk). A configuration it calls legal that spills is
a miss of the rule; one it refuses that does not spill, a configuration it gives away.

    python bench/register_scan.py [--gpu h100] [--diagrams attention,sigmoid_attention,...] [--out DIR]

It writes register_scan_<gpu>.json and .md into --out (bench/results).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, import_file, log, save_results  # noqa: E402

DIAGRAMS = ("attention", "causal_attention", "sigmoid_attention", "softcap_attention", "sink_attention",
            "alibi_attention", "gemma2_local_attention", "bias_attention")
HEAD_DIMS = (64, 128)
MARGIN = 24           # configurations up to this many registers past the rule are compiled too


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100", help="the profile the modules are generated for")
    ap.add_argument("--diagrams", default=",".join(DIAGRAMS))
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    import triton

    from analyzer import hardware
    from analyzer.codegen import generate
    from analyzer.config.hopper import configuration
    from tests.kernels.hopper_build import hopper_source, ptxas_log

    profile = hardware.load(args.gpu)
    smem = profile.level("smem").block_capacity_bytes
    tmp = Path(tempfile.mkdtemp())
    began = time.time()
    rows = []
    for diagram in args.diagrams.split(","):
        g = generate(diagram, profile)
        chain = g.hopper.scores          # the chain of scores the module was generated for
        (path,) = g.write(tmp / f"{diagram}.py")
        module = import_file(path, diagram)
        for head_dim in HEAD_DIMS:
            for groups in sorted(module.REGISTER_CAP):     # every consumer count the module has
                for chunk in (64, 128, 256):
                    for overlap in ("none", "intra") if groups == 1 else ("intra", "inter+intra"):
                        c = configuration(profile, head_dim, g.dtype, warpgroups=groups, chunk=chunk, stages=2,
                                          overlap=overlap, causal=module.RIGHT == 0, scores=chain)
                        if c.registers_needed > c.registers + MARGIN or c.smem_bytes > smem:
                            continue
                        entry = {"WARPGROUPS": groups, "BLOCK_X": chunk, "STAGES": 2, "OVERLAP": overlap,
                                 "SCHEDULE": "tiles"}
                        source, target, options = hopper_source(module, entry, head_dim, g.dtype)
                        ptx = triton.compile(source, target=target, options=options).asm["ptx"]
                        notes = ptxas_log(ptx, f"--maxrregcount={module.REGISTER_CAP[groups]}")
                        spilled = sum(int(n) for n in re.findall(r"(\d+) bytes spill", notes))
                        rows.append({"diagram": diagram, "head_dim": head_dim, "config": entry,
                                     "needed": c.registers_needed, "given": c.registers, "spilled_bytes": spilled,
                                     "legal": c.registers_needed <= c.registers})
                        log(json.dumps(rows[-1]))
    doc = {"command": command("register_scan.py", argv), "gpu_profile": profile.name, "rows": rows,
           "seconds": time.time() - began}
    misses = [r for r in rows if r["legal"] and r["spilled_bytes"]]
    given_away = [r for r in rows if not r["legal"] and not r["spilled_bytes"]]
    md = [f"# The Hopper attention kernel's register rule against ptxas ({profile.name})", "",
          f"`{doc['command']}`: {len(rows)} configurations compiled for sm_90a (two stages, a block a tile), "
          f"those within {MARGIN} registers of the rule's edge.", "",
          f"Called legal and spilled: {len(misses)}. Refused and built without a spill: {len(given_away)}.", "",
          "| diagram | head dim | consumers | chunk | overlap | registers counted | given | spilled | rule says |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["spilled_bytes"] or not r["legal"]:
            c = r["config"]
            md.append(f"| {r['diagram']} | {r['head_dim']} | {c['WARPGROUPS']} | {c['BLOCK_X']} | {c['OVERLAP']} | "
                      f"{r['needed']} | {r['given']} | {r['spilled_bytes']} B | "
                      f"{'legal' if r['legal'] else 'refused'} |")
    md += ["", "Every other configuration compiled is legal and spills nothing.", ""]
    save_results(args.out, f"register_scan_{profile.name.split('-')[0]}", doc, "\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
