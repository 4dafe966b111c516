"""Degenerate inputs and the corners of the Lasso certificate, one regression test each: what
scikit-learn returns, or a ValueError that names the problem; never an arithmetic error or a
certificate the solver did not check."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.linear_model import Lasso

from circuitlasso.solve import ConvergenceWarning, block_lasso, lasso, lasso_path, lasso_sets


def objective(X: np.ndarray, y: np.ndarray, coef: np.ndarray, intercept: float, lam: float):
    r = y - X @ coef - intercept
    return r @ r / (2 * len(y)) + lam * np.abs(coef).sum()


def test_a_nearly_exact_fit_is_not_certified_above_its_optimum() -> None:
    """A noiseless target at a small lam: the residual ends anti-correlated with y, and the dual
    point's step along it must be bounded from below too (it was not: gap 0, objective 0.1 %
    above scikit-learn's, converged)."""
    rng = np.random.default_rng(2)
    M, p = rng.integers(3, 12), rng.integers(2, 15)  # (10, 5), drawn as in the sweep it came from
    X = rng.standard_normal((M, p))
    y = X[:, 0]
    lam = 5.3e-6
    result = lasso(X, y, lam, normalize=False, fit_intercept=True, dtype=torch.float64)
    reference = Lasso(alpha=lam, tol=1e-14, max_iter=10**6).fit(X, y)
    ours = objective(X, y, result.coef.numpy(), float(result.intercept), lam)
    best = objective(X, y, reference.coef_, reference.intercept_, lam)
    assert ours - best <= float(result.gap) + 1e-15
    assert bool(result.converged) and ours - best <= 1e-6 * np.var(y)


@pytest.mark.parametrize("column", ["zero", "constant"])
@pytest.mark.parametrize("sparse", [False, True])
def test_no_usable_column_gives_zeros_and_the_mean(column: str, sparse: bool) -> None:
    y = np.random.default_rng(0).standard_normal(6)
    X = np.zeros((6, 3)) if column == "zero" else np.full((6, 3), 2.5)
    X_in = sp.csr_matrix(X) if sparse else X
    reference = Lasso(alpha=0.1).fit(X, y)
    result = lasso(X_in, y, 0.1, fit_intercept=True)
    assert torch.count_nonzero(result.coef.to_dense()) == 0
    assert float(result.intercept) == pytest.approx(reference.intercept_)
    assert bool(result.converged) and float(result.gap) == 0.0
    path = lasso_path(X_in, y[:, None], fit_intercept=True, n_lams=3)
    assert bool((path.lams == 0).all())
    np.testing.assert_allclose(path.intercepts.numpy(), y.mean())
    blocks = block_lasso(np.column_stack([X, y]), [3, 1], [[], [0]], 0.1, fit_intercept=True)
    assert float(blocks.intercept[3]) == pytest.approx(y.mean())
    assert bool(blocks.converged.all())


@pytest.mark.parametrize(
    "X",
    [
        np.array([["a", "b"], ["c", "d"]]),
        [[1, "x"], [2, 3]],
        np.array([[1, "x"], [2, 3]], dtype=object),
    ],
    ids=["strings", "mixed-lists", "object"],
)
def test_non_numeric_input_is_a_value_error_naming_it(X) -> None:
    with pytest.raises(ValueError, match="X must hold real numbers"):
        lasso(X, [1.0, 2.0], 0.1)


def test_huge_and_tiny_columns_are_not_taken_for_constants() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((20, 3))
    y = X @ np.array([1.0, 0.0, -2.0]) + 0.01 * rng.standard_normal(20)
    base = lasso(X, y, 0.01, fit_intercept=True, dtype=torch.float64)
    for scale in (1e200, 1e-200):
        scaled = lasso(X * scale, y, 0.01, fit_intercept=True, dtype=torch.float64)
        np.testing.assert_allclose(scaled.coef.numpy() * scale, base.coef.numpy(), rtol=1e-6)


def test_values_beyond_the_range_are_value_errors() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((8, 3))
    with pytest.raises(ValueError, match="Y's squares overflow float64"):
        lasso(X, 1e200 * rng.standard_normal(8), 0.1, dtype=torch.float64)
    with pytest.raises(ValueError, match="beyond the range of torch.float32"):
        lasso(X * 1e200, rng.standard_normal(8), 0.1)


def test_the_objective_rule_does_not_claim_outputs_cut_by_max_iter() -> None:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 30))
    Y = X @ rng.standard_normal((30, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = lasso(X, Y, 1e-4, stop="objective", tol=1e-12, max_iter=3)
    assert not bool(result.converged.any())


def test_the_last_round_returns_the_certificate_of_its_coefficients(monkeypatch) -> None:
    """With the rounds exhausted, the gap returned is that of the coefficients returned (it was
    the gap from before the last round's solve)."""
    monkeypatch.setattr(lasso_sets, "LASSO_POLICY", replace(lasso_sets.LASSO_POLICY, max_rounds=1))
    rng = np.random.default_rng(4)
    X = rng.standard_normal((40, 8))
    y = X @ rng.standard_normal(8)
    lam = 0.01
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = lasso(X, y, lam, normalize=False, dtype=torch.float64)
    coef = result.coef.numpy()
    r = y - X @ coef
    s_max = len(y) * lam / np.abs(X.T @ r).max()
    s = np.clip((y @ r) / (r @ r), -s_max, s_max)
    dual = (s * (y @ r) - s * s * (r @ r) / 2) / len(y)
    gap = objective(X, y, coef, 0.0, lam) - dual
    assert float(result.gap) == pytest.approx(gap, rel=1e-9)
    assert not bool(result.converged)
