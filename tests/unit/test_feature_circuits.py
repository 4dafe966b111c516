"""Layer-pair and label regressions on SAE features against scikit-learn and direct formulas.

The reference for a layer pair is scikit-learn's ``Lasso`` on the centered, unit-norm predictor
columns ``x~_k = (x_k - mean) / ||x_k - mean||`` with ``alpha = lam_j``; our coefficients are in
the units of the raw features, so they must equal the reference divided by ``||x_k - mean||``.
The label reference is ``LogisticRegression`` with an l1 penalty on the same design and
``C = 1 / (lam * M)`` (liblinear with a huge ``intercept_scaling``, so the intercept is in effect
unpenalized).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import Lasso, LogisticRegression

from circuitlasso.circuits.features import (
    LayerPairFit,
    fit_label,
    fit_layer_pair,
    frequent_features,
    lam_ablation,
)

M, D_PARENT, D_CHILD = 300, 25, 6


def sparse_nonneg(rng: np.random.Generator, rows: int, cols: int, density: float) -> np.ndarray:
    """Dense ``(rows, cols)`` array, each entry exponential with probability ``density``, else 0."""
    mask = rng.random((rows, cols)) < density
    return np.where(mask, rng.exponential(1.0, (rows, cols)), 0.0)


@pytest.fixture(scope="module")
def pair() -> tuple[np.ndarray, np.ndarray]:
    """Parent features ``(M, 25)`` and child features ``(M, 6)`` with a planted sparse map."""
    rng = np.random.default_rng(0)
    parent = sparse_nonneg(rng, M, D_PARENT, 0.3)
    A = np.zeros((D_PARENT, D_CHILD))
    A[rng.choice(D_PARENT, 8, replace=False)] = rng.uniform(0.5, 2.0, (8, D_CHILD))
    child = np.maximum(parent @ A + 0.3 * rng.standard_normal((M, D_CHILD)), 0.0)
    return parent, child


def standardized(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centered unit-norm columns of ``X`` and the centered norms (zero-norm columns dropped by
    the caller)."""
    centered = X - X.mean(0)
    norms = np.linalg.norm(centered, axis=0)
    return centered / norms, norms


def lasso_reference(
    X: np.ndarray, y: np.ndarray, lam_ratio: float
) -> tuple[np.ndarray, float, float]:
    """Coefficients in raw units, lam and the standardized objective of the reference fit."""
    Xs, norms = standardized(X)
    yc = y - y.mean()
    lam = lam_ratio * np.abs(Xs.T @ yc).max() / len(y)
    model = Lasso(alpha=lam, fit_intercept=True, tol=1e-14, max_iter=1_000_000).fit(Xs, y)
    return model.coef_ / norms, lam, standardized_objective(Xs, yc, model.coef_, lam)


def standardized_objective(Xs: np.ndarray, yc: np.ndarray, b: np.ndarray, lam: float) -> float:
    r = yc - Xs @ b
    return float(r @ r / (2 * len(yc)) + lam * np.abs(b).sum())


def dense_column(fit: LayerPairFit, j: int) -> np.ndarray:
    return fit.coef[:, j].toarray().ravel()


# ---------------------------------------------------------------- frequent_features


def test_frequent_features_counts_prompts_with_nonzero_values() -> None:
    rng = np.random.default_rng(3)
    Z = sparse_nonneg(rng, 50, 12, 0.15)
    Z[:, 4] = 0.0
    Z[:, 7] = 1.0
    counts = (Z != 0).sum(0)
    for min_prompts in (1, 5, 8, 50, 51):
        expected = np.flatnonzero(counts >= min_prompts)
        np.testing.assert_array_equal(frequent_features(sp.csr_matrix(Z), min_prompts), expected)
    assert 4 not in frequent_features(sp.csr_matrix(Z), 1)
    np.testing.assert_array_equal(frequent_features(sp.csr_matrix(Z), 50), [7])


