"""The benchmark suite: every native entry point on the canonical shapes, plus scaling sweeps.

    python -m benchmarks [--quick] [--out DIR] [--no-flex] [--no-sweep]

In one process it measures the hardware ceilings, then each case: the native kernel,
the plain-PyTorch path and (core attention) FlexAttention, each native output checked
against the PyTorch path before it is timed. It writes ``DIR/bench.json`` (GPU,
driver, versions, exact shapes, every median), prints a table, and, when matplotlib
is installed, ``DIR/time_vs_context.png`` and ``DIR/roofline.png``. The README's
Performance section is regenerated from the JSON by ``python -m benchmarks.report``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import bench_mqa, bench_sparse, report, sweep
from benchmarks.checks import missing_cuda
from benchmarks.timing import env_info, measure_ceilings

__all__ = ["main", "run"]


def _annotate_mqa(row: dict[str, Any], copy_tbps: float) -> dict[str, Any]:
    op = {"decode": "mqa_decode", "indexer": "indexer_score"}.get(row["name"].split("_")[0], "mqa_prefill")
    row = {"op": op, **row}
    if op == "mqa_decode":
        row["bytes"] = row["floor_us"] * 1e-6 * copy_tbps * 1e12
        keys = row["bytes"] / (2 * bench_mqa.D + 4)  # each key: D bf16 values read, one FP32 logit written
        row["flops"] = 2 * bench_mqa.H * bench_mqa.D * keys
    else:
        row["flops"] = row["TFLOPs_visible"] * 1e6 * row["native_us"]
        row["bytes"] = row["write_floor_us"] * 1e-6 * copy_tbps * 1e12
    return row


def _annotate_sparse(row: dict[str, Any], copy_tbps: float) -> dict[str, Any]:
    op = "sparse_physical" if row["name"].endswith("_physical") else "sparse_attention"
    row = {"op": op, **row}  # bench_sparse checked the output against PyTorch before timing it
    row["bytes"] = row["floor_us"] * 1e-6 * copy_tbps * 1e12
    row["flops"] = 4 * row["rows"] * row["width"] * bench_sparse.HQ * bench_sparse.D
    if "flex_us" in row:
        row["speedup_vs_flex"] = row["flex_us"] / row["native_us"]
    return row


def run(quick: bool, flex: bool, do_sweep: bool, progress: Any = None) -> dict[str, Any]:
    ceilings = measure_ceilings()
    results: list[dict[str, Any]] = []
    stages = 2 + (len(list(sweep.points(quick))) if do_sweep else 0)
    task = progress.add_task("benchmarks", total=stages) if progress else None

    def step(label: str) -> None:
        if progress:
            progress.update(task, advance=1, description=label)

    errors: list[str] = []

    def guarded(label: str, fn: Any) -> Any:
        """A failing family or point is recorded and reported, never timed as a result."""
        try:
            return fn()
        except Exception as exc:  # every failure ends up in the JSON and the exit code
            errors.append(f"{label}: {type(exc).__name__}: {exc}")
            print(f"FAILED {errors[-1]}", file=sys.stderr)
            return None
        finally:
            step(label)

    bw = ceilings["copy_TBps"]
    results += guarded("MQA indexer cases", lambda: [
        _annotate_mqa(r, bw) for r in bench_mqa.run(quick=quick, ceil=ceilings)[1:]]) or []  # fmt: skip
    results += guarded("sparse attention cases", lambda: [
        _annotate_sparse(r, bw) for r in bench_sparse.run(quick=quick, flex=flex, sweep=False, ceil=ceilings)[1:]
    ]) or []  # fmt: skip
    if do_sweep:
        for op, axis, x in sweep.points(quick):
            row = guarded(f"sweep {op} {axis}={x}", lambda op=op, axis=axis, x=x: sweep.run_point(
                op, axis, x, bw, quick))  # fmt: skip
            if row is not None:
                results.append(row)
    return {
        "date": datetime.date.today().isoformat(),
        "command": "python -m benchmarks"
        + (" --quick" if quick else "")
        + ("" if flex else " --no-flex")
        + ("" if do_sweep else " --no-sweep"),
        "env": env_info(),
        "ceilings": ceilings,
        "results": results,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a one-minute subset")
    parser.add_argument("--out", default="bench-results", help="directory for bench.json and plots")
    parser.add_argument("--no-flex", action="store_true", help="skip FlexAttention (slow to compile)")
    parser.add_argument("--no-sweep", action="store_true", help="canonical cases only")
    args = parser.parse_args(argv)
    if (status := missing_cuda("the benchmark suite")) is not None:
        return status
    try:
        from rich.progress import Progress
    except ImportError:
        doc = run(args.quick, not args.no_flex, not args.no_sweep)
    else:
        with Progress() as progress:
            doc = run(args.quick, not args.no_flex, not args.no_sweep, progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=2))
    report.write_csv(doc, out / "bench.csv")
    print(report.render_table(doc))
    try:
        for path in report.plot(doc, out):
            print(f"wrote {path}")
    except ImportError:
        print("matplotlib is not installed: no plots (run python -m benchmarks.report on the JSON elsewhere)")
    print(f"wrote {out / 'bench.json'} and {out / 'bench.csv'}")
    for err in doc["errors"]:
        print(f"FAILED {err}")
    return 1 if doc["errors"] else 0
