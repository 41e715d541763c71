"""The splits of a (row, KV head) as independent thread groups of one CTA, merged inside it.

A split decode (:mod:`.sparse_paged_kernel` with several splits) writes FP32 partials that a second
grid merges (:mod:`.sparse_merge_kernel`). With ``groups`` splits per CTA instead, one CTA of
``groups * threads`` threads runs the splits of one (row, KV head) as ``groups`` independent groups of
``threads`` threads: the same per-split code, with its own shared memory and its own barrier ids, so each
SM still runs ``groups`` independent chains (session 19's version, with CTA-wide barriers, lost 110 us).
Each group keeps its normalized partial output and LSE in its own shared memory. After one CTA barrier
the CTA merges them as the merge kernel does (the same arithmetic, in the same order: bitwise-equal
results) and writes ``out`` and ``lse``: no FP32 partial stores, no merge grid.

TileLang 0.1.15 lays fragments out over a CTA's threads and generates per-CTA barriers and reduction
workspaces, and its host code launches the ``T.Kernel`` shape. So the group kernel is built in two
parts:

* the paged kernel's ordinary split build, whose generated CUDA source :func:`group_source` rewrites
  (per-group shared memory, barrier ids and reduction workspaces, split ``groups * blockIdx.z + group``,
  partials into shared memory, the merge appended);
* a *shell*: the paged kernel's prim_func with the launch shape ``(rows, Hkv, splits / groups)`` x
  ``groups * threads`` threads and ``groups`` times the dynamic shared memory, whose body only names every
  argument the split build's kernel takes. Its generated device source is replaced by the rewritten one
  (:func:`replace_shell`, the factory's ``cuda_postproc``), so TileLang's host code launches the rewritten
  kernel with the shell's shape. The replacement checks that both kernels take the same parameters, in
  the same order, and raises otherwise.

The launcher takes it for four-split schedules with int32 K/V offsets (``Schedule.groups``); with int64
offsets the four groups' offset arrays would exceed the SM's shared memory (the launch fails), so those
keep the merge kernel.

Decode 64 x 1 on the H200 (same process, CUDA-graph medians after a read flush, outputs bitwise equal to the
merge kernel's; ``.devrun/s42_ab.py``, three rounds):

* session 43, each warp merging one head after one CTA barrier (below): 75.10 / 75.12 / 75.25 us against
  77.02 / 76.98 / 77.17 for the same four splits with the merge kernel (1.8-1.9 us under it);
* session 42, one thread per head taking the weights, a second barrier, every thread merging six single
  elements: 76.02 / 76.24 / 76.03 against 77.18 / 77.55 / 77.60 (1.2-1.5 us under it; on session 43's first
  lease 75.14-76.00 against 76.77-76.99);
* the probe that preceded it (``.devrun/s42_gp.py``, the rewrite launched through the driver API, two
  leases): 74.2-74.7 against 76.1-76.7 (the ``sparse_merge_kernel`` docstring has the table).

Session 43's merge was expected to save ~0.5-1 us of the ~1.7 us the probe's merge cost over no merge
(one barrier fewer, a quarter of the instructions per element); it saved ~0.3-0.7 us: its lead over the
merge kernel grew from 1.0-1.7 to 1.8-1.9 us (two leases, minutes apart). Compiled from the generated
source with nvcc 13.0 ``-O3``, the group kernel uses 128 registers with 12 bytes of spill (24 with
session 42's merge; the split build none): each thread holds its group index and the shifted
shared-memory bases.

Session 44 made the merge multiply by one reciprocal of each head's denominator instead of dividing every
element (8 IEEE divisions per lane), in both merges, so they stay bitwise equal: ~0.3-0.4 us on the median
of five rounds (74.03-74.56 against 73.97-75.15 us), expected 0.1-0.3. A build without the merge (outputs
wrong, timing only) was ~1.35 us faster than the shipped one before it; that is what the merge and the stores
of ``out`` and ``lse`` still cost (``docs/performance-notes.md``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "GROUPS",
    "MARKER",
    "group_source",
    "kernel_params",
    "launch_shape",
    "prepare_shell",
    "replace_shell",
    "sum_f32",
]

GROUPS = 4  # splits per CTA of the group build (the decode schedule's split count for 64 x 1)
MARKER = "mate_group_shell"
_SOURCES: dict[str, str] = {}  # shell key -> the rewritten split kernel

# TileLang's AllReduce syncs through ``bar.sync <phase>, <threads>`` (phases 1 and 2): every group gets
# ids of its own, above the group barriers 1..groups.
_GROUP_BARRIER = r"""struct MateGroupBarrier {
  template <int phase = 1> static __device__ __forceinline__ void sync() {
    asm volatile("bar.sync %0, THREADS;" :: "r"(GROUPS + 1 + GROUPS * (phase - 1) + (int)(threadIdx.x / THREADS))
                 : "memory");
  }
};
"""

# Appended to the kernel. The group of the last split (the shortest: ceil shares) takes a per-head gate's
# sigmoids before the CTA barrier, while the other groups still gather. After it, each warp merges one head:
# every lane takes the head's split weights, their sum and the LSE (once per head, not per element: per
# element the exp work costs as much as the merge grid; warp-uniform, so no second barrier), then merges four
# consecutive features per 128-feature chunk, loaded as float4 (a warp reads 512 contiguous bytes: no bank
# conflict) and stored as one 8-byte vector where ``out`` is contiguous in D and aligned, else element-wise.
_MERGE = r"""
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  if ((int)threadIdx.x >= (GROUPS - 1) * THREADS && (int)threadIdx.x < (GROUPS - 1) * THREADS + HEADS) {
    const int mg_h = (int)threadIdx.x - (GROUPS - 1) * THREADS;
    mg_gt[mg_h] = (has_gate != 0 && sg2 == (int64_t)0)
        ? 1.f / (1.f + expf(-(float)GATE[(int64_t)blockIdx.x * sg0 + (int64_t)((int)blockIdx.y * HEADS + mg_h) * sg1]))
        : 1.f;
  }
  asm volatile("bar.sync 0;\n" ::: "memory");
  {
    const int mg_lane = (int)threadIdx.x % 32;
    const int64_t mg_r = (int64_t)blockIdx.x;
    for (int mg_h = (int)threadIdx.x / 32; mg_h < HEADS; mg_h += GROUPS * THREADS / 32) {
      const int64_t mg_head = (int64_t)((int)blockIdx.y * HEADS + mg_h);
      float mg_w[GROUPS];
      float mg_m = -CUDART_INF_F;
      #pragma unroll
      for (int g = 0; g < GROUPS; ++g) { mg_w[g] = mg_lp[g * 16 + mg_h]; mg_m = fmaxf(mg_m, mg_w[g]); }
      float mg_den = 0.f;
      #pragma unroll
      for (int g = 0; g < GROUPS; ++g) {
        mg_w[g] = mg_w[g] > -CUDART_INF_F ? expf(mg_w[g] - mg_m) : 0.f;
        mg_den = mg_den + mg_w[g];
      }
      const float mg_inv = 1.f / mg_den;
      if (has_lse != 0 && mg_lane == 0) {
        LSE[mg_r * sl0 + mg_head * sl1] = mg_den > 0.f ? mg_m + logf(mg_den) : -CUDART_INF_F;
      }
      #pragma unroll
      for (int mg_c = 0; mg_c < DIM / 128; ++mg_c) {
        const int mg_d = mg_c * 128 + mg_lane * 4;
        float mg_o[4] = {0.f, 0.f, 0.f, 0.f};
        #pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
          const float4 mg_x = *(const float4*)(((const float*)(mg_dyn + g * DYN)) + mg_h * DIM + mg_d);
          mg_o[0] = mg_o[0] + mg_w[g] * mg_x.x;
          mg_o[1] = mg_o[1] + mg_w[g] * mg_x.y;
          mg_o[2] = mg_o[2] + mg_w[g] * mg_x.z;
          mg_o[3] = mg_o[3] + mg_w[g] * mg_x.w;
        }
        __align__(8) CTYPE mg_v[4];
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          float mg_gate = mg_gt[mg_h];
          if (has_gate != 0 && sg2 != (int64_t)0) {
            mg_gate = 1.f / (1.f + expf(-(float)GATE[mg_r * sg0 + mg_head * sg1 + (int64_t)(mg_d + k) * sg2]));
          }
          mg_v[k] = (CTYPE)(mg_den > 0.f ? mg_o[k] * mg_inv * mg_gate : 0.f);
        }
        CTYPE* mg_out = OUT + (mg_r * so0 + mg_head * so1 + (int64_t)mg_d * so2);
        if (so2 == (int64_t)1 && ((size_t)mg_out & 7) == 0) {
          *(uint2*)mg_out = *(const uint2*)mg_v;
        } else {
          #pragma unroll
          for (int k = 0; k < 4; ++k) { mg_out[(int64_t)k * so2] = mg_v[k]; }
        }
      }
    }
  }
