"""The multi-GPU level (Appendix A.2.3, the groups aligned) and the context-parallel prediction built on it:
the link's transfers against counting what each GPU needs and holds, the ring's blocks against the
attention they split, the link's bound, the unmasked diagram, and the refusals."""

from __future__ import annotations

import itertools
import json
import re

import pytest
import sympy

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.common.expr import at
from analyzer.config.context_parallel import context_parallel, device_counts
from analyzer.diagram.interface import interface
from analyzer.diagram.unmasked import masks, unmasked
from analyzer.model.analysis import analyze, load
from analyzer.model.devices import DEVICES, cross_transfers
from tests.run_napkin import in_process

RING_DIAGRAMS = ("attention", "causal_attention", "gqa", "causal_gqa", "mla_attention", "mha", "bias_attention")


def _counted(name: str, n: int, sizes: dict[str, int]) -> tuple[int, int]:
    """Values and bytes that cross the link, counted element by element: GPU r holds the r-th slice of
    every array along its sequence axis (the queries' where it has one, else the keys'), and needs every
    element of an input whose query index is one of its rows (every element, where the input has no query
    axis); it receives what it needs and does not hold. Outputs are written where they are held."""
    d = load(name)
    r = interface(d)
    values = nbytes = 0
    for array in d.arrays.values():
        if array.role != "input":
            continue
        axes = array.axes
        seq = r.seq_q if r.seq_q in axes else r.seq_k
        length = sizes[seq if seq in sizes else str(d.size(seq))]
        chunk = length // n
        extents = [range(sizes[str(d.size(a))]) for a in axes]
        for device in range(n):
            rows = range(device * chunk, (device + 1) * chunk)
            for index in itertools.product(*extents):
                at_ = dict(zip(axes, index, strict=True))
                needed = r.seq_q not in axes or at_[r.seq_q] in rows
                held = at_[seq] in rows
                if needed and not held:
                    values += 1
                    nbytes += array.bytes_per_value
    return values, nbytes


@pytest.mark.parametrize("name", RING_DIAGRAMS)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_link_moves_what_each_gpu_needs_and_does_not_hold(name, n):
    d = load(name)
    sizes = {s.name: 2 for s in d.size_symbols}
    r = interface(d)
    for a in (r.seq_q, r.seq_k):
        sizes[str(d.size(a))] = 12
    c = cross_transfers(d)
    values = {**{s: sizes[s.name] for s in d.size_symbols}, DEVICES: n}
    assert (int(at(c.cross, values)), int(at(c.cross_bytes, values))) == _counted(name, n, sizes)


def test_attention_crosses_its_keys_and_values_n_minus_one_times():
    """The paper's rough model (A.2.3) has nothing cross when one GPU holds the problem; aligned with the
    diagram's groups, each GPU receives the keys and values of the N - 1 others."""
    d, x, dim = load("attention"), *sympy.symbols("x d", positive=True)
    c = cross_transfers(d)
    assert sympy.simplify(c.cross - 2 * x * dim * (DEVICES - 1)) == 0
    assert sympy.simplify(c.per_device_bytes - 4 * x * dim * (DEVICES - 1) / DEVICES) == 0


