"""bench/sweep_h200.py without a GPU: how partial runs join (napkin calibrate reads the result)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("napkin_sweep_bench", ROOT / "bench" / "sweep_h200.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SB = _load()


def run(command: str, records: list[dict], skipped=(), peers=()) -> dict:
    return {"meta": {"date": "2026-11-24", "command": command, "timer": "t"}, "records": records,
            "skipped": list(skipped), "peers": list(peers)}


def rec(diagram: str, hdim: int | None, seqlen: int, time_s: float) -> dict:
    family = "matmul" if diagram == "matmul" else "attention"
    return {"family": family, "diagram": diagram, "head_dim": hdim, "seqlen": seqlen, "time_s": time_s,
            "tiles": {"g": 64}, "num_warps": 4, "num_stages": 2, "status": "ok", "model_rank": 1,
            "tflops": 1.0}


def test_a_merge_keeps_the_later_run_per_group_and_size(tmp_path):
    first = run("a", [rec("causal_attention", 64, 512, 1.0), rec("causal_attention", 64, 2048, 9.0),
                      rec("matmul", None, 1024, 1.0)],
                skipped=["causal_attention:64 L=2048 g_q=64 s_x=16 warps=4 stages=2",
                         "causal_attention:64 L=512 g_q=64 s_x=16 warps=4 stages=2"],
                peers=[{"family": "matmul", "size": 1024, "time_s": 0.5}])
    second = run("b", [rec("causal_attention", 64, 2048, 2.0), rec("causal_attention", 64, 4096, 3.0)])
    paths = []
    for name, doc in (("a.json", first), ("b.json", second)):
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(str(tmp_path / name))
    assert SB.merge(paths, tmp_path / "out") == 0
    merged = json.loads((tmp_path / "out" / "sweep_h200.json").read_text())
    kept = sorted((r["diagram"], r["seqlen"], r["time_s"]) for r in merged["records"])
    assert kept == [("causal_attention", 512, 1.0), ("causal_attention", 2048, 2.0),
                    ("causal_attention", 4096, 3.0), ("matmul", 1024, 1.0)]
    # the first run's skip at 2048 is superseded by the second run's records there
    assert merged["skipped"] == ["causal_attention:64 L=512 g_q=64 s_x=16 warps=4 stages=2"]
    assert merged["peers"] == first["peers"]
    assert [m["command"] for m in merged["meta"]["merged_from"]] == ["a", "b"]
    assert merged["meta"]["merged_from"][1]["groups"] == ["causal_attention:64"]


def test_skipped_entries_name_their_group_and_size():
    assert SB.skipped_cell("matmul n=1024 g_a=64 warps=4 stages=3") == ("matmul", 1024)
    assert SB.skipped_cell("attention:128 L=512 g_q=64") == ("attention:128", 512)
    assert SB.skipped_cell("garbled") == ("garbled", None)


def test_the_timer_text_names_each_familys_timer():
    assert SB.timer_text(True).startswith("attention: triton.testing.do_bench_cudagraph(fn, rep=100)")
    assert SB.timer_text(False).startswith("attention: triton.testing.do_bench(fn, warmup=25, rep=100)")
    assert "matmul: triton.testing.do_bench_cudagraph" in SB.timer_text(False)


def test_a_configuration_replaces_a_by_size_table(tmp_path):
    """The bench times a configuration by putting it in the module's CONFIGS slot: a slot that holds
    the by-size table must take it as it is, and the wrapper must then launch it at every size."""
    import pytest
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from analyzer.config.sweep import sweep
    module, _, g = SB.load_kernel("causal_attention", tmp_path)
    assert "by_size" in module.CONFIGS["flash"][64]
    (s,) = sweep("causal_attention", SB.GPU, sets={"batch": 2, "heads": 4, "q": 4096, "d": 64})
    for row in s.rows[:5]:
        config = SB.entry(module, "flash", 64, row)
        assert "by_size" not in config and config["num_warps"] == row.num_warps
        assert config["TILE_Q"] == row.tiles["g_q"] and config["BLOCK_X"] == row.tiles["s_x"]
        module.CONFIGS["flash"][64] = config
        for seqlen in (256, 4096, 32768):
            size = {"batch": 1, "heads": 8, "q": seqlen, "x": seqlen, "d": 64}
            assert module._sized(module.CONFIGS["flash"][64], size) is config
