"""Context-parallel attention predicted: the multi-GPU level's transfers (analyzer.model.devices), each
block of the ring timed by the model of the kernel napkin generates for it, and the engine's schedule.

The engine is PyTorch's ring (torch.distributed.tensor.experimental, `_templated_ring_attention`,
torch 2.9 to 2.13), as examples/context_parallel.py runs it with napkin's kernel for each block:
- N ranks each hold 1/N of the sequence: one contiguous chunk, or under a causal mask chunks r and
  2N - 1 - r of 2N (the round-robin load balance);
- step 0 attends a rank's queries to its own keys (causal under the mask: the diagram itself); step
  i > 0 to rank r - i's keys, which under the round-robin layout its queries see in full: all its
  queries to the first half of them (i <= r) or the second half of its queries to all of them (i > r),
  so the step runs the diagram without its mask (analyzer.diagram.unmasked) on half a square;
- the keys and values move by one all-gather issued before step 0 and awaited before step 1 (torch's
  default rotation), or by N - 1 permutations, each issued before a step and awaited before the next
  (`alltoall`); before every step but the last the step's keys and values are copied into one buffer;
- after each step the block's output is folded into the running one by their log-sum-exps: by napkin's
  merge kernel in place of torch's merger (analyzer.measure.ring_merge, the example's default: one pass
  over the rows a step updates), or by torch's merger itself (`_SDPAMerger`, convert_to_f32: elementwise
  torch operations in fp32, each a pass over HBM).

The model: a block takes its kernel's expected time (analyzer.config.launch, the configuration its
wrapper launches at the block's shape); the copies and the merger's passes take their bytes at HBM
bandwidth; the link moves each rank's cross transfers at the interconnect's bandwidth after its latency
(once for the all-gather, once a permutation), concurrently with the steps it runs under (assumed to
take neither SMs nor HBM bandwidth from them). A rank's time is the sum of its steps, a step waiting for
the transfer it needs; the slowest rank's is the prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import sympy

from analyzer import hardware
from analyzer.common.errors import NapkinError
from analyzer.common.expr import at
from analyzer.config.family import Launch
from analyzer.config.launch import expected, launch
from analyzer.diagram.compiled import Diagram
from analyzer.diagram.unmasked import unmasked
from analyzer.hardware import Profile
from analyzer.model.analysis import load
from analyzer.model.devices import DEVICES, attention_roles, cross_transfers
from analyzer.model.predict import params_of
from analyzer.model.result import ContextParallelOut, DeviceCountOut, Out

ENGINE = "PyTorch's ring (torch.distributed.tensor.experimental), napkin's kernel for each block"

Rotation = Literal["allgather", "alltoall"]
ROTATIONS: tuple[str, ...] = ("allgather", "alltoall")
Merge = Literal["napkin", "torch"]
MERGES: tuple[str, ...] = ("napkin", "torch")
MERGED_BY = {"napkin": "napkin's merge kernel", "torch": "torch's merger"}

# torch's merger, pass by pass, in bytes moved over HBM (fp32: 4 bytes; the output's own type: q). Per value
# of the output a step updates: out - block_out (read 8, write 4), sigmoid(lse_b - lse) times that (read 4,
# write 4), out less that (read 8, write 4). Per value of the log-sum-exp it updates: lse_b - lse, its
# sigmoid, lse - lse_b, its logsigmoid, lse less that (12, 8, 12, 8, 12). Besides: each block's output is
# converted to fp32 (read q, write 4); a step that updates half the rows joins the halves again (torch.cat:
# read 4, write 4 over all rows, of the output and of its log-sum-exp); the ring's result is converted back
# (read 4, write q).
MERGE_BYTES_PER_VALUE = 12 + 8 + 12
MERGE_BYTES_PER_LSE = 12 + 8 + 12 + 8 + 12
# napkin's merge kernel reads a row's two log-sum-exps and writes one (fp32); it reads the running row
# (in the first block's type until a merge has put it in the fp32 buffer) and the block's, and writes
# the row to the buffer (fp32) or, at the ring's last step, into the first block's output (its type).
KERNEL_MERGE_BYTES_PER_LSE = 4 + 4 + 4
HALVES = 2          # torch's round-robin cycle: a step updates every row or the second of two halves


@dataclass(frozen=True)
class Step:
    """One step of one rank: the block's shape, what its kernel takes, and what the engine adds."""

    sizes: dict[str, int]        # the block diagram's size symbols (batch and heads included)
    causal: bool                 # the diagram itself (a rank's own keys under a causal mask), or unmasked
    kernel_s: float
    engine_s: float              # copying the keys and values into the send buffer, and the merge
    waits_s: float               # time the step waits for the link beyond its own