def test_the_unmasked_diagram_is_the_attention_without_its_mask():
    causal = load("causal_attention")
    plain = unmasked(causal)
    assert masks(causal) == ("Sm",) and masks(plain) == ()
    assert interface(plain).band is None and str(plain.size("x")) == "x"
    assert {s.name: v for s, v in plain.defaults.items()}["x"] == 16384        # the query axis's default
    ours, theirs = (analyze(d, "h100", sets={"q": 4096, "x": 2048}) for d in (plain, "attention"))
    assert [lv.transfers for lv in ours.kernels[0].levels] == [lv.transfers for lv in theirs.kernels[0].levels]
    assert ours.totals.flops == theirs.totals.flops
    assert unmasked(load("attention")) is load("attention")
    gemma = load("gemma2_local_attention")
    window = unmasked(gemma)
    assert masks(window) == () and masks(gemma)
    assert [op.name for op in window.ops] == [op.name for op in gemma.ops if op.name not in masks(gemma)]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_the_causal_ring_covers_every_visible_pair_once(n):
    """Under torch's round-robin layout, rank r's step 0 is causal on its 2c rows, and each later step a
    half square of 2c^2 pairs: over all ranks s(s + 1)/2 pairs, the causal attention's."""
    s = 4096
    found = context_parallel("causal_attention", "h100", n, sets={"q": s})
    c = found.counts[-1]
    assert c.devices == n
    steps = c.steps
    assert len(steps) == n and steps[0].causal and not any(x.causal for x in steps[1:])
    chunk = s // (2 * n)
    covered = (2 * chunk) * (2 * chunk + 1) / 2 + sum(x.sizes["q"] * x.sizes["x"] for x in steps[1:])
    assert covered * n == s * (s + 1) / 2


def test_the_link_bounds_the_ring_only_when_it_is_slower_than_the_blocks():
    def linked(rate: float):
        profile = hardware.load("h100")
        return profile.model_copy(update={"interconnect": profile.interconnect.model_copy(
            update={"bandwidth_bytes_per_s": rate})})

    slow_profile = linked(1e8)
    fast, slow = (context_parallel("attention", p, 4, sets={"q": 65536, "x": 65536, "heads": 8})
                  for p in (linked(1e15), slow_profile))
    assert [c.bound for c in fast.counts] == ["compute"] * 3
    assert all(c.waits_s == 0 for c in fast.counts)
    assert [c.bound for c in slow.counts] == ["compute", "communication", "communication"]
    for f, s in zip(fast.counts[1:], slow.counts[1:], strict=True):
        assert s.time_s == pytest.approx(f.time_s + s.waits_s) and s.waits_s == pytest.approx(
            s.link_s - (s.steps[0].kernel_s + s.steps[0].engine_s))
    assert fast.counts[0].time_s == slow.counts[0].time_s
    # one permutation per step hides under every step but the last; one all-gather under step 0 alone
    each = context_parallel("attention", slow_profile, 4, rotation="alltoall", sets={"q": 65536, "x": 65536,
                                                                                    "heads": 8})
    assert each.counts[-1].waits_s < slow.counts[-1].waits_s


def test_more_gpus_split_the_blocks_and_the_one_gpu_ring_is_the_kernel():
    found = context_parallel("causal_attention", "h200", 4, sets={"q": 131072, "heads": 8})
    one, two, four = found.counts
    assert [c.devices for c in found.counts] == [1, 2, 4] == list(device_counts(4))
    assert one.steps[0].causal and one.link_s == 0 and one.cross_bytes == 0
    assert one.kernel_s == one.steps[0].kernel_s and one.engine_s < 0.01 * one.kernel_s
    assert four.kernel_s < two.kernel_s < one.kernel_s
    assert 0.8 < found.efficiency(four) <= 1.0 and 0.8 < found.efficiency(two) <= 1.0
    assert four.cross_bytes == pytest.approx(3 / 4 * 4 * 131072 * 8 * 128)     # K and V, 2 bytes, 3 of 4 slices


def test_napkins_merge_costs_nothing_on_one_gpu_and_less_than_torchs_on_several():
    """napkin's merge kernel keeps the first block's output as the result (nothing moved on one GPU) and
    passes over a step's rows once where torch's merger passes over them about ten times (its bytes against
    the kernel's, counted from the tensors it touches: tests/kernels/test_ring_merge.py); the blocks and
    the link are the same either way."""
    sets = {"q": 131072, "heads": 8}
    ours, torchs = (context_parallel("causal_attention", "h100", 4, sets=sets, merge=m) for m in ("napkin", "torch"))
    assert ours.merge == "napkin" and torchs.merge == "torch"
    assert ours.counts[0].engine_s == 0 < torchs.counts[0].engine_s
    for a, b in zip(ours.counts[1:], torchs.counts[1:]):
        assert a.kernel_s == b.kernel_s and a.link_s == b.link_s
        assert a.engine_s < b.engine_s / 2
        assert a.time_s < b.time_s and ours.efficiency(a) > torchs.efficiency(b)


