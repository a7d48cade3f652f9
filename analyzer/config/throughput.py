"""The throughput analysis (Appendix B.0.1, the sheets' Table 4): load time against compute time.

Per chunk, a block loads H bytes (the streamed operands, e.g. keys and values) and its tensor cores
spend k_TC clock cycles per row (Table 3). With g rows sharing each load and no caching, an SM must not
wait for its share B / N_SM of the GMEM bandwidth:

    T_H = H N_SM / B,   T_K = k_TC g / f_K,   T_K >= T_H  <=>  g >= g* = T_H f_K / k_TC

and the ideal, tensor-bound throughput is K N_SM / max(T_K, T_H), with K = g x (tensor ops per row)
the operations of one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.config.compute import Compute
from analyzer.config.lowering import Variable
from analyzer.config.setting import Setting


@dataclass(frozen=True)
class Throughput:
    tensor_clocks_per_row: float      # k
    bytes_per_chunk: int              # H
    clock_hz: float                   # f_K
    bandwidth_bytes_per_s: float      # B
    sm_count: int                     # N_SM
    rows: int                         # g ("Num. of Th")
    load_time_s: float                # T_H
    min_rows: float                   # g*
    compute_time_s: float             # T_K
    ops_per_chunk: float              # K
    throughput_flops_per_s: float
    loads_from: str | None = None     # the level B is the bandwidth of (None: the top, GMEM)

    @property
    def time_s(self) -> float:
        return max(self.compute_time_s, self.load_time_s)

    @property
    def bound(self) -> str:
        if self.compute_time_s >= self.load_time_s:
            return "tensor cores"
        return f"{(self.loads_from or 'gmem').upper()} bandwidth"


def throughput(setting: Setting, variables: tuple[Variable, ...], compute: Compute) -> Throughput:
    p = setting.profile
    stream = setting.names.stream
    d = setting.schedule.diagram
    streamed = [v for v in variables
                if v.name in setting.schedule.loads and stream in d.arrays[v.name].axes]
    h = sum(v.bytes // v.buffers for v in streamed)         # one chunk, not its extra buffers
    k = compute.tensor_clocks
    f_k = p.clocks.tensor_hz
    level = p.level(setting.loads_from) if setting.loads_from else p.levels[0]
    bandwidth = level.bandwidth_bytes_per_s
    rows = setting.rows_per_load
    t_h = h * p.sm_count / bandwidth
    t_k = k * rows / f_k
    ops = rows * compute.ops("tensor")
    return Throughput(k, h, f_k, bandwidth, p.sm_count, rows, t_h, t_h * f_k / k if k else 0.0, t_k,
                      ops, ops * p.sm_count / max(t_k, t_h) if max(t_k, t_h) else 0.0, setting.loads_from)
