"""Multi-output Lasso: `lasso`, `lam_max` and the warm-started `lasso_path`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

import torch
from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from torch import Tensor
from typing_extensions import Unpack

from circuitlasso.memory import budget_bytes
from circuitlasso.solve._inputs import Matrix
from circuitlasso.solve.lasso_sets import (
    WorkingSetSolution,
    certificate_batch,
    solve_working_sets,
)
from circuitlasso.solve.options import (
    LAM_MAX,
    LASSO,
    LamMaxOptions,
    LassoOptions,
    SolverOptions,
    settle,
)
from circuitlasso.solve.prepare import Prepared, check_lam, prepare, scaled_init
from circuitlasso.solve.screen import score


class ConvergenceWarning(SklearnConvergenceWarning):
    """Some outputs did not reach the requested tolerance within max_iter (scikit-learn's
    warning class, so ``warnings.filterwarnings("ignore", category=ConvergenceWarning)`` with
    either class filters it)."""


@dataclass(frozen=True, kw_only=True)
class OutputCertificates:
    """Per-output intercepts and certificates of Lasso solves, each (d,) (0-d for 1-D y):
    intercept, gap, objective, lam float64; n_iter inner iterations (coordinate-descent epochs
    on the CPU, FISTA steps on a GPU); converged bool."""

    intercept: Tensor
    gap: Tensor
    objective: Tensor
    n_iter: Tensor
    converged: Tensor
    lam: Tensor


@dataclass(frozen=True, kw_only=True)
class LassoResult(OutputCertificates):
    """Solution of a multi-output Lasso (d outputs, p predictors).

    coef: (p, d) dense tensor for dense X, sparse COO tensor for sparse X; (p,) for 1-D y.
    The certificates as `OutputCertificates`: gap is the certified duality gap in objective
    units (the mean-scaled objective) of the coefficients returned, on X and Y as read in the
    solve's dtype, computed in float64 (up to float64 rounding; with dtype float32 the
    coefficients are then rounded to float32); an output is converged when
    gap <= tol * ||y_c||^2 / M (stop="gap"), or, with stop="objective", when its objective
    stalled with no KKT violator (never when max_iter cut it short). With no usable predictor
    (every column constant) b = 0 is exact: gap 0.
    """

    coef: Tensor

    @property
    def support_size(self) -> Tensor:
        """Nonzero coefficients per output: (d,) (a 0-d tensor for 1-D y)."""
        if self.coef.layout == torch.strided:
            return (self.coef != 0).sum(0)
        nonzero = self.coef.values() != 0
        return torch.bincount(self.coef.indices()[1][nonzero], minlength=self.coef.shape[1])


@dataclass(frozen=True)
class LassoPath:
    """Warm-started solutions along a decreasing grid of penalties (n_lams of them).

    lams, intercepts, objective, gap, support_size, n_iter: (n_lams, d); coefs: one coefficient
    tensor per penalty, laid out as `LassoResult.coef`.
    """

    lams: Tensor
    coefs: list[Tensor]
    intercepts: Tensor
    objective: Tensor
    gap: Tensor
    support_size: Tensor
    n_iter: Tensor


def lasso(
    X: Matrix,
    Y: Matrix,
    lam: float | Matrix,
    *,
    coef_init: Matrix | None = None,
    **options: Unpack[LassoOptions],
) -> LassoResult:
    """Solve min_A 1/(2M) ||Y - X A - 1 b^T||_F^2 + sum_j lam_j ||A_j||_1 column by column.

    X: (M, p) dense or sparse; Y: (M, d) dense or sparse, or (M,); lam: scalar or (d,).
    normalize=True (App. B.1) penalizes coefficients of unit-norm predictor columns, i.e.
    ``lam_j * sum_k ||x_k - mean(x_k)|| |A_kj|`` in the units returned; normalize=False solves the
    plain Lasso (scikit-learn's `Lasso(alpha=lam)`), using the scaling only as preconditioning.
    stop="gap" stops output j once its duality gap <= tol * ||y_j - mean||^2 / M (the rule of
    scikit-learn and celer); stop="objective" stops on a relative objective decrease < tol
    (the paper's rule) once no predictor outside the working set violates the KKT conditions.
    coef_init: (p, d) warm start. memory_gib: the solve's memory budget in GiB: batches of
    outputs are sized to fit it, and a problem that cannot fit raises `MemoryBudgetError`
    before any work (`circuitlasso.solve.memory`). options: any keywords of `LassoOptions`,
    the others at their defaults `options.LASSO` (see `options.SolverOptions`).
    """
    settings = settle(LASSO, LassoOptions, options).checked()
    prepared, memory = _prepare(X, Y, settings)
    lam_t = check_lam(lam, prepared)
    init = scaled_init(coef_init, prepared) if coef_init is not None else None
    solution = solve_working_sets(
        prepared.problem, lam_t, prepared.omega(settings.normalize), settings, memory, init
    )
    return to_result(prepared, solution, lam_t, settings.max_iter)


def _prepare(X: Matrix, Y: Matrix, settings: SolverOptions) -> tuple[Prepared, int]:
    """The prepared problem of a Lasso solve and its memory budget in bytes."""
    return prepare(X, Y, settings), budget_bytes(settings.memory_gib)


def to_result(
    prepared: Prepared, solution: WorkingSetSolution, lam: Tensor, max_iter: int
) -> LassoResult:
    """Coefficients in the user's units, intercepts, and the per-output certificates."""
    n_bad = int((~solution.converged).sum())
    if n_bad:
        warnings.warn(
            f"{n_bad} of {solution.converged.numel()} outputs did not reach the tolerance "
            f"within max_iter={max_iter}",
            ConvergenceWarning,
            stacklevel=3,
        )
    W, b = solution.W, solution.b
    outputs, slots = (b != 0).nonzero(as_tuple=True)
    features = W[outputs, slots]
    values = b[outputs, slots].double() / prepared.norms[features]
    shape = (prepared.n_features, prepared.problem.n_outputs)
    user_features = prepared.keep[features]
    intercept = prepared.y_mean.clone().index_add_(
        0, outputs, -prepared.x_mean[user_features] * values
    )
    dtype = prepared.problem.dtype
    if prepared.sparse and not prepared.was_1d:
        index = torch.stack([user_features, outputs])
        coef = torch.sparse_coo_tensor(index, values.to(dtype), shape).coalesce()
    else:
        coef = torch.zeros(shape, dtype=dtype, device=values.device)
        coef[user_features, outputs] = values.to(dtype)
    per_output = [intercept, solution.gap, solution.objective, solution.n_iter, solution.converged]
    per_output.append(lam)
    if prepared.was_1d:
        coef, per_output = coef[:, 0], [v[0] for v in per_output]
    names = [field.name for field in fields(OutputCertificates)]  # in the order of per_output
    return LassoResult(coef=coef, **dict(zip(names, per_output, strict=True)))


def lam_max(X: Matrix, Y: Matrix, **options: Unpack[LamMaxOptions]) -> Tensor:
    """(d,) smallest lam for which the all-zero solution is optimal, per output (0-d for 1-D y).

    ``lam_max_j = max_k |x~_k^T y_cj| / (M omega_k)``, with x~_k the centered unit-norm column and
    omega_k = 1 (normalize=True) or 1/||x_k - mean|| (normalize=False). options: any keywords
    of `LamMaxOptions`, the others at `options.LAM_MAX`; batches of outputs fit memory_gib.
    """
    settings = settle(LAM_MAX, LamMaxOptions, options)
    prepared = prepare(X, Y, settings, gram_blocks=False)
    out = prepared_lam_max(prepared, settings.normalize, budget_bytes(settings.memory_gib))
    return out[0] if prepared.was_1d else out


def prepared_lam_max(prepared: Prepared, normalize: bool, memory: int) -> Tensor:
    """(d,) lam_max of every output of a prepared problem: its largest KKT score at b = 0,
    in batches of outputs sized within `memory` bytes."""
    problem = prepared.problem
    omega = prepared.omega(normalize)
    device = omega.device
    out = torch.zeros(problem.n_outputs, dtype=torch.float64, device=device)
    step = certificate_batch(problem, memory)
    for start in range(0, problem.n_outputs, step):
        cols = torch.arange(start, min(start + step, problem.n_outputs), device=device)
        W = torch.zeros(cols.numel(), 0, dtype=torch.int64, device=device)
        b = torch.zeros(W.shape, dtype=problem.dtype, device=device)
        grad, _, _ = problem.gradient(cols, W, b)
        ones = torch.ones(cols.numel(), dtype=torch.float64, device=device)
        out[cols] = score(grad, omega, W, W.bool(), ones).max_score / problem.n_obs
    return out


def lasso_path(
    X: Matrix,
    Y: Matrix,
    *,
    n_lams: int = 100,
    eps: float = 1e-3,
    lams: Matrix | None = None,
    **options: Unpack[LassoOptions],
) -> LassoPath:
    """Lasso along lam_max_j * eps ** (i / (n_lams - 1)), i = 0..n_lams-1, warm-started (App. B.1).

    lams: optional grid instead, (n_lams,) shared by all outputs or (n_lams, d); solved in the
    order given (decreasing is what makes warm starts pay). Other arguments as in `lasso`.
    """
    settings = settle(LASSO, LassoOptions, options).checked()
    prepared, memory = _prepare(X, Y, settings)
    d = prepared.problem.n_outputs
    if lams is None:
        if n_lams < 1 or not 0 < eps <= 1:
            raise ValueError(f"need n_lams >= 1 and 0 < eps <= 1, got {n_lams} and {eps}")
        top = prepared_lam_max(prepared, settings.normalize, memory)
        factors = eps ** torch.linspace(0, 1, n_lams, dtype=torch.float64, device=top.device)
        grid = factors.unsqueeze(1) * top.unsqueeze(0)
    else:
        grid = torch.as_tensor(lams, dtype=torch.float64)
        grid = grid.unsqueeze(1).expand(-1, d) if grid.dim() == 1 else grid
        if grid.dim() != 2 or grid.shape[1] != d:
            raise ValueError(
                f"lams must have shape (n_lams,) or (n_lams, {d}), got {tuple(grid.shape)}"
            )
    omega = prepared.omega(settings.normalize)
    results, init = [], None
    for row in grid:
        lam_t = check_lam(row, prepared)
        solution = solve_working_sets(prepared.problem, lam_t, omega, settings, memory, init)
        init = (solution.W, solution.b)
        results.append(to_result(prepared, solution, lam_t, settings.max_iter))

    def stack(name: str) -> Tensor:
        return torch.stack([getattr(r, name) for r in results])

    return LassoPath(
        lams=stack("lam"),
        coefs=[r.coef for r in results],
        intercepts=stack("intercept"),
        objective=stack("objective"),
        gap=stack("gap"),
        support_size=torch.stack([r.support_size for r in results]),
        n_iter=stack("n_iter"),
    )
