"""The ``mate`` console command: ``check``, ``show-config``, ``precompile`` and ``demo``."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence

from mate_kernels_musa import precompile as pc  # no TileLang import until something compiles
from mate_kernels_musa.target import PROFILES

from . import __version__, _env
from ._table import Printer

__all__ = ["main"]

# Shown where a version is absent; torch's CUDA build is absent on a CPU build of torch.
NO_CUDA_BUILD = "none (CPU build)"
NOT_INSTALLED = "not installed"
# --dtype aliases of precompile: the README's and PyTorch's short names.
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16"}


def _version_text(name: str, value: str | None) -> str:
    if value:
        return value
    return NO_CUDA_BUILD if name == "torch cuda build" else NOT_INSTALLED


def _check(args: argparse.Namespace) -> int:
    out = Printer()
    versions = _env.package_versions()
    tilelang = versions["tilelang"]
    out.mapping(
        "MATE-QSA environment",
        {
            "python": versions["python"],
            "torch": versions["torch"],
            "torch cuda build": _version_text("torch cuda build", versions["torch cuda build"]),
            "tilelang": _version_text("tilelang", tilelang),
            "mate-qsa": versions["mate-qsa"],
        },
    )
    devices = _env.devices()
    out.table(
        "Devices",
        ("device", "description", "native target"),
        [(d["device"], d["description"], d["native_target"] or f"no ({d['reason']})") for d in devices],
    )
    native = [d["device"] for d in devices if d["native_target"]]
    if native and tilelang:
        out.line(f"native backend (backend='tilelang'): supported on {', '.join(native)}")
    elif native:
        out.line(f"native backend: {', '.join(native)} is supported but TileLang is not installed")
    else:
        out.line("native backend: no supported device here (supported: NVIDIA sm_90, MUSA MP31)")
    out.line("reference backend (backend='reference'): available on every device")
    return 0


def _show_config(args: argparse.Namespace) -> int:
    config = {
        "versions": _env.package_versions(),
        "native_targets": _env.native_targets(),
        "devices": _env.devices(),
        "tilelang": _env.tilelang_config(),
    }
    if args.json:
        print(json.dumps(config, indent=2))
        return 0
    out = Printer()
    out.mapping("Package versions", {k: _version_text(k, v) for k, v in config["versions"].items()})
    out.table(
        "Native targets",
        ("target", "device", "capability", "arch", "toolchain", "status", "profile"),
        [
            (t["name"], t["device_type"], t["capability"], t["arch"], t["toolchain"], t["status"], t["profile"])
            for t in config["native_targets"]
        ],
    )
    tl = config["tilelang"]
    out.mapping(
        "TileLang",
        {
            "installed": tl["installed"],
            "cache dir": f"{tl['cache_dir']} ({tl['cache_dir_source']})",
            **{f"${name}": value or "unset" for name, value in tl["env"].items()},
            "nvcc": tl["nvcc"] or "not on PATH",
        },
    )
    return 0


def _default_profile() -> str:
    """The compile profile of the first supported device here, else the verified sm_90a one."""
    from mate_core.arch import native_target_for
    from mate_kernels_musa.target import profile_for

    device = _env.supported_device()
    return profile_for(native_target_for(device)).name if device else "cuda-sm90a"


def _dtype(value: str) -> str:
    """``--dtype``: a full torch dtype name, or its alias bf16 / fp16."""
    return DTYPE_ALIASES.get(value.lower(), value)


def _precompile(args: argparse.Namespace) -> int:
    out = Printer()
    bad_group = [g for g in args.group or () if not 1 <= g <= 16]
    if bad_group:
        out.line(f"error: --group takes Q heads per KV head in 1..16, got {bad_group[0]}")
        return 2
    if args.jobs < 1:
        out.line(f"error: --jobs takes a positive number of worker processes, got {args.jobs}")
        return 2
    dtypes = tuple(dict.fromkeys(args.dtype or pc.DTYPES))  # bf16 and bfloat16 are one dtype
    specs = pc.launcher_specializations(dtypes, args.group or (12,), args.family or pc.FAMILIES)
    profile = args.target or _default_profile()
    if args.list:
        out.table(f"{len(specs)} specializations", ("family", "kernel"), [(s.family, s.label) for s in specs])
        return 0
    config = _env.tilelang_config()
    if not config["installed"]:
        out.line("error: TileLang is not installed (pip install 'tilelang==0.1.15'); nothing compiled")
        return 1
    out.line(f"compiling {len(specs)} specializations for {profile} with {args.jobs} jobs into {config['cache_dir']}")
    start = time.perf_counter()

    def report(result: pc.Result) -> None:
        status = "ok" if result.error is None else f"FAILED: {result.error}"
        out.line(f"{result.seconds:7.1f}s {result.spec.label} {status}")

    results = pc.precompile(specs, profile, args.jobs, report)
    failed = [r for r in results if r.error is not None]
    out.line(
        f"compiled {len(results) - len(failed)} of {len(results)} specializations for {profile} "
        f"in {time.perf_counter() - start:.0f} s" + (f"; {len(failed)} failed" if failed else "")
    )
    return 1 if failed else 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo  # imports the compute stack only when needed

    return run_demo(
        device=args.device,
        backend=args.backend,
        requests=args.requests,
        seq_len=args.seq_len,
        topk=args.topk,
        seed=args.seed,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mate", description="MATE-QSA: Qwen Sparse Attention kernels for PyTorch.")
    parser.add_argument("--version", action="version", version=f"mate-qsa {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="Python, torch, TileLang and devices; which devices run native kernels")
    check.set_defaults(func=_check)

    show = sub.add_parser("show-config", help="package versions, native target table, TileLang cache and env vars")
    show.add_argument("--json", action="store_true", help="print machine-readable JSON")
    show.set_defaults(func=_show_config)

    pre = sub.add_parser(
        "precompile",
        help="compile the native kernels ahead of time into TileLang's cache (no GPU needed)",
        description="Compiles the kernel specializations the native launchers use (MQA score and decode, "
        "sparse attention with its merge and union-path kernels) into TileLang's on-disk cache, in "
        "parallel, so that the first native calls of a process do not wait for the compiler. Rare "
        "variants still compile on first use.",
    )
    pre.add_argument("--target", choices=tuple(PROFILES), help="default: this machine's supported device, else "
                     "cuda-sm90a")  # fmt: skip
    pre.add_argument("--dtype", action="append", type=_dtype, choices=pc.DTYPES, help=f"{' or '.join(pc.DTYPES)} "
                     "(aliases bf16, fp16), repeatable (default: both)")  # fmt: skip
    pre.add_argument("--group", action="append", type=int, help="Q heads per KV head of the sparse-attention calls, "
                     "repeatable (default: 12, QSA's 24 / 2)")  # fmt: skip
    pre.add_argument("--family", action="append", choices=pc.FAMILIES, help="kernel family, repeatable (default: all)")
    pre.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="worker processes (default: "
                     "min(8, CPUs))")  # fmt: skip
    pre.add_argument("--list", action="store_true", help="list the specializations and exit")
    pre.set_defaults(func=_precompile)

    demo = sub.add_parser(
        "demo",
        help="one QSA step on synthetic data: indexer -> top-k -> expansion -> sparse attention",
        description="Runs one QSA prefill step on synthetic data and checks it: natively on a supported GPU "
        "(compared with the FP32 reference), else the reference on the CPU (compared with a dense "
        "PyTorch computation).",
    )
    demo.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: the first supported GPU when "
                      "TileLang is installed, else cpu)")  # fmt: skip
    demo.add_argument(
        "--backend",
        choices=("tilelang", "reference"),
        help="default: tilelang where the native kernels can run, else reference; an explicit tilelang that "
        "cannot run here is an error",
    )
    demo.add_argument("--requests", type=int, default=None, help="number of requests (default 2)")
    demo.add_argument("--seq-len", type=int, default=None, help="tokens per request, a multiple of 64 (default "
                      "2048 for a native run, 256 for the reference)")  # fmt: skip
    demo.add_argument("--topk", type=int, default=None, help="selected 4-token blocks per query, 1..512 (default "
                      "64 for a native run, 16 for the reference)")  # fmt: skip
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mate`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    return int(args.func(args))
