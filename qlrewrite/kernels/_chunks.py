"""Granularity layout, cache-sized chunks and the thread pool the kernels share.

Every Q/DQ is seen as a 3-D problem ``(P, C, Q)``: C is the quantization axis, P the dims
before it, Q the dims after it (per-tensor: ``(N, 1, 1)``). The scale is a ``(P', S, Q')``
array broadcast against it (per-axis ``(1, C, 1)``, blocked ``(P, ceil(C/B), Q)``).
Chunks are slices of about ``CHUNK`` elements; each chunk is split into *parts*, views on
which one broadcast scale applies (blocked chunks: a partial head block, the whole blocks
viewed as ``(p, nblocks, B, q)``, a partial tail block). No loop runs over elements or blocks.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CHUNK",
    "Layout",
    "chunks",
    "layout",
    "output_array",
    "parts",
    "run_chunks",
    "scratch",
    "thread_count",
]

#: Elements per chunk: 1 MiB of float32 temporaries, about one core's L2. Measured on a
#: 2-core EPYC (1 MiB L2 per core), one thread, 4096 x 4096: 1.3-1.5x the throughput of
#: 64 Ki-element chunks (uint8 per-tensor DQ 7.5 -> 11.2 GB/s): a quarter of the NumPy
#: calls, and longer runs of output for each call; 512 Ki elements gained 3-8% more but
#: double the scratch memory. Q makes about eight NumPy calls per chunk, whose Python
#: overhead holds the GIL: at 64 Ki elements a second thread convoyed (slower than one),
#: at 256 Ki two threads run 1.6-1.8x one.
CHUNK = 1 << 18

_F32 = np.dtype(np.float32)
_local = threading.local()
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


@dataclass(frozen=True)
class Layout:
    """How x, scale and zero point line up (see the module docstring)."""

    P: int
    C: int
    Q: int
    block: int  # 0: not blocked
    scale_shape: tuple[int, int, int]


def layout(
    x_shape: Sequence[int],
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    axis: int,
    block_size: int,
) -> Layout:
    """Check the granularity of (x, scale, zero point) and return the 3-D layout."""
    rank = len(x_shape)
    if (
        zero_point is not None
        and zero_point.shape != scale.shape
        and not (zero_point.size == 1 and scale.size == 1)
    ):
        raise ValueError(
            f"zero point shape {zero_point.shape} differs from scale shape {scale.shape}"
        )
    if block_size < 0:
        raise ValueError(f"block_size must be >= 0, got {block_size}")
    if block_size == 0 and scale.size == 1 and scale.ndim <= 1:
        return Layout(math.prod(x_shape), 1, 1, 0, (1, 1, 1))
    if block_size == 0 and scale.ndim != 1:
        raise ValueError(
            f"scale of shape {scale.shape} needs block_size > 0 (per-tensor: scalar, per-axis: 1-D)"
        )
    ax = _axis(axis, rank)
    pre, dim, post = math.prod(x_shape[:ax]), x_shape[ax], math.prod(x_shape[ax + 1 :])
    if block_size == 0:
        if scale.shape[0] != dim:
            raise ValueError(
                f"per-axis scale has {scale.shape[0]} elements, x has {dim} along axis {axis}"
            )
        return Layout(pre, dim, post, 0, (1, dim, 1))
    _check_blocked(x_shape, scale.shape, ax, axis, block_size)
    return Layout(pre, dim, post, block_size, (pre, scale.shape[ax], post))


def check_granularity(
    x_shape: Sequence[int],
    scale_shape: Sequence[int],
    zero_point_shape: Sequence[int] | None,
    axis: int,
    block_size: int,
) -> None:
    """Raise ValueError where :func:`layout` would, from the shapes alone (nothing read)."""
    empty = np.empty((), np.float32)
    scale = np.broadcast_to(empty, tuple(scale_shape))
    zero_point = (
        None if zero_point_shape is None else np.broadcast_to(empty, tuple(zero_point_shape))
    )
    layout(x_shape, scale, zero_point, axis, block_size)


def _check_blocked(
    x_shape: Sequence[int], scale_shape: tuple[int, ...], ax: int, axis: int, block_size: int
) -> None:
    """A blocked scale has x's rank and shape but along ``ax`` (``axis`` as given), where
    it has one element per block of ``block_size``."""
    rank, dim = len(x_shape), x_shape[ax]
    if len(scale_shape) != rank:
        raise ValueError(f"blocked scale must have the rank of x ({rank}), got {len(scale_shape)}")
    for i, (d, s) in enumerate(zip(x_shape, scale_shape, strict=True)):
        if i != ax and d != s:
            raise ValueError(
                f"blocked scale shape {scale_shape} differs from x shape {tuple(x_shape)} "
                f"outside axis {axis}"
            )
    if -(-dim // block_size) != scale_shape[ax]:
        raise ValueError(
            f"block_size {block_size} does not fit: {dim} elements along axis {axis} "
            f"need {-(-dim // block_size)} blocks, scale has {scale_shape[ax]}"
        )


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _split(view: np.ndarray, blocks: int, block: int) -> np.ndarray:
    """View (p, blocks*block, q) as (p, blocks, block, q).

    Splitting one axis of a strided array never needs a copy, so this is a view (outputs
    are written through it) on every NumPy version."""
    p, _, q = view.shape
    split = view.reshape(p, blocks, block, q)
    assert split.size == 0 or np.may_share_memory(split, view)
    return split


def parts(
    lay: Layout,
    chunk: tuple[int, int, int, int, int, int],
    arrays: Sequence[np.ndarray],
    per_scale: Sequence[np.ndarray | None],
) -> Iterator[tuple[list[np.ndarray], list[np.ndarray | None]]]:
    """Split a chunk into parts on which the scale broadcasts.

    ``arrays`` are (P, C, Q) views of x and the output, ``per_scale`` are scale-shaped
    ``lay.scale_shape`` arrays (scale, zero point; None passes through). Yields the views of
    both, broadcast-compatible: whole blocks come as (p, blocks, B, q) against
    (p, blocks, 1, q); a trailing axis of 1 is dropped (faster inner loops).
    """
    p0, p1, c0, c1, q0, q1 = chunk
    sp = slice(p0, p1) if lay.scale_shape[0] > 1 else slice(0, 1)
    sq = slice(q0, q1) if lay.scale_shape[2] > 1 else slice(0, 1)
    last = 0 if lay.Q == 1 else slice(None)  # drop a trailing axis of 1

    def cut(c: slice, b: slice, split: int = 0):
        views = [a[p0:p1, c, q0:q1] for a in arrays]
        scales = [None if v is None else v[sp, b, sq] for v in per_scale]
        if split:
            views = [_split(v, (c.stop - c.start) // split, split) for v in views]
            scales = [None if v is None else v[:, :, None, :] for v in scales]
        views = [v[..., last] for v in views]
        scales = [None if v is None else v[..., last] for v in scales]
        return views, scales

    B = lay.block
    if not B:
        b = slice(c0, c1) if lay.scale_shape[1] > 1 else slice(0, 1)
        yield cut(slice(c0, c1), b)
        return
    head_end = min(c1, -(-c0 // B) * B)
    if head_end > c0:  # partial block at the start
        yield cut(slice(c0, head_end), slice(c0 // B, c0 // B + 1))
    start = max(c0, head_end)
    mid_end = max(start, c1 // B * B)
    if mid_end > start:  # whole blocks
        yield cut(slice(start, mid_end), slice(start // B, mid_end // B), B)
    if c1 > mid_end >= start:  # partial (ragged or cut) block at the end
        yield cut(slice(mid_end, c1), slice(mid_end // B, mid_end // B + 1))


def chunks(lay: Layout, target: int | None = None) -> list[tuple[int, int, int, int, int, int]]:
    """Slices (p0, p1, c0, c1, q0, q1) of about ``target`` (default CHUNK) elements covering
    (P, C, Q)."""
    target = target or CHUNK
    P, C, Q = lay.P, lay.C, lay.Q
    if P * C * Q == 0:
        return []
    if target >= C * Q:
        k = max(1, target // (C * Q))
        return [(p, min(P, p + k), 0, C, 0, Q) for p in range(0, P, k)]
    if target >= Q:
        k = max(1, target // Q)
        if lay.block and k > lay.block:
            k -= k % lay.block  # chunks hold whole blocks
        return [(p, p + 1, c, min(C, c + k), 0, Q) for p in range(P) for c in range(0, C, k)]
    return [
        (p, p + 1, c, c + 1, q, min(Q, q + target))
        for p in range(P)
        for c in range(C)
        for q in range(0, Q, target)
    ]


def thread_count(threads: int | None = None) -> int:
    """Threads to use: ``threads``, else $QLREWRITE_THREADS, else the usable cores."""
    if threads is None:
        env = os.environ.get("QLREWRITE_THREADS", "").strip()
        if env:
            try:
                threads = int(env)
            except ValueError as err:
                raise ValueError(f"QLREWRITE_THREADS must be an integer, got {env!r}") from err
        else:
            try:
                threads = len(os.sched_getaffinity(0))
            except AttributeError:  # pragma: no cover - not Linux
                threads = os.cpu_count() or 1
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return threads


def run_chunks(
    work: Callable[[tuple[int, int, int, int, int, int]], None],
    plan: list[tuple[int, int, int, int, int, int]],
    threads: int | None,
) -> None:
    """Run ``work`` on every chunk, on a shared pool when there are several chunks."""
    n = min(thread_count(threads), len(plan))
    if n <= 1:
        _walk(work, plan)
        return
    with _pools_lock:
        pool = _pools.get(n)
        if pool is None:
            pool = _pools[n] = ThreadPoolExecutor(n, thread_name_prefix="qlrewrite-kernel")
    # one task per thread, all pulling from one iterator: a thread slowed down by other
    # processes just takes fewer chunks (list iterators are safe to share under the GIL)
    shared = iter(plan)
    futures = [pool.submit(_walk, work, shared) for _ in range(n)]
    for future in futures:
        future.result()


def _walk(work: Callable[[tuple[int, int, int, int, int, int]], None], plan: Iterable) -> None:
    # overflow to inf and NaN are results here, not errors (errstate is per thread)
    with np.errstate(all="ignore"):
        for chunk in plan:
            work(chunk)


def scratch(shape: tuple[int, ...], dtype: np.dtype = _F32, slot: int = 0) -> np.ndarray:
    """A per-thread reusable temporary of ``shape`` (contiguous, uninitialised)."""
    n = math.prod(shape)
    key = (slot, np.dtype(dtype))
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = {}
    buf = bufs.get(key)
    if buf is None or buf.size < n:
        buf = bufs[key] = np.empty(max(n, CHUNK), dtype)
    return buf[:n].reshape(shape)


def output_array(out: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``out`` checked against shape and type, or a new array."""
    if out is None:
        return np.empty(shape, dtype)
    if out.shape != tuple(shape) or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(
            f"out must be a C-contiguous {dtype} array of shape {tuple(shape)}, "
            f"got {out.dtype} {out.shape}"
        )
    return out