@pytest.mark.parametrize(("diagram", "gpu", "devices", "said"), [
    ("matmul", "h100", 2, "not attention in one kernel"),
    ("gemma2_local_attention", "h100", 2, "torch's ring splits attention under a causal mask or none"),
    ("bias_attention", "h100", 2, "torch's ring passes each block q, k and v only"),
    ("sigmoid_attention", "h100", 2, "merges its blocks by their log-sum-exps"),
    ("attention", "t4", 2, "t4 names no link between GPUs"),
    ("attention", "h100-pcie", 4, "joins at most 2 GPUs"),
])
def test_what_the_ring_cannot_split_is_refused_in_one_line(diagram, gpu, devices, said):
    with pytest.raises(NapkinError, match=said):
        context_parallel(diagram, gpu, devices)


def test_napkin_analyze_devices_prints_each_device_count(tmp_path):
    def run_napkin(*args: str):
        return in_process(tmp_path, *args, env={"NAPKIN_CACHE": "off"})
    r = run_napkin("analyze", "causal_attention", "--gpu", "h100", "--devices", "4", "--heads", "8",
                   "--set", "q=32768", "--json")
    assert r.returncode == 0, r.stderr
    cp = json.loads(r.stdout)["context_parallel"]
    assert [c["devices"] for c in cp["counts"]] == [1, 2, 4]
    assert cp["sizes"]["heads"] == 8 and cp["rotation"] == "allgather" and cp["link"] == "nvlink"
    assert "N_c - 1" in cp["cross_bytes_per_device"]
    text = run_napkin("analyze", "causal_attention", "--gpu", "h100", "--devices", "2", "--set", "q=8192")
    assert text.returncode == 0 and "Context parallelism (allgather rotation" in text.stdout
    usage = run_napkin("analyze", "attention", "--heads", "4")
    assert usage.returncode == 2 and "add --devices N" in usage.stderr
    refused = run_napkin("analyze", "matmul", "--devices", "2")
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.slow(seconds=5)
def test_napkin_sweep_and_report_show_each_device_count(tmp_path):
    def run_napkin(*args: str):
        return in_process(tmp_path, *args, env={"NAPKIN_CACHE": "off"})
    r = run_napkin("sweep", "causal_attention", "--gpu", "h200", "--set", "q=16384", "--set", "heads=8", "--top", "2",
                   "--devices", "2", "--json")
    assert r.returncode == 0, r.stderr
    cp = json.loads(r.stdout)["context_parallel"]
    assert [c["devices"] for c in cp["counts"]] == [1, 2] and cp["sizes"]["heads"] == 8
    page = tmp_path / "report.html"
    r = run_napkin("report", "causal_attention", "--gpu", "h200", "--gpu", "t4", "--devices", "2", "--heads", "8",
                   "-o", str(page))
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert 'id="devices"' in html and "t4 names no link between GPUs" in html and "--devices 2 --heads 8" in html
    r = run_napkin("report", "matmul", "--devices", "2", "-o", str(tmp_path / "matmul.html"))
    assert r.returncode == 1 and not (tmp_path / "matmul.html").exists()


