"""The batched Lasso path (`circuitlasso.solve.homotopy`) against scikit-learn, in its corners,
and as the start of the component problem's block Lasso when observations are few."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso

from circuitlasso.circuits.components import standardize
from circuitlasso.collect import collect_nodes
from circuitlasso.evaluation.cost import build_model, gpt2_family, random_prompt_pairs
from circuitlasso.evaluation.solver_check import lasso_objective
from circuitlasso.solve import block, block_lasso, lam_max
from circuitlasso.solve.homotopy import lasso_path_to


def path_coef(x: np.ndarray, y: np.ndarray, lam: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """(p, q) coefficients of `lasso_path_to` on float64 copies, every output at its lam."""
    t = torch.from_numpy
    path = lasso_path_to(t(x), t(y), t(lam), t(omega), gram=t(x.T @ x))
    assert bool(path.reached.all())
    coef = np.zeros((x.shape[1], y.shape[1]))
    for j in range(y.shape[1]):
        np.add.at(coef[:, j], path.W[j].numpy(), path.b[j].numpy())
    return coef


def sklearn_coef(x: np.ndarray, y: np.ndarray, lam: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """The weighted Lasso through scikit-learn: columns divided by their weights, coefficients
    divided back."""
    coef = np.zeros((x.shape[1], y.shape[1]))
    for j in range(y.shape[1]):
        fit = Lasso(alpha=lam[j], fit_intercept=False, tol=1e-14, max_iter=10**6)
        coef[:, j] = fit.fit(x / omega, y[:, j]).coef_ / omega
    return coef


@pytest.mark.parametrize("M, p", [(12, 40), (30, 30), (40, 12)])
def test_the_path_ends_at_the_lasso_solution(M: int, p: int) -> None:
    """Gaussian columns (a unique solution), weighted penalties, several lam per batch."""
    rng = np.random.default_rng(M + p)
    x = rng.standard_normal((M, p))
    y = x[:, :3] @ rng.standard_normal((3, 5)) + 0.3 * rng.standard_normal((M, 5))
    omega = rng.uniform(0.5, 2.0, p)
    top = np.abs(x.T @ y / M / omega[:, None]).max(0)
    lam = top * np.array([0.5, 0.1, 0.03, 0.01, 2.0])  # the last one is above lam_max: b = 0
    ours = path_coef(x, y, lam, omega)
    np.testing.assert_allclose(ours, sklearn_coef(x, y, lam, omega), atol=1e-7)
    assert not ours[:, -1].any()


def test_collinear_and_duplicate_columns_reach_the_optimal_objective() -> None:
    """Duplicated and collinear columns and a zero column: the solution is not unique, the
    objective is; a feature that would join in the span of the active ones is left out."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((15, 20))
    x = np.column_stack([base, base[:, :4], -3 * base[:, 4:6], np.zeros(15)])
    x /= np.maximum(np.linalg.norm(x, axis=0), 1e-300) / np.sqrt(15)
    x[:, -1] = 0.0
    y = base[:, :6] @ rng.standard_normal((6, 4))
    lam = np.abs(x.T @ y / 15).max(0) * np.array([0.2, 0.05, 0.01, 0.001])
    ours = path_coef(x, y, lam, np.ones(x.shape[1]))
    best = sklearn_coef(x, y, lam, np.ones(x.shape[1]))
    gain = lasso_objective(x, y, ours, 0.0) - lasso_objective(x, y, best, 0.0)
    penalty = lam * (np.abs(ours).sum(0) - np.abs(best).sum(0))
    scale = (y**2).sum(0) / 15
    assert np.all((gain + penalty) / scale <= 1e-9)


def test_a_zero_target_stays_at_zero() -> None:
    x = np.random.default_rng(0).standard_normal((6, 10))
    coef = path_coef(x, np.zeros((6, 2)), np.array([0.0, 0.1]), np.ones(10))
    assert not coef.any()


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


def test_few_observations_start_the_block_lasso_from_the_path(few_prompt_components) -> None:
    """Each child's outputs are certified at the path's end, with no first-order iteration,
    and every objective is scikit-learn's within the certified gap; with the path switched off
    the working sets reach the same objectives to their tolerance."""
    x, sizes, parents, lam = few_prompt_components
    assert x.shape[0] <= block.PATH_MAX_OBS
    result = block_lasso(x, sizes, parents, lam, normalize=False, tol=1e-6, dtype=torch.float64)
    assert bool(result.converged.all()) and int(result.n_iter.max()) == 0
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
    scale = (x**2).sum(0) / x.shape[0]
    try:
        block.PATH_MAX_OBS = 0
        working_sets = block_lasso(
            x, sizes, parents, lam, normalize=False, tol=1e-6, dtype=torch.float64
        )
    finally:
        block.PATH_MAX_OBS = 64
    assert int(working_sets.n_iter.max()) > 0
    difference = (result.objective - working_sets.objective) / scale.clamp_min(1e-300)
    assert float(difference.max()) <= 1e-12 and float(difference.min()) >= -1e-6
