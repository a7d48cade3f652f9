"""Section 5.6-5.7 and Appendix B.0.1 / B.2: the configuration, maximum, compute and throughput tables.

Every number below is the paper's (Tables 1-3 of the main text, the sheets of Appendix B.2); napkin
derives them from diagrams/attention.yaml (its named configurations set only sizes, element types and
choices) and the shipped H100 profiles. Where the sheets assume something the datasheets do not, the
test says so and overrides the profile, as the B.1 tests do for the paper's 256 KB of SMEM.
"""

from __future__ import annotations

import pytest

from analyzer import hardware
from analyzer.config.configure import configure
from analyzer.hardware import Profile

KB = 1024


def profile(name: str, **changes) -> Profile:
    """A shipped profile with nested fields replaced, e.g. registers={"per_thread_max": 256}."""
    data = hardware.load(name).model_dump()
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    return Profile.model_validate(data)


def sxm5() -> Profile:
    return hardware.load("h100")


def pcie() -> Profile:
    """The sheets take H100 PCIe's preliminary 2.04 TB/s (the profile has the final 2.0 TB/s)."""
    return hardware.load("h100-pcie").with_level("gmem", bandwidth_bytes_per_s=2.04e12)


def sheet_registers(p: Profile) -> Profile:
    """The sheets' per-thread register limit is 256 registers (1024 B); the datasheets say 255."""
    data = p.model_dump()
    data["registers"]["per_thread_max"] = 256
    return Profile.model_validate(data)


def by_name(report, name):
    return next(v for v in report.variables if v.name == name)


def cap(report, storage):
    return next(c for c in report.capacity if c.storage == storage)


def column(report, pipeline, nth=0):
    return [c for c in report.compute.columns if c.pipeline == pipeline][nth]


# -- Table 1 and Table 2 (Section 5.6; Appendix B.2.1) ---------------------------------------------

@pytest.fixture(scope="module")
def napkin_hopper():
    return configure("attention", sxm5(), config="napkin_hopper")


def test_table1_variables(napkin_hopper):
    """Each row of Table 1: the paper's name -> napkin's variable, with its bytes."""
    rows = {"Q": ("Q", 16384, "group"), "K": ("K", 16384, "block"), "V": ("V", 32768, "block"),
            "S": ("S", 16384, "group"), "P": ("S.smem", 16384, "group"),
            "P'": ("S.reg", 16384, "group"), "A": ("P.smem", 8192, "group"),
            "alpha": ("O.aux", 768, "group"), "O'": ("O.reg", 32768, "group"),
            "D": ("O.tc", 8192, "group"), "Delta O": ("O.smem", 8192, "group"),
            "Delta O'": ("O.chunk", 2048, "group")}
    assert len(napkin_hopper.variables) == len(rows)
    for paper, (name, nbytes, scope) in rows.items():
        v = by_name(napkin_hopper, name)
        assert (v.bytes, v.scope) == (nbytes, scope), paper
    assert by_name(napkin_hopper, "K").buffers == 2            # "asynchronously loaded, doubling"
    assert by_name(napkin_hopper, "O.aux").multiple == 3       # mu, delta, z


def test_table1_totals(napkin_hopper):
    smem, regs = cap(napkin_hopper, "smem"), cap(napkin_hopper, "registers")
    assert smem.block_bytes == 48 * KB and smem.group_bytes == 48 * KB
    assert regs.block_bytes == 0 and regs.group_bytes == 74.75 * KB


def test_table2_maximum_analysis(napkin_hopper):
    smem, regs = cap(napkin_hopper, "smem"), cap(napkin_hopper, "registers")
    assert (smem.max_bytes, regs.max_bytes) == (227 * KB, 256 * KB)
    assert round(smem.n_max, 1) == 3.7 and round(regs.n_max, 1) == 3.4
    assert napkin_hopper.configuration.groups == 3 and napkin_hopper.values["g_q"] == 384
    assert smem.excess_block_bytes == 35 * KB
    assert round(smem.excess_group_bytes / KB, 2) == 11.67
    assert regs.excess_block_bytes == 31.75 * KB
    assert round(regs.excess_group_bytes / KB, 2) == 10.58
    assert round(regs.excess_thread_bytes) == 85
    assert napkin_hopper.fits


