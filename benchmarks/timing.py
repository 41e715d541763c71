"""Timing and hardware-ceiling helpers shared by every benchmark.

Microsecond-scale calls are timed by CUDA-graph replay (eager launch gaps alone
can add tens of microseconds), each replay bracketed by CUDA events, with the L2
flushed (or the inputs rotated) before every replay outside the timed window. The
default flush reads a 256 MB buffer (clean lines only); ``flush_mode="write"`` is
the stricter variant that also leaves dirty lines to write back.
Ceilings (copy bandwidth, bf16 GEMM rate) are measured in the same process as
the kernels they judge.

Every timing starts from a settled GPU and times its calls in short bursts (``SETTLE_S``,
``REST_S``, ``BURST_MS``). Calls that keep the tensor cores busy reach the H200's 700 W board
limit after about 0.1 s back to back; the power controller then lowers the SM clock and keeps it
down for 0.3-1 s after the load stops. Session 16 (H200, CUDA-graph medians after a read flush,
us): the causal MQA call (32768 x 8192) took 355-356 from a settled GPU, 370-375 after ~80 ms
of itself back to back, 464-507 right after 1-3 s of bf16 GEMMs and 412 after 2 s of itself;
the dense MQA prefill 233 / 248 / 288-295 / 288; the ``-inf``-only call (memory-bound, ~370 W)
146 in every case; the sparse decode 64 x 1 80.6-80.9 settled, 81.0 after 2 s of itself,
86-87 right after GEMMs (the same call with and without the settle, interleaved: 81.3-81.8
either way). The GEMM ceiling, timed over ~30 ms, does not reach the cap either, so a burst
timing compares a call with ceilings taken in the same regime. :func:`time_sustained` times the other regime: a call after one second of itself,
with the SM clock and power-cap state that NVML reports over that second (NVML's readings lag
the hardware by 0.1-0.3 s: a 10 ms window cannot be judged by them).
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .gpu_state import STATE_KEYS, GpuStateSampler

__all__ = [
    "time_cuda_graph", "time_eager", "time_sustained", "native_fields", "sustained_fields", "measure_ceilings",
    "env_info", "L2Flusher",
    "SETTLE_S", "REST_S", "BURST_MS",
]  # fmt: skip

SETTLE_S = 1.0  # idle before each timing: 1 s after 3 s of GEMMs the causal call was back to its settled time
REST_S = 0.3  # idle between two bursts of one timing (a burst stays far below the cap)
BURST_MS = 40.0  # GPU time of the timed calls of one burst: well under the ~0.1 s it takes to reach the cap
WARM_MS = 1.0  # untimed calls after each idle period, while the SM clock ramps up from idle
SUSTAIN_S = 1.0  # back-to-back calls before a sustained timing


class L2Flusher:
    """Evicts the L2 by touching a buffer several times its size (H200 L2: 60 MB).

    ``mode="write"`` fills the buffer, which leaves the L2 full of dirty lines: the timed
    call then also pays their write-back to DRAM (up to ~60 MB, ~15 us at 4 TB/s).
    ``mode="read"`` reduces the buffer, which leaves only clean lines: the timed call starts
    with its inputs evicted and nothing to write back, as after a layer's weight reads.
    """

    def __init__(self, nbytes: int = 256 << 20, device: str | torch.device = "cuda", mode: str = "read") -> None:
        if mode not in ("read", "write"):
            raise ValueError(f"mode must be 'read' or 'write', got {mode!r}")
        self.mode = mode
        self.buf = torch.full((nbytes // 4,), 0x5A5A5A5A, dtype=torch.int32, device=device)
        self.sink = torch.empty((), dtype=torch.int32, device=device)

    def __call__(self) -> None:
        if self.mode == "write":
            self.buf.fill_(0x5A5A5A5A)
        else:
            torch.amax(self.buf, dim=0, out=self.sink)


def _summarize(samples_ms: Sequence[float]) -> dict[str, float]:
    us = sorted(1e3 * s for s in samples_ms)
    q = statistics.quantiles(us, n=10) if len(us) >= 10 else [us[0]] * 9
    return {
        "median_us": statistics.median(us),
        "p10_us": q[0],
        "p90_us": q[-1],
        "min_us": us[0],
        "reps": len(us),
    }


def time_cuda_graph(
    fns: Callable[[], Any] | Sequence[Callable[[], Any]],
    *,
    reps: int = 100,
    warmup: int = 3,
    flush_l2: bool = True,
    flush_mode: str = "read",
    settle_s: float = SETTLE_S,
) -> dict[str, float]:
    """Median time of one call, by CUDA-graph replay, in bursts from a settled GPU.

    Parameters
    ----------
    fns
        A callable, or several callables over rotated input sets (replayed
        round-robin so consecutive replays touch different memory). Each is
        warmed up eagerly, then captured into its own graph.
    reps
        Number of timed replays.
    flush_l2
        Touch a 256 MB buffer before each replay (outside the timed window).
    flush_mode
        ``"read"`` (default) or ``"write"`` (see :class:`L2Flusher`). Reading evicts the
        inputs as rotating input sets would; a write flush also bills the timed call for
        writing back ~60 MB of the flusher's dirty lines (measured on the H200: +7 us on
        the 100 us sparse decode, +0 on 3 ms prefill).
    settle_s
        Idle time before the first burst (module docstring); 0 times the GPU as the caller left it.

    Returns
    -------
    dict with median_us, p10_us, p90_us, min_us, reps and bursts.
    """
    replay = _graphs(fns, warmup)
    flusher = L2Flusher(mode=flush_mode) if flush_l2 else None
    return _timed(replay, reps, flusher, settle_s)


def _graphs(fns: Callable[[], Any] | Sequence[Callable[[], Any]], warmup: int) -> Callable[[int], Any]:
    """Warm up and capture each callable; returns ``replay(i)`` (round-robin over the graphs),
    after one untimed replay of each."""
    if callable(fns):
        fns = [fns]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graphs = []
    with torch.cuda.stream(stream):
        for fn in fns:
            for _ in range(warmup):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    for fn in fns:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        graphs.append(g)
    for g in graphs:
        g.replay()
    return lambda i: graphs[i % len(graphs)].replay()


def time_eager(fn: Callable[[], Any], *, reps: int = 20, warmup: int = 2, flush_l2: bool = True,
               flush_mode: str = "read", settle_s: float = SETTLE_S) -> dict[str, float]:  # fmt: skip
    """Median time of one eager call (for paths that cannot be graph-captured), in bursts from a settled GPU."""
    for _ in range(warmup):
        fn()
    flusher = L2Flusher(mode=flush_mode) if flush_l2 else None
    return _timed(lambda i: fn(), reps, flusher, settle_s)


def time_sustained(fn: Callable[[], Any], *, reps: int = 30, seconds: float = SUSTAIN_S,
                   flush_l2: bool = True) -> dict[str, Any]:  # fmt: skip
    """Median time of one replay after ``seconds`` of back-to-back replays (the power-capped regime).

    Returns the :func:`time_cuda_graph` fields plus, where NVML answers, the median SM clock and
    the share of power-capped samples over the whole period (``sm_mhz``, ``power_cap_pct``,
    ``state_samples``; :mod:`.gpu_state`).
    """
    replay = _graphs(fn, warmup=3)
    flusher = L2Flusher() if flush_l2 else None
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    with GpuStateSampler() as state:
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            for _ in range(8):
                _call(replay, 0, flusher)
            torch.cuda.synchronize()
        for i in range(reps):
            _call(replay, i, flusher, starts[i], ends[i])
        torch.cuda.synchronize()
    return {**_summarize([a.elapsed_time(b) for a, b in zip(starts, ends)]), "bursts": 1, **state.summary()}


def _call(call: Callable[[int], Any], i: int, flusher: L2Flusher | None, start: Any = None, end: Any = None) -> None:
    """One call after the flush; bracketed by the events when given (the flush stays outside)."""
    if flusher is not None:
        flusher()
    if start is not None:
        start.record()
    call(i)
    if end is not None:
        end.record()


def _timed(
    call: Callable[[int], Any], reps: int, flusher: L2Flusher | None, settle_s: float = SETTLE_S
) -> dict[str, Any]:
    """Calls ``call(0) .. call(reps - 1)``, each after the flush (outside the timed window) and
    bracketed by CUDA events, in bursts of at most ``BURST_MS`` of GPU time: before each burst
    the GPU idles (``settle_s`` before the first, ``REST_S`` between) and then runs ``WARM_MS``
    of untimed calls. Returns the summary of the timed calls and the number of bursts."""
    probe = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    _call(call, 0, flusher, *probe)
    torch.cuda.synchronize()
    per_call_ms = max(probe[0].elapsed_time(probe[1]), 1e-3)
    burst = max(1, int(BURST_MS / per_call_ms))
    warm = max(1, math.ceil(WARM_MS / per_call_ms))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    bursts = 0
    for first in range(0, reps, burst):
        torch.cuda.synchronize()
        time.sleep(settle_s if bursts == 0 else min(settle_s, REST_S))
        for _ in range(warm):
            _call(call, first, flusher)
        for i in range(first, min(first + burst, reps)):
            _call(call, i, flusher, starts[i], ends[i])
        bursts += 1
    torch.cuda.synchronize()
    return {**_summarize([s.elapsed_time(e) for s, e in zip(starts, ends)]), "bursts": bursts}


def native_fields(native: dict[str, Any]) -> dict[str, Any]:
    """The fields of a benchmark row that come from the native timing: median, p10 and p90 (us)."""
    return {"native_us": native["median_us"], "native_p10_us": native["p10_us"], "native_p90_us": native["p90_us"]}


def sustained_fields(sustained: dict[str, Any]) -> dict[str, Any]:
    """Row fields of a :func:`time_sustained` timing: ``sustained_us`` and, where NVML answered,
    ``sustained_sm_mhz`` and ``sustained_power_cap_pct``."""
    row = {"sustained_us": sustained["median_us"]}
    row.update({f"sustained_{k}": sustained[k] for k in STATE_KEYS[:2] if k in sustained})
    return row


def measure_ceilings(device: str | torch.device = "cuda") -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) and bf16 GEMM rates, measured now.

    ``copy_TBps`` is the faster of two device copies of 1 GiB: an SM kernel
    (``kernel_copy_TBps``, ~4.2-4.3 TB/s on the H200) and a graph-captured memcpy node
    (``memcpy_TBps``, served by the copy engine: ~2.7 TB/s there). Floors use the faster,
    so ratios to the floor are not flattered. Each is a burst timing from a settled GPU
    (module docstring), like the calls it judges; ``gemm8192_sustained_TFLOPs`` is the 8192^3
    GEMM after one second of itself (power-capped on the H200; ``gemm8192_sustained_sm_mhz``).
    """
    out: dict[str, float] = {}
    for size in (4096, 8192):
        a = torch.randn(size, size, dtype=torch.bfloat16, device=device)
        b = torch.randn(size, size, dtype=torch.bfloat16, device=device)
        t = time_cuda_graph(lambda a=a, b=b: a @ b, reps=20, warmup=5, flush_l2=False)
        out[f"gemm{size}_TFLOPs"] = 2 * size**3 / (t["median_us"] * 1e-6) / 1e12
    src = torch.randn(1 << 28, device=device)  # 1 GiB of float32: far beyond L2
    dst = torch.empty_like(src)
    nbytes = 2 * src.numel() * src.element_size()
    for key, fn in (("kernel_copy_TBps", lambda: torch.neg(src, out=dst)), ("memcpy_TBps", lambda: dst.copy_(src))):
        t = time_cuda_graph(fn, reps=30, warmup=5, flush_l2=False)
        out[key] = nbytes / (t["median_us"] * 1e-6) / 1e12
    out["copy_TBps"] = max(out["kernel_copy_TBps"], out["memcpy_TBps"])
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    t = time_sustained(lambda: a @ a, reps=20, flush_l2=False)
    out["gemm8192_sustained_TFLOPs"] = 2 * 8192**3 / (t["median_us"] * 1e-6) / 1e12
    if "sm_mhz" in t:
        out["gemm8192_sustained_sm_mhz"] = float(t["sm_mhz"])
    return out


def env_info() -> dict[str, Any]:
    """GPU, driver and software versions for benchmark JSON."""
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        from importlib.metadata import version

        info["tilelang"] = version("tilelang")
    except Exception:
        info["tilelang"] = None
    try:
        import tilelang

        info["tilelang"] = getattr(tilelang, "__version__", info["tilelang"])
    except Exception:
        pass
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            sms=props.multi_processor_count,
            capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
            driver=_driver_version(),
        )
    return info


def _driver_version() -> str | None:
    try:
        import subprocess

        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return res.stdout.strip() or None
    except Exception:
        return None
