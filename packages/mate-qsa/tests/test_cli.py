"""The ``mate`` command: check, show-config (text and JSON) and the demo, checked by their output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mate import demo
from mate.cli import _parser, main
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


def test_version_flag(capsys) -> None:
    import mate

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mate-qsa {mate.__version__}"


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


def _notes(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("note:")]


def test_demo_automatic_backend_on_cpu_says_why_in_one_line(capsys) -> None:
    code, out = _run(capsys, "demo", "--device", "cpu", "--seq-len", "64", "--topk", "4")
    assert code == 0, out
    assert "backend 'reference' (chosen automatically)" in out
    [note] = _notes(out)
    assert note.startswith("note: running backend='reference': cpu is not a native target") and len(note) < 200


def test_demo_explicit_tilelang_that_cannot_run_is_an_option_error(capsys) -> None:
    code, out = _run(capsys, "demo", "--device", "cpu", "--backend", "tilelang", "--seq-len", "64", "--topk", "4")
    assert code == 2
    [line] = out.splitlines()  # one line, and nothing ran
    assert line.startswith("mate demo: --backend tilelang: cpu is not a native target (supported: NVIDIA Hopper")
    assert "pass --backend reference, or omit --backend" in line and len(line) < 250


def test_demo_explicit_tilelang_without_tilelang_names_it(capsys, monkeypatch) -> None:
    """A supported device (faked) without TileLang: the error names TileLang, not the device."""
    monkeypatch.setattr(demo, "native_target_for", lambda device: NATIVE_TARGETS[0])
    monkeypatch.setattr(demo, "_tilelang_installed", lambda: False)
    monkeypatch.setattr(demo._env, "supported_device", lambda: "cpu")
    for argv in (["--device", "cpu"], []):  # given, and the default device for an explicit tilelang
        code, out = _run(capsys, "demo", "--backend", "tilelang", *argv)
        assert code == 2
        [line] = out.splitlines()
        assert line.startswith("mate demo: --backend tilelang: TileLang is not installed (")
        assert "tilelang==0.1.15" in line and "--backend reference" in line


def test_demo_automatic_native_falls_back_per_stage_in_one_note(capsys, monkeypatch) -> None:
    """An automatically chosen native backend whose kernels turn out unavailable: one short note, PASS."""
    monkeypatch.setattr(demo, "_native_problem", lambda device: None)  # "native" on the CPU: the calls raise
    code, out = _run(capsys, "demo", "--device", "cpu", "--seq-len", "64", "--topk", "4")
    assert code == 0, out
    assert "backend 'tilelang' (chosen automatically)" in out and "PASS" in out
    [note] = _notes(out)
    assert "native backend unavailable for indexer score and sparse attention" in note
    assert "ran backend='reference' there" in note and len(note) < 200


def test_demo_explicit_tilelang_never_falls_back(capsys, monkeypatch) -> None:
    """Past the up-front check (faked), a native call that cannot run is an error, not a fallback."""
    monkeypatch.setattr(demo, "_native_problem", lambda device: None)
    code, out = _run(capsys, "demo", "--device", "cpu", "--backend", "tilelang", "--seq-len", "64", "--topk", "4")
    assert code == 2
    [line] = out.splitlines()
    assert line.startswith("mate demo: --backend tilelang: backend='tilelang' does not support device cpu")


@pytest.mark.parametrize(
    ("device", "why"),
    [
        ("foo", "not a torch device"),
        ("", "not a torch device"),
        ("cuda:-1", "not a torch device"),
        ("meta", "meta tensors hold no data"),
        ("xla", "xla"),
    ],
)
def test_demo_rejects_bad_devices(capsys, device: str, why: str) -> None:
    code, out = _run(capsys, "demo", "--device", device)
    assert code == 2
    [line] = out.splitlines()
    assert line.startswith(f"mate demo: --device: got {device!r} (") and why in line
    assert "; expected cpu" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_demo_rejects_cuda_without_cuda(capsys) -> None:
    code, out = _run(capsys, "demo", "--device", "cuda")
    assert code == 2
    [line] = out.splitlines()
    assert line.startswith("mate demo: --device: got 'cuda' (torch.cuda.is_available() is False")
    assert line.endswith("; expected cpu")


def test_demo_device_index_is_checked_against_the_device_count(monkeypatch) -> None:
    monkeypatch.setattr(demo, "_device_count", lambda device_type: 2 if device_type == "cuda" else 0)
    for ok in ("cpu", "cpu:0", "cuda", "cuda:0", "cuda:1"):
        assert demo._device_error(ok) is None, ok
    assert demo._device_error("cuda:2") == (
        "--device: got 'cuda:2' (this machine has 2 cuda device(s)); expected cpu, cuda or cuda:0..cuda:1"
    )


def test_demo_notes_topk_beyond_the_sequence(capsys) -> None:
    code, out = _run(capsys, "demo", "--device", "cpu", "--backend", "reference", "--seq-len", "64", "--topk", "20")
    assert code == 0, out
    assert _notes(out) == ["note: --topk 20 > 16 blocks of a 64-token sequence: the extra slots are -1 padding"]
    assert "top-20 blocks -> 83 token slots" in out and "PASS" in out


def test_demo_topk_limit_is_plain(capsys) -> None:
    code, out = _run(capsys, "demo", "--device", "cpu", "--topk", "513")
    assert code == 2
    assert out.strip() == "mate demo: --topk: got 513; expected 1..512: at most 512 blocks (2051 tokens)"


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # unwrapped


def test_demo_help_gives_the_size_defaults(capsys) -> None:
    text = _help(capsys, "demo")
    assert f"default {demo.NATIVE_SEQ_LEN} for a native run, {demo.REFERENCE_SEQ_LEN} for the reference" in text
    assert f"default {demo.NATIVE_TOPK} for a native run, {demo.REFERENCE_TOPK} for the reference" in text
    assert f"1..{demo.MAX_TOPK}" in text and "--seed" in text


def test_readme_usage_lines_list_every_option() -> None:
    readme = Path(__file__).resolve().parents[3] / "README.md"
    if not readme.exists():
        pytest.skip("an installed copy of the tests without the repository")
    text = readme.read_text()
    for command in ("demo", "precompile"):
        [usage] = [line for line in text.splitlines() if line.startswith(f"mate {command} [")]
        sub = next(a for a in _parser()._actions if a.dest == "command").choices[command]
        options = [o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
        assert all(o in usage for o in options), (usage, options)
    for default in (demo.NATIVE_SEQ_LEN, demo.REFERENCE_SEQ_LEN, demo.NATIVE_TOPK, demo.REFERENCE_TOPK):
        assert str(default) in text[text.index("mate demo [") : text.index("## API")]


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


def test_precompile_takes_dtype_aliases(capsys) -> None:
    code, full = _run(capsys, "precompile", "--list", "--dtype", "bfloat16", "--dtype", "float16")
    assert code == 0
    code, short = _run(capsys, "precompile", "--list", "--dtype", "bf16", "--dtype", "FP16", "--dtype", "bfloat16")
    assert code == 0 and short == full  # aliases map to the full names; a dtype given twice counts once
    text = _help(capsys, "precompile")
    assert "--dtype {bfloat16,float16}" in text and "aliases bf16, fp16" in text


def test_check_and_show_config_word_a_cpu_torch_alike(capsys) -> None:
    _, check = _run(capsys, "check")
    _, show = _run(capsys, "show-config")
    for out in (check, show):
        [row] = [line for line in out.splitlines() if "torch cuda build" in line]
        assert (torch.version.cuda or "none (CPU build)") in row and "not installed" not in row


def test_precompile_rejects_bad_options(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["precompile", "--dtype", "float32"])
    assert info.value.code == 2 and "invalid choice: 'float32'" in capsys.readouterr().err
    code, out = _run(capsys, "precompile", "--list", "--group", "20")
    assert code == 2 and "--group" in out and "1..16" in out
