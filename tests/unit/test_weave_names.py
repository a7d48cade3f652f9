"""A diagram may name its tile sizes like the axes a call weaves attention over (`batch`, `g_heads`):
the tiles are renamed `<name>_tile` in every compiled copy alike, so the weaved diagram keeps the weave's
axes and the configuration napkin chooses on the diagram fits its weaved form."""

from __future__ import annotations

import yaml

from analyzer.codegen import generate
from analyzer.common import resources
from analyzer.diagram.graph import compile_data


def test_a_tile_named_like_a_weaved_axis_is_renamed_and_the_kernel_generates(tmp_path):
    data = yaml.safe_load(resources.shipped("diagrams")["attention"].read_text())
    data["kernels"][0]["partition"]["smem"] = {"group": {"q": "batch"}, "stream": {"x": "g_heads"}}
    d = compile_data(data, source="named.yaml")
    part = d.kernels[0].partitions["smem"]
    assert [s.name for _, s in part.group] == ["batch_tile"] and part.stream[1].name == "g_heads_tile"
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    g = generate(str(path), "a100", backend="triton")
    assert "batch_tile" in g.source and list(g.diagram.axes)[:2] == ["batch", "heads"]
