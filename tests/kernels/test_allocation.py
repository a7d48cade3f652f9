"""Every shipped diagram's kernel, as `napkin kernel <diagram> --gpu h100` and `--gpu h200` generate it,
allocates at its default sizes no more SMEM than napkin counts for it (the count legality holds to the
block's limit), and napkin's count is that limit's at most: compiled for sm_90a without a GPU, every
launch the module makes at those sizes, in one process (tests.kernels.portable_build.allocated).

The count is Triton's own for the portable kernel (analyzer.config.allocation: equal to it but for a few
bytes of reduction scratch; where the kernel compiled as one loop, at sizes that are whole chunks,
allocates less than the kernel with its edge loop, the count is the larger), the Hopper kernel's
(analyzer.config.hopper: its buffers and mbarriers) and the Hopper contraction kernel's
(analyzer.config.contraction: its ring, staging tiles and mbarriers). A count below what Triton allocates is a kernel that may fail with OutOfResources at sizes
napkin calls legal, as linear_attention's did on the H100 (262144 bytes of SMEM against 232448)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer import hardware
from analyzer.codegen import generate
from analyzer.common import resources
from analyzer.config.launch import allocated, expected, sizes_of
from bench.matmul_wgmma import with_edge_loop
from tests.kernels.portable_build import allocated as compiled_allocation
from tests.kernels.portable_build import call

pytest.importorskip("triton")

GPUS = ("h100", "h200")
SCRATCH = 4096      # bytes napkin may count above Triton's allocation: its reduction scratch, a bound


def hopper_job(g, path) -> dict:
    """The Hopper module's launch at its default sizes: the CONFIGS entry napkin expects it to take."""
    config = expected(g.as_launch, hardware.load(g.gpu), sizes_of(g, None)).hopper
    head_dim = g.axis_sizes({})(g.roles.head_dim)
    return {"module": str(path), "hopper": {"entry": config.entry(), "head_dim": head_dim, "dtype": g.dtype}}


def contraction_job(g, path) -> dict:
    """The Hopper contraction module's launches at its default sizes: each kernel's configuration napkin
    expects it to take."""
    configs = expected(g.as_launch, hardware.load(g.gpu), sizes_of(g, None)).contraction
    return {"module": str(path), "contraction": [{"kernel": k.plan.name, "entry": c.entry(), "dtype": g.dtype}
                                                 for k, c in zip(g.kernels, configs, strict=True)]}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """(gpu, diagram, napkin's counts, Triton's allocations) of every shipped diagram on each GPU. A file
    that launches what another GPU's file launches (the same diagram, backend, element type and
    configuration at the default sizes: the same kernel text, compiled for the same sm_90a) is compiled
    once; the H100's and H200's mostly are."""
    tmp = tmp_path_factory.mktemp("allocation")
    cases, jobs, keys = [], [], {}
    for gpu in GPUS:
        profile = hardware.load(gpu)
        for name in sorted(resources.shipped("diagrams")):
            g = generate(name, profile)
            launch = g.as_launch
            counts = allocated(launch, profile, sizes_of(g, None))
            key = (name, g.backend, g.dtype, expected(launch, profile, sizes_of(g, None)).configuration)
            if key not in keys:
                (path,) = g.write(tmp / f"{name}_{gpu}.py")
                keys[key] = len(jobs)
                jobs.append(hopper_job(g, path) if g.backend == "hopper" else contraction_job(g, path)
                            if g.backend == "hopper-contraction" else {"module": str(path), **call(g)})
            cases.append((gpu, name, g.backend, counts, keys[key]))
    results = compiled_allocation(jobs)
    # At the defaults every stream is whole chunks, so the portable kernel is compiled as one loop
    # (EVEN_<stream>). Where that allocates less than napkin counts, the count is the kernel with its
    # edge loop, which sizes that are not whole chunks compile: the most either allocates. Compile it.
    short = sorted({job for _, _, backend, counts, job in cases if backend == "triton" and any(
        c is not None and c > launch["shared"] + SCRATCH for c, launch in zip(counts, results[job]))})
    edges = []
    for job in short:
        path = Path(jobs[job]["module"])
        edge = path.with_name(f"{path.stem}_edge.py")
        edge.write_text(with_edge_loop(path.read_text()))
        edges.append({**jobs[job], "module": str(edge)})
    for job, launches in zip(short, compiled_allocation(edges) if edges else [], strict=True):
        results[job] = [{**one, "shared": max(one["shared"], other["shared"]), "edge": other["shared"]}
                        for one, other in zip(results[job], launches, strict=True)]
    return [(gpu, name, backend, counts, results[job]) for gpu, name, backend, counts, job in cases]


@pytest.mark.slow(seconds=28)
def test_every_shipped_kernel_allocates_what_napkin_counts_within_the_block_limit(kernels):
    wrong = []
    for gpu, name, backend, counts, launches in kernels:
        limit = hardware.load(gpu).level("smem").block_capacity_bytes
        assert len(counts) == len(launches), f"{name} on {gpu}: {len(launches)} launches, {len(counts)} counted"
        for counted, launch in zip(counts, launches, strict=True):
            shared = launch["shared"]
            if not shared <= counted <= min(limit, shared + SCRATCH):
                wrong.append(f"{name} ({backend}, {gpu}) {launch['kernel']}: Triton allocates {shared} B, "
                             f"napkin counts {counted} B, a block may use {limit:.0f} B")
    assert not wrong, "\n".join(wrong)
