"""The report renders a suite JSON into a table, plots and a README section (CPU only)."""

from __future__ import annotations

import json

import pytest

from benchmarks import report, sweep


def _doc() -> dict:
    case = {
        "op": "sparse_attention",
        "name": "decode_64x1",
        "native_us": 102.5,
        "floor_us": 63.3,
        "ratio_to_floor": 1.62,
        "torch_us": 1157.0,
        "speedup_vs_torch": 11.3,
        "bytes": 2.7e8,
        "flops": 3.2e9,
    }
    pts = [{"op": "sparse_decode", "sweep": "context", "x": x, "name": f"p{x}", "native_us": x / 1000,
            "floor_us": x / 2000, "torch_us": x / 100, "ratio_to_floor": 2.0} for x in (8192, 32768, 131072)]  # fmt: skip
    return {
        "date": "2026-11-29",
        "command": "python -m benchmarks",
        "env": {"gpu": "NVIDIA H200", "torch": "2.11", "tilelang": "0.1.15", "driver": "580", "cuda": "13.0"},
        "ceilings": {"copy_TBps": 4.27, "gemm4096_TFLOPs": 745.0, "gemm8192_TFLOPs": 681.0},
        "results": [case, *pts],
    }


def test_table_lists_cases_not_sweep_points() -> None:
    text = report.render_table(_doc())
    assert "decode_64x1" in text and "102" in text and "NVIDIA H200" in text
    assert "p8192" not in text


def test_csv_holds_every_row_unrounded(tmp_path) -> None:
    import csv

    path = report.write_csv(_doc(), tmp_path / "bench.csv")
    rows = list(csv.DictReader(path.open()))
    assert [r["name"] for r in rows] == ["decode_64x1", "p8192", "p32768", "p131072"]
    case = rows[0]
    assert float(case["native_us"]) == 102.5 and float(case["speedup_vs_torch"]) == 11.3
    assert abs(float(case["eff_TBps"]) - 2.7e8 / 102.5e-6 / 1e12) < 1e-12
    assert case["sweep"] == "" and case["flex_us"] == ""
    assert rows[1]["sweep"] == "context" and int(rows[1]["x"]) == 8192


def test_report_cli_writes_csv(tmp_path, capsys) -> None:
    json_path = tmp_path / "bench.json"
    json_path.write_text(json.dumps(_doc()))
    assert report.main([str(json_path), "--csv", str(tmp_path / "out.csv")]) == 0
    assert (tmp_path / "out.csv").read_text().startswith("op,name,sweep,x,shape,native_us")
    assert "wrote" in capsys.readouterr().out


def test_plots_written(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    paths = report.plot(_doc(), tmp_path)
    assert {p.name for p in paths} == {"time_vs_context.png", "roofline.png"}
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_readme_section_replaced_between_markers(tmp_path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Performance\n{report.BEGIN}\nold\n{report.END}\n\ntail\n")
    json_path = tmp_path / "bench.json"
    json_path.write_text(json.dumps(_doc()))
    report.update_readme(readme, report.readme_section(report.load(json_path), ["perf/roofline.png"]))
    text = readme.read_text()
    assert "old" not in text and text.endswith("tail\n")
    assert "| sparse_attention | decode_64x1 | 102 | 63.3 | 1.62 | 2.63 | 31.2 | 1157 | 11.3 |" in text
    assert "![roofline](perf/roofline.png)" in text and "4.27 TB/s" in text


def test_sweep_points_cover_each_axis() -> None:
    quick, full = list(sweep.points(True)), list(sweep.points(False))
    assert {a for _, a, _ in full} == {"context", "batch", "width"}
    assert len(quick) < len(full)
    assert ("sparse_decode", "width", 2051) in full and ("mqa_decode", "context", 131072) in full


def test_decode_inputs_match_the_torch_path_shapes() -> None:
    from benchmarks import bench_mqa

    q, k_cache, table, lens = bench_mqa.decode_inputs(2, 256, 16, seed=0, device="cpu")
    assert q.shape == (2, 1, 4, 128) and k_cache.shape == (32, 16, 1, 128)
    assert sorted(table.flatten().tolist()) == list(range(32)) and lens.tolist() == [256, 256]
    scores = bench_mqa._decode_torch(q, k_cache, table, lens)
    assert scores.shape == (2, 256) and bool(scores.isfinite().all())


def test_mixed_case_inputs() -> None:
    """``prefill_mixed``: one 2048-row chunk then 512 one-row decode requests, valid selections and pool pages."""
    import torch

    from benchmarks import bench_sparse as b

    per_req, sel, table, pages = b._mixed_inputs(torch.Generator().manual_seed(0))
    assert per_req == [b.MIXED_CHUNK] + [1] * b.MIXED_DECODE and "prefill_mixed" in b.CASES
    assert sel.shape == (b.MIXED_CHUNK + b.MIXED_DECODE, b.WIDTH) and sel.dtype == torch.int32
    pos = torch.cat([b.CTX - b.MIXED_CHUNK + torch.arange(b.MIXED_CHUNK), torch.full((b.MIXED_DECODE,), b.CTX - 1)])
    assert bool((sel <= pos[:, None]).all()) and int((sel >= 0).sum(1).min()) >= 4 * b.BLOCKS
    assert table.shape == (1 + b.MIXED_DECODE, b.CTX // b.PAGE) and pages == b.MIXED_POOL
    assert 0 <= int(table.min()) and int(table.max()) < pages

    # The chunk's neighbouring rows share most of their blocks; decode rows do not.
    def shared(a, c):
        return len(set(a.tolist()) & set(c.tolist())) / b.WIDTH

    assert shared(sel[0], sel[1]) > 0.8 and shared(sel[-1], sel[-2]) < 0.2
