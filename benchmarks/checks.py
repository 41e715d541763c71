"""Checks every benchmark runs: a CUDA GPU before anything starts, then the agreement check
on every case before it is timed.

A wrong fast kernel must not be reported as fast: the native output is compared with
the plain-PyTorch path on the same inputs (identical -inf pattern, relative L2 error
below 1e-2 on the finite entries) and the case fails loudly otherwise.
"""

from __future__ import annotations

import sys

import torch

__all__ = ["MismatchError", "check_agreement", "missing_cuda"]

TOLERANCE = 1e-2


class MismatchError(RuntimeError):
    """The native output disagrees with the PyTorch path."""


def missing_cuda(prog: str) -> int | None:
    """Exit status 2, after one line on stderr, where no CUDA GPU is visible (the benchmarks
    would fail on their first CUDA tensor with a traceback); None where one is."""
    if torch.cuda.is_available():
        return None
    print(
        f"{prog} needs a CUDA GPU (sm_90 with TileLang for the native kernels); none is visible here", file=sys.stderr
    )
    return 2


def check_agreement(name: str, out: torch.Tensor, ref: torch.Tensor, tol: float = TOLERANCE) -> float:
    """Relative L2 error of ``out`` against ``ref`` on finite entries; raises on any mismatch."""
    finite = torch.isfinite(ref)
    if not torch.equal(finite, torch.isfinite(out)):
        raise MismatchError(f"{name}: native -inf/NaN pattern differs from the PyTorch path")
    diff = (out[finite].double() - ref[finite].double()).norm()
    err = float(diff / ref[finite].double().norm().clamp_min(1e-30))
    if not err < tol:
        raise MismatchError(f"{name}: relative L2 error {err:.3g} against the PyTorch path (tolerance {tol})")
    return err
