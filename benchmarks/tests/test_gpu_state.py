"""GPU-state sampling and the burst timing loop of the benchmarks (CPU only: NVML and CUDA events are faked)."""

from __future__ import annotations

import threading

import pytest

from benchmarks import gpu_state, report
from benchmarks.timing import native_fields, sustained_fields


def test_summarize_gives_medians_and_power_cap_share() -> None:
    samples = [(1980, 0x0), (1725, 0x4), (1710, 0x4), (1500, 0x80 | 0x1)]
    s = gpu_state.summarize(samples)
    assert s == {"sm_mhz": 1717.5, "power_cap_pct": 75.0, "state_samples": 4}
    assert set(s) == set(gpu_state.STATE_KEYS)
    assert gpu_state.summarize([]) == {}


def test_thermal_or_idle_reasons_are_not_power_caps() -> None:
    assert gpu_state.summarize([(1400, 0x1 | 0x20 | 0x40)])["power_cap_pct"] == 0


class _FakeNvml:
    """Counts its reads and sets ``enough`` once there were ``wanted`` of them."""

    def __init__(self, wanted: int) -> None:
        self.reads, self.wanted = 0, wanted
        self.enough = threading.Event()

    def read(self) -> tuple[int, int]:
        self.reads += 1
        if self.reads >= self.wanted:
            self.enough.set()
        return 1700, 0x4


def test_sampler_reads_until_the_block_ends(monkeypatch) -> None:
    fake = _FakeNvml(wanted=3)
    monkeypatch.setattr(gpu_state.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_state, "_nvml_for", lambda index: fake)
    with gpu_state.GpuStateSampler(device=0, interval_s=0.001) as sampler:
        # Keeps reading while the block runs; the timeout only bounds a sampler that stopped early.
        assert fake.enough.wait(timeout=60), f"only {fake.reads} reads in 60 s"
    reads = fake.reads
    assert sampler._thread is not None and not sampler._thread.is_alive()  # the thread stopped with the block
    assert len(sampler.samples) == reads >= 3
    assert sampler.summary() == {"sm_mhz": 1700, "power_cap_pct": 100.0, "state_samples": reads}


def test_sampler_without_nvml_records_nothing(monkeypatch) -> None:
    monkeypatch.setattr(gpu_state.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_state, "_nvml_for", lambda index: None)
    with gpu_state.GpuStateSampler(device=0) as sampler:
        pass
    assert sampler.samples == [] and sampler.summary() == {}


@pytest.mark.skipif(gpu_state.torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_sampler_on_a_cpu_machine_is_empty() -> None:
    with gpu_state.GpuStateSampler() as sampler:
        pass
    assert sampler.summary() == {}


def test_rows_and_report_carry_the_sustained_state() -> None:
    timing = {"median_us": 100.0, "p10_us": 99.0, "p90_us": 101.0, "min_us": 98.0, "reps": 10, "bursts": 1}
    assert native_fields(timing) == {"native_us": 100.0, "native_p10_us": 99.0, "native_p90_us": 101.0}
    sustained = {**timing, "median_us": 120.0, "sm_mhz": 1620.0, "power_cap_pct": 100.0, "state_samples": 500}
    assert sustained_fields(sustained) == {
        "sustained_us": 120.0, "sustained_sm_mhz": 1620.0, "sustained_power_cap_pct": 100.0,
    }  # fmt: skip
    assert sustained_fields(timing) == {"sustained_us": 100.0}  # no NVML
    assert report.COLUMNS[-2:] == ("sustained_us", "sustained_sm_mhz")
    assert {"sustained_us", "sustained_sm_mhz", "sustained_power_cap_pct"} <= set(report.CSV_COLUMNS)


class _FakeLib:
    """Stands in for libnvidia-ml: the UUID lookup fails, the index lookup and reads succeed."""

    def __init__(self) -> None:
        self.by_index = []

    def nvmlInit_v2(self) -> int:
        return 0

    def nvmlDeviceGetHandleByUUID(self, uuid, handle) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle) -> int:
        self.by_index.append(index)
        return 0

    def nvmlDeviceGetClockInfo(self, handle, clock, out) -> int:
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, out) -> int:
        return 0


@pytest.mark.parametrize("visible", [None, "1"])
def test_index_fallback_only_without_cuda_visible_devices(monkeypatch, visible) -> None:
    lib = _FakeLib()
    monkeypatch.setattr(gpu_state.ctypes, "CDLL", lambda name: lib)
    monkeypatch.setattr(gpu_state.torch.cuda, "get_device_properties", lambda index: object())  # no uuid
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    gpu_state._nvml_for.cache_clear()
    try:
        nvml = gpu_state._nvml_for(0)
    finally:
        gpu_state._nvml_for.cache_clear()
    if visible is None:
        assert nvml is not None and lib.by_index == [0]
    else:  # CUDA's device 0 is NVML's device 1 here: better no samples than another GPU's
        assert nvml is None and lib.by_index == []


@pytest.mark.parametrize(("burst_ms", "bursts"), [(40.0, 1), (2.0, 2)])
def test_timed_loop_settles_and_times_in_bursts(monkeypatch, burst_ms: float, bursts: int) -> None:
    from benchmarks import timing

    log = []

    class _Event:
        def __init__(self, enable_timing: bool) -> None:
            self.at = None

        def record(self) -> None:
            self.at = len(log)

        def elapsed_time(self, end: _Event) -> float:  # ms: the log entries between the two events
            return float(end.at - self.at)

    monkeypatch.setattr(timing.torch.cuda, "Event", _Event)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(timing.time, "sleep", lambda s: log.append(f"sleep{s}"))
    monkeypatch.setattr(timing, "BURST_MS", burst_ms)
    out = timing._timed(lambda i: log.append(f"call{i}"), 3, lambda: log.append("flush"), settle_s=1.0)
    # One probe call (1 ms here: one log entry), then each burst: idle, 1 ms of warm calls, timed calls.
    probe = ["flush", "call0", "sync"]
    if bursts == 1:
        body = ["sync", "sleep1.0", "flush", "call0", "flush", "call0", "flush", "call1", "flush", "call2", "sync"]
    else:
        body = ["sync", "sleep1.0", "flush", "call0", "flush", "call0", "flush", "call1",
                "sync", f"sleep{timing.REST_S}", "flush", "call2", "flush", "call2", "sync"]  # fmt: skip
    assert log == probe + body
    assert out["reps"] == 3 and out["median_us"] == 1000.0 and out["bursts"] == bursts
