"""A profile for a GPU napkin does not ship, drafted from the device at hand for its owner to review
(napkin hardware draft).

Every figure comes from one of three places, and its line in the file says which:
- the device: what the CUDA driver reports through torch (SMs, memory, L2, shared memory per SM and
  per block, registers per SM, threads, warp size, and where this torch reports them the SM clock and
  the memory's clock and bus width, from which the memory's peak bandwidth follows: two transfers a
  clock on a bus that wide);
- a measurement on it: the memory bandwidth a device-to-device copy reaches (read and written), and the
  tensor rate a square fp16 (bf16) matmul reaches; these stand in for the peaks only where the driver
  gives nothing to derive them from, and are written beside the derived peaks otherwise;
- the shipped profile of the same compute capability (`reference`): what a device does not report and a
  short measurement does not show (per-SM rates of the SFU and FMA pipelines, the tensor cores' FLOPs a
  clock per SM, the MMA instruction and shape, the L2's partitions and bandwidth a clock, shared
  memory's bytes a clock, the cluster level). Where no shipped profile has the device's compute
  capability, the nearest below it serves, and each such line says ASSUMED, naming it: the figures to
  check against NVIDIA's documentation before trusting a prediction.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from analyzer.common.errors import NapkinError
from analyzer.hardware import Profile, shipped_profiles
from analyzer.measure.device import Device, local_device, torch_module

COPY_BYTES = 1 << 30            # the copy that measures the memory: 1 GiB, far beyond any L2
MATMUL = 8192                   # the square matmul that measures the tensor rate
REPEATS = 20                    # timed runs of each, after one warm-up; the fastest counts


@dataclass(frozen=True)
class Properties:
    """What the driver reports of a device, through torch (None: this torch does not report it)."""

    device: Device
    smem_per_sm: int | None = None
    smem_per_block: int | None = None
    registers_per_sm: int | None = None
    threads_per_sm: int | None = None
    warp_size: int | None = None
    clock_hz: float | None = None
    memory_clock_hz: float | None = None
    memory_bus_bits: int | None = None


@dataclass(frozen=True)
class Measured:
    """Rates measured on the device: a copy's bytes (read + written) a second, matmuls' FLOPs a second."""

    copy_bytes_per_s: float
    matmul_flops_per_s: dict[str, float] = field(default_factory=dict)
    how: str = ""


def properties(index: int = 0) -> Properties:
    """The local device's reported properties."""
    torch = torch_module()
    device = local_device(index)
    p = torch.cuda.get_device_properties(index)

    def got(*names: str) -> Any:
        return next((getattr(p, n) for n in names if getattr(p, n, None)), None)

    clock, memory_clock = got("clock_rate"), got("memory_clock_rate")      # kHz, as CUDA reports them
    return Properties(device, got("shared_memory_per_multiprocessor"), got("shared_memory_per_block_optin"),
                      got("regs_per_multiprocessor"), got("max_threads_per_multi_processor"), got("warp_size"),
                      clock * 1e3 if clock else None, memory_clock * 1e3 if memory_clock else None,
                      got("memory_bus_width"))


def measure_rates(dtypes: tuple[str, ...], index: int = 0) -> Measured:
    """The copy's and the matmuls' rates on device `index`: the fastest of REPEATS timed runs each."""
    torch = torch_module()
    dev = torch.device("cuda", index)
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    copy = 2 * COPY_BYTES / _fastest(torch, lambda: dst.copy_(src))
    src = dst = None            # the copy's 2 GiB back before the matmuls
    flops = {}
    for dtype in dtypes:
        element = getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[dtype])
        a = torch.randn(MATMUL, MATMUL, device=dev, dtype=element)
        b = torch.randn_like(a)
        flops[dtype] = 2 * MATMUL ** 3 / _fastest(torch, lambda: a @ b)
    how = (f"the fastest of {REPEATS} runs (CUDA events): a {COPY_BYTES >> 30} GiB device-to-device copy, "
           f"{MATMUL}^3 matmuls")
    return Measured(copy, flops, how)


def _fastest(torch: Any, fn) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return min(times)


def reference(device: Device) -> tuple[str, Profile, bool]:
    """The shipped datasheet profile whose compute capability is the device's (True), or the nearest below
    it (False: its figures are assumptions)."""
    datasheets = {n: p for n, p in shipped_profiles().items() if p.calibration is None}
    cc = _cc(device.compute_capability)
    # of those of its compute capability, the one most like it: its SM count, then its memory
    same = sorted((p.sm_count != device.sm_count, abs(math.log((p.levels[0].capacity_bytes or 1) /
                                                                device.memory_bytes)), n)
                  for n, p in datasheets.items() if _cc(p.compute_capability) == cc)
    if same:
        return same[0][2], datasheets[same[0][2]], True
    below = sorted(((_cc(p.compute_capability), n) for n, p in datasheets.items() if _cc(p.compute_capability) < cc),
                   reverse=True)
    if not below:
        raise NapkinError(f"no shipped profile has a compute capability at or below {device.compute_capability} "
                          f"({device.name}) to take the per-SM figures from",
                          hint="write the profile by hand (docs/hardware-profiles.md)")
    return below[0][1], datasheets[below[0][1]], False