def test_frequent_features_ignores_stored_zeros() -> None:
    # row 0 stores (0, 1.0) and (1, 0.0); row 1 stores (1, 2.0) and (2, 0.0)
    Z = sp.csr_matrix(
        (np.array([1.0, 0.0, 2.0, 0.0]), np.array([0, 1, 1, 2]), np.array([0, 2, 4])),
        shape=(2, 3),
    )
    assert Z.nnz == 4
    np.testing.assert_array_equal(frequent_features(Z, 1), [0, 1])
    np.testing.assert_array_equal(frequent_features(Z, 2), [])
    # duplicate entries are summed: (0, 0) twice in row 0, (1, 1) stored as 1.0 and -1.0
    Z = sp.csr_matrix(
        (np.array([1.0, 1.0, 1.0, -1.0]), np.array([0, 0, 1, 1]), np.array([0, 2, 4])),
        shape=(2, 2),
    )
    assert not Z.has_canonical_format
    np.testing.assert_array_equal(frequent_features(Z, 1), [0])
    np.testing.assert_array_equal(frequent_features(Z, 2), [])


def test_frequent_features_rejects_min_prompts_below_one() -> None:
    with pytest.raises(ValueError, match="min_prompts must be >= 1, got 0"):
        frequent_features(sp.csr_matrix(np.eye(3)), 0)


# ---------------------------------------------------------------- fit_layer_pair


def test_fit_layer_pair_matches_sklearn_lasso_on_standardized_columns(pair) -> None:
    parent, child = pair
    lam_ratio = 0.1
    fit = fit_layer_pair(
        sp.csr_matrix(parent), sp.csr_matrix(child), lam_ratio, parent=3, child=4, tol=1e-6
    )
    assert (fit.parent, fit.child) == (3, 4)
    np.testing.assert_array_equal(fit.children, np.arange(D_CHILD))
    assert isinstance(fit.coef, sp.csc_matrix) and fit.coef.shape == (D_PARENT, D_CHILD)
    assert fit.converged.all()
    for j in range(D_CHILD):
        ref_coef, ref_lam, _ = lasso_reference(parent, child[:, j], lam_ratio)
        assert fit.lam[j] == pytest.approx(ref_lam, rel=1e-10)
        got = dense_column(fit, j)
        assert np.count_nonzero(ref_coef) > 0
        np.testing.assert_allclose(got, ref_coef, rtol=0, atol=1e-4 * np.abs(ref_coef).max())
        np.testing.assert_array_equal(got != 0, ref_coef != 0)
        np.testing.assert_array_equal(fit.column(j).toarray().ravel(), got)


@pytest.mark.parametrize("lam_ratio", [0.05, 0.5])
def test_fit_layer_pair_default_tolerance_bounds_the_objective(pair, lam_ratio: float) -> None:
    # the gap rule: objective - optimum <= tol * ||y - mean||^2 / M (plus float32 rounding)
    parent, child = pair
    tol = 1e-4
    fit = fit_layer_pair(sp.csr_matrix(parent), sp.csr_matrix(child), lam_ratio, parent=0, child=1)
    Xs, norms = standardized(parent)
    for j in range(D_CHILD):
        yc = child[:, j] - child[:, j].mean()
        _, lam, ref_objective = lasso_reference(parent, child[:, j], lam_ratio)
        ours = standardized_objective(Xs, yc, dense_column(fit, j) * norms, lam)
        assert ref_objective - 1e-9 <= ours <= ref_objective + 1.01 * tol * (yc @ yc) / M


