"""bench/sweep_h200.py without a GPU: how partial runs join (napkin calibrate reads the result)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import common
from bench import sweep_h200 as SB

ROOT = Path(__file__).resolve().parents[2]


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
    assert SB.merge(paths, tmp_path / "out", "h200") == 0
    merged = json.loads((tmp_path / "out" / "sweep_h200.json").read_text())
    kept = sorted((r["diagram"], r["seqlen"], r["time_s"]) for r in merged["records"])
    assert kept == [("causal_attention", 512, 1.0), ("causal_attention", 2048, 2.0),
                    ("causal_attention", 4096, 3.0), ("matmul", 1024, 1.0)]
    # the first run's skip at 2048 is superseded by the second run's records there
    assert merged["skipped"] == ["causal_attention:64 L=512 g_q=64 s_x=16 warps=4 stages=2"]
    assert merged["peers"] == first["peers"]
    assert [m["command"] for m in merged["meta"]["merged_from"]] == ["a", "b"]
    assert merged["meta"]["merged_from"][1]["groups"] == ["causal_attention:64"]


def test_a_merge_joins_the_compiled_files_beside_each_run_by_group(tmp_path):
    """Runs of different groups each write what the compiler allotted beside their sweep file; the
    merged compiled file holds every group once (the later run's where two compiled one)."""
    def compiled(command, records):
        return {"meta": {"command": command, "timer": "none"}, "records": records, "peers": []}
    runs = {"a": ([rec("attention", 64, 512, 1.0)],
                  [{"family": "attention", "diagram": "attention", "head_dim": 64, "registers": 100},
                   {"family": "matmul", "diagram": "matmul", "head_dim": None, "registers": 90}]),
            "b": ([rec("matmul", None, 1024, 1.0)],
                  [{"family": "matmul", "diagram": "matmul", "head_dim": None, "registers": 80}])}
    paths = []
    for name, (records, allotted) in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep_h100.json").write_text(json.dumps(run(name, records)))
        (tmp_path / name / "compiled_h100.json").write_text(json.dumps(compiled(name, allotted)))
        paths.append(str(tmp_path / name / "sweep_h100.json"))
    assert SB.merge(paths, tmp_path / "out", "h100") == 0
    assert (tmp_path / "out" / "sweep_h100.md").is_file()
    joined = json.loads((tmp_path / "out" / "compiled_h100.json").read_text())
    assert sorted((r["diagram"], r["registers"]) for r in joined["records"]) == \
        [("attention", 100), ("matmul", 80)]
    assert joined["meta"]["merged_from"] == ["a", "b"]


def test_skipped_entries_name_their_group_and_size():
    assert SB.skipped_cell("matmul n=1024 g_a=64 warps=4 stages=3") == ("matmul", 1024)
    assert SB.skipped_cell("attention:128 L=512 g_q=64") == ("attention:128", 512)
    assert SB.skipped_cell("garbled") == ("garbled", None)


def test_the_timer_text_names_each_familys_timer():
    assert SB.timer_text(True).startswith("attention: triton.testing.do_bench_cudagraph(fn, rep=100)")
    assert SB.timer_text(False).startswith("attention: triton.testing.do_bench(fn, warmup=25, rep=100)")
    assert SB.timer_text(True, 40).startswith("attention: triton.testing.do_bench_cudagraph(fn, rep=40)")
    assert "matmul: triton.testing.do_bench_cudagraph" in SB.timer_text(False)


def test_a_sweep_rows_configuration_is_what_the_call_takes(tmp_path):
    """The bench times a sweep row by passing its configuration to the call (config=): it holds the
    kernel's CONFIG_KEYS in order, with the row's tiles, warps and stages, and the wrapper's check
    takes it as it is, by kernel or alone. Nothing in the module's CONFIGS is replaced."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from analyzer.config.sweep import sweep
    loaded = common.load_kernel("causal_attention", tmp_path)
    module = loaded.module
    assert "by_size" in module.CONFIGS["flash"][64]
    (s,) = sweep("causal_attention", common.GPU, sets={"batch": 2, "heads": 4, "q": 4096, "d": 64},
                 backend="triton")
    for row in s.rows[:5]:
        config = loaded.configuration("flash", row)
        assert list(config) == list(module.CONFIG_KEYS["flash"])
        assert config == {"TILE_Q": row.tiles["g_q"], "BLOCK_X": row.tiles["s_x"],
                          "num_warps": row.num_warps, "num_stages": row.num_stages}
        assert module._per_kernel({"flash": config}) == module._per_kernel(config) == {"flash": config}


@pytest.mark.slow
def test_every_recorded_configuration_is_the_one_its_row_gives_and_a_call_takes(tmp_path):
    """The committed sweep's 1254 records: each record's configuration is what Loaded.configuration
    makes of its tiles, warps and stages, and the generated wrapper accepts it as config=."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    doc = json.loads((ROOT / "bench" / "results" / "sweep_h200.json").read_text())
    kernels = common.Kernels(tmp_path)
    for r in doc["records"]:
        loaded = kernels(r["diagram"])
        row = SimpleNamespace(tiles=r["tiles"], woven=r["woven"], num_warps=r["num_warps"],
                              num_stages=r["num_stages"])
        config = loaded.configuration(r["kernel"], row)
        assert list(config.items()) == list(r["config"].items())
        assert loaded.module._per_kernel({r["kernel"]: config})[r["kernel"]] == config


def test_the_recorded_command_leaves_out_where_results_went():
    assert common.without_out(["--groups", "matmul", "--out", "/tmp/x", "--out=/y", "--top", "3"]) == \
        ["--groups", "matmul", "--top", "3"]
    assert common.command("sweep_h200.py", ["--out", "d", "--seqlens", "512"]) == \
        "python bench/sweep_h200.py --seqlens 512"
    assert common.command("sweep_h200.py", []) == "python bench/sweep_h200.py"


def test_the_scripts_import_the_shared_helpers_one_way():
    """No script imports another, or puts bench/ itself on sys.path: they share bench.common."""
    for script in sorted((ROOT / "bench").glob("*_h200.py")):
        text = script.read_text()
        assert "from bench.common import" in text, script.name
        assert re.findall(r"sys\.path\.insert\((.*)\)", text) in (["0, str(ROOT)"], ["0, str(REPO_ROOT)"]), \
            script.name                                    # the checkout's root only, never bench/
        for other in ("sweep_h200", "choice_h200", "clocks_h200", "gpu_state"):
            assert f"import {other}" not in text, (script.name, other)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_a_recording_holds_every_configuration_its_profile_allows(gpu):
    """sweep_<gpu>.json holds, at a size of each family, exactly the legal configurations napkin sweep
    lists for the datasheet profile the bench ranks with: its own figures (sibling_fit=False), not the
    calibrated sibling's, whose register count drops the configurations the compiler caps, which the
    fit must see."""
    from analyzer.config.sweep import sweep
    doc = json.loads((ROOT / "bench" / "results" / f"sweep_{gpu}.json").read_text())
    key = lambda tiles, warps, stages: (tuple(sorted(tiles.items())), warps, stages)     # noqa: E731
    for group, size, diagram, sets in (("attention:128", 4096, "attention",
                                        {"batch": 4, "heads": 16, "q": 4096, "x": 4096, "d": 128}),
                                       ("matmul", 2048, "matmul", {"a": 2048, "b": 2048, "c": 2048})):
        recorded = {key(r["tiles"], r["num_warps"], r["num_stages"]) for r in doc["records"]
                    if SB.group_of(r) == group and r["seqlen"] == size}
        (s,) = sweep(diagram, gpu, sets=sets, backend="triton", sibling_fit=False)
        assert recorded == {key(r.tiles, r.num_warps, r.num_stages) for r in s.rows}, group
        (fitted,) = sweep(diagram, gpu, sets=sets, backend="triton")
        assert len(fitted.rows) <= len(s.rows) and fitted.gpu == f"{gpu}-calibrated"
