"""Multi-output Lasso: `lasso`, `lam_max` and the warm-started `lasso_path`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
from torch import Tensor

from circuitlasso.memory import batch_size, budget_bytes
from circuitlasso.solve._inputs import Matrix
from circuitlasso.solve.fista import StopRule
from circuitlasso.solve.memory import DEFAULT_MEMORY_GIB, gram_share
from circuitlasso.solve.prepare import Prepared, check_lam, prepare, scaled_init
from circuitlasso.solve.screen import score
from circuitlasso.solve.workset import SCORE_BYTES, WorkingSetSolution, solve_working_sets


class ConvergenceWarning(SklearnConvergenceWarning):
    """Some outputs did not reach the requested tolerance within max_iter (scikit-learn's
    warning class, so ``warnings.filterwarnings("ignore", category=ConvergenceWarning)`` with
    either class filters it)."""


@dataclass(frozen=True)
class LassoResult:
    """Solution of a multi-output Lasso (d outputs, p predictors).

    coef: (p, d) dense tensor for dense X, sparse COO tensor for sparse X; (p,) for 1-D y.
    intercept, gap, objective, lam: (d,) float64; n_iter: (d,) inner iterations (coordinate-descent
    epochs on the CPU, FISTA steps on a GPU); converged: (d,)
    bool. gap is the certified duality gap in objective units (the mean-scaled objective) of
    the coefficients returned, on X and Y as read in the solve's dtype, computed in float64 (up
    to float64 rounding; with dtype float32 the coefficients are then rounded to float32); an
    output is converged when gap <= tol * ||y_c||^2 / M (stop="gap"), or, with
    stop="objective", when its objective stalled with no KKT violator (never when max_iter cut
    it short). With no usable predictor (every column constant) b = 0 is exact: gap 0.
    """

    coef: Tensor
    intercept: Tensor
    gap: Tensor
    objective: Tensor
    n_iter: Tensor
    converged: Tensor
    lam: Tensor

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


def _check_options(tol: float, stop: str, max_iter: int) -> None:
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    if stop not in ("gap", "objective"):
        raise ValueError(f"stop must be 'gap' or 'objective', got {stop!r}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")


def lasso(
    X: Matrix,
    Y: Matrix,
    lam: float | Matrix,
    *,
    fit_intercept: bool = False,
    normalize: bool = True,
    tol: float = 1e-6,
    stop: StopRule = "gap",
    max_iter: int = 20_000,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    coef_init: Matrix | None = None,
    memory_gib: float = DEFAULT_MEMORY_GIB,
    progress: bool = False,
) -> LassoResult:
    """Solve min_A 1/(2M) ||Y - X A - 1 b^T||_F^2 + sum_j lam_j ||A_j||_1 column by column.

    X: (M, p) dense or sparse; Y: (M, d) dense or sparse, or (M,); lam: scalar or (d,).
    normalize=True (App. B.1) penalizes coefficients of unit-norm predictor columns, i.e.
    lam_j * sum_k ||x_k - mean(x_k)|| |A_kj| in the units returned; normalize=False solves the
    plain Lasso (scikit-learn's `Lasso(alpha=lam)`), using the scaling only as preconditioning.
    stop="gap" stops output j once its duality gap <= tol * ||y_j - mean||^2 / M (the rule of
    scikit-learn and celer); stop="objective" stops on a relative objective decrease < tol
    (the paper's rule) once no predictor outside the working set violates the KKT conditions.
    coef_init: (p, d) warm start. memory_gib: the solve's memory budget in GiB: batches of
    outputs are sized to fit it, and a problem that cannot fit raises `MemoryBudgetError`
    before any work (`circuitlasso.solve.memory`).
    """
    _check_options(tol, stop, max_iter)
    memory = budget_bytes(memory_gib)
    prepared = prepare(
        X, Y, fit_intercept=fit_intercept, dtype=dtype, device=device, gram_bytes=gram_share(memory)
    )
    lam_t = check_lam(lam, prepared)
    init = scaled_init(coef_init, prepared) if coef_init is not None else None
    solution = solve_working_sets(
        prepared.problem,
        lam_t,
        prepared.omega(normalize),
        tol=tol,
        stop=stop,
        max_iter=max_iter,
        memory=memory,
        init=init,
        progress=progress,
    )
    return to_result(prepared, solution, lam_t, max_iter)


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
    fields = [intercept, solution.gap, solution.objective, solution.n_iter, solution.converged, lam]
    if prepared.was_1d:
        return LassoResult(coef[:, 0], *(f[0] for f in fields))
    return LassoResult(coef, *fields)


def lam_max(
    X: Matrix,
    Y: Matrix,
    *,
    fit_intercept: bool = False,
    normalize: bool = True,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """(d,) smallest lam for which the all-zero solution is optimal, per output (0-d for 1-D y).

    lam_max_j = max_k |x~_k^T y_cj| / (M omega_k), with x~_k the centered unit-norm column and
    omega_k = 1 (normalize=True) or 1/||x_k - mean|| (normalize=False).
    """
    prepared = prepare(X, Y, fit_intercept=fit_intercept, dtype=dtype, device=device)
    out = prepared_lam_max(prepared, normalize)
    return out[0] if prepared.was_1d else out


def prepared_lam_max(prepared: Prepared, normalize: bool) -> Tensor:
    """(d,) lam_max of every output of a prepared problem: its largest KKT score at b = 0."""
    problem = prepared.problem
    omega = prepared.omega(normalize)
    device = omega.device
    out = torch.zeros(problem.n_outputs, dtype=torch.float64, device=device)
    step = batch_size(2**28, problem.gradient_bytes() + SCORE_BYTES * problem.n_features)
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
    fit_intercept: bool = False,
    normalize: bool = True,
    tol: float = 1e-6,
    stop: StopRule = "gap",
    max_iter: int = 20_000,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    memory_gib: float = DEFAULT_MEMORY_GIB,
    progress: bool = False,
) -> LassoPath:
    """Lasso along lam_max_j * eps ** (i / (n_lams - 1)), i = 0..n_lams-1, warm-started (App. B.1).

    lams: optional grid instead, (n_lams,) shared by all outputs or (n_lams, d); solved in the
    order given (decreasing is what makes warm starts pay). Other arguments as in `lasso`.
    """
    _check_options(tol, stop, max_iter)
    memory = budget_bytes(memory_gib)
    prepared = prepare(
        X, Y, fit_intercept=fit_intercept, dtype=dtype, device=device, gram_bytes=gram_share(memory)
    )
    d = prepared.problem.n_outputs
    if lams is None:
        if n_lams < 1 or not 0 < eps <= 1:
            raise ValueError(f"need n_lams >= 1 and 0 < eps <= 1, got {n_lams} and {eps}")
        top = prepared_lam_max(prepared, normalize)
        factors = eps ** torch.linspace(0, 1, n_lams, dtype=torch.float64, device=top.device)
        grid = factors.unsqueeze(1) * top.unsqueeze(0)
    else:
        grid = torch.as_tensor(lams, dtype=torch.float64)
        grid = grid.unsqueeze(1).expand(-1, d) if grid.dim() == 1 else grid
        if grid.dim() != 2 or grid.shape[1] != d:
            raise ValueError(
                f"lams must have shape (n_lams,) or (n_lams, {d}), got {tuple(grid.shape)}"
            )
    omega = prepared.omega(normalize)
    results, init = [], None
    for row in grid:
        lam_t = check_lam(row, prepared)
        solution = solve_working_sets(
            prepared.problem,
            lam_t,
            omega,
            tol=tol,
            stop=stop,
            max_iter=max_iter,
            memory=memory,
            init=init,
            progress=progress,
        )
        init = (solution.W, solution.b)
        results.append(to_result(prepared, solution, lam_t, max_iter))

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
