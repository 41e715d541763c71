"""Render benchmark JSON: a table, plots, and the README "Performance" section.

Works anywhere the JSON is (plots need matplotlib; the table uses rich when present):

    python -m benchmarks.report results/bench.json [--plots DIR] [--readme README.md] [--csv FILE]

Row schema (written by ``benchmarks.suite``): one ``{"name": "ceilings", ...}`` row with
``copy_TBps``, ``gemm4096_TFLOPs``, ``gemm8192_TFLOPs`` and the environment; case rows with
``op``, ``name``, ``shape``, ``native_us``, ``floor_us``, ``ratio_to_floor``, optional
``torch_us``/``flex_us`` and speedups, ``bytes`` and ``flops``, and on the MQA prefill rows
``sustained_us`` (the native call after one second of itself) with, where NVML answered,
``sustained_sm_mhz`` and ``sustained_power_cap_pct``; sweep rows additionally with
``sweep`` (the swept axis) and ``x`` (its value).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from pathlib import Path
from typing import Any

__all__ = ["load", "table_rows", "render_table", "write_csv", "plot", "readme_section", "update_readme"]

BEGIN, END = "<!-- performance:begin -->", "<!-- performance:end -->"
COLUMNS = ("op", "name", "native_us", "floor_us", "ratio_to_floor", "eff_TBps", "TFLOPs", "torch_us", "speedup_vs_torch",
           "flex_us", "speedup_vs_flex", "sustained_us", "sustained_sm_mhz")  # fmt: skip
# Every row of the JSON, cases and sweep points, with unrounded values (empty where a row lacks one).
CSV_COLUMNS = ("op", "name", "sweep", "x", "shape", "native_us", "floor_us", "ratio_to_floor", "eff_TBps", "TFLOPs",
               "torch_us", "speedup_vs_torch", "flex_us", "speedup_vs_flex", "bytes", "flops", "sustained_us",
               "sustained_sm_mhz", "sustained_power_cap_pct")  # fmt: skip


def load(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return "-" if v is None else str(v)


def _derived(r: dict[str, Any]) -> dict[str, Any]:
    """Effective floor bytes and FLOPs per second of the native time."""
    seconds = r["native_us"] * 1e-6
    out = dict(r)
    if r.get("bytes"):
        out["eff_TBps"] = r["bytes"] / seconds / 1e12
    if r.get("flops"):
        out["TFLOPs"] = r["flops"] / seconds / 1e12
    return out


def table_rows(doc: dict[str, Any], sweep: bool = False) -> list[list[str]]:
    rows = [_derived(r) for r in doc["results"] if ("sweep" in r) == sweep]
    return [[_fmt(r.get(c)) for c in COLUMNS] for r in rows]


def render_table(doc: dict[str, Any]) -> str:
    """Readable table of the canonical cases (rich when installed, plain text otherwise)."""
    c = doc["ceilings"]
    head = (f"{doc['env'].get('gpu')} | torch {doc['env'].get('torch')} | tilelang {doc['env'].get('tilelang')} | "
            f"copy {c['copy_TBps']:.2f} TB/s | bf16 GEMM {c['gemm8192_TFLOPs']:.0f} TFLOP/s (8192^3)")  # fmt: skip
    rows = table_rows(doc)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
        lines = [head, "  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        return "\n".join(lines)
    table = Table(title=head)
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("op", "name") else "right")
    for r in rows:
        table.add_row(*r)
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(table)
    return console.export_text()


def write_csv(doc: dict[str, Any], path: str | Path) -> Path:
    """Every case and sweep row of ``doc`` as CSV (``CSV_COLUMNS``; shapes JSON-encoded)."""
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for r in doc["results"]:
            row = _derived(r)
            if "shape" in row and not isinstance(row["shape"], str):
                row["shape"] = json.dumps(row["shape"])
            writer.writerow({c: row.get(c, "") for c in CSV_COLUMNS})
    return path


def plot(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """time_vs_context.png (per backend) and roofline.png (each kernel against the ceilings)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    sweeps = [r for r in doc["results"] if r.get("sweep") == "context"]
    if sweeps:
        ops = sorted({r["op"] for r in sweeps})
        fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4.2), squeeze=False)
        for ax, op in zip(axes[0], ops):
            pts = sorted((r for r in sweeps if r["op"] == op), key=lambda r: r["x"])
            xs = [r["x"] / 1024 for r in pts]
            for key, label in (("native_us", "native (TileLang)"), ("torch_us", "plain PyTorch"),
                               ("flex_us", "FlexAttention"), ("floor_us", "memory floor")):  # fmt: skip
                ys = [r.get(key) for r in pts]
                if any(y is not None for y in ys):
                    ax.plot(xs, ys, marker="o", linestyle="--" if key == "floor_us" else "-", label=label)
            ax.set(xscale="log", yscale="log", xlabel="context length (K tokens)", ylabel="median time (us)", title=op)
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        fig.tight_layout()
        written.append(out_dir / "time_vs_context.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    cases = [r for r in doc["results"] if "sweep" not in r and r.get("bytes") and r.get("flops")]
    if cases:
        c = doc["ceilings"]
        bw, peak = c["copy_TBps"] * 1e12, c["gemm8192_TFLOPs"] * 1e12
        fig, ax = plt.subplots(figsize=(7, 5))
        ai = [r["flops"] / r["bytes"] for r in cases]
        lo, hi = min([*ai, 1.0]) / 4, max([*ai, peak / bw]) * 4
        xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
        ax.plot(xs, [min(peak, x * bw) / 1e12 for x in xs], color="black", label="ceiling (measured)")
        markers = dict(zip(sorted({r["op"] for r in cases}), "osD^vP*X"))
        for r, x in zip(cases, ai):
            ax.scatter([x], [r["flops"] / (r["native_us"] * 1e-6) / 1e12], marker=markers[r["op"]],
                       label=f"{r['op']}: {r['name']}")  # fmt: skip
        # Bytes are each case's floor bytes (sparse attention: every row gathers its own K/V,
        # no reuse), so a point above the line means rows reused K/V through the L2.
        ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per floor byte)", ylabel="TFLOP/s",
               title=f"Roofline, {doc['env'].get('gpu')}")  # fmt: skip
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(out_dir / "roofline.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    return written


def readme_section(doc: dict[str, Any], plot_paths: list[str]) -> str:
    """Markdown for the README's Performance section, generated from the JSON."""
    env, c = doc["env"], doc["ceilings"]
    lines = [
        BEGIN,
        f"Measured {doc['date']} on {env.get('gpu')} (driver {env.get('driver')}, CUDA {env.get('cuda')}), "
        f"torch {env.get('torch')}, TileLang {env.get('tilelang')}, by `{doc['command']}`. Ceilings measured "
        f"in the same run: copy {c['copy_TBps']:.2f} TB/s (read + write), bf16 GEMM "
        f"{c['gemm8192_TFLOPs']:.0f} TFLOP/s (8192^3{_sustained_gemm(c)}). Medians of CUDA-graph replays, L2 "
        "flushed before each (a 256 MB read), timed in bursts of at most 40 ms from a settled GPU, the regime "
        "of the ceilings (`benchmarks/timing.py`).",
        "",
        "| op | case | native us | floor us | x floor | eff. TB/s | TFLOP/s | PyTorch us | speedup | FlexAttention us "
        "| speedup | sustained us | sustained SM MHz |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in table_rows(doc):
        lines.append("| " + " | ".join(r) + " |")
    lines += [
        "",
        "Floors (QSA-DESIGN.md section 4, at the copy rate measured above): MQA decode reads every "
        "compressed key once and writes the logits; MQA prefill is max(math at the GEMM rate, FP32 "
        "output write); sparse attention moves the selected K/V of every row with no reuse, so "
        "prefill rows that share blocks through the L2 can beat it (x floor < 1). eff. TB/s is the "
        "floor's bytes over the native time. `_physical` rows run the same selections through "
        "`selected_kv_indices` (no gate). Sustained (MQA prefill rows): the native call after one "
        "second of itself back to back, when the board's 700 W limit lowers the SM clock (median "
        "clock from NVML over that second).",
        "",
    ]
    lines += [f"![{Path(p).stem}]({p})" for p in plot_paths]
    lines.append(END)
    return "\n".join(lines)


def _sustained_gemm(c: dict[str, Any]) -> str:
    if "gemm8192_sustained_TFLOPs" not in c:
        return ""
    mhz = c.get("gemm8192_sustained_sm_mhz")
    return f"; {c['gemm8192_sustained_TFLOPs']:.0f} after one second of itself" + (f", at {mhz:.0f} MHz" if mhz else "")


def update_readme(readme: str | Path, section: str) -> None:
    path = Path(readme)
    text = path.read_text()
    if BEGIN not in text:
        raise SystemExit(f"{readme}: no {BEGIN} marker")
    path.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--plots", default=None, help="directory for PNG plots")
    parser.add_argument("--readme", default=None, help="README to update between the performance markers")
    parser.add_argument("--csv", default=None, help="write every case and sweep row to this CSV file")
    args = parser.parse_args(argv)
    doc = load(args.json)
    print(render_table(doc))
    if args.csv:
        print(f"wrote {write_csv(doc, args.csv)}")
    paths = plot(doc, args.plots) if args.plots else []
    for p in paths:
        print(f"wrote {p}")
    if args.readme:
        rel = [str(Path(p).relative_to(Path(args.readme).resolve().parent)) if Path(p).is_absolute() else str(p)
               for p in paths]  # fmt: skip
        update_readme(args.readme, readme_section(doc, rel))
        print(f"updated {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
