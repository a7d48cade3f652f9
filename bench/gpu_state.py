"""The GPU's SM clock, power draw and temperature, sampled in the background while a kernel is timed.

    with Sampler() as s:
        t0 = time.monotonic(); ...time a kernel...; t1 = time.monotonic()
        state = s.window(t0, t1)      # {"sm_clock_mhz": ..., "power_w": ..., "temperature_c": ...}

NVML (pynvml, nvidia-ml-py) where importable, else `nvidia-smi --query-gpu` once per period. A sample
is stamped when it is read, so a window's means carry up to one period of lag.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time

FIELDS = ("sm_clock_mhz", "power_w", "temperature_c")
QUERY = "clocks.sm,power.draw,temperature.gpu"


class Sampler:
    def __init__(self, period_s: float = 0.05, device: int = 0) -> None:
        self.period_s, self.device = period_s, device
        self.samples: list[tuple[float, tuple[float, ...]]] = []
        self.source = "none"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._read = self._reader()

    def _reader(self):
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.device)
            self.source = "NVML"
            return lambda: (float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                            float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)))
        except Exception:  # noqa: BLE001 - no NVML bindings: fall back to nvidia-smi
            pass
        if shutil.which("nvidia-smi"):
            self.source = "nvidia-smi"
            command = ["nvidia-smi", f"--id={self.device}", f"--query-gpu={QUERY}",
                       "--format=csv,noheader,nounits"]

            def read():
                line = subprocess.run(command, capture_output=True, text=True, timeout=5).stdout
                return tuple(float(x) for x in line.strip().split(","))
            return read
        return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), self._read()))
            except Exception:  # noqa: BLE001 - one failed read loses one sample
                pass
            self._stop.wait(self.period_s)

    def __enter__(self) -> Sampler:
        if self._read is not None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def window(self, t0: float, t1: float) -> dict[str, float | None]:
        """Means of the samples read between t0 and t1 (monotonic seconds); None where none was."""
        inside = [v for t, v in self.samples if t0 <= t <= t1]
        return {f: (statistics.fmean(v[i] for v in inside) if inside else None)
                for i, f in enumerate(FIELDS)}
