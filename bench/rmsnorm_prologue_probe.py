"""Where the Hopper contraction kernel's prologue spends its time: rmsnorm_matmul's module as napkin kernel
writes it (A's chunk into registers, the gain and the sum of squares there, wgmma with A from registers)
beside variants of its text, in one run on one GPU, at the diagram's defaults (16384 x 4096 -> 4096, fp16):

- `registers` (the generated module): the prologue's result goes to wgmma from registers;
- `smem`: the prologue reads the chunk in a blocked layout, writes X g back into the chunk's own SMEM
  buffer (it is this consumer's until it releases the stage) and wgmma reads it from SMEM, as without a
  prologue;
- `sum only`: only the sum of squares, wgmma reads X itself (a wrong answer: a timing of the prologue's
  loads alone);
- matmul: the generated matmul module at the same shape, no prologue; and torch's F.rms_norm then matmul.

Each is checked against float64 where it computes the diagram (not `sum only`).

    python bench/rmsnorm_prologue_probe.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import environment, import_file, log, rel_err, save_results, timed  # noqa: E402
from bench.hopper_contraction import EPS, RMSNORM, inputs, reference  # noqa: E402

REGISTERS = '''\
                a, stat = _mm_prologue(a.load(a_layout).to(gl.float32), a_rows, ks, stat, size_m, size_k, extras,
                                       TAIL)
                a = a.to(a_desc.dtype)'''
SMEM = '''\
                x_val, stat = _mm_prologue(a.load(x_layout).to(gl.float32), x_rows, kx, stat, size_m, size_k, extras,
                                           TAIL)
                a.store(x_val.to(a_desc.dtype))     # X g into this consumer's own buffer of the stage
                fence_async_shared()'''
SUM_ONLY = '''\
                x_val, stat = _mm_prologue(a.load(x_layout).to(gl.float32), x_rows, kx, stat, size_m, size_k, extras,
                                           TAIL)'''
KS = "                ks = j * BLOCK_K + gl.arange(0, BLOCK_K, gl.SliceLayout(0, a_layout))"
KX = "                kx = j * BLOCK_K + gl.arange(0, BLOCK_K, gl.SliceLayout(0, x_layout))"
LAYOUT = "    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)"
BLOCKED = (LAYOUT + "\n    x_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # 16-byte rows")
STAT = ("            stat = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, a_layout))\n"
        "            a_rows = row0 + gl.arange(0, ROWS, gl.SliceLayout(1, a_layout))")
XSTAT = ("            stat = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, x_layout))\n"
         "            x_rows = row0 + gl.arange(0, ROWS, gl.SliceLayout(1, x_layout))")


def variant(source: str, body: str) -> str:
    for old, new in ((REGISTERS, body), (KS, KX), (LAYOUT, BLOCKED), (STAT, XSTAT)):
        if old not in source:
            raise ValueError(f"the module has no {old.strip()[:40]!r}: the probe's text is stale")
        source = source.replace(old, new)
    return source


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer import hardware
    from analyzer.codegen import generate

    env = environment()
    profile = hardware.load("h100")
    tmp = Path(tempfile.mkdtemp())
    source = generate("rmsnorm_matmul", profile, dtype="fp16").source
    texts = {"registers": source, "smem": variant(source, SMEM), "sum only": variant(source, SUM_ONLY)}
    xs = inputs(torch, "rmsnorm_matmul", RMSNORM, torch.float16)
    ref = reference(torch, "rmsnorm_matmul", xs)
    rows = []
    for name, text in texts.items():
        path = tmp / f"rms_{name.replace(' ', '_')}.py"
        path.write_text(text)
        m = import_file(path, path.stem)
        fn = (lambda m=m: m.rmsnorm_matmul(*xs))
        err = rel_err(torch, fn(), ref)
        rows.append({"kernel": name, "rel_err": err, "time_s": timed(triton, fn, graph=True)["time_s"]})
        log(json.dumps(rows[-1]))
    g = generate("matmul", profile, dtype="fp16")
    path = tmp / "mm.py"
    g.write(path)
    mm = import_file(path, "mm")
    w = xs[2]
    rows.append({"kernel": "matmul (no prologue)", "time_s": timed(triton, lambda: mm.matmul(xs[0], w), graph=True)["time_s"]})
    F = torch.nn.functional
    rows.append({"kernel": "torch rms_norm + matmul", "time_s": timed(
        triton, lambda: torch.matmul(F.rms_norm(xs[0], (xs[0].shape[1],), xs[1], eps=EPS), w), graph=True)["time_s"]})
    for r in rows[-2:]:
        log(json.dumps(r))
    md = [f"# rmsnorm_matmul's prologue on {env['gpu']}", "", "`python bench/rmsnorm_prologue_probe.py`, "
          "16384 x 4096 -> 4096 fp16, CUDA graph replays, median", "", "| kernel | time | rel. error |", "|---|---|---|"]
    md += [f"| {r['kernel']} | {r['time_s'] * 1e6:.1f} us | {r.get('rel_err', float('nan')):.1e} |" for r in rows]
    save_results(args.out, "rmsnorm_prologue_probe_" + ("h200" if "H200" in env["gpu"] else "h100"),
                 {"env": env, "rows": rows}, "\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