"""


def kernel_params(src: str) -> list[str]:
    """``type name`` of every parameter of ``main_kernel``'s definition, in order (``const`` and
    ``__restrict__`` dropped: they do not change what the host passes)."""
    m = re.search(r"__global__ void __launch_bounds__\([^)]*\) main_kernel\(([^)]*)\)", src)
    if m is None:
        raise RuntimeError("group build: no main_kernel definition in the generated CUDA source")
    return [" ".join(w for w in p.split() if w not in ("const", "__restrict__")) for p in m.group(1).split(",")]


def launch_shape(kernel: Any) -> tuple[int, int]:
    """(threads per CTA, dynamic shared-memory bytes) that a TileLang kernel's host code launches with.

    The host code passes the kernel's arguments, then the grid's three extents, the CTA's three and the
    dynamic shared memory; those two are literals.
    """
    n = len(kernel_params(kernel.get_kernel_source()))
    lit = {
        int(i): int(v) for i, v in re.findall(r"\[(\d+)\]\.v_int64\) = \(\(int64_t\)(\d+)\);", kernel.get_host_source())
    }
    if n + 3 not in lit or n + 6 not in lit:
        raise RuntimeError("group build: the launch shape is not in the TileLang host code where expected")
    return lit[n + 3], lit[n + 6]


def sum_f32(*values: Any) -> Any:
    """The float32 sum of TIR values of any dtype (the shell's body names every argument with it)."""
    import tilelang.language as T

    return functools.reduce(lambda a, b: a + b, [T.cast(v, "float32") for v in values])


def prepare_shell(factory: Callable[..., Any], split_consts: tuple[Any, ...], *, groups: int, group: int, dim: int,
                  dtype: str) -> tuple[str, int]:  # fmt: skip
    """Build the split kernel of ``split_consts`` for the profile being built, rewrite its source for
    ``groups`` groups and register it; returns (the shell's import, the split kernel's dynamic shared memory).

    The shell's key is a hash of the rewritten source, so TileLang's disk cache never pairs a shell with
    another rewrite.
    """
    from ._build import build, current_profile

    kernel = build(factory, current_profile(), *split_consts)
    threads, dyn = launch_shape(kernel)
    ctype = {"bfloat16": "bfloat16_t", "float16": "half_t"}[dtype]
    source = group_source(kernel.get_kernel_source(), groups=groups, threads=threads, heads=group, dim=dim,
                          dyn=dyn, ctype=ctype)  # fmt: skip
    key = hashlib.sha256(source.encode()).hexdigest()[:20]
    _SOURCES[key] = source
    return f"// {MARKER} {key}\n", dyn


def _closing(src: str, i: int) -> int:
    """Index one past the bracket that closes the one at ``src[i]``."""
    close = {"[": "]", "(": ")"}[src[i]]
    depth = 0
    for j in range(i, len(src)):
        depth += src[j] == src[i]
        depth -= src[j] == close
        if depth == 0:
            return j + 1
    raise RuntimeError("group build: unbalanced brackets in the generated CUDA source")


def _expect(src: str, text: str, count: int = 1) -> None:
    if src.count(text) != count:
        raise RuntimeError(
            f"group build: expected {count} x {text!r} in the paged kernel's generated CUDA source, found "
            f"{src.count(text)}: the installed TileLang generates it differently from the pinned 0.1.15"
        )


def group_source(src: str, *, groups: int, threads: int, heads: int, dim: int, dyn: int, ctype: str) -> str:
    """Rewrite a split build's CUDA source (``threads`` per CTA, one split per CTA, ``dyn`` bytes of
    dynamic shared memory) to run ``groups`` splits per CTA as groups and merge them (module docstring).

    ``heads`` is the GQA group (Q heads per KV head), ``ctype`` the output's C type.
    """
    if dim % 128 or heads > 16:
        raise RuntimeError(f"group build: the merge takes D a multiple of 128 and at most 16 heads, got {dim}, {heads}")
    g_expr = f"((int)threadIdx.x / {threads})"
    m = re.search(r"__launch_bounds__\(\d+, \d+\) main_kernel\(", src)
    if m is None:
        raise RuntimeError("group build: no __launch_bounds__ on main_kernel in the generated CUDA source")
    src = src[: m.start()] + f"__launch_bounds__({groups * threads}, 1) main_kernel(" + src[m.end() :]
    # Each group sees thread ids 0..threads-1 and its own split.
    if src.count("threadIdx.x") != src.count("((int)threadIdx.x)"):
        raise RuntimeError("group build: a thread index the rewrite does not recognize")
    src = src.replace("((int)threadIdx.x)", f"(((int)threadIdx.x) % {threads})")
    src = src.replace("((int)blockIdx.z)", f"((((int)blockIdx.z) * {groups}) + mg_g)")
    if "blockIdx.z" in src.replace("((int)blockIdx.z)", ""):
        raise RuntimeError("group build: a split index the rewrite does not recognize")
    # Shared memory: the group's slice of the dynamic buffer and of each static array.
    dyn_decl = "  extern __shared__ __align__(1024) uchar buf_dyn_shmem[];\n"
    _expect(src, dyn_decl)
    src = src.replace(
        dyn_decl,
        (
            f"  const int mg_g = {g_expr};\n"
            "  extern __shared__ __align__(1024) uchar mg_dyn[];\n"
            f"  uchar* buf_dyn_shmem = mg_dyn + mg_g * {dyn};\n"
            f"  __shared__ __align__(16) float mg_lp[{groups} * 16];\n"
            "  __shared__ float mg_gt[16];\n"
        ),
    )
    for decl in re.finditer(r"  __shared__ __align__\((\d+)\) (\w+) (\w+)\[(\d+)\];\n", src):
        align, typ, name, n = decl.groups()
        if name == "mg_lp":
            continue
        src = src.replace(
            decl.group(0),
            f"  __shared__ __align__({align}) {typ} mg_{name}[{groups} * {n}];\n"
            f"  {typ}* {name} = mg_{name} + mg_g * {n};\n",
        )
    if re.search(r"__shared__ (?!__align__)", src.replace("__shared__ float mg_gt", "")):
        raise RuntimeError("group build: a shared-memory declaration the rewrite does not recognize")
    # Barriers: the group's own.
    group_sync = f'asm volatile("bar.sync %0, {threads};" :: "r"(mg_g + 1) : "memory");'
    src = src.replace("__syncthreads();", group_sync)
    if re.search(r"__syncthreads_|bar\.sync 0|bar\.arrive", src):
        raise RuntimeError("group build: a CTA-wide barrier the rewrite does not recognize")
    src = src.replace(f"tl::NamedBarrier<{threads}>", "MateGroupBarrier")
    # Its workspace is indexed by the raw threadIdx.x: the group's base moves down by threads * group.
    src, n_ws = re.subn(
        r"::run\(([^,()]+(?:\[[^\]]*\])?), \(&\(\(\(float\*\)(workspace\w*)\)\[0\]\)\)\)",
        rf"::run(\1, ((float*)\2) - mg_g * {threads})",
        src,
    )
    leftover = src.count("(&(((float*)workspace")
    if src.count("tl::AllReduce<") != src.count("MateGroupBarrier>::run(") or leftover or not n_ws:
        raise RuntimeError("group build: a reduction the rewrite does not recognize")
    decl = 'extern "C" __global__ void main_kernel('
    _expect(src, decl)
    src = src.replace(decl, _GROUP_BARRIER.replace("GROUPS", str(groups)).replace("THREADS", str(threads)) + decl)
    # Partials into the group's shared memory: the global index minus the CTA's base.
    split = f"((int64_t)((((int)blockIdx.z) * {groups}) + mg_g))"
    base_lp = f"(({split} * (int64_t)o_r + (int64_t)blockIdx.x) * (int64_t)o_h + (int64_t)blockIdx.y * {heads})"
    _expect(src, "*(float2*)(OP + ")
    i = src.index("*(float2*)(OP + ")
    j = _closing(src, i + len("*(float2*)"))
    index = src[i + len("*(float2*)(OP + ") : j - 1]
    src = src[:i] + f"*(float2*)(((float*)buf_dyn_shmem) + (({index}) - {base_lp} * {dim}))" + src[j:]
    _expect(src, "LP[")
    i = src.index("LP[")
    j = _closing(src, i + 2)
    src = src[:i] + f"mg_lp[mg_g * 16 + (({src[i + 3 : j - 1]}) - {base_lp})]" + src[j:]
    # Nothing of the group's loop may still write its shared memory when the partials go there.
    tail = f"  {group_sync}\n  if (skip == 0) {{\n    if (direct != 0) {{"
    _expect(src, tail)
    src = src.replace(tail, '  asm volatile("cp.async.wait_all;\\n" ::: "memory");\n' + tail)
    merge = _MERGE
    for name, value in (("GROUPS", groups), ("THREADS", threads), ("HEADS", heads), ("DIM", dim), ("DYN", dyn),
                        ("CTYPE", ctype)):  # fmt: skip
        merge = merge.replace(name, str(value))
    end = src.rindex("}")
    return src[:end] + merge + src[end:]


def replace_shell(code: str) -> str:
    """``cuda_postproc`` of the paged kernel's factory: a shell's generated source -> the rewritten split
    kernel registered under its key (others unchanged).

    Raises
    ------
    RuntimeError
        The two kernels' parameters differ: the shell's host code would pass the wrong arguments.
    """
    m = re.search(rf"// {MARKER} (\S+)\n", code)
    if m is None:
        return code
    source = _SOURCES[m.group(1)]
    if kernel_params(code) != kernel_params(source):
        raise RuntimeError(
            "group build: the shell kernel's parameters differ from the split kernel's:\n"
            f"  shell {kernel_params(code)}\n  split {kernel_params(source)}"
        )
    return source
