"""Layer-pair and label regressions on SAE features against scikit-learn and direct formulas.

The reference for a layer pair is scikit-learn's ``Lasso`` on the centered, unit-norm predictor
columns ``x~_k = (x_k - mean) / ||x_k - mean||`` with ``alpha = lam_j``; our coefficients are in
the units of the raw features, so they must equal the reference divided by ``||x_k - mean||``.
The label references are scikit-learn fits on the same standardized design with
``lam = lam_ratio * lam_max`` computed here by hand: ``LogisticRegression`` with an l1 penalty and
``C = 1 / (lam * M)`` (binary: liblinear with a huge ``intercept_scaling``, so the intercept is in
effect unpenalized; multi-class: saga, multinomial) and ``Lasso(alpha=lam)`` (regression).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold

from circuitlasso.circuits.features import (
    LabelFit,
    LayerPairFit,
    fit_label,
    fit_layer_pair,
    frequent_features,
    label_lam_max,
)
from circuitlasso.estimator import CircuitLasso, penalty_table

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
        ({"lam_ratio": 0.0}, r"lam_ratio must be > 0 \(a fraction of lam_max\), got 0.0"),
        ({"lam_ratio": -0.5}, r"lam_ratio must be > 0 \(a fraction of lam_max\), got -0.5"),
        ({"lam_ratio": np.nan}, r"lam_ratio must be > 0 \(a fraction of lam_max\), got nan"),
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


@pytest.mark.parametrize("ratio", [0.1, 0.4])
def test_fit_label_matches_sklearn_l1_logistic_on_standardized_columns(
    label_data, ratio: float
) -> None:
    Z, y = label_data
    lam = ratio * logistic_lam_max(Z, y)
    fit = fit_label(sp.csr_matrix(Z), y, ratio, layer=5)
    assert (fit.layer, fit.kind, fit.lam_ratio, fit.converged) == (5, "binary", ratio, True)
    assert fit.lam == pytest.approx(lam, rel=1e-12)
    assert label_lam_max(sp.csr_matrix(Z), y) == pytest.approx(lam / ratio, rel=1e-12)
    np.testing.assert_array_equal(fit.classes, [0, 1])
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
    np.testing.assert_array_equal(fit.predict(sp.csr_matrix(Z)), expected_proba > 0.5)


def test_fit_label_at_lam_max_keeps_only_the_intercept(label_data) -> None:
    Z, y = label_data
    fit = fit_label(sp.csr_matrix(Z), y, 1.0, layer=0)
    assert not fit.coef.any() and fit.lam == pytest.approx(logistic_lam_max(Z, y), rel=1e-12)
    assert fit.intercept == pytest.approx(np.log(y.mean() / (1 - y.mean())), abs=1e-6)
    assert not fit_label(sp.csr_matrix(Z), y, 3.0, layer=0).coef.any()
    assert fit_label(sp.csr_matrix(Z), y, 0.95, layer=0).coef.any()


def test_fit_label_min_prompts_zeroes_rare_features(label_data) -> None:
    Z, y = label_data
    Z = Z.copy()
    rare = [3, 10]
    Z[:, rare] = 0.0
    Z[:4, 3] = 4.0
    Z[:2, 10] = 1.0
    keep = np.setdiff1d(np.arange(Z.shape[1]), rare)
    fit = fit_label(sp.csr_matrix(Z), y, 0.1, layer=0, min_prompts=5)
    assert not fit.coef[rare].any()
    # lam_max is taken over the kept features only
    assert fit.lam == pytest.approx(0.1 * logistic_lam_max(Z[:, keep], y), rel=1e-12)
    ref_coef, ref_intercept = l1_logistic_reference(Z[:, keep], y, fit.lam)
    np.testing.assert_allclose(fit.coef[keep], ref_coef, atol=1e-4 * np.abs(ref_coef).max())
    assert fit.intercept == pytest.approx(ref_intercept, abs=1e-4)


@pytest.fixture(scope="module")
def multiclass_data() -> tuple[np.ndarray, np.ndarray]:
    """Features ``(M, 30)`` and a softmax label over three string classes driven by features
    0, 3 and 7."""
    rng = np.random.default_rng(11)
    Z = sparse_nonneg(rng, M, 30, 0.3)
    eta = np.column_stack([3 * Z[:, 0], -2 * Z[:, 3] + 1, 2.5 * Z[:, 7]])
    P = np.exp(eta) / np.exp(eta).sum(1, keepdims=True)
    y = np.array(["cat", "cow", "dog"])[[rng.choice(3, p=row) for row in P]]
    return Z, y


def test_fit_label_multiclass_matches_sklearn_multinomial(multiclass_data) -> None:
    Z, y = multiclass_data
    Zs, norms = standardized(Z)
    codes = np.searchsorted(["cat", "cow", "dog"], y)
    theta = np.eye(3)[codes] - np.bincount(codes) / M
    lam = 0.1 * np.abs(Zs.T @ theta).max() / M
    fit = fit_label(sp.csr_matrix(Z), y, 0.1, layer=2, tol=1e-8)
    assert (fit.kind, fit.converged) == ("multiclass", True)
    assert fit.lam == pytest.approx(lam, rel=1e-12)
    np.testing.assert_array_equal(fit.classes, ["cat", "cow", "dog"])
    ref = LogisticRegression(l1_ratio=1.0, C=1 / (lam * M), solver="saga", tol=1e-12,
                             max_iter=1_000_000)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.fit(Zs, y)
    ref_coef = ref.coef_.T / norms[:, None]
    ref_intercept = ref.intercept_ - Z.mean(0) @ ref_coef
    assert fit.coef.shape == (30, 3) and 0 < np.count_nonzero(ref_coef) < ref_coef.size
    np.testing.assert_allclose(fit.coef, ref_coef, atol=1e-4 * np.abs(ref_coef).max())
    np.testing.assert_allclose(fit.intercept, ref_intercept - ref_intercept.mean(), atol=1e-4)
    logits = Z @ fit.coef + fit.intercept
    expected = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(fit.predict_proba(sp.csr_matrix(Z)), expected, rtol=1e-10)
    np.testing.assert_array_equal(fit.predict(sp.csr_matrix(Z)), ref.predict(Zs))


def test_fit_label_regression_is_the_lasso_on_standardized_columns(label_data) -> None:
    Z, _ = label_data
    rng = np.random.default_rng(12)
    y = 2 * Z[:, 0] - 1.5 * Z[:, 3] + Z[:, 7] + 0.5 + 0.3 * rng.standard_normal(M)
    coef, lam, objective = lasso_reference(Z, y, 0.05)
    fit = fit_label(sp.csr_matrix(Z), y, 0.05, layer=1)
    assert (fit.kind, fit.converged, len(fit.classes)) == ("regression", True, 0)
    assert fit.lam == pytest.approx(lam, rel=1e-12)
    np.testing.assert_allclose(fit.coef, coef, atol=1e-4 * np.abs(coef).max())
    assert fit.intercept == pytest.approx(np.mean(y - Z @ coef), abs=1e-4)
    np.testing.assert_allclose(fit.predict(sp.csr_matrix(Z)), Z @ fit.coef + fit.intercept)
    with pytest.raises(ValueError, match="no class probabilities"):
        fit.predict_proba(sp.csr_matrix(Z))
    # integer-valued real targets are multi-class unless told otherwise
    counts = np.round(np.abs(y) * 3)
    assert fit_label(sp.csr_matrix(Z), counts, 0.2, layer=1, kind="regression").kind == "regression"


def test_hand_written_readout_reads_as_binary() -> None:
    fit = LabelFit(0, np.array([1.0, -2.0]), 0.5, 0.01, True)
    assert (fit.kind, fit.lam_ratio) == ("binary", None)
    Z = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(fit.predict_proba(Z), 1 / (1 + np.exp(-np.array([1.5, -1.5]))))
    np.testing.assert_array_equal(fit.predict(Z), [1, 0])


@pytest.mark.parametrize(
    ("labels", "ratio", "min_prompts", "kind", "message"),
    [
        (np.arange(12) % 3, 0.1, 1, "binary", r"exactly two values, got 3: \[0, 1, 2\]"),
        (np.ones(12), 0.1, 1, None, r"at least two values, got 1: \[1.0\]"),
        (np.arange(11) % 2, 0.1, 1, None, "features have 12 prompts but there are 11 labels"),
        (np.arange(12) % 2, 0.0, 1, None, r"lam_ratio must be > 0 \(a fraction of lam_max\)"),
        (np.arange(12) % 2, -0.1, 1, None, r"lam_ratio must be > 0"),
        (np.arange(12) % 2, 0.1, 13, None, "no feature is active on at least 13 prompts"),
        (np.arange(12) % 2, 0.1, 1, "ordinal", "kind must be one of"),
        (np.array(list("ab") * 6), 0.1, 1, "regression", "regression labels must be real"),
    ],
)
def test_fit_label_rejects_bad_inputs(labels, ratio, min_prompts, kind, message) -> None:
    Z = sp.csr_matrix(sparse_nonneg(np.random.default_rng(4), 12, 5, 0.5))
    with pytest.raises(ValueError, match=message):
        fit_label(Z, labels, ratio, layer=0, kind=kind, min_prompts=min_prompts)


# ---------------------------------------------------------------- penalty_table

COLUMNS = [
    "label_lam_ratio",
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


def ratio_search(
    ratios: list[float], Z: sp.csr_matrix, y: np.ndarray, kind: str = "classification"
) -> GridSearchCV:
    estimator = CircuitLasso(kind=kind)
    return GridSearchCV(estimator, {"label_lam_ratio": ratios}, cv=KFold(3)).fit(Z, y)


def test_penalty_table_rows_and_the_search_choice(label_data) -> None:
    Z, y = label_data
    train, test = np.arange(200), np.arange(200, M)
    Z_tr, Z_te = sp.csr_matrix(Z[train]), sp.csr_matrix(Z[test])
    top = logistic_lam_max(Z[train], y[train])
    ratios = [0.02, 0.2, 0.6, 1.5]
    search = ratio_search(ratios, Z_tr, y[train])
    table = penalty_table(search, Z_tr, y[train], Z_te, y[test])

    assert list(table.columns) == COLUMNS and len(table) == len(ratios)
    np.testing.assert_allclose(table["label_lam_ratio"], ratios)
    np.testing.assert_allclose(table["lam"], np.array(ratios) * top, rtol=1e-12)
    for row, ratio in zip(table.itertuples(), ratios, strict=True):
        fit = fit_label(Z_tr, y[train], ratio, layer=0)
        train_loss, train_acc = cross_entropy_and_accuracy(fit.predict_proba(Z_tr), y[train])
        test_loss, test_acc = cross_entropy_and_accuracy(fit.predict_proba(Z_te), y[test])
        assert row.train_loss == pytest.approx(train_loss, rel=1e-9)
        assert row.test_loss == pytest.approx(test_loss, rel=1e-9)
        assert (row.train_accuracy, row.test_accuracy) == (train_acc, test_acc)
        assert row.l1_norm == pytest.approx(np.abs(fit.coef).sum(), rel=1e-9)
        assert row.nonzero == np.count_nonzero(fit.coef)
        # validation: the mean accuracy over the search's folds, each fit on the other folds
        folds = []
        for rest, val in KFold(3).split(Z_tr):
            held = fit_label(Z_tr[rest], y[train][rest], ratio, layer=0)
            folds.append(np.mean(held.predict(Z_tr[val]) == y[train][val]))
        assert row.validation_accuracy == pytest.approx(np.mean(folds), abs=1e-12)

    nonzero = table["nonzero"].to_numpy()
    assert nonzero[0] > 0 and nonzero[-1] == 0
    assert (np.diff(nonzero) <= 0).all()
    assert (np.diff(table["l1_norm"].to_numpy()) <= 0).all()
    assert (np.diff(table["train_loss"].to_numpy()) >= 0).all()
    validation = table["validation_accuracy"].to_numpy()
    assert search.best_params_["label_lam_ratio"] == ratios[int(np.argmax(validation))]

    # the choice never looks at the test set
    rng = np.random.default_rng(9)
    other_test = sp.csr_matrix(sparse_nonneg(rng, 50, Z.shape[1], 0.3))
    table2 = penalty_table(search, Z_tr, y[train], other_test, rng.integers(0, 2, 50))
    np.testing.assert_array_equal(table2["validation_accuracy"], validation)


def test_penalty_table_scores_multiclass_and_regression_targets(label_data, multiclass_data):
    Z, y = multiclass_data
    train, test = np.arange(200), np.arange(200, M)
    Z_tr, Z_te = sp.csr_matrix(Z[train]), sp.csr_matrix(Z[test])
    search = ratio_search([0.05, 0.3], Z_tr, y[train])
    table = penalty_table(search, Z_tr, y[train], Z_te, y[test])
    for row in table.itertuples():
        fit = fit_label(Z_tr, y[train], row.label_lam_ratio, layer=0)
        proba = fit.predict_proba(Z_te)
        codes = np.searchsorted(fit.classes, y[test])
        assert row.test_loss == pytest.approx(-np.mean(np.log(proba[np.arange(100), codes])))
        assert row.test_accuracy == np.mean(fit.classes[proba.argmax(1)] == y[test])
    with pytest.raises(ValueError, match=r"labels \['emu'\] are not among the classes"):
        penalty_table(search, Z_tr, y[train], Z_te, np.where(y[test] == "dog", "emu", y[test]))

    Z, _ = label_data
    values = 2 * Z[:, 0] - Z[:, 3] + 0.2 * np.random.default_rng(13).standard_normal(M)
    Z_tr, Z_te = sp.csr_matrix(Z[train]), sp.csr_matrix(Z[test])
    search = ratio_search([0.01, 0.9], Z_tr, values[train], kind="regression")
    table = penalty_table(search, Z_tr, values[train], Z_te, values[test])
    assert "test_r2" in table and "test_accuracy" not in table
    for row in table.itertuples():
        fit = fit_label(Z_tr, values[train], row.label_lam_ratio, layer=0)
        residual = values[test] - (Z[test] @ fit.coef + fit.intercept)
        total = np.sum((values[test] - values[test].mean()) ** 2)
        assert row.test_loss == pytest.approx(np.mean(residual**2), rel=1e-9)
        assert row.test_r2 == pytest.approx(1 - residual @ residual / total, rel=1e-9)
    assert search.best_params_["label_lam_ratio"] == 0.01
    assert table["validation_r2"].iloc[0] > table["validation_r2"].iloc[1]
