"""How napkin measure times a kernel, as the recordings the model was calibrated on were timed
(bench/common.timed): CUDA events around repeated calls (triton.testing.do_bench, the L2 cache flushed
between calls), unless the call's launch from Python takes as long as the kernel, in which case the
events would time the host: then CUDA graph replays (triton.testing.do_bench_cudagraph), which time the
kernels alone. The median and the 20th and 80th percentiles of the repetitions.

On an H100 (2026-11-28) the two methods differ by 4-5 % on a 210 us attention kernel (events 211.4 us,
graph replays 220-222 us: a graph replays the kernel back to back for the whole repetition, with no
pause for the flush, and the SMs run at a lower clock). Events are the default wherever they time the
kernel, so that `napkin measure` and a fit of `napkin measure --sweep`'s recording time alike. The
shipped fits' recordings (bench/hopper_sweep.py, bench/sweep_h200.py) were timed by graph replays: a
user's fit and the shipped one differ by this method as well as by their GPUs (docs/measure.md);
`--timer graph` times every call by graph replays, as those recordings were.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from analyzer.measure.result import TimingOut

REP_MS = 100.0             # each repetition's length
WARMUP_MS = 25.0           # do_bench's warm-up before its repetitions
HOST_CALLS = 20            # calls enqueued back to back to read the host's cost of one
HOST_SHARE = 0.5           # events time the host where a call's launch costs this share of its time or more
GRAPH = "CUDA graph replays (triton.testing.do_bench_cudagraph): the launch costs as long as the kernel"
EVENTS = "CUDA events around repeated calls (triton.testing.do_bench)"
GRAPH_ASKED = "CUDA graph replays (triton.testing.do_bench_cudagraph), as asked (--timer graph)"
QUANTILES = [0.5, 0.2, 0.8]  # the median, then the 20th and 80th percentiles
TIMERS = ("auto", "graph")


def host_seconds(fn: Callable[[], Any], synchronize: Callable[[], None]) -> float:
    """The host's time to launch one call: HOST_CALLS calls enqueued without waiting for the GPU."""
    synchronize()
    began = time.perf_counter()
    for _ in range(HOST_CALLS):
        fn()
    spent = (time.perf_counter() - began) / HOST_CALLS
    synchronize()
    return spent


def timed(fn: Callable[[], Any], rep_ms: float = REP_MS) -> TimingOut:
    """The call `fn` timed with events, or in a CUDA graph where its launch is as long as the kernel."""
    import torch
    import triton.testing
    median, p20, p80 = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=rep_ms, quantiles=QUANTILES)
    if host_seconds(fn, torch.cuda.synchronize) >= HOST_SHARE * median * 1e-3:
        return graph_timed(fn, rep_ms, GRAPH)
    return TimingOut(method=EVENTS, repetitions_ms=rep_ms, time_s=median * 1e-3, time_s_p20=p20 * 1e-3,
                     time_s_p80=p80 * 1e-3)


def graph_timed(fn: Callable[[], Any], rep_ms: float = REP_MS, method: str = GRAPH_ASKED) -> TimingOut:
    """The call `fn` timed by CUDA graph replays, as the shipped fits' recordings were (--timer graph)."""
    import triton.testing
    median, p20, p80 = triton.testing.do_bench_cudagraph(fn, rep=rep_ms, quantiles=QUANTILES)
    return TimingOut(method=method, repetitions_ms=rep_ms, time_s=median * 1e-3, time_s_p20=p20 * 1e-3,
                     time_s_p80=p80 * 1e-3)


def timer_named(name: str) -> Callable[[Callable[[], Any], float], TimingOut]:
    """napkin measure --timer: `auto` (events unless the launch is as long as the kernel) or `graph`."""
    return {"auto": timed, "graph": graph_timed}[name]


__all__ = ["EVENTS", "GRAPH", "GRAPH_ASKED", "HOST_SHARE", "REP_MS", "TIMERS", "graph_timed", "host_seconds", "timed",
           "timer_named"]
