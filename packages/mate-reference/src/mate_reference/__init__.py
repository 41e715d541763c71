"""mate_reference: the FP32 PyTorch oracle of every MATE-QSA entry point (runs on the CPU)."""

from __future__ import annotations

__version__ = "0.1.0"