@pytest.mark.parametrize(("first", "last", "unit"), [(100, 5000, 8), (1, 1 << 30, 4), (3000, 3001, 2)])
def test_the_search_finds_the_longest_length_at_which_a_step_waits(first, last, unit):
    """Steps wait from `first` to `last` tokens (the fixed costs of short blocks hide the link below first):
    the search returns the longest multiple of the unit that waits, or the longest it looks at."""
    from analyzer.config.context_parallel import LONGEST, _link_bound_up_to
    waits = lambda length: first <= length <= last      # noqa: E731
    found = _link_bound_up_to(waits, unit)
    on_grid = any(first <= unit << i <= last for i in range((LONGEST // unit).bit_length()))
    if not on_grid:
        assert found is None
    else:
        assert found == min(last // unit * unit, LONGEST)


def test_the_all_gather_under_one_step_bounds_long_rings_and_a_permutation_a_step_does_not():
    """On the H100's NVLink an 8-head causal prefill over 8 GPUs waits for the all-gather under step 0 up to
    about 128k tokens (step 0 is 1/64 of the causal work, the all-gather 7/8 of the keys and values); one
    permutation under each step hides at every length."""
    sets = {"q": 131072, "heads": 8}
    gathered = context_parallel("causal_attention", "h100", 8, sets=sets).counts[-1]
    permuted = context_parallel("causal_attention", "h100", 8, sets=sets, rotation="alltoall").counts[-1]
    assert gathered.bound == "communication" and gathered.link_bound_up_to >= 131072
    assert permuted.bound == "compute" and permuted.link_bound_up_to is None
    assert permuted.time_s < gathered.time_s


def test_the_link_pays_its_latency_once_a_collective():
    """The H200's profile names the link's latency (measured): the all-gather pays it once, the permutations
    once each, and below a few thousand tokens it is the latency that makes the ring wait."""
    link = hardware.load("h200").interconnect
    assert link.latency_s > 0
    sets = {"q": 32768, "heads": 8}
    gathered = context_parallel("causal_attention", "h200", 4, sets=sets).counts[-1]
    permuted = context_parallel("causal_attention", "h200", 4, sets=sets, rotation="alltoall").counts[-1]
    moved = gathered.cross_bytes / link.bandwidth_bytes_per_s
    assert gathered.link_s == pytest.approx(link.latency_s + moved)
    assert permuted.link_s == pytest.approx(3 * link.latency_s + moved)
    assert context_parallel("causal_attention", "h200", 2, sets=sets).counts[-1].link_bound_up_to >= 2048
    assert context_parallel("causal_attention", "h100", 2, sets=sets).counts[-1].link_bound_up_to is None


def test_a_mask_inside_a_concatenation_is_dropped_too():
    """A diagram that writes its mask as one op of a concatenation (Figure 3) unmasks like one that does not."""
    from analyzer.diagram.graph import compile_data
    doc = load("causal_attention").document
    scores, mask, out = doc["ops"]
    d = compile_data({**doc, "ops": [scores, {"concat": [mask]}, out]}, source="concat.yaml")
    assert masks(d) == ("Sm",)
    plain = unmasked(d)
    assert masks(plain) == () and [op.name for op in plain.ops] == ["S", "O"] and plain.op("O").inputs[0] == "S"


def test_a_size_range_shows_each_gpu_count_beside_each_size(tmp_path):
    """napkin analyze --devices with a size range: a column per GPU count, its time and efficiency, the link
    marked where it bounds the ring (4 GPUs at 16k tokens on the H100: up to 16896 tokens)."""
    r = in_process(tmp_path, "analyze", "causal_attention", "--gpu", "h100", "--devices", "4", "--heads", "8",
                   "--set", "q=16384,131072", env={"NAPKIN_CACHE": "off", "COLUMNS": "240"})
    assert r.returncode == 0, r.stderr
    assert "1 GPU" in r.stdout and "4 GPUs" in r.stdout and "(heads=8" not in r.stdout
    rows = [line for line in r.stdout.splitlines() if line.startswith("h100-sxm5")]
    assert len(rows) == 2 and re.search(r"\(\d+%, link\)$", rows[0]) and "link" not in rows[1]
    assert "the attention (batch=1, heads=8) split by context parallelism" in r.stdout
