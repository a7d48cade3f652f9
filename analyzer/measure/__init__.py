"""napkin measure: the generated kernel run on the GPU at hand, checked against float64 and timed beside
the model's prediction (docs/measure.md).

    device      the local CUDA device, and the shipped profile that describes it
    reference   the float64 evaluation of a diagram a kernel is checked against, and the tolerance
    timing      CUDA graph replays (or events), the median and percentiles
    result      the measurement's JSON (napkin schema measurement)
    run         the pipeline: generate, check, time, predict
    sweep       every legal configuration timed: a recording napkin calibrate fits (the Hopper attention
                kernel's; sweep_portable the portable module's)
    draft       a profile drafted from the device for a GPU napkin does not ship (napkin hardware draft)
    ring_merge  the merge of a context-parallel ring, one Triton kernel a step, in place of torch's merger
                (examples/context_parallel.py; docs/scale.md)

torch and triton are needed only here, and imported only when a measurement runs.
"""

from analyzer.measure.result import Measurement
from analyzer.measure.run import measure

__all__ = ["Measurement", "measure"]
