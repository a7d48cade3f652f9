"""RMSNorm-matmul's prologue operand: wgmma reading it from registers (as napkin kernel writes it) against
from SMEM (the prologue's result written back over the chunk, rebuilt here from the generated text), in
one run, beside napkin's plain matmul of the same shape and torch's F.rms_norm + matmul.

ptxas serialises every wgmma of the register form with two consumer warpgroups (its note C7512: too few
registers beside the accumulators); the SMEM form compiles without the note, and this script asks
whether that pays. Each form at the module's
own choice and at the tiles both forms compile with two consumers (128 x 256 and 128 x 128, 64-wide
chunks), each checked against float64 at rmsnorm_matmul's defaults before it is timed.

    python bench/rmsnorm_smem.py [--gpu h200] [--out DIR]

It writes rmsnorm_smem_<gpu>.json and .md into --out (bench/results).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import command, environment, import_file, log, rel_err, save_results, timed  # noqa: E402
from bench.hopper_contraction import EPS, RMSNORM, inputs, reference  # noqa: E402

# the SMEM form's lines, and the register form's they replace (contraction.gluon's)
SMEM_FORM = """\
                a_op, stat = _mm_prologue(a.load(a_layout).to(gl.float32), a_rows, ks, kvec, stat, size_m, size_k,
                                          extras, TAIL)
                # wgmma takes A from SMEM: from registers, the chunk's values beside the accumulators leave
                # ptxas too few registers, and it serialises every wgmma (C7512; bench/rmsnorm_smem.py)
                a.store(a_op.to(a_desc.dtype))
                fence_async_shared()        # the stores before the tensor cores' reads,
                gl.thread_barrier()         # every thread's of the warpgroup
"""
REGISTER_FORM = """\
                a, stat = _mm_prologue(a.load(a_layout).to(gl.float32), a_rows, ks, kvec, stat, size_m, size_k,
                                       extras, TAIL)
                a = a.to(a_desc.dtype)
"""
CONFIGS = ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "STAGES": 3, "WARPGROUPS": 2},
           {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 4, "WARPGROUPS": 2})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h200", help="the profile napkin generates the kernels for")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    import torch
    import triton

    from analyzer import hardware
    from analyzer.codegen import generate

    env = environment()
    profile = hardware.load(args.gpu)
    tmp = Path(tempfile.mkdtemp())
    g = generate("rmsnorm_matmul", profile, dtype="fp16")
    if REGISTER_FORM not in g.source:
        raise SystemExit("the generated prologue is not the register form this script knows: update REGISTER_FORM")
    forms = {"registers (as generated)": g.source, "SMEM (written back)": g.source.replace(REGISTER_FORM, SMEM_FORM)}
    modules = {}
    for i, (form, source) in enumerate(forms.items()):
        path = tmp / f"rmsnorm_{i}.py"
        path.write_text(source)
        modules[form] = import_file(path, path.stem)
    mm = generate("matmul", profile, dtype="fp16")
    mm_path = tmp / "matmul.py"
    mm.write(mm_path)
    matmul = import_file(mm_path, "matmul").matmul
    x, gain, w = inputs(torch, "rmsnorm_matmul", RMSNORM, torch.float16)
    ref = reference(torch, "rmsnorm_matmul", [x, gain, w])
    F = torch.nn.functional
    rows = []
    for form, module in modules.items():
        for config in (None, *CONFIGS):
            def fn(m=module, c=config):
                return m.rmsnorm_matmul(x, gain, w, config=c)
            row = {"callable": f"napkin fused, prologue operand from {form}", "config": config or "its own choice",
                   "rel_err": rel_err(torch, fn(), ref)}
            row["time_s"] = timed(triton, fn, graph=True, rep_ms=50)["time_s"]
            rows.append(row)
            log(json.dumps(row))
    for name, fn in (("napkin matmul, same shape", lambda: matmul(x, w)),
                     ("torch F.rms_norm + matmul", lambda: torch.matmul(F.rms_norm(x, (x.shape[1],), gain, eps=EPS),
                                                                         w))):
        rows.append({"callable": name, "config": "its own choice" if name.startswith("napkin") else "",
                     "time_s": timed(triton, fn, graph=True, rep_ms=50)["time_s"]})
        log(json.dumps(rows[-1]))
    torch_s = rows[-1]["time_s"]
    doc = {"command": command("rmsnorm_smem.py", argv), "env": env, "gpu_profile": profile.name,
           "sizes": RMSNORM, "timer": "triton.testing.do_bench_cudagraph (rep 50 ms), median", "rows": rows}
    md = [f"# RMSNorm-matmul's prologue operand from SMEM or registers, on {env['gpu']}", "",
          f"`{doc['command']}`: 16384 x 4096 -> 4096 fp16, {doc['timer']}", "",
          "| callable | configuration | time | torch / it | error against float64 |", "|---|---|---|---|---|"]
    for r in rows:
        cfg = r["config"] if isinstance(r["config"], str) else ", ".join(f"{k}={v}" for k, v in r["config"].items())
        err = f"{r['rel_err']:.1e}" if "rel_err" in r else ""
        md.append(f"| {r['callable']} | {cfg} | {r['time_s'] * 1e6:.1f} us | {torch_s / r['time_s']:.3f}x | {err} |")
    save_results(args.out, "rmsnorm_smem_" + ("h200" if "H200" in env["gpu"] else "h100"), doc, "\n".join(md) + "\n")
    return 0 if all(r.get("rel_err", 0) < 1e-2 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main(argv=None))
