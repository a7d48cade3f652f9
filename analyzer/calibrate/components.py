"""The model's terms of every recorded configuration, derived again from its diagram.

    recording -> per diagram: weaved diagram, legal configurations (napkin sweep's)
    -> per problem size: the symbolic model evaluated at the recorded tiles (analyzer.model.analysis.TermModel)
    -> datasheet seconds per pipeline and level (wave quantization and the imbalance of unequal blocks
    included), chunks per SM, stages, resident blocks,
    exposed edge, waves, and whether napkin sweep ranks the configuration
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from analyzer.calibrate.fit import Components
from analyzer.calibrate.record import Record, Recording
from analyzer.common.errors import NapkinError
from analyzer.config.choose import capped, legal, resident_blocks
from analyzer.diagram.interface import Attention, interface
from analyzer.diagram.primitives import PIPELINES
from analyzer.diagram.weave import weave_diagram
from analyzer.hardware import Profile
from analyzer.model.analysis import TermModel, load
from analyzer.model.predict import (
    chunks_per_sm,
    datasheet_pipes,
    edge_seconds,
    waves_of,
)


def measured(recording: Recording) -> list[Record]:
    return [r for r in recording.records if r.status == "ok" and r.time_s]


def components(records: list[Record], profile: Profile, resident_profile: Profile | None = None
               ) -> Components:
    """One entry per record, in order; resident blocks, and whether napkin sweep ranks the
    configuration, by `resident_profile`'s register count (a profile calibrated against the compiler's)
    where given, else by `profile`'s."""
    n = len(records)
    pipes = {p: np.zeros(n) for p in PIPELINES}
    transfers: dict[str, np.ndarray] = {}
    chunks, stages, resident, edge, waves = (np.zeros(n) for _ in range(5))
    ranked = np.ones(n, bool)
    counted = resident_profile or profile
    by_shape: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        by_shape[(r.diagram, r.dtype, r.kernel, json.dumps(r.sizes, sort_keys=True))].append(i)
    models: dict[tuple, tuple] = {}
    for (diagram, dtype, kernel, sizes), index in by_shape.items():
        if (diagram, dtype, kernel) not in models:
            models[(diagram, dtype, kernel)] = model_of(diagram, dtype, kernel, profile)
        base, roles, model = models[(diagram, dtype, kernel)]
        terms = model.terms(json.loads(sizes), [{**records[i].tiles, **records[i].woven} for i in index])
        v = terms.values
        for i in index:
            choice = legal_choice(base, roles, profile, records[i])
            stages[i] = records[i].num_stages
            resident[i] = resident_blocks(choice, counted)
            ranked[i] = not capped(choice, counted)
        k = resident[index]
        for p, t in datasheet_pipes({p: v[f"flops_{p}"] for p in PIPELINES}, profile, dtype,
                                    v["groups"], v["ramp"], k).items():
            pipes[p][index] = t
        for lv, w in terms.weights.items():
            transfers.setdefault(lv, np.zeros(n))[index] = v[f"{lv}_bytes"] * w
        chunks[index] = chunks_per_sm(v["steps"], v["groups"], profile, v["ramp"], k)
        edge[index] = edge_seconds(v["edge_bytes"], profile)
        waves[index] = waves_of(v["groups"], profile)
    return Components({p: t for p, t in pipes.items() if t.any()}, transfers, chunks, stages, resident,
                      edge, np.array([r.time_s for r in records], dtype=np.float64),
                      ranked=ranked, waves=waves)


def model_of(diagram: str, dtype: str, kernel: str, profile: Profile):
    """The diagram, its kernel interface and the term model of its weaved form."""
    base = load(diagram, dtype=dtype)
    roles = interface(base)
    return base, roles, TermModel(weave_diagram(base, roles.outer), profile, kernel)


def legal_choice(base, roles, profile: Profile, r: Record):
    """The legal configuration (napkin sweep's) a record measured."""
    pins = {}
    if isinstance(roles, Attention) and r.head_dim is not None:
        pins = {str(s): r.head_dim for s in base.size(roles.head_dim).free_symbols}
    for c in legal(base, profile, r.kernel, pins, r.dtype):
        if c.tiles == r.tiles and c.num_warps == r.num_warps and c.num_stages == r.num_stages:
            return c
    raise NapkinError(f"recorded configuration {r.config_key} is not a legal configuration on "
                      f"{profile.name}", hint="calibrate against the profile the recording was swept on")
