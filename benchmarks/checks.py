"""Agreement check run on every benchmark case before it is timed.

A wrong fast kernel must not be reported as fast: the native output is compared with
the plain-PyTorch path on the same inputs (identical -inf pattern, relative L2 error
below 1e-2 on the finite entries) and the case fails loudly otherwise.
"""

from __future__ import annotations

import torch

__all__ = ["MismatchError", "check_agreement"]

TOLERANCE = 1e-2


class MismatchError(RuntimeError):
    """The native output disagrees with the PyTorch path."""


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
