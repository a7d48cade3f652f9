"""Four launches of the Hopper chain kernel for Nsight Compute: mlp2 and linear_attention_queries at their
defaults, each with one consumer warpgroup (64 rows, s_f = 64, 3 stages) and with the module's own
configuration, each launched twice. Run under ncu (bench/results/chain_ncu_h100.txt has the command and
what it printed on an H100):

    ncu --kernel-name regex:"_mlp2_mlp|_linear_attention_queries_linear" --metrics ... python bench/chain_ncu.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LAUNCHES = (("mlp2", {"BLOCK_M": 64, "BLOCK_F": 64, "STAGES": 3, "WARPGROUPS": 1}),
            ("linear_attention_queries", {"BLOCK_M": 64, "BLOCK_F": 64, "STAGES": 3, "WARPGROUPS": 1}),
            ("linear_attention_queries", {"BLOCK_M": 128, "BLOCK_F": 128, "STAGES": 2, "WARPGROUPS": 2}),
            ("mlp2", {"BLOCK_M": 128, "BLOCK_F": 64, "STAGES": 2, "WARPGROUPS": 2}))


def main() -> int:
    import torch

    from analyzer.codegen import generate
    from bench.common import import_file
    from bench.hopper_chain import inputs

    tmp = Path(tempfile.mkdtemp())
    for diagram, cfg in LAUNCHES:
        g = generate(diagram, "h100")
        (path,) = g.write(tmp / f"{diagram}.py")
        module = import_file(path, diagram)
        xs = inputs(torch, diagram, {s.name: int(v) for s, v in g.diagram.defaults.items()}, torch.float16)
        for _ in range(2):
            getattr(module, diagram)(*xs, config=cfg)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