def test_fit_layer_pair_children_subset_equals_the_full_fit_columns(pair) -> None:
    parent, child = pair
    Zp, Zc = sp.csr_matrix(parent), sp.csr_matrix(child)
    full = fit_layer_pair(Zp, Zc, 0.2, parent=0, child=1, tol=1e-6)
    chosen = [4, 0, 2]
    part = fit_layer_pair(Zp, Zc, 0.2, parent=0, child=1, children=chosen, tol=1e-6)
    np.testing.assert_array_equal(part.children, chosen)
    assert part.coef.shape == (D_PARENT, 3)
    np.testing.assert_allclose(part.lam, full.lam[chosen], rtol=1e-12)
    for j, feature in enumerate(chosen):
        expected = dense_column(full, feature)
        np.testing.assert_allclose(
            dense_column(part, j), expected, atol=1e-6 * np.abs(expected).max()
        )
        np.testing.assert_array_equal(part.column(feature).toarray().ravel(), dense_column(part, j))
    with pytest.raises(KeyError, match="child feature 3 of layer 1 was not fit"):
        part.column(3)


def test_fit_layer_pair_min_prompts_drops_rarely_active_parents(pair) -> None:
    parent, child = pair
    parent, child = parent.copy(), child.copy()
    rare = [2, 11]
    rows = np.arange(4)
    parent[:, rare] = 0.0
    parent[rows, 2] = 5.0
    parent[rows[:2], 11] = 3.0
    child[rows, 0] += 20.0  # only the rare parent 2 can explain these four rows
    Zp, Zc = sp.csr_matrix(parent), sp.csr_matrix(child)

    loose = fit_layer_pair(Zp, Zc, 0.1, parent=0, child=1, tol=1e-6)
    assert loose.coef[2, 0] != 0  # without the rule the rare parent is picked up

    fit = fit_layer_pair(Zp, Zc, 0.1, parent=0, child=1, min_prompts=5, tol=1e-6)
    assert fit.coef[rare].nnz == 0
    keep = np.setdiff1d(np.arange(D_PARENT), rare)
    for j in range(D_CHILD):
        ref_coef, ref_lam, _ = lasso_reference(parent[:, keep], child[:, j], 0.1)
        assert fit.lam[j] == pytest.approx(ref_lam, rel=1e-10)
        got = dense_column(fit, j)[keep]
        np.testing.assert_allclose(got, ref_coef, atol=1e-4 * np.abs(ref_coef).max())


def test_fit_layer_pair_constant_children_get_zero_columns(pair) -> None:
    parent, child = pair
    child = child.copy()
    child[:, 1] = 0.0
    child[:, 4] = 1.5
    fit = fit_layer_pair(sp.csr_matrix(parent), sp.csr_matrix(child), 0.1, parent=0, child=1)
    for j in (1, 4):
        assert fit.coef[:, j].nnz == 0
        assert fit.lam[j] == 0 and fit.converged[j]
    for j in (0, 2, 3, 5):
        assert fit.coef[:, j].nnz > 0 and fit.lam[j] > 0


def test_fit_layer_pair_without_frequent_parents_is_all_zero(pair) -> None:
    parent, child = pair
    fit = fit_layer_pair(
        sp.csr_matrix(parent), sp.csr_matrix(child), 0.1, parent=0, child=1, min_prompts=M + 1
    )
    assert fit.coef.shape == (D_PARENT, D_CHILD) and fit.coef.nnz == 0
    assert (fit.lam == 0).all() and fit.converged.all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lam_ratio": 0.0}, r"lam_ratio must be in \(0, 1\), got 0.0"),
        ({"lam_ratio": 1.0}, r"lam_ratio must be in \(0, 1\), got 1.0"),
        ({"lam_ratio": -0.5}, r"lam_ratio must be in \(0, 1\), got -0.5"),
        ({"children": [0, 6]}, r"child features \[6\] out of range 0..5"),
        ({"children": [-1, 2]}, r"child features \[-1\] out of range 0..5"),
        ({"child_rows": 10}, "parent features have 12 prompts but child features 10"),
        ({"parent_rows": 1, "child_rows": 1}, "need at least 2 prompts, got 1"),
        ({"min_prompts": 0}, "min_prompts must be >= 1, got 0"),
    ],
)
def test_fit_layer_pair_rejects_bad_inputs(kwargs: dict, message: str) -> None:
    rng = np.random.default_rng(5)
    parent_rows = kwargs.pop("parent_rows", 12)
    child_rows = kwargs.pop("child_rows", parent_rows)
    Zp = sp.csr_matrix(sparse_nonneg(rng, parent_rows, 4, 0.5))
    Zc = sp.csr_matrix(sparse_nonneg(rng, child_rows, 6, 0.5))
    options = {"lam_ratio": 0.1, **kwargs}
    with pytest.raises(ValueError, match=message):
        fit_layer_pair(Zp, Zc, options.pop("lam_ratio"), parent=0, child=1, **options)


