"""mate_kernels_musa: native TileLang kernels for NVIDIA Hopper (sm_90a) and MUSA MP31.

Importing this package does not import TileLang; kernels are compiled lazily
on first use, per specialization, after the architecture gate has passed.
"""

from __future__ import annotations

__version__ = "0.1.0"