def _cc(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def draft(props: Properties, measured: Measured, date: str) -> str:
    """The profile's YAML text, each figure with its source (the module docstring's three places)."""
    d = props.device
    ref_name, ref, exact = reference(d)
    taken = f"hardware/{ref_name}.yaml" + ("" if exact else f" (cc {ref.compute_capability}): ASSUMED, check it")
    smem_ref, l2_ref = ref.level("smem"), ref.level("l2")
    per_clock_tensor = ref.tensor_flops_per_s["fp16"] / (ref.sm_count * ref.clocks.tensor_hz)   # FLOP/clk/SM
    clock, clock_source = _clock(props, measured, per_clock_tensor, taken)
    clock = clock if props.clock_hz else _sig(clock)          # a derived clock carries four digits
    tensor = {t: per_clock_tensor * ref.tensor_flops_per_s[t] / ref.tensor_flops_per_s["fp16"] * d.sm_count * clock
              for t in ref.tensor_flops_per_s}
    tensor_source = f"derived: {per_clock_tensor:.0f} FLOP/clk/SM ({taken}) x {d.sm_count} SMs x the clock"
    for t, rate in measured.matmul_flops_per_s.items():
        if rate > tensor.get(t, math.inf):        # the derivation is wrong where a matmul beats it
            tensor[t] = rate
    if props.memory_clock_hz and props.memory_bus_bits:
        bandwidth = 2 * props.memory_clock_hz * props.memory_bus_bits / 8
        bandwidth_source = (f"device: {props.memory_bus_bits}-bit bus x {props.memory_clock_hz / 1e6:.0f} MHz x 2 "
                            f"(measured copy: {measured.copy_bytes_per_s / 1e9:,.0f} GB/s)")
    else:
        bandwidth = _sig(measured.copy_bytes_per_s)
        bandwidth_source = "measured: a device-to-device copy, read + written (below the datasheet peak)"
    smem_clk = smem_ref.bandwidth_bytes_per_s / (ref.sm_count * ref.clocks.tensor_hz)
    l2_clk = l2_ref.bandwidth_bytes_per_s / (ref.sm_count * ref.clocks.tensor_hz)
    registers = props.registers_per_sm or ref.registers.per_sm
    dev = "device (torch.cuda.get_device_properties)"
    out = [f"# {_comment(d.name)}: drafted by napkin hardware draft on {date} from the device, for review. Each figure",
           "# says where it comes from: the device, a measurement on it, or a shipped profile (ASSUMED where",
           "# that profile is of another compute capability: check those against NVIDIA's documentation).",
           f"# Measured: {measured.how}.",
           f"name: {_q(_slug(d.name))}",
           f"description: {_q(d.name + ' (drafted)')}",
           _l("architecture", _q(ref.architecture), taken),
           _l("compute_capability", _q(d.compute_capability), dev),
           _l("sm_count", d.sm_count, dev),
           "clocks:",
           _l("  boost_hz", _n(clock), clock_source),
           _l("  tensor_hz", _n(clock), "the same clock behind the tensor peaks below"),
           f"tensor_dtypes: [{', '.join(ref.tensor_dtypes)}]" + f"  # {taken}",
           "tensor_flops_per_s:                 # dense peaks",
           *[_l(f"  {t}", _n(_sig(rate)), tensor_source if rate != measured.matmul_flops_per_s.get(t) else
                f"measured: a {MATMUL}^3 matmul (above the derived peak)")
             for t, rate in tensor.items()],
           *[f"  # measured {t}: {rate / 1e12:,.0f} TFLOP/s by a {MATMUL}^3 matmul, {rate / tensor[t]:.0%} of the peak "
             "above" + (": far below it, check the FLOP/clk/SM" if rate < 0.5 * tensor[t] else "")
             for t, rate in measured.matmul_flops_per_s.items() if t in tensor],
           "per_sm_per_clock:",
           _l("  sfu_ops", ref.per_sm_per_clock.sfu_ops, taken),
           _l("  fp32_fma", ref.per_sm_per_clock.fp32_fma, taken),
           _l("  fp16_fma", ref.per_sm_per_clock.fp16_fma, taken),
           "registers:",
           _l("  per_sm", registers, dev if props.registers_per_sm else taken),
           _l("  per_thread_max", ref.registers.per_thread_max, taken),
           _l("  per_block_max", ref.registers.per_block_max, taken),
           "threads:",
           _l("  warp_size", props.warp_size or ref.threads.warp_size, dev if props.warp_size else taken),
           _l("  per_sm_max", props.threads_per_sm or ref.threads.per_sm_max, dev if props.threads_per_sm else taken),
           _l("  per_block_max", ref.threads.per_block_max, taken),
           _l("  blocks_per_sm_max", ref.threads.blocks_per_sm_max, taken),
           "levels:",
           "  - name: gmem",
           "    kind: memory",
           _l("    capacity_bytes", _n(d.memory_bytes), dev),
           _l("    instances", 1, "one device memory"),
           _l("    bandwidth_bytes_per_s", _n(bandwidth), bandwidth_source),
           "  - name: l2",
           "    kind: cache",
           _l("    capacity_bytes", (d.l2_bytes or l2_ref.capacity_bytes * l2_ref.instances) // l2_ref.instances,
              (dev if d.l2_bytes else taken) + f", over {l2_ref.instances} partition(s)"),
           _l("    instances", l2_ref.instances, taken),
           _l("    bandwidth_bytes_per_s", _n(_sig(l2_clk * d.sm_count * clock)),
              f"derived: {l2_clk:.1f} B/clk/SM ({taken}) x SMs x the clock"),
           *_cross(ref, taken),
           "  - name: smem",
           "    kind: memory",
           _l("    capacity_bytes", props.smem_per_sm or smem_ref.capacity_bytes, dev if props.smem_per_sm else taken),
           _l("    capacity_bytes_per_block", props.smem_per_block or smem_ref.block_capacity_bytes,
              dev if props.smem_per_block else taken),
           _l("    instances", d.sm_count, "one per SM"),
           _l("    bandwidth_bytes_per_s", _n(_sig(smem_clk * d.sm_count * clock)),
              f"derived: {smem_clk:.0f} B/clk/SM ({taken}) x SMs x the clock"),
           "  - name: registers",
           "    kind: memory",
           _l("    capacity_bytes", registers * 4, "the registers per SM x 4 bytes"),
           _l("    capacity_bytes_per_block", ref.registers.per_block_max * 4, taken),
           _l("    instances", d.sm_count, "one register file per SM"),
           "divisors:",
           _l("  coalesce_bytes", ref.divisors.coalesce_bytes, taken),
           _l("  mma_instruction", _q(ref.divisors.mma_instruction), taken),
           _l("  mma_threads", ref.divisors.mma_threads, taken),
           "  mma:" + f"  # {taken}",
           *[f"    {t}: {{m: {s.m}, n: {s.n}, k: {s.k}}}" for t, s in ref.divisors.mma.items()]]
    return "\n".join(out) + "\n"


def _clock(props: Properties, measured: Measured, per_clock_tensor: float, taken: str) -> tuple[float, str]:
    if props.clock_hz:
        return props.clock_hz, "device: the SM clock the driver reports (its highest)"
    rate = measured.matmul_flops_per_s.get("fp16") or max(measured.matmul_flops_per_s.values(), default=0.0)
    if not rate:
        raise NapkinError("neither the driver's SM clock nor a matmul's rate to derive it from",
                          hint="write clocks: by hand (docs/hardware-profiles.md)")
    return rate / (per_clock_tensor * props.device.sm_count), (
        f"derived: the fp16 matmul's rate over {per_clock_tensor:.0f} FLOP/clk/SM ({taken}) x SMs; a lower "
        "bound, as the matmul reaches below the peak")


def _cross(ref: Profile, taken: str) -> list[str]:
    """The cluster level of the reference, where it has one (Hopper's distributed shared memory)."""
    out = []
    for lv in ref.levels:
        if lv.kind == "cross":
            out += [f"  - name: {lv.name}", "    kind: cross", _l("    cluster_size_max", lv.cluster_size_max, taken),
                    "    bandwidth_bytes_per_s_by_cluster:" + f"  # {taken}",
                    *[f"      {n}: {_n(v)}" for n, v in lv.bandwidth_bytes_per_s_by_cluster.items()]]
    return out


def _l(key: str, value: Any, source: str) -> str:
    return f"{key}: {value}".ljust(40) + f"  # {source}"


def _n(x: float) -> str:
    """A number as YAML 1.2 reads it back exactly: a whole number as one, any other as Python writes it."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _sig(x: float) -> float:
    """A derived or measured figure to the four significant digits it carries."""
    return float(f"{x:.4g}")


def _q(text: str) -> str:
    """A string as a YAML scalar: JSON's double-quoted form, which YAML reads as the same string."""
    return json.dumps(text)


def _comment(text: str) -> str:
    """Text inside a YAML comment: on one line whatever the device calls itself."""
    return "".join(c if c.isprintable() else " " for c in text)


def _slug(name: str) -> str:
    words = "".join(c.lower() if c.isalnum() else " " for c in name).split()
    return "-".join(w for w in words if w != "nvidia") or "gpu"


__all__ = ["Measured", "Properties", "draft", "measure_rates", "properties", "reference"]