@dataclass(frozen=True)
class DeviceCount:
    """The prediction for one number of GPUs."""

    devices: int
    time_s: float
    kernel_s: float              # the slowest rank's blocks
    engine_s: float              # its copies and merges
    link_s: float                # its cross transfers at the interconnect's bandwidth
    waits_s: float               # the part of link_s no step hides
    cross_bytes: float           # what one GPU receives over the link
    steps: tuple[Step, ...]      # the slowest rank's
    link_bound_up_to: int | None = None   # the longest query sequence at which a step waits for the link

    @property
    def bound(self) -> str:
        """communication where a step waits for the link, else compute (its blocks' kernels)."""
        return "communication" if self.waits_s > 0 else "compute"


@dataclass(frozen=True)
class ContextParallel:
    diagram: str
    gpu: str
    link: str
    link_bytes_per_s: float
    rotation: str
    merge: str
    sizes: dict[str, int]                 # the whole problem's
    cross_per_device: sympy.Expr          # bytes one GPU receives, in the diagram's sizes and N_c
    counts: tuple[DeviceCount, ...]

    def efficiency(self, c: DeviceCount) -> float:
        """Strong-scaling efficiency against one GPU: T_1 / (N T_N)."""
        return self.counts[0].time_s / (c.devices * c.time_s)


