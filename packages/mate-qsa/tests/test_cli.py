"""The ``mate`` command: check, show-config (text and JSON) and the demo, checked by their output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from mate import demo
from mate.cli import main
from mate_core.arch import NATIVE_TARGETS


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_check_reports_versions_devices_and_native_support(capsys) -> None:
    code, out = _run(capsys, "check")
    assert code == 0
    for expected in ("python", torch.__version__, "tilelang", "Devices", "cpu", "no native capability"):
        assert expected in out
    assert "native backend" in out and "reference backend (backend='reference'): available on every device" in out
    if not torch.cuda.is_available():
        assert "no supported device here" in out


def test_show_config_json(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    code, out = _run(capsys, "show-config", "--json")
    assert code == 0
    config = json.loads(out)
    assert config["versions"]["torch"] == torch.__version__
    assert config["versions"]["mate-kernels-musa"] == "0.1.0"
    targets = {t["arch"]: t for t in config["native_targets"]}
    assert set(targets) == {t.arch for t in NATIVE_TARGETS} == {"sm_90a", "mp_31"}
    assert targets["sm_90a"]["status"] == "verified" and targets["sm_90a"]["compile_target"]["kind"] == "cuda"
    assert targets["mp_31"]["status"] == "by design, untested here"
    assert config["tilelang"]["cache_dir"] == str(tmp_path)
    assert config["tilelang"]["cache_dir_source"] == "TILELANG_CACHE_DIR"
    assert {"TL_TEMPLATE_PATH", "TL_CUTLASS_PATH"} <= set(config["tilelang"]["env"])
    assert config["devices"][0]["device"] == "cpu" and config["devices"][0]["native_target"] is None


def test_show_config_text(capsys, monkeypatch) -> None:
    monkeypatch.delenv("TILELANG_CACHE_DIR", raising=False)
    code, out = _run(capsys, "show-config")
    assert code == 0
    for expected in ("Package versions", "Native targets", "sm_90a", "mp_31", "TileLang-MUSA", "cache dir"):
        assert expected in out
    assert os.path.join(".tilelang", "cache") in out and "(default)" in out


def test_demo_on_cpu_runs_every_stage_and_agrees(capsys) -> None:
    code, out = _run(capsys, "demo", "--device", "cpu", "--seq-len", "128", "--topk", "8")
    assert code == 0, out
    for stage in ("indexer score", "top-k blocks", "expand blocks", "sparse attention"):
        assert stage in out
    assert "scores [2, 128, 32] float32" in out and "tokens [2, 128, 35] int32" in out
    assert "lse [2, 128, 24] float32" in out
    assert "first ms" in out and "warm ms" in out
    assert out.count("dense float64 PyTorch") == 3 and "PASS" in out


def test_demo_falls_back_when_the_native_backend_cannot_run(capsys) -> None:
    code, out = _run(capsys, "demo", "--device", "cpu", "--backend", "tilelang", "--seq-len", "64", "--topk", "4")
    assert code == 0, out
    assert "native backend unavailable" in out and "ran backend='reference' instead" in out
    assert "PASS" in out


def test_demo_reports_a_disagreement(capsys, monkeypatch) -> None:
    real = demo._dense_attention

    def perturbed(x, tokens):
        out, lse = real(x, tokens)
        return out * 1.1, lse

    monkeypatch.setattr(demo, "_dense_attention", perturbed)
    code, out = _run(capsys, "demo", "--device", "cpu", "--seq-len", "64", "--topk", "4")
    assert code == 1 and "FAIL" in out and "NO" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--seq-len", "100"], "--seq-len"), (["--topk", "0"], "--topk"), (["--requests", "-1"], "--requests")],
)
def test_demo_rejects_bad_options(capsys, argv: list[str], message: str) -> None:
    code, out = _run(capsys, "demo", "--device", "cpu", *argv)
    assert code == 2 and message in out


def test_compare_flags_inf_pattern_and_error() -> None:
    want = torch.tensor([1.0, float("-inf"), 2.0])
    assert demo._compare("x", "y", want.clone(), want, 1e-4).ok
    assert not demo._compare("x", "y", torch.tensor([1.0, 0.5, 2.0]), want, 1e-4).inf_pattern_equal
    worse = demo._compare("x", "y", torch.tensor([1.1, float("-inf"), 2.0]), want, 1e-4)
    assert not worse.ok and worse.max_abs == pytest.approx(0.1, rel=1e-5)


def test_python_dash_m_mate() -> None:
    done = subprocess.run([sys.executable, "-m", "mate", "check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "reference backend" in done.stdout


@pytest.mark.skipif(shutil.which("mate") is None, reason="the mate console script is not installed")
def test_console_script() -> None:
    done = subprocess.run(["mate", "show-config", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["versions"]["mate-qsa"] == "0.1.0"


def test_missing_command_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_precompile_lists_the_launchers_kernels(capsys) -> None:
    code, out = _run(capsys, "precompile", "--list", "--dtype", "bfloat16", "--family", "mqa_decode")
    assert code == 0
    assert "4 specializations" in out
    for page_size in (8, 16, 32, 64):
        assert f"decode_kernel(bfloat16, {page_size}, True, 128)" in out
    code, out = _run(capsys, "precompile", "--list", "--group", "3", "--family", "sparse_paged", "--dtype", "float16")
    assert code == 0 and "sparse_paged_kernel(3, float16" in out and "(12," not in out


def test_precompile_compiles_and_reports(capsys, monkeypatch) -> None:
    """The command passes its selection to ``precompile`` and reports each result; a failure exits 1."""
    from mate_kernels_musa import precompile as pc

    calls = []

    def fake(specs, profile, jobs, on_result):
        calls.append((len(specs), profile, jobs))
        results = [pc.Result(s, 1.5, None if i else "ValueError: bad") for i, s in enumerate(specs)]
        for r in results:
            on_result(r)
        return results

    monkeypatch.setattr(pc, "precompile", fake)
    code, out = _run(capsys, "precompile", "--target", "cuda-sm90a", "--dtype", "float16", "--family", "sparse_merge",
                     "--jobs", "3")  # fmt: skip
    assert calls == [(2, "cuda-sm90a", 3)]
    assert code == 1 and "FAILED: ValueError: bad" in out and "ok" in out
    assert "compiled 1 of 2 specializations for cuda-sm90a" in out and "1 failed" in out


def test_precompile_without_tilelang(capsys, monkeypatch) -> None:
    from mate import _env

    real = _env.tilelang_config
    monkeypatch.setattr(_env, "tilelang_config", lambda: {**real(), "installed": False})
    code, out = _run(capsys, "precompile", "--family", "mqa_decode")
    assert code == 1 and "TileLang is not installed" in out and "nothing compiled" in out


def test_precompile_rejects_bad_options(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["precompile", "--dtype", "float32"])
    assert info.value.code == 2 and "invalid choice: 'float32'" in capsys.readouterr().err
    code, out = _run(capsys, "precompile", "--list", "--group", "20")
    assert code == 2 and "--group" in out and "1..16" in out
