"""Reusable argument checks.

Every check reads only tensor metadata (shape, stride, dtype, device, storage
pointer); none reads device memory or synchronizes. Each failure names the
argument, what was given and what is accepted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from .errors import LayoutError, MateTypeError, MateValueError

__all__ = [
    "BACKENDS",
    "DATA_DTYPES",
    "FP8_DTYPES",
    "describe",
    "check_backend",
    "require_tensor",
    "optional_tensor",
    "require_dtype",
    "require_rank",
    "require_size",
    "require_same_device",
    "require_metadata",
    "require_int",
    "require_bool",
    "require_native_grid",
    "NATIVE_MAX_GRID_YZ",
    "require_none",
    "is_non_overlapping",
    "resolve_scale",
    "check_vector_layout",
    "check_vector_alignment",
    "row_view",
    "check_out_buffer",
    "check_internal_overlap",
    "check_no_overlap",
    "positions_view",
    "is_tracing",
    "VECTOR_LOAD_MESSAGE",
]

BACKENDS = ("tilelang", "reference")
DATA_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPES = tuple(
    getattr(torch, n)
    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, n)
)
INT_METADATA = (torch.int32, torch.int64)
NATIVE_MAX_GRID_YZ = 65535  # CUDA/MUSA limit of a launch grid's y and z extents
_DESCRIBED_ITEMS = 4  # elements of a list/tuple an error message spells out
VECTOR_LOAD_MESSAGE = (
    "vector loads require unit feature stride and 16-byte alignment; "
    "pass a contiguous copy or adjust the slice offsets instead"
)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def describe(x: object) -> str:
    """Short description of a value for error messages (no device read)."""
    if isinstance(x, torch.Tensor):
        return (
            f"tensor(shape={list(x.shape)}, dtype={_dtype_name(x.dtype)}, device={x.device}, stride={list(x.stride())})"
        )
    if isinstance(x, torch.dtype):
        return _dtype_name(x)
    if isinstance(x, (list, tuple)):
        # Never repr() a container: it would print (and so read back) any tensor inside it.
        items = ", ".join(describe(v) for v in x[:_DESCRIBED_ITEMS])
        more = f", ... ({len(x)} items)" if len(x) > _DESCRIBED_ITEMS else ""
        brackets = "[]" if isinstance(x, list) else "()"
        return f"{type(x).__name__} {brackets[0]}{items}{more}{brackets[1]}"
    if isinstance(x, dict):
        return f"{type(x).__name__} with {len(x)} keys"
    return f"{type(x).__name__} {x!r}"


def is_tracing() -> bool:
    """True under torch.compile / FX tracing, where data pointers are unavailable."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling():
        return True
    return False


def _has_storage(t: torch.Tensor) -> bool:
    if is_tracing() or t.device.type == "meta":
        return False
    try:
        t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # fake/functional tensors
        return False
    return not isinstance(t, torch._subclasses.FakeTensor)  # type: ignore[attr-defined]


def check_backend(backend: object) -> str:
    if not isinstance(backend, str):
        raise MateTypeError(f"backend: got {describe(backend)}; expected one of {BACKENDS!r}")
    if backend == "auto":
        raise MateValueError(
            "backend: got 'auto'; automatic backend selection is not supported. "
            "Pass backend='tilelang' (native kernels, the default) or backend='reference' "
            "(the FP32 PyTorch oracle) explicitly"
        )
    if backend not in BACKENDS:
        raise MateValueError(f"backend: got {backend!r}; expected one of {BACKENDS!r}")
    return backend


def require_tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise MateTypeError(f"{name}: got {describe(x)}; expected a torch.Tensor")
    if x.layout != torch.strided:  # sparse or nested tensors have no strides the kernels could use
        raise MateTypeError(
            f"{name}: got a tensor with layout {x.layout}; expected a dense strided tensor (pass {name}.to_dense())"
        )
    return x


def optional_tensor(name: str, x: object) -> torch.Tensor | None:
    return None if x is None else require_tensor(name, x)


