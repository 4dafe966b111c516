"""Block-structured Lasso (paper Eq. 3): each child block regresses on its allowed parent blocks.

X (M, N) stacks the components in computation order, cut into blocks of `block_sizes`. Output
column t of child block j is regressed on the columns of the blocks in `parents[j]` only, so
forbidden coefficients are never variables: they are exactly 0.0 and no N x N mask exists while
solving (the decomposition of the App. A proof). Shared work: column statistics, the scaled
Gram (dense, or sparse for sparse X) and the scaled X are computed once for all child blocks.

Each child's outputs are solved by the working-set engine (`circuitlasso.solve.workset`), whose
inner solver on the CPU, coordinate descent, suits these small, dense, often rank-deficient
problems (fewer observations than predictors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from typing_extensions import Unpack

from circuitlasso.memory import MemoryBudgetError, budget_bytes, gib
from circuitlasso.solve._inputs import Matrix, as_matrix, per_output
from circuitlasso.solve._sparse import csr_rows, csr_transpose
from circuitlasso.solve.lasso import LassoResult, OutputCertificates, to_result
from circuitlasso.solve.lasso_sets import solve_working_sets
from circuitlasso.solve.memory import gram_share
from circuitlasso.solve.options import LASSO, LassoOptions, settle
from circuitlasso.solve.prepare import Prepared, check_lam, column_stats, has_gram
from circuitlasso.solve.problems import (
    DenseProblem,
    GramProblem,
    LassoProblem,
    SparseProblem,
    scaled_sparse,
)


def upper_triangular_parents(
    n_blocks: int, parallel_groups: Sequence[Sequence[int]] | None = None
) -> list[list[int]]:
    """parents[j] = every earlier block i < j, except blocks in the same parallel group as j.

    parallel_groups: disjoint lists of block indices computed in parallel (e.g. the heads of one
    attention layer), which therefore cannot feed each other.
    """
    if n_blocks < 1:
        raise ValueError(f"n_blocks must be >= 1, got {n_blocks}")
    group_of: dict[int, int] = {}
    for g, members in enumerate(parallel_groups or []):
        for block in members:
            if not 0 <= block < n_blocks:
                raise ValueError(
                    f"parallel group {g} names block {block}, outside 0..{n_blocks - 1}"
                )
            if block in group_of:
                raise ValueError(f"block {block} is in parallel groups {group_of[block]} and {g}")
            group_of[block] = g
    return [
        [i for i in range(j) if not (i in group_of and group_of.get(j) == group_of[i])]
        for j in range(n_blocks)
    ]


@dataclass(frozen=True, kw_only=True)
class BlockLassoResult(OutputCertificates):
    """Coefficients per allowed (parent block, child block) pair, and per-column certificates.

    coef[(i, j)]: (block_sizes[i], block_sizes[j]), dense or sparse COO like `LassoResult.coef`.
    The certificates (`OutputCertificates`) are (N,), indexed by the target column; columns of
    a block without parents have gap 0 and the all-zero objective.
    """

    block_sizes: tuple[int, ...]
    parents: tuple[tuple[int, ...], ...]
    coef: dict[tuple[int, int], Tensor]

    @property
    def offsets(self) -> list[int]:
        out = [0]
        for size in self.block_sizes:
            out.append(out[-1] + size)
        return out

    def to_dense(self) -> Tensor:
        """The full (N, N) coefficient matrix A, A[k, t] != 0 meaning column k feeds column t."""
        n, off = self.offsets[-1], self.offsets
        out = torch.zeros(n, n, dtype=self._dtype, device=self.lam.device)
        for (i, j), c in self.coef.items():
            block = c.to_dense() if c.layout != torch.strided else c
            out[off[i] : off[i + 1], off[j] : off[j + 1]] = block
        return out

    def to_sparse(self) -> Tensor:
        """The full (N, N) coefficient matrix as a coalesced sparse COO tensor."""
        n, off, device = self.offsets[-1], self.offsets, self.lam.device
        index = [torch.zeros(2, 0, dtype=torch.int64, device=device)]
        values = [torch.zeros(0, dtype=self._dtype, device=device)]
        for (i, j), c in self.coef.items():
            coo = (c.to_sparse_coo() if c.layout == torch.strided else c).coalesce()
            index.append(coo.indices() + torch.tensor([[off[i]], [off[j]]], device=device))
            values.append(coo.values())
        return torch.sparse_coo_tensor(torch.cat(index, 1), torch.cat(values), (n, n)).coalesce()

    @property
    def _dtype(self) -> torch.dtype:
        first = next(iter(self.coef.values()), None)
        return first.dtype if first is not None else torch.float32


def _check_blocks(
    n_columns: int, block_sizes: Sequence[int], parents: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    sizes = tuple(int(s) for s in block_sizes)
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(f"block_sizes must be positive integers, got {list(block_sizes)}")
    if sum(sizes) != n_columns:
        raise ValueError(f"block_sizes add up to {sum(sizes)} but X has {n_columns} columns")
    if len(parents) != len(sizes):
        raise ValueError(f"parents has {len(parents)} entries but there are {len(sizes)} blocks")
    checked = []
    for j, allowed in enumerate(parents):
        allowed = tuple(int(i) for i in allowed)
        for i in allowed:
            if not 0 <= i < len(sizes) or i == j:
                raise ValueError(
                    f"parents[{j}] names block {i}: must be another block in 0..{len(sizes) - 1}"
                )
        if len(set(allowed)) != len(allowed):
            raise ValueError(f"parents[{j}] repeats a block: {list(allowed)}")
        checked.append(allowed)
    return sizes, tuple(checked)


class _SharedDesign:
    """Column statistics and scaled X (or its Gram) computed once for all child blocks."""

    def __init__(self, x: Tensor, fit_intercept: bool, memory: int) -> None:
        self.x, self.fit_intercept, self.memory = x, fit_intercept, memory
        self.M, self.N = x.shape
        self.mean, self.norms = column_stats(x, fit_intercept)
        self.sparse = x.layout == torch.sparse_csr
        inverse = torch.where(self.norms > 0, 1 / self.norms, torch.zeros_like(self.norms))
        if self.sparse:
            self.x_t = csr_transpose(x)
            self.xs_t = csr_transpose(scaled_sparse(x.to(torch.float64), self.norms))
            self.mu = self.mean * inverse
        else:
            self.xc = (x.double() - self.mean) * inverse
            gram_bytes = gram_share(memory)
            self.gram = self.xc.t() @ self.xc if has_gram(self.N, self.N, gram_bytes) else None

    def problem(self, predictors: Tensor, targets: Tensor) -> LassoProblem:
        """Problem regressing columns `targets` on the (nonzero-norm) columns `predictors`."""
        if self.sparse:
            x_pred = csr_transpose(csr_rows(self.xs_t, predictors))
            mu = self.mu[predictors] if self.fit_intercept else None
            gram_bytes = gram_share(self.memory)
            targets_t = csr_rows(self.x_t, targets)
            return SparseProblem(x_pred, mu, targets_t, gram_bytes, self.x.dtype)
        if self.gram is not None:
            cross_t = self.gram[targets][:, predictors] * self.norms[targets][:, None]
            yty = self.norms[targets] ** 2
            gram = self.gram[predictors][:, predictors]
            x_pred = self.xc[:, predictors]
            return GramProblem(gram, cross_t, yty, self.M, self.x.dtype, x_scaled=x_pred)
        y_t = (self.xc[:, targets] * self.norms[targets]).t().contiguous()
        return DenseProblem(self.xc[:, predictors], y_t, self.x.dtype)


def check_coefficient_bytes(
    sizes: Sequence[int], parents: Sequence[Sequence[int]], item_bytes: int, memory: int
) -> None:
    """MemoryBudgetError, before any work, where the dense coefficient blocks that
    :func:`block_lasso` returns for a dense X (``size_i x size_j`` per allowed pair, of
    ``item_bytes`` each) exceed ``memory`` bytes. A sparse X gets sparse blocks."""
    needed = item_bytes * sum(sizes[i] * sizes[j] for j, ps in enumerate(parents) for i in ps)
    if needed > memory:
        raise MemoryBudgetError(
            f"the dense coefficient blocks of {len(sizes)} blocks ({sum(sizes)} columns) take "
            f"{gib(needed)}, more than memory_gib ({gib(memory)}); fit fewer or narrower "
            "blocks, one child at a time with `lasso`, or pass X sparse"
        )


def block_lasso(
    X: Matrix,
    block_sizes: Sequence[int],
    parents: Sequence[Sequence[int]],
    lam: float | Matrix,
    **options: Unpack[LassoOptions],
) -> BlockLassoResult:
    """Lasso of every column of X (M, N) on the columns of its block's allowed parent blocks.

    block_sizes: ints summing to N; parents[j]: allowed parent blocks of child block j (see
    `upper_triangular_parents`); lam: scalar or (N,) per target column. The options (the
    keywords of `LassoOptions`) and the objective as in `lasso`.
    """
    settings = settle(LASSO, LassoOptions, options).checked()
    fit_intercept = settings.fit_intercept
    device = torch.device(settings.device or "cpu")
    x, _ = as_matrix(X, "X", settings.dtype, device)
    sizes, allowed = _check_blocks(x.shape[1], block_sizes, parents)
    lam_all = per_output(lam, x.shape[1], "lam").to(device)
    memory = budget_bytes(settings.memory_gib)
    if x.layout != torch.sparse_csr:
        check_coefficient_bytes(sizes, allowed, x.element_size(), memory)
    shared = _SharedDesign(x, fit_intercept, memory)
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    N = x.shape[1]
    zeros = torch.zeros(N, dtype=torch.float64, device=device)
    certificates: dict[str, Any] = {  # per target column, as `OutputCertificates`
        "intercept": shared.mean.clone() if fit_intercept else zeros.clone(),
        "gap": zeros.clone(),
        "objective": shared.norms**2 / (2 * shared.M),
        "n_iter": torch.zeros(N, dtype=torch.int64, device=device),
        "converged": torch.ones(N, dtype=torch.bool, device=device),
    }
    coef: dict[tuple[int, int], Tensor] = {}
    for j, parent_blocks in enumerate(allowed):
        if not parent_blocks:
            continue
        targets = torch.arange(offsets[j], offsets[j + 1], device=device)
        columns = torch.cat(
            [torch.arange(offsets[i], offsets[i + 1], device=device) for i in parent_blocks]
        )
        keep = (shared.norms[columns] > 0).nonzero().squeeze(1)
        prepared = Prepared(
            problem=shared.problem(columns[keep], targets),
            keep=keep,
            norms=shared.norms[columns[keep]],
            x_mean=shared.mean[columns],
            y_mean=shared.mean[targets] if fit_intercept else zeros[targets],
            n_features=columns.numel(),
            sparse=shared.sparse,
            was_1d=False,
        )
        lam_j = check_lam(lam_all[targets], prepared)
        omega = prepared.omega(settings.normalize)
        solution = solve_working_sets(prepared.problem, lam_j, omega, settings, memory)
        result: LassoResult = to_result(prepared, solution, lam_j, settings.max_iter)
        start = 0
        for i in parent_blocks:
            rows = torch.arange(start, start + sizes[i], device=device)
            coef[(i, j)] = result.coef.index_select(0, rows)
            start += sizes[i]
        for name, values in certificates.items():
            values[targets] = getattr(result, name)
    return BlockLassoResult(
        block_sizes=sizes, parents=allowed, coef=coef, lam=lam_all, **certificates
    )