def test_one_more_warpgroup_does_not_fit():
    """N = 4 > N_max: the maximum analysis says so and names the storage."""
    r = configure("attention", sxm5(), config="napkin_hopper", sets={"N": 4})
    assert not r.fits
    assert any(p.startswith("smem:") and "at most N = 3" in p for p in r.problems)
    assert any(p.startswith("registers:") for p in r.problems)


# -- Table 3 (Section 5.7) -----------------------------------------------------------------------------

def test_table3_main_text():
    """Table 3 as printed: s_x = u_x = 32 (Ops/Th 2 d s_x = 8192 and s_x + s_x/u_x = 33)."""
    r = configure("attention", sxm5(), config="napkin_hopper",
                  sets={"s_x": 32, "u_x": 32, "c_x": 32})
    qk, exp, pv, acc = (column(r, "tensor", 0), column(r, "sfu"), column(r, "tensor", 1),
                        column(r, "vector"))
    assert [c.ops_per_row for c in (qk, exp, pv, acc)] == [8192, 33, 8192, 256]
    assert [round(c.ops_per_clock) for c in (qk, exp, pv, acc)] == [8192, 16, 4096, 512]
    assert [round(c.clocks_per_row, 2) for c in (qk, exp, pv, acc)] == [1, 2.06, 2, 0.5]
    assert round(r.compute.clocks_per_row["tensor"]) == 3   # "lower bound by the 3 clock cycles"


def test_table3_appendix_b21(napkin_hopper):
    """The B.2.1 sheet: s_x = u_x = 64."""
    r = napkin_hopper
    qk, exp, pv, acc = (column(r, "tensor", 0), column(r, "sfu"), column(r, "tensor", 1),
                        column(r, "vector"))
    assert [c.ops_per_row for c in (qk, exp, pv, acc)] == [16384, 65, 16384, 256]
    assert [round(c.clocks_per_row, 3) for c in (qk, exp, pv, acc)] == [2, 4.062, 4, 0.5]
    assert round(r.compute.clocks_per_row["tensor"], 3) == 6
    assert (qk.dtype, pv.dtype) == ("fp8", "fp16")    # FP8 queries and keys, FP16 values


# -- B.0.1: the throughput analysis of the derived algorithm ----------------------------------------

@pytest.mark.parametrize(("gpu", "t_h", "g_star", "t_k", "flops"), [
    (sxm5, 9.68e-7, 295, 1.26e-6, 1.32e15),
    (pcie, 1.37e-6, 371, 1.42e-6, 1.01e15),
])
def test_b01_throughput(gpu, t_h, g_star, t_k, flops):
    r = configure("attention", gpu(), config="napkin_hopper")
    t = r.throughput
    assert round(t.tensor_clocks_per_row) == 6 and t.bytes_per_chunk == 24576
    assert t.load_time_s == pytest.approx(t_h, rel=5e-3)
    assert round(t.min_rows) == g_star                    # "g_q >= 295 (for H100 SXM5)"
    assert t.rows == 384 and t.compute_time_s == pytest.approx(t_k, rel=5e-3)
    assert t.ops_per_chunk == pytest.approx(1.26e7, rel=5e-3)
    assert t.throughput_flops_per_s == pytest.approx(flops, rel=5e-3)
    assert t.bound == "tensor cores"


def test_b01_fewer_rows_are_bandwidth_bound():
    """Below g* the load time wins: one warpgroup of 128 rows cannot feed the tensor cores."""
    r = configure("attention", sxm5(), config="napkin_hopper", sets={"N": 1})
    assert r.throughput.bound == "GMEM bandwidth"
    assert r.throughput.load_time_s > r.throughput.compute_time_s


# -- B.2.2-B.2.4: FlashAttention-3 ----------------------------------------------------------------------

FA3 = {   # name: (registers per WG, SMEM per block, excess registers per thread with 256 registers)
    "fa3_fp8_inter": (90880, 114688, 314),
    "fa3_fp8_intra": (131840, 98304, -6),
    "fa3_fp16_intra": (132608, 131072, -12),
}


