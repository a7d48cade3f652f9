"""A first probe of the warp-specialised Hopper contraction kernel (analyzer/codegen/hopper/contraction.gluon)
before it is a family: the kernel text rendered with a tail of its own (a plain matmul; a bias and GELU),
launched by a launcher of this script's, checked against float64 and timed beside torch.matmul over a
grid of configurations (tile shape, warpgroups, stages, band).

    python bench/hopper_contraction_probe.py [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzer.codegen.hopper.contraction import render_kernel  # noqa: E402
from bench.common import environment, import_file, log, rel_err, save_results, timed  # noqa: E402

HEADER = '''\
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

'''
PLAIN = '''@gluon.jit
def _mm_tail(acc, rows, cols, size_m, size_n, extras):
    return acc
'''
GELU = '''@gluon.jit
def _mm_tail(acc, rows, cols, size_m, size_n, extras):
    b_ptr, b_stride = extras
    bias = gl.load(b_ptr + cols * b_stride, mask=cols < size_n, other=0.0).to(gl.float32)
    z = acc + bias[None, :]
    return z * (0.5 * _mm_tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)) + 0.5)
'''


def module(tmp: Path, name: str, tail: str, params: tuple[str, ...]):
    path = tmp / f"{name}.py"
    path.write_text(HEADER + render_kernel("kernel", (1, 2), tail, params) + "\n")
    return import_file(path, name)


def launch(torch, mod, a, b, c, cfg, extras=(), sms=132):
    gl = mod.gl
    bm, bn, bk, stages, groups, band = cfg
    rows = bm // groups
    el = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[a.dtype]

    def desc(t, block):
        return mod.TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, el))

    m, k = a.shape
    n = b.shape[1]
    tiles = -(-m // bm) * -(-n // bn)
    cap = min(512 // (groups + 1), 256) // 8 * 8
    regs = min((cap * (groups + 1) - 24) // groups, 255) // 8 * 8
    args = (desc(a, [rows, bk]), desc(b, [bk, bn]), desc(c, [rows, bn]), m, n, k, *extras)
    return lambda: mod.kernel[(min(tiles, sms),)](*args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages,
                                                   GROUPS=groups, BAND=band, A_T=False, B_T=False,
                                                   CONSUMER_REGS=regs, num_warps=4, maxnreg=cap)


CONFIGS = [(128, 256, 64, 3, 2, 8), (128, 256, 64, 3, 2, 16), (256, 128, 64, 3, 2, 8), (256, 128, 64, 4, 2, 8),
           (128, 128, 64, 4, 2, 8), (128, 128, 64, 6, 2, 8), (128, 128, 64, 5, 1, 8), (128, 256, 64, 4, 2, 8)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    import torch
    import triton
    env = environment()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        plain = module(Path(tmp), "plain", PLAIN, ())
        gelu = module(Path(tmp), "gelu", GELU, ("b_ptr", "b_stride"))
        for (n, dtype), cfg in itertools.product([(8192, torch.float16), (4096, torch.float16),
                                                  (8192, torch.bfloat16), (4096, torch.bfloat16)], CONFIGS):
            torch.manual_seed(0)
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype) / n ** 0.5
            c = torch.empty(n, n, device="cuda", dtype=dtype)
            row = {"n": n, "dtype": str(dtype), "config": cfg}
            try:
                fn = launch(torch, plain, a, b, c, cfg, sms=sms)
                fn()
                torch.cuda.synchronize()
                row["err"] = rel_err(torch, c, a.double() @ b.double())
                row["ours_s"] = timed(triton, fn, graph=True)["time_s"]
            except Exception as exc:  # noqa: BLE001 - a configuration that fails is a row, not the end
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            log(json.dumps(row))
        for n, dtype in [(8192, torch.float16), (4096, torch.float16), (8192, torch.bfloat16), (4096, torch.bfloat16)]:
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype) / n ** 0.5
            t = timed(triton, lambda: torch.matmul(a, b), graph=True)["time_s"]
            rows.append({"n": n, "dtype": str(dtype), "torch_s": t})
            log(json.dumps(rows[-1]))
        # bias + GELU at the diagram's defaults: 8192 x 4096 -> 16384
        m, k, n = 8192, 4096, 16384
        for cfg in CONFIGS[:4]:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            w = torch.randn(k, n, device="cuda", dtype=torch.float16) / k ** 0.5
            bias = torch.randn(n, device="cuda", dtype=torch.float16)
            y = torch.empty(m, n, device="cuda", dtype=torch.float16)
            row = {"gelu": [m, k, n], "config": cfg}
            try:
                fn = launch(torch, gelu, x, w, y, cfg, (bias, bias.stride(0)), sms=sms)
                fn()
                ref = torch.nn.functional.gelu(x.double() @ w.double() + bias.double(), approximate="tanh")
                row["err"] = rel_err(torch, y, ref)
                row["ours_s"] = timed(triton, fn, graph=True)["time_s"]
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            log(json.dumps(row))
        t = timed(triton, lambda: torch.nn.functional.gelu(torch.addmm(bias, x, w), approximate="tanh"),
                  graph=True)["time_s"]
        rows.append({"gelu": [m, k, n], "torch_s": t})
        log(json.dumps(rows[-1]))
    save_results(args.out, "hopper_contraction_probe_" + ("h200" if "H200" in env["gpu"] else "h100"), {"env": env, "rows": rows},
                 "\n".join(json.dumps(r) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