def require_dtype(name: str, t: torch.Tensor, allowed: Sequence[torch.dtype], what: str = "") -> None:
    if t.dtype not in allowed:
        names = ", ".join(_dtype_name(d) for d in allowed)
        extra = f" {what}" if what else ""
        raise MateTypeError(f"{name}: got dtype {_dtype_name(t.dtype)}; expected one of [{names}]{extra}")


def require_rank(name: str, t: torch.Tensor, ranks: Iterable[int], layout: str) -> int:
    ranks = tuple(ranks)
    if t.dim() not in ranks:
        raise MateValueError(
            f"{name}: got shape {list(t.shape)} (rank {t.dim()}); expected rank "
            f"{' or '.join(map(str, ranks))}: {layout}"
        )
    return t.dim()


def require_size(name: str, t: torch.Tensor, axis: int, expected: int, what: str) -> None:
    if t.shape[axis] != expected:
        raise MateValueError(f"{name}: got shape {list(t.shape)}; expected size {expected} on axis {axis} ({what})")


def require_same_device(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.device != ref.device:
        raise MateValueError(f"{name}: got a tensor on {t.device}; expected the device of {ref_name} ({ref.device})")


def require_metadata(
    name: str,
    t: object,
    backend: str,
    ref_name: str,
    ref: torch.Tensor,
    shape: Sequence[int] | None = None,
    what: str = "",
) -> torch.Tensor:
    """Integer metadata tensor: int32 for the native backend, int32/int64 for the reference.

    No dtype conversion happens here or later in the native path (the spec forbids it).
    """
    t = require_tensor(name, t)
    if backend == "tilelang":
        require_dtype(name, t, (torch.int32,), "(backend='tilelang' consumes int32 metadata without conversion)")
    else:
        require_dtype(name, t, INT_METADATA)
    require_same_device(name, t, ref_name, ref)
    if shape is not None and tuple(t.shape) != tuple(shape):
        extra = f" ({what})" if what else ""
        raise MateValueError(f"{name}: got shape {list(t.shape)}; expected {list(shape)}{extra}")
    return t


INT32_MAX = 2**31 - 1


def require_int(name: str, x: object, *, minimum: int | None = None, optional: bool = False) -> int | None:
    """An int size or count in ``[minimum, INT32_MAX]``: every one of them indexes int32 metadata
    (token ids, positions, page ids) or an int32 kernel argument, and larger values would only
    overflow later, inside torch or a kernel."""
    if x is None and optional:
        return None
    if isinstance(x, bool) or not isinstance(x, int):
        raise MateTypeError(f"{name}: got {describe(x)}; expected an int")
    if minimum is not None and x < minimum:
        raise MateValueError(f"{name}: got {x}; expected an int >= {minimum}")
    if x > INT32_MAX:
        raise MateValueError(f"{name}: got {x}; expected an int <= {INT32_MAX} (sizes and counts are int32)")
    return x


def require_native_grid(name: str, value: int, what: str, instead: str) -> None:
    """``backend='tilelang'``: ``value`` (``what`` of argument ``name``) spans a grid y/z axis of the kernel."""
    if value > NATIVE_MAX_GRID_YZ:
        raise MateValueError(
            f"{name}: got {value} {what}; backend='tilelang' launches them on a grid axis of at most "
            f"{NATIVE_MAX_GRID_YZ}; {instead}"
        )


def require_bool(name: str, x: object) -> bool:
    if not isinstance(x, bool):
        raise MateTypeError(f"{name}: got {describe(x)}; expected a bool")
    return x


FP32_MAX = torch.finfo(torch.float32).max
FP32_TINY = torch.finfo(torch.float32).tiny  # smallest normal FP32 value


def _positive_float(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise MateTypeError(f"{name}: got {describe(x)}; expected a positive float")
    try:
        value = float(x)
    except OverflowError:  # an int beyond the float range
        value = math.inf
    # A comparison, not math.isfinite(): under torch.compile a float argument can be a SymFloat.
    if not abs(value) < math.inf or value <= 0.0:
        raise MateValueError(f"{name}: got {x!r}; expected a finite positive float")
    return value


def _fp32_multiplier(name: str, given: object, value: float) -> float:
    """The resolved multiplier must be a normal FP32 number: the kernels and the reference scale
    in FP32, where a larger value is inf (scores become inf or NaN) and a smaller one flushes
    scores towards 0."""
    if not FP32_TINY <= value <= FP32_MAX:
        raise MateValueError(
            f"{name}: got {given!r}, i.e. a multiplier of {value!r}; expected one in FP32's normal range "
            f"[{FP32_TINY:.3g}, {FP32_MAX:.3g}] (scores are scaled in FP32)"
        )
    return value


def resolve_scale(
    scale: object,
    other: object,
    *,
    default: float,
    other_name: str,
    other_is_denominator: bool,
) -> float:
    """Resolve ``scale`` and its exclusive alternative into one multiplier.

    ``other`` is ``score_scale`` (a denominator) or ``softmax_scale`` (an alias).
    """
    if scale is not None and other is not None:
        raise MateValueError(
            f"scale and {other_name}: got both ({scale!r} and {other!r}); they are mutually exclusive, pass only one"
        )
    if scale is not None:
        return _fp32_multiplier("scale", scale, _positive_float("scale", scale))
    if other is not None:
        value = _positive_float(other_name, other)
        return _fp32_multiplier(other_name, other, 1.0 / value if other_is_denominator else value)
    return default


def check_vector_layout(name: str, t: torch.Tensor) -> None:
    """The spec's vector-load rule for MQA score/prefill Q and K."""
    elem = t.element_size()
    problems = []
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        problems.append(f"feature stride {t.stride(-1)} (expected 1)")
    problems += _misalignment(t)
    for axis in range(t.dim() - 1):
        if t.shape[axis] > 1:
            s = t.stride(axis)
            if s <= 0 or (s * elem) % 16 != 0:
                problems.append(f"axis {axis} stride {s} ({s * elem} bytes; expected a positive multiple of 16)")
    _raise_vector_layout(name, t, problems)


def check_vector_alignment(name: str, t: torch.Tensor) -> None:
    """The data-pointer part of :func:`check_vector_layout` alone (its stride rules need no pointer)."""
    _raise_vector_layout(name, t, _misalignment(t))


def _misalignment(t: torch.Tensor) -> list[str]:
    return [f"data_ptr() % 16 == {t.data_ptr() % 16}"] if _has_storage(t) and t.data_ptr() % 16 != 0 else []


def _raise_vector_layout(name: str, t: torch.Tensor, problems: list[str]) -> None:
    if problems:
        raise LayoutError(f"{name}: {VECTOR_LOAD_MESSAGE} (got {describe(t)}: {'; '.join(problems)})")


def row_view(name: str, t: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """Collapse the leading ``batch_dims`` axes into one row axis without copying."""
    if batch_dims == 1:
        return t
    try:
        # An explicit row count (not -1) keeps zero-element tensors such as [B,Q,0] viewable.
        return t.view(math.prod(t.shape[:batch_dims]), *t.shape[batch_dims:])
    except RuntimeError:
        raise MateValueError(
            f"{name}: got {describe(t)}; its batch/query axes must form a zero-copy row view "
            "(stride(0) == shape(1) * stride(1)); pass a framework-prepared flattened tensor instead"
        ) from None


def positions_view(t: torch.Tensor) -> torch.Tensor:
    """``query_positions`` ``[B, Q]`` (or already ``[rows]``) as a ``[rows]`` view where one exists
    without a copy; otherwise the ``[B, Q]`` tensor itself.

    The spec asks zero-copy row views only of query, indices, gate and out: positions are
    metadata, which may be any sliced view. A ``[B, Q]`` slice whose axes do not merge (e.g.
    ``pos[:, :Q]`` of a wider table) stays 2-D in the plan and the backends flatten it with
    ``reshape`` (the native launcher then copies its ``B * Q`` entries, a capturable op).
    """
    if t.dim() < 2:
        return t
    try:
        return t.view(t.shape[0] * t.shape[1])
    except RuntimeError:
        return t


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    extent = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()) if n > 0)
    return start, start + (extent + 1) * t.element_size()


def check_out_buffer(
    name: str,
    buf: object,
    *,
    shape: Sequence[int],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """Output buffer: exact shape, dtype, device; positive strides; no internal overlap."""
    buf = require_tensor(name, buf)
    if buf.dtype != dtype:
        raise MateTypeError(f"{name}: got dtype {_dtype_name(buf.dtype)}; expected {_dtype_name(dtype)}")
    if buf.device != device:
        raise MateValueError(f"{name}: got a tensor on {buf.device}; expected {device}")
    if tuple(buf.shape) != tuple(shape):
        raise MateValueError(f"{name}: got shape {list(buf.shape)}; expected {list(shape)}")
    for axis, (n, s) in enumerate(zip(buf.shape, buf.stride())):
        if n > 1 and s <= 0:
            raise MateValueError(
                f"{name}: got stride {list(buf.stride())}; expected positive strides on every axis "
                f"with more than one element (axis {axis} has stride {s})"
            )
    check_internal_overlap(name, buf)
    if buf.requires_grad and buf.is_leaf:
        raise MateValueError(f"{name}: got a leaf tensor that requires grad; expected a plain writable buffer")
    return buf


def check_internal_overlap(name: str, buf: torch.Tensor) -> None:
    """Reject an output buffer two of whose elements share memory (skipped on fake tensors)."""
    if buf.numel() > 1 and _has_storage(buf) and not is_non_overlapping(buf):
        raise MateValueError(
            f"{name}: got {describe(buf)}, whose elements overlap in memory; expected a writable non-overlapping view"
        )


_OVERLAP_SEARCH_BUDGET = 10_000  # search nodes before _strided_overlap answers "cannot tell"


def _strided_overlap(
    ptr_a: int,
    shape_a: Sequence[int],
    stride_a: Sequence[int],
    itemsize_a: int,
    ptr_b: int,
    shape_b: Sequence[int],
    stride_b: Sequence[int],
    itemsize_b: int,
    budget: int | None = None,
) -> bool | None:
    """True if two strided views share a byte, False if not, None if the search gave up.

    Why not just compare first-to-last byte spans: callers legitimately carve
    inputs and outputs out of one workspace as interleaved views (``ws[..., :D]``
    and ``ws[..., D:]``), whose spans overlap although no element is shared, so
    the span test alone rejects valid calls. Why metadata only: validation must
    never read tensor memory, launch device work or synchronize.

    Why this search: a shared byte means non-negative integers i, j within the
    shapes and byte offsets e1 < itemsize_a, e2 < itemsize_b with
    ptr_a + sum(i*stride_a)*itemsize_a + e1 == ptr_b + sum(j*stride_b)*itemsize_b + e2,
    a bounded linear Diophantine problem that is NP-hard in general. Sorting the
    coefficients in decreasing order and pruning with the min/max the remaining
    axes can still add (and their gcd) leaves one or two candidates per axis
    for nested strides, the layouts real callers pass; remembering offsets
    already refuted bounds the work by the spans for small views. The node
    budget bounds the rest: the caller must treat None as "may overlap".
    """
    if budget is None:
        budget = _OVERLAP_SEARCH_BUDGET
    if 0 in shape_a or 0 in shape_b:
        return False
    # Variables (coefficient in bytes, low, high): A's indices count up, B's count down,
    # so the equation is  sum(c * x) == (ptr_b - ptr_a) + e2 - e1.
    terms: dict[int, list[int]] = {}
    for ptr_is_a, shape, stride, itemsize in (
        (True, shape_a, stride_a, itemsize_a),
        (False, shape_b, stride_b, itemsize_b),
    ):
        for n, s in zip(shape, stride):
            if n <= 1 or s == 0:
                continue
            if s < 0:  # walk the axis from its other end (torch never makes these; kept exact anyway)
                if ptr_is_a:
                    ptr_a += (n - 1) * s * itemsize
                else:
                    ptr_b += (n - 1) * s * itemsize
                s = -s
            lo, hi = (0, n - 1) if ptr_is_a else (-(n - 1), 0)
            # Equal coefficients merge: x1*c + x2*c takes every (x1 + x2)*c in the summed range.
            bounds = terms.setdefault(s * itemsize, [0, 0])
            bounds[0] += lo
            bounds[1] += hi
    delta = ptr_b - ptr_a
    target_lo, target_hi = delta - (itemsize_a - 1), delta + (itemsize_b - 1)
    coeffs = sorted(terms.items(), reverse=True)
    k = len(coeffs)
    rest_min, rest_max, rest_gcd = [0] * (k + 1), [0] * (k + 1), [0] * (k + 1)
    for level in range(k - 1, -1, -1):
        c, (lo, hi) = coeffs[level]
        rest_min[level] = rest_min[level + 1] + c * lo
        rest_max[level] = rest_max[level + 1] + c * hi
        rest_gcd[level] = math.gcd(rest_gcd[level + 1], c)
    if not (rest_min[0] <= target_hi and target_lo <= rest_max[0]):
        return False  # the span test: no byte in common
    refuted: set[tuple[int, int]] = set()
    nodes = 0

    def reachable(level: int, fixed: int) -> bool | None:
        # Can the variables from ``level`` on add up to a value in target - fixed?
        nonlocal nodes
        nodes += 1
        if nodes > budget:
            return None
        lo, hi = target_lo - fixed, target_hi - fixed
        if hi < rest_min[level] or lo > rest_max[level]:
            return False
        g = rest_gcd[level]
        if g == 0:
            return lo <= 0 <= hi
        if (hi // g) * g < lo:  # no multiple of the remaining gcd in [lo, hi]
            return False
        if level == k - 1:
            return True  # one variable left, a multiple of c in range and within its bounds
        if (level, fixed) in refuted:
            return False
        c, (x_lo, x_hi) = coeffs[level]
        first = max(x_lo, -((rest_max[level + 1] - lo) // c))  # ceil((lo - rest_max) / c)
        last = min(x_hi, (hi - rest_min[level + 1]) // c)
        for x in range(first, last + 1):
            found = reachable(level + 1, fixed + x * c)
            if found is not False:
                return found
        refuted.add((level, fixed))
        return False

    return reachable(0, 0)


def check_no_overlap(name: str, buf: torch.Tensor, inputs: dict[str, torch.Tensor | None]) -> None:
    """Reject an output buffer whose memory overlaps any input (host pointers only)."""
    if not _has_storage(buf) or buf.numel() == 0:
        return
    slo, shi = _storage_span(buf)
    lo, hi = _byte_span(buf)
    for other_name, t in inputs.items():
        # buf has storage, so this is no trace, and an input on its device has storage too.
        if t is None or t.numel() == 0 or t.device != buf.device:
            continue
        tlo, thi = _storage_span(t)
        if not (slo < thi and tlo < shi):
            continue  # disjoint allocations (the usual case; cheaper than the views' spans)
        olo, ohi = _byte_span(t)
        if not (lo < ohi and olo < hi):
            continue  # disjoint spans: the cheap test settles it
        overlap = _strided_overlap(
            buf.data_ptr(),
            buf.shape,
            buf.stride(),
            buf.element_size(),
            t.data_ptr(),
            t.shape,
            t.stride(),
            t.element_size(),
        )
        if overlap is None:
            raise MateValueError(
                f"{name}: its memory could not be proven disjoint from {other_name} (their strided views of "
                f"one allocation are too irregular to check from shapes and strides); native paths bind "
                f"{name} directly and reject input/output overlap. Pass separate buffers for {name} and {other_name}"
            )
        if overlap:
            raise MateValueError(
                f"{name}: its memory overlaps {other_name}; native paths bind {name} directly and "
                f"reject input/output overlap. Pass a separate buffer"
            )


def require_none(name: str, x: object, why: str) -> None:
    """Reject an argument that must be omitted in this call's configuration."""
    if x is not None:
        raise MateValueError(f"{name}: got {describe(x)}; expected None ({why})")


def is_non_overlapping(t: torch.Tensor) -> bool:
    """Whether no two elements of ``t`` share memory, from shape and strides alone.

    Sufficient test (exact for dense tensors and for slices of them): sorted by
    stride, each axis must step past everything the smaller axes span. Unlike
    ``torch._debug_has_internal_overlap`` it accepts strided views such as
    ``big[..., 2:10]`` instead of reporting them as "too hard".
    """
    axes = sorted((abs(s), n) for n, s in zip(t.shape, t.stride()) if n > 1)
    span = 1  # elements covered by the axes already placed
    for stride, n in axes:
        if stride < span:
            return False
        span = stride * (n - 1) + span
    return True
