"""The solver's check against scikit-learn, on an orthogonal design where the Lasso has a closed
form: coef = soft-threshold(X^T Y / M, lam) when X^T X = M I."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from circuitlasso.evaluation import solver_check


def orthogonal_problem(M: int = 64, p: int = 6, d: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((M, p)))
    X = np.sqrt(M) * Q  # X^T X / M = I
    Y = X[:, :2] @ np.array([[2.0, -1.0, 0.5], [0.3, 1.5, -2.0]])[:, :d]
    return X, Y + 0.3 * rng.standard_normal((M, d))


def test_comparison_matches_the_closed_form_on_an_orthogonal_design():
    X, Y = orthogonal_problem()
    M = len(X)
    check = solver_check.compare_with_sklearn(X, Y, lam_ratio=0.3)
    correlation = X.T @ Y / M
    assert check.lam == pytest.approx(0.3 * np.abs(correlation).max())
    coef = np.sign(correlation) * np.maximum(np.abs(correlation) - check.lam, 0)
    objective = ((Y - X @ coef) ** 2).sum(0) / (2 * M) + check.lam * np.abs(coef).sum(0)
    np.testing.assert_allclose(check.table["objective (sklearn)"], objective, rtol=1e-10)
    np.testing.assert_allclose(check.table["objective (ours)"], objective, rtol=1e-9)
    assert check.table["max |coef diff|"].max() < 1e-6
    assert check.support_sizes == (coef != 0).sum(0).tolist()
    assert check.same_support
    assert check.max_rel_objective_diff < 1e-9
    assert (check.relative_gap <= 1e-10).all()
    np.testing.assert_allclose(check.relative_gap, check.table["duality gap"] / Y.var(0))
    lines = str(check).splitlines()
    assert lines[1:] == [
        "every duality gap below tol times the output's variance: True",
        "same supports as scikit-learn: True",
    ]


def test_lasso_objective_per_output_and_for_one_output_on_sparse_x():
    X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    Y = np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 1.0]])
    coef = np.array([[1.0, 0.0], [0.5, 0.5]])
    # residuals: (0, 1, -1.5) and (0, 0, 0.5): sums of squares 3.25 and 0.25, over 2 M = 6
    expected = np.array([3.25 / 6 + 0.1 * 1.5, 0.25 / 6 + 0.1 * 0.5])
    np.testing.assert_allclose(solver_check.lasso_objective(X, Y, coef, 0.1), expected)
    one = solver_check.lasso_objective(sp.csr_matrix(X), Y[:, 0], coef[:, 0], 0.1)
    assert float(one) == pytest.approx(expected[0])


def test_planted_problem_and_bad_inputs():
    X, Y = solver_check.planted_problem(seed=3, M=50, p=7, outputs=2, informative=3, noise=0.0)
    weights, *_ = np.linalg.lstsq(X[:, :3], Y, rcond=None)
    np.testing.assert_allclose(X[:, :3] @ weights, Y, atol=1e-10)  # noiseless: exactly 3 used
    with pytest.raises(ValueError, match="informative"):
        solver_check.planted_problem(p=3, informative=4)
    with pytest.raises(ValueError, match=r"Y must be \(M, d\)"):
        solver_check.compare_with_sklearn(X, Y[:, 0])
    with pytest.raises(ValueError, match="lam_ratio"):
        solver_check.compare_with_sklearn(X, Y, lam_ratio=1.5)


def test_sae_like_problem_draws_the_frequency_law_asked_for():
    counts = {}
    for law in ("power-law", "uniform"):
        X, _, _ = solver_check.sae_like_problem(
            M=2000, p=400, d=8, active_per_row=20, frequency=law
        )
        assert abs(X.getnnz(axis=1).mean() - 20) < 1.5  # the density asked for, either way
        counts[law] = np.sort(X.getnnz(axis=0))[::-1]
    # power law: the top features fire on a quarter of the rows; uniform: every one on ~5 %
    assert counts["power-law"][0] > 400 and counts["uniform"][0] < 160
    with pytest.raises(ValueError, match="frequency"):
        solver_check.sae_like_problem(M=10, p=10, d=2, active_per_row=2, frequency="zipf")