# ---------------------------------------------------------------- fit_label


@pytest.fixture(scope="module")
def label_data() -> tuple[np.ndarray, np.ndarray]:
    """Features ``(M, 30)`` and a noisy logistic label driven by features 0, 3 and 7."""
    rng = np.random.default_rng(1)
    Z = sparse_nonneg(rng, M, 30, 0.3)
    eta = 3 * Z[:, 0] - 3 * Z[:, 3] + 2 * Z[:, 7] - 0.5
    y = (rng.random(M) < 1 / (1 + np.exp(-eta))).astype(int)
    return Z, y


def logistic_lam_max(Z: np.ndarray, y: np.ndarray) -> float:
    Zs, _ = standardized(Z)
    return float(np.abs(Zs.T @ (y - y.mean())).max() / len(y))


def logistic_objective(Z: np.ndarray, y: np.ndarray, coef, intercept, lam: float) -> float:
    """Mean cross-entropy plus ``lam`` times the l1 norm of the standardized coefficients."""
    eta = Z @ coef + intercept
    norms = np.linalg.norm(Z - Z.mean(0), axis=0)
    return float(np.mean(np.logaddexp(0, eta) - y * eta) + lam * np.sum(norms * np.abs(coef)))


def l1_logistic_reference(Z: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    """Coefficients in raw units and intercept of scikit-learn's l1 fit on standardized columns."""
    Zs, norms = standardized(Z)
    model = LogisticRegression(
        l1_ratio=1.0,  # scikit-learn >= 1.8 spelling of penalty="l1"
        C=1 / (lam * len(y)),
        solver="liblinear",
        intercept_scaling=1e4,
        tol=1e-12,
        max_iter=100_000,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(Zs, y)
    coef = model.coef_[0] / norms
    return coef, float(model.intercept_[0] - Z.mean(0) @ coef)


@pytest.mark.parametrize("fraction", [0.1, 0.4])
def test_fit_label_matches_sklearn_l1_logistic_on_standardized_columns(
    label_data, fraction: float
) -> None:
    Z, y = label_data
    lam = fraction * logistic_lam_max(Z, y)
    fit = fit_label(sp.csr_matrix(Z), y, lam, layer=5)
    assert fit.layer == 5 and fit.lam == lam and fit.converged
    ref_coef, ref_intercept = l1_logistic_reference(Z, y, lam)
    assert 0 < np.count_nonzero(ref_coef) < Z.shape[1]
    np.testing.assert_array_equal(fit.coef != 0, ref_coef != 0)
    np.testing.assert_allclose(fit.coef, ref_coef, atol=1e-4 * np.abs(ref_coef).max())
    assert fit.intercept == pytest.approx(ref_intercept, abs=1e-4)
    ours = logistic_objective(Z, y, fit.coef, fit.intercept, lam)
    ref = logistic_objective(Z, y, ref_coef, ref_intercept, lam)
    assert ours <= ref + 1e-6 * ref
    expected_proba = 1 / (1 + np.exp(-(Z @ fit.coef + fit.intercept)))
    np.testing.assert_allclose(fit.predict_proba(sp.csr_matrix(Z)), expected_proba, rtol=1e-12)


def test_fit_label_above_lam_max_keeps_only_the_intercept(label_data) -> None:
    Z, y = label_data
    fit = fit_label(sp.csr_matrix(Z), y, 1.01 * logistic_lam_max(Z, y), layer=0)
    assert not fit.coef.any()
    assert fit.intercept == pytest.approx(np.log(y.mean() / (1 - y.mean())), abs=1e-6)
    below = fit_label(sp.csr_matrix(Z), y, 0.95 * logistic_lam_max(Z, y), layer=0)
    assert below.coef.any()


def newton_logistic(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Unpenalized logistic regression with intercept by Newton's method."""
    X1 = np.column_stack([X, np.ones(len(y))])
    w = np.zeros(X1.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-X1 @ w))
        step = np.linalg.solve(X1.T @ (X1 * (p * (1 - p))[:, None]), X1.T @ (p - y))
        w -= step
        if np.abs(step).max() < 1e-12:
            break
    return w[:-1], float(w[-1])


def test_fit_label_lam_zero_is_unpenalized_logistic_regression() -> None:
    rng = np.random.default_rng(2)
    Z = sparse_nonneg(rng, M, 20, 0.3)
    eta = Z[:, 0] - Z[:, 3] + 0.5 * Z[:, 7] - 0.2
    y = (rng.random(M) < 1 / (1 + np.exp(-eta))).astype(int)
    fit = fit_label(sp.csr_matrix(Z), y, 0.0, layer=1)
    assert fit.lam == 0.0 and fit.converged
    coef, intercept = newton_logistic(Z, y)
    assert np.count_nonzero(fit.coef) == Z.shape[1]
    ours = logistic_objective(Z, y, fit.coef, fit.intercept, 0.0)
    ref = logistic_objective(Z, y, coef, intercept, 0.0)
    assert ref <= ours <= ref + 1e-6 * ref
    np.testing.assert_allclose(fit.coef, coef, atol=1e-2 * np.abs(coef).max())
    assert fit.intercept == pytest.approx(intercept, abs=1e-2)


def test_fit_label_min_prompts_zeroes_rare_features(label_data) -> None:
    Z, y = label_data
    Z = Z.copy()
    rare = [3, 10]
    Z[:, rare] = 0.0
    Z[:4, 3] = 4.0
    Z[:2, 10] = 1.0
    lam = 0.1 * logistic_lam_max(Z, y)
    fit = fit_label(sp.csr_matrix(Z), y, lam, layer=0, min_prompts=5)
    assert not fit.coef[rare].any()
    keep = np.setdiff1d(np.arange(Z.shape[1]), rare)
    ref_coef, ref_intercept = l1_logistic_reference(Z[:, keep], y, lam)
    np.testing.assert_allclose(fit.coef[keep], ref_coef, atol=1e-4 * np.abs(ref_coef).max())
    assert fit.intercept == pytest.approx(ref_intercept, abs=1e-4)


@pytest.mark.parametrize(
    ("labels", "lam", "min_prompts", "message"),
    [
        (np.arange(12) % 3, 0.1, 1, r"labels must take exactly two values, got 3: \[0, 1, 2\]"),
        (np.ones(12), 0.1, 1, r"labels must take exactly two values, got 1: \[1.0\]"),
        (np.arange(11) % 2, 0.1, 1, "features have 12 prompts but there are 11 labels"),
        (np.arange(12) % 2, -0.1, 1, "lam must be >= 0, got -0.1"),
        (np.arange(12) % 2, 0.1, 13, "no feature is active on at least 13 prompts"),
    ],
)
def test_fit_label_rejects_bad_inputs(labels, lam: float, min_prompts: int, message: str) -> None:
    Z = sp.csr_matrix(sparse_nonneg(np.random.default_rng(4), 12, 5, 0.5))
    with pytest.raises(ValueError, match=message):
        fit_label(Z, labels, lam, layer=0, min_prompts=min_prompts)


# ---------------------------------------------------------------- lam_ablation

COLUMNS = [
    "lam",
    "train_loss",
    "l1_norm",
    "nonzero",
    "train_accuracy",
    "validation_accuracy",
    "test_loss",
    "test_accuracy",
]


def cross_entropy_and_accuracy(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    loss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return float(loss), float(np.mean((p > 0.5) == y))


def test_lam_ablation_table_and_choice(label_data) -> None:
    Z, y = label_data
    train, test = np.arange(200), np.arange(200, M)
    Z_tr, Z_te = sp.csr_matrix(Z[train]), sp.csr_matrix(Z[test])
    top = logistic_lam_max(Z[train], y[train])
    lams = [0.0, 0.02 * top, 0.2 * top, 0.6 * top, 1.5 * top]
    table, chosen = lam_ablation(Z_tr, y[train], Z_te, y[test], lams, layer=2)

    assert list(table.columns) == COLUMNS and len(table) == len(lams)
    np.testing.assert_allclose(table["lam"], lams)
    for row, lam in zip(table.itertuples(), lams, strict=True):
        fit = fit_label(Z_tr, y[train], lam, layer=2)
        train_loss, train_acc = cross_entropy_and_accuracy(fit.predict_proba(Z_tr), y[train])
        test_loss, test_acc = cross_entropy_and_accuracy(fit.predict_proba(Z_te), y[test])
        assert row.train_loss == pytest.approx(train_loss, rel=1e-9)
        assert row.test_loss == pytest.approx(test_loss, rel=1e-9)
        assert (row.train_accuracy, row.test_accuracy) == (train_acc, test_acc)
        assert row.l1_norm == pytest.approx(np.abs(fit.coef).sum(), rel=1e-9)
        assert row.nonzero == np.count_nonzero(fit.coef)

    nonzero = table["nonzero"].to_numpy()
    assert nonzero[0] == Z.shape[1] and nonzero[-1] == 0
    assert (np.diff(nonzero) <= 0).all()
    assert (np.diff(table["l1_norm"].to_numpy()) <= 0).all()
    assert (np.diff(table["train_loss"].to_numpy()) >= 0).all()

    n_val = round(0.2 * len(train))
    validation = table["validation_accuracy"].to_numpy()
    np.testing.assert_allclose(validation * n_val, np.round(validation * n_val), atol=1e-9)
    best = validation.max()
    assert chosen == max(lam for lam, v in zip(lams, validation, strict=True) if v == best)
    assert chosen in lams

    # the choice never looks at the test set
    rng = np.random.default_rng(9)
    other_test = sp.csr_matrix(sparse_nonneg(rng, 50, Z.shape[1], 0.3))
    other_y = rng.integers(0, 2, 50)
    table2, chosen2 = lam_ablation(Z_tr, y[train], other_test, other_y, lams, layer=2)
    assert chosen2 == chosen
    np.testing.assert_array_equal(table2["validation_accuracy"], validation)


def test_lam_ablation_ties_go_to_the_larger_lam() -> None:
    # feature 0 is active exactly on the positive prompts: every moderate lam is perfect
    rng = np.random.default_rng(6)
    n = 240
    y = rng.integers(0, 2, n)
    Z = sparse_nonneg(rng, n, 20, 0.3)
    Z[:, 0] = np.where(y == 1, 1.0 + rng.random(n), 0.0)
    Zs = sp.csr_matrix(Z)
    top = logistic_lam_max(Z, y)
    lams = [0.05 * top, 0.1 * top, 0.3 * top, 2.0 * top]
    table, chosen = lam_ablation(Zs, y, Zs, y, lams, layer=0, seed=3)
    validation = table["validation_accuracy"].to_numpy()
    assert (validation[:3] == 1.0).all() and validation[3] < 1.0
    assert chosen == lams[2]
