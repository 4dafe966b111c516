"""The memory budget of a solve: what a problem holds, what a batch of outputs allocates.

A Lasso solve holds its problem (the scaled X, the targets and, when it fits, a dense Gram) and
the per-output working sets, and allocates work tensors for each batch of outputs: a full
gradient per output in the certificate pass, Gram blocks of K^2 entries per output (and FISTA's
copies of them) in the solve pass. Batches are sized by those bytes, so the peak stays within
`memory_gib` for any p, d, density and working-set size. A solve whose problem and smallest
batch cannot fit says so before any work (`MemoryBudgetError`); a working set that would outgrow
the budget stops growing, and its output is reported as not converged.
"""

from __future__ import annotations

import math

GIB = 2**30
DEFAULT_MEMORY_GIB = 8.0
"""Default budget of a solve, in GiB (2**30 bytes)."""
PLANNED_SHARE = 0.8
"""Share of the budget that batches are planned in; the rest absorbs what the plan does not
count (conversion copies of the inputs, the allocator's slack)."""
MAX_BATCH = 8192
"""Most outputs in one batch, whatever the budget (larger batches stop paying off)."""


class MemoryBudgetError(MemoryError):
    """A solve cannot run within its memory budget. Raised before the solve starts."""


def budget_bytes(memory_gib: float) -> int:
    """The budget in bytes; a clear error for anything but a positive, finite number of GiB."""
    if not (isinstance(memory_gib, int | float) and math.isfinite(memory_gib) and memory_gib > 0):
        raise ValueError(f"memory_gib must be a positive number of GiB, got {memory_gib!r}")
    return int(memory_gib * GIB)


def gram_share(memory: int) -> int:
    """Most bytes a dense Gram may take within a budget of `memory` bytes."""
    return int(0.4 * memory)


def batch_size(available: int, per_output: int) -> int:
    """Outputs per batch when each allocates `per_output` bytes: at least 1, at most MAX_BATCH."""
    return max(1, min(MAX_BATCH, available // max(1, per_output)))


def gib(n_bytes: float) -> str:
    """Bytes as GiB for messages: '1.25 GiB'."""
    return f"{n_bytes / GIB:.2f} GiB"
