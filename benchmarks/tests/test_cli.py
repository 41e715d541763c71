"""The benchmark commands on a machine without a CUDA GPU: one line and exit status 2, not a
traceback from the first CUDA tensor; unknown case names are refused before anything runs."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_mqa, bench_sparse, bench_sparse_union, suite

MAINS = {"the benchmark suite": suite.main, "bench_mqa": bench_mqa.main, "bench_sparse": bench_sparse.main,
         "bench_sparse_union": bench_sparse_union.main}  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a CUDA GPU")
@pytest.mark.parametrize("prog", sorted(MAINS))
def test_without_cuda_one_line_and_status_2(prog: str, tmp_path, capsys) -> None:
    argv = ["--out", str(tmp_path)] if prog == "the benchmark suite" else ["--json", str(tmp_path / "r.json")]
    assert MAINS[prog](argv) == 2
    err = capsys.readouterr().err
    assert err == f"{prog} needs a CUDA GPU (sm_90 with TileLang for the native kernels); none is visible here\n"
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("main", [bench_sparse.main, bench_sparse_union.main])
def test_unknown_case_is_refused(main, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--cases", "decode_64x2"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'decode_64x2'" in capsys.readouterr().err
