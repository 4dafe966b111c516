"""Compiled kernels over a batch of independent outputs, run on torch's CPU threads.

A kernel compiled with ``numba.njit(nogil=True)`` takes its arrays and a range [lo, hi) of
the batch; `over_threads` splits the batch into contiguous ranges and runs them on a thread pool
(the kernels release the GIL), so that each output's result depends on its own data only, not
on how the batch was split.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

RANGES_PER_THREAD = 4
"""Ranges a batch is split into per thread: outputs differ in cost, so a thread that finishes
early takes another range."""


_pools: dict[int, ThreadPoolExecutor] = {}


def _pool(threads: int) -> ThreadPoolExecutor:
    """A pool of `threads` threads, kept for later calls (starting threads costs more than the
    smaller kernels)."""
    if threads not in _pools:
        _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="circuitlasso-kernel")
    return _pools[threads]


def over_threads(kernel: Callable[..., None], n: int, *arrays: Any) -> None:
    """Run ``kernel(*arrays, lo, hi)`` over [0, n) in ranges, on `torch.get_num_threads()`
    threads."""
    threads = min(torch.get_num_threads(), n)
    if threads <= 1:
        if n:
            kernel(*arrays, 0, n)
        return
    step = max(1, -(-n // (threads * RANGES_PER_THREAD)))
    pool = _pool(threads)
    jobs = [pool.submit(kernel, *arrays, lo, min(n, lo + step)) for lo in range(0, n, step)]
    for job in jobs:
        job.result()