@pytest.mark.parametrize("name", FA3)
def test_fa3_configuration_tables(name):
    registers, smem, per_thread = FA3[name]
    r = configure("attention", sheet_registers(sxm5()), config=name)
    assert cap(r, "registers").group_bytes == registers
    assert cap(r, "smem").block_bytes == smem and cap(r, "smem").group_bytes == 0
    assert cap(r, "smem").n_max is None                 # the sheets' #DIV/0!
    assert cap(r, "smem").excess_block_bytes == 227 * KB - smem
    assert cap(r, "registers").thread_limit_excess_bytes == per_thread
    assert r.fits == (per_thread >= 0)                   # -6 and -12: spills


def test_fa3_datasheet_register_limit():
    """With the datasheets' 255 registers per thread the FP16 sheet's -12 B is -16 B."""
    r = configure("attention", sxm5(), config="fa3_fp16_intra")
    assert cap(r, "registers").thread_limit_excess_bytes == -16
    assert any("spills" in p for p in r.problems)


def test_b24_maximum_analysis():
    regs = cap(configure("attention", sxm5(), config="fa3_fp16_intra"), "registers")
    assert regs.group_bytes == 129.5 * KB and round(regs.n_max, 1) == 2.0
    assert regs.excess_block_bytes == 126.5 * KB and round(regs.excess_thread_bytes) == 1012


@pytest.mark.parametrize(("gpu", "t_h", "t_k", "flops"), [
    (sxm5, 2.58e-6, 8.73e-6, 9.89e14),
    (pcie, 3.66e-6, 9.87e-6, 7.56e14),
])
def test_b24_throughput(gpu, t_h, t_k, flops):
    t = configure("attention", gpu(), config="fa3_fp16_intra").throughput
    assert round(t.tensor_clocks_per_row) == 16 and t.bytes_per_chunk == 65536
    assert t.rows == 999                                  # "artificially set to 999"
    assert t.load_time_s == pytest.approx(t_h, rel=5e-3)
    assert t.compute_time_s == pytest.approx(t_k, rel=5e-3)
    assert t.ops_per_chunk == pytest.approx(6.55e7, rel=5e-3)
    assert t.throughput_flops_per_s == pytest.approx(flops, rel=5e-3)


@pytest.mark.parametrize(("gpu", "g_star", "t_k"), [(sxm5, 295, None), (pcie, 371, 8.63e-6)])
def test_b22_throughput(gpu, g_star, t_k):
    t = configure("attention", gpu(), config="fa3_fp8_inter").throughput
    assert round(t.tensor_clocks_per_row) == 14 and t.bytes_per_chunk == 57344
    assert round(t.min_rows) == g_star
    assert t.ops_per_chunk == pytest.approx(1.15e8, rel=5e-3)
    if t_k:
        assert t.compute_time_s == pytest.approx(t_k, rel=5e-3)


def test_b23_throughput_at_the_sheets_rate():
    """The B.2.3 sheet times both FP8 contractions at 4096 ops/clk, the FP16 rate: with that
    assumption napkin reproduces its row (k = 24, 989 and 756 TFLOP/s); with the FP8 rate k = 12."""
    def fp16_rate_for_fp8(p: Profile) -> Profile:
        return profile_with_rates(p, fp8=p.tensor_flops_per_s["fp16"])

    for gpu, flops in ((sxm5, 9.89e14), (pcie, 7.56e14)):
        t = configure("attention", fp16_rate_for_fp8(gpu()), config="fa3_fp8_intra").throughput
        assert round(t.tensor_clocks_per_row) == 24 and t.bytes_per_chunk == 49152
        assert t.ops_per_chunk == pytest.approx(9.82e7, rel=5e-3)
        assert t.throughput_flops_per_s == pytest.approx(flops, rel=5e-3)
    t = configure("attention", sxm5(), config="fa3_fp8_intra").throughput
    assert round(t.tensor_clocks_per_row) == 12
    assert t.throughput_flops_per_s == pytest.approx(1.979e15, rel=5e-3)


def profile_with_rates(p: Profile, **rates: float) -> Profile:
    data = p.model_dump()
    data["tensor_flops_per_s"] = {**data["tensor_flops_per_s"], **rates}
    return Profile.model_validate(data)
