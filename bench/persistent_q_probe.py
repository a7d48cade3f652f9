"""The Hopper attention kernel's two schedules at short sequences, beside SDPA's cuDNN backend, in one run.

A block a tile (`tiles`: the hardware schedules the blocks) or a block an SM taking every grid-th tile
(`persistent`), whose query tiles take turns in two sets of SMEM buffers so that the next tile's
queries land while this one runs (analyzer.codegen.hopper, Q_BUFFERS), and, to tell what the second set
buys, persistent with one set (the generated module with Q_BUFFERS=1 written in: its queries wait until
the last tile's output has left). For each head dim the Hopper module's own configuration (the model's
choice, schedule `tiles`) and the same configuration persistent,
at the FlashAttention-3 grid's short lengths (16k tokens, hidden 2048, not causal, fp16), each checked
against float64 first, each timed three times in turn (CUDA graph replays, median of each) to show how
far a timing spreads, with the model's prediction of both.

    python bench/persistent_q_probe.py [--gpu h100] [--out DIR]

It writes persistent_q_probe_<gpu>.json and .md into --out (bench/results).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    attention_inputs,
    command,
    environment,
    import_file,
    log,
    reference_attention,
    rel_err,
    save_results,
    timed,
)

TOKENS, HIDDEN = 16384, 2048
LENGTHS = (512, 1024, 2048)
HEAD_DIMS = (64, 128)
ROUNDS = 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100", help="the profile napkin generates the kernel for")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from analyzer import hardware
    from analyzer.codegen import generate
    from analyzer.config.hopper import (
        HopperParams,
        chosen_at,
        configuration,
        legal,
        predicted_time,
    )

    env = environment()
    profile = hardware.load(args.gpu)
    params = HopperParams.of(profile)
    tmp = Path(tempfile.mkdtemp())
    g = generate("mha", profile)
    path = tmp / "mha.py"
    g.write(path)
    module = import_file(path, "mha_schedules")
    planned = "Q_BUFFERS=2 if cfg['SCHEDULE'] == 'persistent' else 1"
    text = path.read_text()
    assert planned in text, "the generated launcher no longer plans Q_BUFFERS so"
    (tmp / "mha_one.py").write_text(text.replace(planned, "Q_BUFFERS=1"))
    one = import_file(tmp / "mha_one.py", "mha_one_buffer")
    rows, checks = [], []
    for d in HEAD_DIMS:
        heads = HIDDEN // d
        for seq in LENGTHS:
            batch = TOKENS // seq
            q, k, v = attention_inputs(torch, batch, heads, heads, seq, seq, d, torch.float16, False, False, seed=d)
            chosen = chosen_at(profile, d, "fp16", causal=False, length=seq, instances=batch * heads, params=params)
            configs = {}
            for schedule in ("tiles", "persistent"):
                c = configuration(profile, d, "fp16", warpgroups=chosen.warpgroups, chunk=chosen.chunk,
                                  stages=chosen.stages, overlap=chosen.overlap, schedule=schedule)
                if legal(profile, c):
                    configs[schedule] = c
            row = {"head_dim": d, "seqlen": seq, "batch": batch, "heads": heads, "configs": {}}
            flops = 4.0 * batch * heads * seq * seq * d
            ref = reference_attention(torch, q[:1, :2], k[:1, :2], v[:1, :2], False, False)
            fns = {}
            if "persistent" in configs:
                configs["persistent, one Q buffer"] = configs["persistent"]
            for schedule, c in configs.items():
                mod = one if schedule == "persistent, one Q buffer" else module
                entry = {**c.entry(), "SCHEDULE": schedule.split(",")[0]}
                out = mod.attention(q, k, v, config=entry)
                err = rel_err(torch, out[:1, :2], ref)
                checks.append({"head_dim": d, "seqlen": seq, "schedule": schedule, "rel_err": err,
                               "ok": err < 1e-2})
                fns[schedule] = (lambda e=entry, m=mod, q=q, k=k, v=v: m.attention(q, k, v, config=e))
                row["configs"][schedule] = {"label": c.label(), "predicted_s": predicted_time(
                    profile, c, d, "fp16", seq_q=seq, seq_k=seq, instances=batch * heads, params=params), "times": []}
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                fns["sdpa_cudnn"] = lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v)
                row["configs"]["sdpa_cudnn"] = {"label": "SDPA cuDNN", "times": []}
                for _ in range(ROUNDS):             # in turn, so a drift of the GPU's clocks shows in each
                    for name, fn in fns.items():
                        row["configs"][name]["times"].append(timed(triton, fn, graph=True)["time_s"])
            for r in row["configs"].values():
                r["median_s"] = sorted(r["times"])[len(r["times"]) // 2]
                r["tflops"] = flops / r["median_s"] / 1e12
            rows.append(row)
            log(str({k: round(v["tflops"]) for k, v in row["configs"].items()}) + f" d={d} seq={seq}")
            del q, k, v
            torch.cuda.empty_cache()

    doc = {"command": command("persistent_q_probe.py", argv), "env": env, "gpu_profile": profile.name,
           "timer": "triton.testing.do_bench_cudagraph, median; each of three rounds in turn", "checks": checks,
           "rows": rows}
    md = [f"# The Hopper kernel's schedules at short sequences on {env['gpu']}", "", f"`{doc['command']}`; "
          f"{doc['timer']}; FlashAttention-3's grid (16k tokens, hidden 2048), not causal, fp16.", "",
          "| hdim | seqlen | configuration | tiles (TFLOP/s, 3 rounds) | persistent | persistent, one Q buffer | cuDNN "
          "| persistent/tiles | persistent/cuDNN | predicted/measured tiles, persistent |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["configs"]
        t, p, n, p1 = c.get("tiles"), c.get("persistent"), c["sdpa_cudnn"], c.get("persistent, one Q buffer")
        rounds = "{:.0f} ({})".format
        md.append(f"| {r['head_dim']} | {r['seqlen']} | {t['label'] if t else '-'} | "
                  f"{rounds(t['tflops'], ', '.join(f'{r_tf(x, r):.0f}' for x in t['times'])) if t else '-'} | "
                  f"{rounds(p['tflops'], ', '.join(f'{r_tf(x, r):.0f}' for x in p['times'])) if p else '-'} | "
                  f"{rounds(p1['tflops'], ', '.join(f'{r_tf(x, r):.0f}' for x in p1['times'])) if p1 else '-'} | "
                  f"{n['tflops']:.0f} | {t['median_s'] / p['median_s'] if t and p else float('nan'):.2f}x | "
                  f"{n['median_s'] / p['median_s'] if p else float('nan'):.2f}x | "
                  f"{t['predicted_s'] / t['median_s'] if t else float('nan'):.2f}, "
                  f"{p['predicted_s'] / p['median_s'] if p else float('nan'):.2f} |")
    md += ["", "Checks against float64 (the first two heads of the first batch entry): " + ", ".join(
        f"d={c['head_dim']} {c['seqlen']} {c['schedule']} {c['rel_err']:.1e}" for c in checks), ""]
    save_results(args.out, "persistent_q_probe_" + ("h200" if "H200" in env["gpu"] else "h100"), doc,
                 "\n".join(md) + "\n")
    return 0 if all(c["ok"] for c in checks) else 1


def r_tf(seconds: float, row: dict) -> float:
    """TFLOP/s of one timing of `row`'s problem."""
    return 4.0 * row["batch"] * row["heads"] * row["seqlen"] ** 2 * row["head_dim"] / seconds / 1e12


if __name__ == "__main__":
    raise SystemExit(main())
