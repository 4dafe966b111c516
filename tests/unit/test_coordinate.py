"""Coordinate descent (`circuitlasso.solve.coordinate`, the working sets' inner solver on the
CPU) against scikit-learn in its corners, against FISTA on the same subproblems, and the block
Lasso of model components with few observations, where it does most of the work."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso

from circuitlasso.circuits.components import standardize
from circuitlasso.collect import collect_nodes
from circuitlasso.data.random_models import build_model, gpt2_family, random_prompt_pairs
from circuitlasso.evaluation.solver_check import lasso_objective
from circuitlasso.solve import block_lasso, lam_max
from circuitlasso.solve.coordinate import coordinate_descent
from circuitlasso.solve.fista import Subproblems, fista

TOL = 1e-13
"""Absolute gap tolerance of the direct solves, relative to ||y||^2."""


def subproblems(x: np.ndarray, y: np.ndarray, lam: np.ndarray, omega: np.ndarray):  # type: ignore[no-untyped-def]
    """The Lasso of each column of y (M, q) on x (M, p) as `coordinate_descent`'s problems in
    the sum scale: Q = X^T X, q = X^T y_j, yty = ||y_j||^2, w = M lam_j omega."""
    M, n_out = y.shape
    t = torch.from_numpy
    Q = t(np.broadcast_to(x.T @ x, (n_out, x.shape[1], x.shape[1])).copy())
    q = t((x.T @ y).T.copy())
    yty = t((y**2).sum(0))
    w = t(M * lam[:, None] * omega[None, :])
    return Subproblems(Q, q, yty, w), torch.zeros_like(q), TOL * yty.clamp_min(1.0)


def coordinate_coef(x: np.ndarray, y: np.ndarray, lam: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """(p, q) coefficients of `coordinate_descent`, every output at its lam, all certified."""
    b, epochs, converged = coordinate_descent(*subproblems(x, y, lam, omega), max_iter=100_000)
    assert bool(converged.all()), epochs
    return b.numpy().T


def sklearn_coef(x: np.ndarray, y: np.ndarray, lam: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """The weighted Lasso through scikit-learn: columns divided by their weights, coefficients
    divided back."""
    coef = np.zeros((x.shape[1], y.shape[1]))
    for j in range(y.shape[1]):
        fit = Lasso(alpha=lam[j], fit_intercept=False, tol=1e-14, max_iter=10**6)
        coef[:, j] = fit.fit(x / omega, y[:, j]).coef_ / omega
    return coef


@pytest.mark.parametrize("M, p", [(12, 40), (30, 30), (40, 12)])
def test_coordinate_descent_reaches_the_lasso_solution(M: int, p: int) -> None:
    """Gaussian columns (a unique solution), weighted penalties, several lam per batch."""
    rng = np.random.default_rng(M + p)
    x = rng.standard_normal((M, p))
    y = x[:, :3] @ rng.standard_normal((3, 5)) + 0.3 * rng.standard_normal((M, 5))
    omega = rng.uniform(0.5, 2.0, p)
    top = np.abs(x.T @ y / M / omega[:, None]).max(0)
    lam = top * np.array([0.5, 0.1, 0.03, 0.01, 2.0])  # the last one is above lam_max: b = 0
    ours = coordinate_coef(x, y, lam, omega)
    np.testing.assert_allclose(ours, sklearn_coef(x, y, lam, omega), atol=1e-6)
    assert not ours[:, -1].any()


def test_collinear_and_duplicate_columns_reach_the_optimal_objective() -> None:
    """Duplicated and collinear columns and a zero column: the solution is not unique, the
    objective is; copies of a column (up to sign, after scaling) share its weight evenly."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((15, 20))
    x = np.column_stack([base, base[:, :4], -3 * base[:, 4:6], np.zeros(15)])
    x /= np.maximum(np.linalg.norm(x, axis=0), 1e-300) / np.sqrt(15)
    x[:, -1] = 0.0
    y = base[:, :6] @ rng.standard_normal((6, 4))
    lam = np.abs(x.T @ y / 15).max(0) * np.array([0.2, 0.05, 0.01, 0.001])
    ours = coordinate_coef(x, y, lam, np.ones(x.shape[1]))
    best = sklearn_coef(x, y, lam, np.ones(x.shape[1]))
    gain = lasso_objective(x, y, ours, 0.0) - lasso_objective(x, y, best, 0.0)
    penalty = lam * (np.abs(ours).sum(0) - np.abs(best).sum(0))
    scale = (y**2).sum(0) / 15
    assert np.all((gain + penalty) / scale <= 1e-9)
    assert not ours[-1].any()
    # of the many solutions, the one that splits weight evenly between copies of a column
    problems, b0, _ = subproblems(x, y, lam, np.ones(x.shape[1]))
    even, _, converged = coordinate_descent(problems, b0, 1e-9 * problems.yty)
    even = even.numpy().T
    assert bool(converged.all()) and np.abs(even[:6]).sum() > 0
    np.testing.assert_allclose(even[:4], even[20:24], rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(even[4:6], -even[24:26], rtol=1e-4, atol=1e-9)


def test_a_zero_target_stays_at_zero() -> None:
    x = np.random.default_rng(0).standard_normal((6, 10))
    coef = coordinate_coef(x, np.zeros((6, 2)), np.array([0.0, 0.1]), np.ones(10))
    assert not coef.any()


def test_each_problem_is_solved_on_its_own_and_fista_agrees() -> None:
    """A problem gives the same coefficients to the bit alone as in a batch; FISTA (the inner
    solver on a GPU) reaches the same objectives within the tolerance, with both stop rules."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((20, 60))
    y = x[:, :8] @ rng.standard_normal((8, 6)) + 0.1 * rng.standard_normal((20, 6))
    lam = np.abs(x.T @ y / 20).max(0) * 0.05
    problems, b0, tol = subproblems(x, y, lam, np.ones(60))
    b, _, _ = coordinate_descent(problems, b0, tol)
    Q, q, yty, w = problems.Q, problems.q, problems.yty, problems.w
    alone, _, _ = coordinate_descent(
        Subproblems(Q[2:3], q[2:3], yty[2:3], w[2:3]), b0[2:3], tol[2:3]
    )
    assert torch.equal(alone[0], b[2])
    f_cd = lasso_objective(x, y, b.numpy().T, 0.0) + lam * np.abs(b.numpy()).sum(1)
    for stop, loose in (("gap", 1e-9), ("objective", 1e-6)):
        stop_tol = torch.full_like(tol, 1e-9) if stop == "objective" else tol
        b_f, _, ok = fista(problems, b0, stop_tol, stop=stop, max_iter=100_000)
        f_f = lasso_objective(x, y, b_f.numpy().T, 0.0) + lam * np.abs(b_f.numpy()).sum(1)
        assert bool(ok.all())
        np.testing.assert_allclose(f_cd, f_f, rtol=loose)
    b_o, _, ok = coordinate_descent(problems, b0, torch.full_like(tol, 1e-12), stop="objective")
    f_o = lasso_objective(x, y, b_o.numpy().T, 0.0) + lam * np.abs(b_o.numpy()).sum(1)
    assert bool(ok.all())
    np.testing.assert_allclose(f_o, f_cd, rtol=1e-6)


def test_an_unmet_tolerance_is_reported() -> None:
    """Stopped after one epoch, problems far from their optimum say they did not converge."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((10, 30))
    y = x @ rng.standard_normal((30, 3))
    lam = np.abs(x.T @ y / 10).max(0) * 1e-3
    b, epochs, converged = coordinate_descent(*subproblems(x, y, lam, np.ones(30)), max_iter=1)
    assert not bool(converged.any()) and epochs.tolist() == [1, 1, 1]


@pytest.fixture(scope="module")
def few_prompt_components() -> tuple[torch.Tensor, list[int], list[list[int]], torch.Tensor]:
    """Standardized component activations of a GPT-2-family model on 6 prompt pairs (12
    observations, 7 blocks of 64 columns; heads of rank at most 32 within their block), and
    lam = 0.05 of each child's lam_max."""
    model = build_model(gpt2_family(1, 128), n_ctx=8)
    prompts = random_prompt_pairs(6, 8, model.cfg.d_vocab)
    acts = collect_nodes(model, torch.cat([prompts.clean, prompts.corrupted]))
    x = standardize(acts.X)
    offsets = np.cumsum([0, *acts.block_sizes])
    lam = torch.ones(x.shape[1], dtype=torch.float64)
    for j, parents in enumerate(acts.parents):
        if parents:
            cols = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in parents])
            child = slice(offsets[j], offsets[j + 1])
            lam[child] = 0.05 * lam_max(x[:, cols], x[:, child], normalize=False).max()
    return x, acts.block_sizes, acts.parents, lam


@pytest.mark.slow  # a reference fit per child
def test_block_lasso_of_few_observation_components_is_certified(few_prompt_components) -> None:
    """Every output is certified, and its objective is scikit-learn's within the certified
    gap (fewer observations than predictors: the solution is not unique, the objective is)."""
    x, sizes, parents, lam = few_prompt_components
    result = block_lasso(x, sizes, parents, lam, normalize=False, tol=1e-6, dtype=torch.float64)
    assert bool(result.converged.all())
    offsets = np.cumsum([0, *sizes])
    X = x.numpy()
    for j, allowed in enumerate(parents):
        if not allowed:
            continue
        cols = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in allowed])
        child = slice(offsets[j], offsets[j + 1])
        reference = sklearn_coef(X[:, cols], X[:, child], lam[child].numpy(), np.ones(cols.size))
        best = lasso_objective(X[:, cols], X[:, child], reference, 0.0) + lam[child].numpy() * (
            np.abs(reference).sum(0)
        )
        ours = result.objective[child].numpy()
        assert np.all(ours - best <= result.gap[child].numpy() + 1e-12)
