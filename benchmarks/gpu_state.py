"""SM clock and power-cap state, sampled while a benchmark runs a call back to back.

Under sustained load the H200 holds its board power at 700 W by lowering the SM clock, with the
throttle reason "software power cap". :func:`benchmarks.timing.time_sustained` samples this state
over the second of back-to-back calls before it times them, where the readings mean something.
They do not over a short window: NVML's clock and throttle readings lag the hardware by 0.1-0.3 s
(session 16: 0.1 s after a GEMM burst NVML still read 1290 MHz and "power cap" while the causal MQA
call already ran within 2% of its settled time; in the suite of session 15 the samples of ~10 ms
windows read 1980 MHz, uncapped, for a causal call 4% slower than from a settled GPU, the
slowdown that ~0.1 s of heavy work just before it causes). So the burst timings carry no state
fields; they start from a settled GPU instead.

NVML is reached through ``ctypes``, so there is no extra dependency. Where it is missing (no
NVIDIA driver, another vendor's GPU, a CPU-only machine), the sampler records nothing and
:meth:`GpuStateSampler.summary` is empty.
"""

from __future__ import annotations

import ctypes
import functools
import os
import statistics
import threading
from typing import Any

import torch

__all__ = ["GpuStateSampler", "STATE_KEYS", "summarize"]

STATE_KEYS = ("sm_mhz", "power_cap_pct", "state_samples")
NVML_CLOCK_SM = 1
# Clock event reasons that mean "held back by power": software power cap, hardware power brake.
POWER_CAP_REASONS = 0x4 | 0x80


class _Nvml:
    """One device's NVML handle: :meth:`read` gives (SM MHz, clock event reasons) or None.

    No power reading: NVML's board power on this GPU is an average over about a second, which
    mostly reflects what ran before a timing window of a few milliseconds (the suite run of
    session 15 read 155-176 W during MQA calls that draw ~690 W when run back to back).
    """

    def __init__(self, lib: ctypes.CDLL, handle: ctypes.c_void_p) -> None:
        self.lib, self.handle = lib, handle
        # The event-reasons name is the current one; older drivers only have the throttle-reasons name.
        newer = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = newer or lib.nvmlDeviceGetCurrentClocksThrottleReasons

    def read(self) -> tuple[int, int] | None:
        mhz, reasons = ctypes.c_uint(), ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(mhz)) != 0:
            return None
        if self._reasons(self.handle, ctypes.byref(reasons)) != 0:
            return None
        return mhz.value, reasons.value


@functools.cache
def _nvml_for(index: int) -> _Nvml | None:
    """NVML for CUDA device ``index``, or None without NVML.

    The device is matched by UUID. NVML numbers every GPU of the machine, while CUDA numbers
    only those ``CUDA_VISIBLE_DEVICES`` lets through. So the CUDA index is used as the NVML index
    only when that variable is unset, and otherwise nothing is sampled rather than another GPU.
    """
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            return None
        handle = ctypes.c_void_p()
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is None or lib.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}".encode(), ctypes.byref(handle)) != 0:
            if "CUDA_VISIBLE_DEVICES" in os.environ:
                return None
            if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                return None
        nvml = _Nvml(lib, handle)
        return nvml if nvml.read() is not None else None
    except (OSError, AttributeError, RuntimeError, AssertionError):
        return None


def summarize(samples: list[tuple[int, int]]) -> dict[str, Any]:
    """Median SM clock (MHz) and the share of samples whose clock was held back by power (%);
    empty without samples."""
    if not samples:
        return {}
    return {
        "sm_mhz": statistics.median(s[0] for s in samples),
        "power_cap_pct": 100 * sum(1 for s in samples if s[1] & POWER_CAP_REASONS) / len(samples),
        "state_samples": len(samples),
    }


class GpuStateSampler:
    """Context manager: a thread reads NVML every ``interval_s`` while the block runs.

    Parameters
    ----------
    device
        CUDA device index (default: the current device).
    interval_s
        Sampling period in seconds (an NVML read takes tens of microseconds).
    """

    def __init__(self, device: int | None = None, interval_s: float = 0.002) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[int, int]] = []
        available = torch.cuda.is_available()
        self._nvml = _nvml_for(torch.cuda.current_device() if device is None else device) if available else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while True:
            s = self._nvml.read()
            if s is not None:
                self.samples.append(s)
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> GpuStateSampler:
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._run, name="gpu-state-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()

    def summary(self) -> dict[str, Any]:
        """:func:`summarize` of the samples taken (empty where NVML is unavailable)."""
        return summarize(self.samples)
