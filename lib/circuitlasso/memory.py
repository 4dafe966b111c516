"""Memory budgets shared by every stage: a budget in GiB, batches sized by the bytes each item
allocates, and the error raised before any work when even one item cannot fit."""

from __future__ import annotations

import math

GIB = 2**30
PLANNED_SHARE = 0.8
"""Share of a budget that batches are planned in; the rest absorbs what the plan does not
count (conversion copies of the inputs, the allocator's slack)."""
MAX_BATCH = 8192
"""Most items in one batch, whatever the budget (larger batches stop paying off)."""


class MemoryBudgetError(MemoryError):
    """Work cannot run within its memory budget. Raised before the work starts."""


def budget_bytes(memory_gib: float) -> int:
    """The budget in bytes; a clear error for anything but a positive, finite number of GiB."""
    if not (isinstance(memory_gib, int | float) and math.isfinite(memory_gib) and memory_gib > 0):
        raise ValueError(f"memory_gib must be a positive number of GiB, got {memory_gib!r}")
    return int(memory_gib * GIB)


def batch_size(available: int, per_item: int) -> int:
    """Items per batch when each allocates `per_item` bytes: at least 1, at most MAX_BATCH."""
    return max(1, min(MAX_BATCH, available // max(1, per_item)))


def gib(n_bytes: float) -> str:
    """Bytes as GiB for messages: '1.25 GiB'."""
    return f"{n_bytes / GIB:.2f} GiB"