def device_counts(most: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to `most`, and `most`."""
    out = [1]
    while out[-1] * 2 <= most:
        out.append(out[-1] * 2)
    return tuple(sorted({*out, most}))


def context_parallel(diagram: str | Diagram, gpu: str | Profile, devices: int, *, rotation: Rotation = "allgather",
                     merge: Merge = "napkin", dtype: str | None = None,
                     sets: dict[str, int] | None = None) -> ContextParallel:
    """The context-parallel time of `diagram` on 1 .. `devices` GPUs of `gpu`'s host (device_counts)."""
    profile = hardware.load(gpu)
    d = load(diagram, dtype=dtype)
    roles = attention_roles(d)
    link = profile.interconnect
    _check_splittable(d, roles, profile, devices, rotation)
    causal = roles.band is not None
    own = {s.name for s in d.size_symbols} | {s.name for k in d.kernels for p in k.partitions.values()
                                               for s in p.symbols}
    pins = {k: v for k, v in (sets or {}).items() if k in own}
    blocks = {True: launch(d, profile, dtype=dtype, sets=pins, tables=False)}
    blocks[False] = blocks[True] if not causal else launch(unmasked(d), profile, dtype=dtype, sets=pins,
                                                            tables=False)
    woven = blocks[True].configured.diagram
    unknown = sorted(set(sets or {}) - {s.name for s in woven.size_symbols} - own)
    if unknown:
        weave = unknown[0] in ("heads", "batch")
        raise NapkinError(f"{d.name} has no size {unknown[0]!r} to split over GPUs", file=d.source,
                          field=f"--{unknown[0]}" if weave else "--set",
                          hint=f"its sizes: {', '.join(sorted(s.name for s in woven.size_symbols))}")
    full = _sizes(blocks[True], sets)
    seq_q, seq_k = (woven.size(a) for a in (roles.seq_q, roles.seq_k))
    if causal and seq_q != seq_k:
        raise NapkinError(f"{d.name}: a causal ring needs the keys' sequence to be the queries'", file=d.source,
                          field="--devices")
    cross = cross_transfers(woven, roles)
    link_rate = link.bandwidth_bytes_per_s if link else float("inf")
    latency = link.latency_s if link else 0.0
    gmem = profile.levels[0].bandwidth_bytes_per_s * params_of(profile).get("bandwidth_efficiency."
                                                                             + profile.levels[0].name, 1.0)
    timer = _Timer(blocks, profile, woven, roles, gmem)

    def ring_of(sizes: dict[str, int], n: int) -> DeviceCount:
        received = float(at(cross.per_device_bytes, {**_symbols(woven, sizes), DEVICES: n})) if n > 1 else 0.0
        transfers = 0 if n == 1 else 1 if rotation == "allgather" else n - 1      # each pays the latency once
        link_s = transfers * latency + received / link_rate
        return _ranks(timer, sizes, n, causal, rotation, merge, link_s, received, seq_q, seq_k)

    counts = []
    for n in device_counts(devices):
        count = ring_of(full, n)
        if n > 1:
            count = replace(count, link_bound_up_to=_link_bound_up_to(
                lambda length, n=n: ring_of(_scaled(full, woven, seq_q, seq_k, length), n).waits_s > 0,
                2 * n if causal else n))
        counts.append(count)
    return ContextParallel(d.name, profile.name, link.name if link else "", link_rate, rotation, merge, full,
                           cross.per_device_bytes, tuple(counts))


def _check_splittable(d: Diagram, roles, profile: Profile, devices: int, rotation: str) -> None:
    """A one-line error where torch's ring cannot split `d` over `devices` GPUs of `profile`'s host."""
    link = profile.interconnect
    if devices > 1 and link is None:
        raise NapkinError(f"{profile.name} names no link between GPUs", file=profile.source, field="interconnect",
                          hint="add an interconnect (docs/hardware-profiles.md) or model one GPU")
    if link is not None and devices > link.devices_max:
        raise NapkinError(f"--devices {devices}: {link.name} joins at most {link.devices_max} GPUs of one "
                          f"host on {profile.name}", field="--devices")
    if rotation not in ROTATIONS:
        raise NapkinError(f"--rotation {rotation}: not a rotation", field="--rotation",
                          hint=f"one of {', '.join(ROTATIONS)}")
    band = roles.band
    if band is not None and not (band.causal and band.before is None):
        raise NapkinError(f"{d.name}'s mask keeps a band of keys, not all before the query: torch's ring splits "
                          "attention under a causal mask or none", file=d.source, field="--devices",
                          hint="a sliding window or a band skips blocks the ring does not")
    if not any(op.primitive.name in ("softmax", "softmax_dot") for op in d.ops):
        raise NapkinError(f"{d.name} normalises its scores without a softmax: torch's ring merges its blocks by "
                          "their log-sum-exps, which only a softmax's blocks have", file=d.source, field="--devices")
    if roles.extras:
        raise NapkinError(f"{d.name}'s scores also read {', '.join(roles.extras)}: torch's ring passes each "
                          "block q, k and v only", file=d.source, field="--devices")


LONGEST = 1 << 24       # the longest sequence the search for the link's bound looks at (16M tokens)


def _link_bound_up_to(waits, unit: int) -> int | None:
    """The longest query sequence, a multiple of `unit`, at which `waits(length)` (a step of the ring waits
    for the link); None where no step waits at any length searched. Longer sequences hide the link: its
    transfers grow as the sequence, a step's blocks as its square. (The shortest may hide it too, where the
    profile names no latency and a block's fixed costs outlast the few bytes the link moves.) The lengths
    are scanned doubling, and the last crossing halved down to one chunk a rank."""
    grid = [unit << i for i in range((LONGEST // unit).bit_length())]
    waiting = [length for length in grid if waits(length)]
    if not waiting:
        return None
    low = waiting[-1]
    high = 2 * low
    if high > LONGEST:
        return low
    while high - low > unit:
        middle = (low + high) // 2 // unit * unit
        low, high = (middle, high) if waits(middle) else (low, middle)
    return low


def _scaled(full: dict[str, int], woven: Diagram, seq_q: sympy.Expr, seq_k: sympy.Expr, length: int) -> dict[str, int]:
    """`full` with the query sequence `length` and the key sequence in the same proportion."""
    q, k = _size_name(seq_q), _size_name(seq_k)
    out = {**full, q: length}
    if k != q:
        out[k] = max(1, round(length * full[k] / full[q]))
    return out


def _sizes(launched: Launch, sets: dict[str, int] | None) -> dict[str, int]:
    woven = launched.configured.diagram
    names = {s.name for s in woven.size_symbols}
    return {**{s.name: int(v) for s, v in woven.defaults.items() if s.name in names},
            **{k: int(v) for k, v in (sets or {}).items() if k in names}}


def _symbols(d: Diagram, sizes: dict[str, int]) -> dict[sympy.Symbol, int]:
    return {s: sizes[s.name] for s in d.size_symbols if s.name in sizes}


class _Timer:
    """Each block's kernel time (remembered by shape) and the engine's bytes around it."""

    def __init__(self, blocks: dict[bool, Launch], profile: Profile, woven: Diagram, roles, gmem: float):
        self.blocks, self.profile, self.woven, self.roles, self.gmem = blocks, profile, woven, roles, gmem
        # each block diagram's size symbols of its query and key sequences (the same where they are tied)
        self.lengths = {mask: tuple(_size_name(b.configured.diagram.size(a)) for a in (roles.seq_q, roles.seq_k))
                        for mask, b in blocks.items()}
        self.seen: dict[tuple, float] = {}
        out = woven.arrays[roles.output]
        self.out_bytes = out.bytes_per_value
        self.out_axes = out.axes

    def kernel(self, causal: bool, sizes: dict[str, int]) -> float:
        key = (causal, tuple(sorted(sizes.items())))
        if key not in self.seen:
            try:
                self.seen[key] = expected(self.blocks[causal], self.profile, sizes).time_s
            except NapkinError as exc:       # a block too small for the model (napkin analyze's own limit)
                shape = ", ".join(f"{k}={v}" for k, v in sizes.items())
                raise NapkinError(f"a block of the ring ({shape}): {exc.message}", file=exc.file, field=exc.field,
                                  hint="split a longer sequence, or over fewer GPUs") from None
        return self.seen[key]

    def outputs(self, sizes: dict[str, int], rows: int) -> tuple[float, float]:
        """Values of the output and of its log-sum-exp for `rows` query rows."""
        lengths = {**sizes, self.roles.seq_q: rows}
        values = 1.0
        lse = 1.0
        for a in self.out_axes:
            n = float(at(self.woven.size(a), _symbols(self.woven, lengths))) if a != self.roles.seq_q else rows
            values *= n
            lse *= 1.0 if a == self.roles.value_dim else n
        return values, lse

    def merge_s(self, sizes: dict[str, int], rows: int, updated: int, first: bool) -> float:
        """torch's merger for a block of `rows` query rows updating `updated` rows of `sizes`' output."""
        block, _ = self.outputs(sizes, rows)
        moved = block * (self.out_bytes + 4)                     # the block's output to fp32
        if not first:
            values, lse = self.outputs(sizes, updated)
            moved += values * MERGE_BYTES_PER_VALUE + lse * MERGE_BYTES_PER_LSE
            if updated != sizes[self.roles.seq_q]:               # half the rows: the halves joined again
                whole, whole_lse = self.outputs(sizes, sizes[self.roles.seq_q])
                moved += 8 * (whole + whole_lse)
        return moved / self.gmem

    def result_s(self, sizes: dict[str, int]) -> float:
        values, _ = self.outputs(sizes, sizes[self.roles.seq_q])
        return values * (4 + self.out_bytes) / self.gmem

    def halves(self, sizes: dict[str, int]) -> list[int]:
        """The rows of each half of `sizes`' queries (torch.chunk's: the first takes the odd row)."""
        rows = sizes[self.roles.seq_q]
        return [-(-rows // HALVES), rows - -(-rows // HALVES)]

    def kernel_merge_s(self, sizes: dict[str, int], updated: list[int], buffered: list[bool], last: bool) -> float:
        """napkin's merge kernel updating the halves `updated` of `sizes`' output (kernel_merge_bytes)."""
        halves = [self.outputs(sizes, rows) for rows in self.halves(sizes)]
        return kernel_merge_bytes(halves, self.out_bytes, updated, buffered, last) / self.gmem

    def kernel_result_s(self, sizes: dict[str, int], buffered: list[bool]) -> float:
        """The halves the last merge left in the fp32 buffer, converted into the output."""
        values = sum(self.outputs(sizes, rows)[0] for rows, b in zip(self.halves(sizes), buffered) if b)
        return values * (4 + self.out_bytes) / self.gmem

    def copy_s(self, kv_bytes: float) -> float:
        return 2 * kv_bytes / self.gmem


def kernel_merge_bytes(halves: list[tuple[float, float]], q: int, updated: list[int], buffered: list[bool],
                       last: bool) -> float:
    """Bytes napkin's merge kernel moves over HBM for one step: for each half `i` in `updated` ((values of
    the output, of its log-sum-exp) in `halves`), the running rows read from the fp32 buffer where
    `buffered[i]`, else from the first block's output (its `q` bytes a value), the block's read, and the
    merged rows written to the buffer, or (`last`) into the first block's output; each log-sum-exp row read
    twice and written once in fp32."""
    moved = 0.0
    for i in updated:
        values, lse = halves[i]
        moved += values * ((4 if buffered[i] else q) + q + (q if last else 4)) + lse * KERNEL_MERGE_BYTES_PER_LSE
    return moved


def _ranks(timer: _Timer, full: dict[str, int], n: int, causal: bool, rotation: str, merge: str, link_s: float,
           received: float, seq_q: sympy.Expr, seq_k: sympy.Expr) -> DeviceCount:
    """Every rank's steps at `n` GPUs; the slowest rank's time."""
    symbols = _symbols(timer.woven, full)
    length_q, length_k = int(at(seq_q, symbols)), int(at(seq_k, symbols))
    unit = 2 * n if causal else n
    chunk_q, chunk_k = -(-length_q // unit), -(-length_k // unit)
    local_q, local_k = chunk_q * (unit // n), chunk_k * (unit // n)
    kv_block = received / (n - 1) if n > 1 else 0.0              # one rank's keys and values, bytes

    def shape(rows: int, keys: int, mask: bool = causal) -> dict[str, int]:
        """The sizes of the block diagram `mask` names for `rows` queries and `keys` keys."""
        names = timer.lengths[mask]
        return {**full, names[0]: rows, **({names[1]: keys} if names[1] != names[0] else {})}

    slowest: DeviceCount | None = None
    for rank in range(n):
        steps: list[Step] = []
        buffered = [False] * HALVES                  # napkin's merge: where each half's running rows lie
        for i in range(n):
            if i == 0 or not causal:
                sizes, rows, mask = shape(local_q, local_k), local_q, causal
                updated = rows
            elif i <= rank:
                sizes, rows, mask, updated = shape(local_q, local_k // 2, False), local_q, False, local_q
            else:
                sizes, rows, mask, updated = shape(local_q // 2, local_k, False), local_q // 2, False, local_q // 2
            kernel_s = timer.kernel(mask, sizes)
            out_sizes = shape(local_q, local_k)
            if merge == "torch":
                engine_s = timer.merge_s(out_sizes, rows, updated, first=i == 0)
            elif i == 0:
                engine_s = 0.0                       # the first block's output is the running one
            else:
                halves = [1] if updated != local_q else [0, 1]
                engine_s = timer.kernel_merge_s(out_sizes, halves, buffered, last=i == n - 1)
                for h in halves:
                    buffered[h] = i < n - 1
            if i < n - 1:
                engine_s += timer.copy_s(kv_block)
            steps.append(Step(sizes, mask, kernel_s, engine_s, 0.0))
        last = steps[-1]
        result_s = (timer.result_s(shape(local_q, local_k)) if merge == "torch"
                    else timer.kernel_result_s(shape(local_q, local_k), buffered))
        steps[-1] = replace(last, engine_s=last.engine_s + result_s)
        steps = _waits(steps, rotation, link_s, n)
        total = sum(s.kernel_s + s.engine_s + s.waits_s for s in steps)
        count = DeviceCount(n, total, sum(s.kernel_s for s in steps), sum(s.engine_s for s in steps), link_s,
                            sum(s.waits_s for s in steps), received, tuple(steps))
        if slowest is None or count.time_s > slowest.time_s:
            slowest = count
    assert slowest is not None
    return slowest


def _waits(steps: list[Step], rotation: str, link_s: float, n: int) -> list[Step]:
    """Each step's wait for the link: the all-gather runs under step 0 and step 1 awaits it; a permutation
    runs under step i and step i + 1 awaits it."""
    if n == 1:
        return steps
    out = list(steps)
    if rotation == "allgather":
        busy = steps[0].kernel_s + steps[0].engine_s
        out[0] = replace(steps[0], waits_s=max(0.0, link_s - busy))
        return out
    each = link_s / (n - 1)
    for i in range(n - 1):
        busy = steps[i].kernel_s + steps[i].engine_s
        out[i] = replace(steps[i], waits_s=max(0.0, each - busy))
    return out


def _size_name(size: sympy.Expr) -> str:
    if not isinstance(size, sympy.Symbol):
        raise NapkinError(f"a sequence of size {size}: context parallelism cuts a sequence whose size is a size "
                          "of its own", field="--devices")
    return size.name



def context_parallel_out(c: ContextParallel) -> ContextParallelOut:
    return ContextParallelOut(
        engine=f"{ENGINE}, {MERGED_BY[c.merge]} between them", rotation=c.rotation, merge=c.merge, link=c.link,
        link_bytes_per_s=c.link_bytes_per_s,
        cross_bytes_per_device=str(c.cross_per_device), sizes=c.sizes,
        counts=[DeviceCountOut(devices=n.devices, time_s=n.time_s, efficiency=c.efficiency(n), kernel_s=n.kernel_s,
                               engine_s=n.engine_s, link_s=n.link_s, waits_s=n.waits_s, cross_bytes=n.cross_bytes,
                               bound=n.bound, link_bound_up_to=n.link_bound_up_to) for n in c.counts])


def with_context_parallel(result: Out, diagram: str | Diagram, gpu: str | Profile, devices: int, *,
                          rotation: Rotation = "allgather", merge: Merge = "napkin", dtype: str | None = None,
                          sets: dict[str, int] | None = None) -> Out:
    """An analysis with its context-parallel times on 1 .. `devices` GPUs (napkin analyze --devices)."""
    found = context_parallel(diagram, gpu, devices, rotation=rotation, merge=merge, dtype=dtype, sets=sets)
    return result.model_copy(update={"context_parallel": context_parallel_out(found)})
