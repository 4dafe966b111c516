"""The memory budget of a solve: what a problem holds, what a batch of outputs allocates.

A Lasso solve holds its problem (the scaled X, the targets and, when it fits, a dense Gram) and
the per-output working sets, and allocates work tensors for each batch of outputs: a full
gradient per output in the certificate pass, Gram blocks of K^2 entries per output (and FISTA's
copies of them) in the solve pass. Batches are sized by those bytes, so the peak stays within
`memory_gib` for any p, d, density and working-set size (batches are sized with
`circuitlasso.memory`). A solve whose problem and smallest batch cannot fit says so before any
work (`MemoryBudgetError`); a working set that would outgrow the budget stops growing, and its
output is reported as not converged.
"""

from __future__ import annotations

DEFAULT_MEMORY_GIB = 8.0
"""Default budget of a solve, in GiB (2**30 bytes)."""
GRAM_SHARE = 0.4
"""Share of a budget a dense Gram may take: the rest holds X, the targets, the working sets and
a batch's work, which at the paper's shapes take about as much again."""


def gram_share(memory: int) -> int:
    """Most bytes a dense Gram may take within a budget of `memory` bytes."""
    return int(GRAM_SHARE * memory)
