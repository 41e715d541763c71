"""Timing and hardware-ceiling helpers shared by every benchmark.

Microsecond-scale calls are timed by CUDA-graph replay (eager launch gaps alone
can add tens of microseconds), each replay bracketed by CUDA events, with the L2
flushed (or the inputs rotated) before every replay outside the timed window. The
default flush reads a 256 MB buffer (clean lines only); ``flush_mode="write"`` is
the stricter variant that also leaves dirty lines to write back.
Ceilings (copy bandwidth, bf16 GEMM rate) are measured in the same process as
the kernels they judge. Where NVML is present, each timing also carries the median SM clock and
the share of samples held back by the power cap over its timed replays.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .gpu_state import STATE_KEYS, GpuStateSampler

__all__ = ["time_cuda_graph", "time_eager", "native_fields", "measure_ceilings", "env_info", "L2Flusher"]


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
) -> dict[str, float]:
    """Median time of one call, by CUDA-graph replay.

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

    Returns
    -------
    dict with median_us, p10_us, p90_us, min_us, reps, and where NVML answers the GPU state
    over the timed replays (:mod:`.gpu_state`): sm_mhz, power_cap_pct, state_samples.
    """
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
    flusher = L2Flusher(mode=flush_mode) if flush_l2 else None
    for g in graphs:  # one untimed replay each
        g.replay()
    return _timed(lambda i: graphs[i % len(graphs)].replay(), reps, flusher)


def time_eager(fn: Callable[[], Any], *, reps: int = 20, warmup: int = 2, flush_l2: bool = True,
               flush_mode: str = "read") -> dict[str, float]:  # fmt: skip
    """Median time of one eager call (for paths that cannot be graph-captured)."""
    for _ in range(warmup):
        fn()
    flusher = L2Flusher(mode=flush_mode) if flush_l2 else None
    return _timed(lambda i: fn(), reps, flusher)


def _timed(call: Callable[[int], Any], reps: int, flusher: L2Flusher | None) -> dict[str, Any]:
    """Calls ``call(0) .. call(reps - 1)``, each after the flush (outside the timed window) and
    bracketed by CUDA events; the summary of their times plus the GPU state sampled over them."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    with GpuStateSampler() as state:
        for i in range(reps):
            if flusher is not None:
                flusher()
            starts[i].record()
            call(i)
            ends[i].record()
        torch.cuda.synchronize()
    return {**_summarize([s.elapsed_time(e) for s, e in zip(starts, ends)]), **state.summary()}


def native_fields(native: dict[str, Any]) -> dict[str, Any]:
    """The fields of a benchmark row that come from the native timing: median, p10 and p90 (us)
    and, where it was sampled, the GPU state over the timed replays (``STATE_KEYS``)."""
    return {
        "native_us": native["median_us"],
        "native_p10_us": native["p10_us"],
        "native_p90_us": native["p90_us"],
        **{k: native[k] for k in STATE_KEYS if k in native},
    }


def measure_ceilings(device: str | torch.device = "cuda") -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) and bf16 GEMM rates, measured now.

    ``copy_TBps`` is the faster of two device copies of 1 GiB: an SM kernel
    (``kernel_copy_TBps``, ~4.2-4.3 TB/s on the H200) and a graph-captured memcpy node
    (``memcpy_TBps``, served by the copy engine: ~2.7 TB/s there). Floors use the faster,
    so ratios to the floor are not flattered. The GEMMs run first so that the copies
    see ramped-up clocks.
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
