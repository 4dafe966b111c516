"""The solver against scikit-learn, its certificates, block masks and input validation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.exceptions
import torch
from sklearn.linear_model import Lasso, LogisticRegression

import circuitlasso.solve.logistic_design as logistic_design
import circuitlasso.solve.prepare as prepare_module
from circuitlasso.solve import (
    ConvergenceWarning,
    block_lasso,
    lam_max,
    lasso,
    lasso_path,
    logistic_lam_max,
    logistic_lasso,
    multinomial_lasso,
    upper_triangular_parents,
)

F64 = torch.float64


def _problem(sparse: bool, seed: int = 0, M: int = 80, p: int = 30, d: int = 4):
    """X (M, p), Y (M, d) with a planted sparse A; sparse X has 30% density."""
    rng = np.random.default_rng(seed)
    if sparse:
        X = sp.random(M, p, density=0.3, random_state=seed, format="csr")
    else:
        X = rng.standard_normal((M, p))
    A = np.zeros((p, d))
    A[rng.choice(p, 5, replace=False)] = rng.standard_normal((5, d))
    Y = np.asarray(X @ A) + 0.1 * rng.standard_normal((M, d)) + 0.5
    return X, Y


def _sklearn(X, y, lam, fit_intercept):
    model = Lasso(alpha=lam, fit_intercept=fit_intercept, tol=1e-14, max_iter=1_000_000)
    model.fit(X, y)
    r = y - X @ model.coef_ - model.intercept_
    objective = r @ r / (2 * len(y)) + lam * np.abs(model.coef_).sum()
    return model.coef_, model.intercept_, objective


def _dense(coef: torch.Tensor) -> np.ndarray:
    return (coef.to_dense() if coef.layout != torch.strided else coef).numpy()


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_lasso_matches_sklearn(sparse, fit_intercept):
    X, Y = _problem(sparse)
    lam = 0.1 * lam_max(X, Y, fit_intercept=fit_intercept, normalize=False).numpy()
    res = lasso(X, Y, lam, fit_intercept=fit_intercept, normalize=False, tol=1e-12, dtype=F64)
    coef = _dense(res.coef)
    for j in range(Y.shape[1]):
        ref_coef, ref_intercept, ref_obj = _sklearn(X, Y[:, j], lam[j], fit_intercept)
        assert abs(res.objective[j].item() - ref_obj) <= 1e-6 * ref_obj
        assert np.abs(coef[:, j] - ref_coef).max() <= 1e-6 * np.abs(ref_coef).max()
        assert abs(res.intercept[j].item() - ref_intercept) <= 1e-6 * max(1.0, abs(ref_intercept))
    assert res.converged.all()


def test_normalize_solves_lasso_on_unit_norm_columns():
    X, Y = _problem(sparse=False, seed=1)
    Xc = X - X.mean(0)
    norms = np.linalg.norm(Xc, axis=0)
    lam = 0.05 * lam_max(X, Y, fit_intercept=True).numpy()
    res = lasso(X, Y, lam, fit_intercept=True, tol=1e-12, dtype=F64)
    for j in range(Y.shape[1]):
        ref_coef, _, ref_obj = _sklearn(X / norms, Y[:, j], lam[j], True)
        assert abs(res.objective[j].item() - ref_obj) <= 1e-6 * ref_obj
        np.testing.assert_allclose(
            res.coef[:, j].numpy() * norms, ref_coef, atol=1e-6 * np.abs(ref_coef).max()
        )


def test_gap_certificate_and_independent_objective():
    X, Y = _problem(sparse=True, seed=2)
    tol = 1e-7
    res = lasso(X, Y, 0.2 * lam_max(X, Y), tol=tol, dtype=F64)
    M = Y.shape[0]
    assert (res.gap.numpy() <= tol * (Y**2).sum(0) / M).all() and res.converged.all()
    # objective recomputed here from the returned coefficients, in the normalized problem
    norms = np.sqrt(np.asarray(X.multiply(X).sum(0))).ravel()
    coef = _dense(res.coef)
    for j in range(Y.shape[1]):
        r = Y[:, j] - X @ coef[:, j]
        objective = r @ r / (2 * M) + res.lam[j].item() * np.abs(coef[:, j] * norms).sum()
        assert abs(objective - res.objective[j].item()) <= 1e-10 * objective


@pytest.mark.parametrize("sparse", [False, True])
def test_lam_at_or_above_lam_max_gives_zeros(sparse):
    X, Y = _problem(sparse, seed=3)
    top = lam_max(X, Y, fit_intercept=True)
    at = lasso(X, Y, top, fit_intercept=True, dtype=F64)
    assert (_dense(at.coef) == 0).all()
    np.testing.assert_allclose(at.intercept.numpy(), Y.mean(0))
    below = lasso(X, Y, 0.95 * top, fit_intercept=True, dtype=F64)
    assert (below.support_size > 0).all()


def test_float32_default_close_to_float64():
    X, Y = _problem(sparse=True, seed=4, M=200, p=60)
    lam = 0.05 * lam_max(X, Y)
    single = lasso(X, Y, lam)
    double = lasso(X, Y, lam, dtype=F64, tol=1e-10)
    assert single.coef.dtype == torch.float32 and single.coef.layout == torch.sparse_coo
    np.testing.assert_allclose(single.objective.numpy(), double.objective.numpy(), rtol=1e-5)


def test_float32_solve_stopped_at_max_iter_returns_its_iterate_with_a_warning():
    # near-duplicate columns and a tiny lam: FISTA needs far more than 30 iterations
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 200))
    X[:, 1::2] = X[:, ::2] + 0.01 * rng.standard_normal((60, 100))
    Y = rng.standard_normal((60, 4))
    with pytest.warns(UserWarning, match="did not reach the tolerance within max_iter=30"):
        stopped = lasso(X, Y, 1e-4, max_iter=30)
    assert stopped.coef.dtype == torch.float32
    assert not stopped.converged.any() and (stopped.n_iter == 30).all()
    assert (stopped.gap > 0).all() and torch.isfinite(stopped.objective).all()


def test_one_dimensional_target_and_zero_columns():
    X, Y = _problem(sparse=False, seed=5)
    X[:, 7] = 0.0
    res = lasso(X, Y[:, 0], 0.1 * lam_max(X, Y[:, 0]).item(), dtype=F64)
    assert res.coef.shape == (X.shape[1],) and res.gap.dim() == 0
    assert res.coef[7] == 0.0


def test_dense_problem_without_gram_matches_gram(monkeypatch):
    X, Y = _problem(sparse=False, seed=6)
    lam = 0.1 * lam_max(X, Y)
    with_gram = lasso(X, Y, lam, fit_intercept=True, dtype=F64, tol=1e-12)
    monkeypatch.setattr(prepare_module, "GRAM_MAX_ENTRIES", 0)
    without = lasso(X, Y, lam, fit_intercept=True, dtype=F64, tol=1e-12)
    np.testing.assert_allclose(without.coef.numpy(), with_gram.coef.numpy(), atol=1e-8)


def test_stop_on_objective_decrease_and_warm_start():
    X, Y = _problem(sparse=False, seed=7)
    lam = 0.1 * lam_max(X, Y)
    exact = lasso(X, Y, lam, dtype=F64, tol=1e-12)
    paper_rule = lasso(X, Y, lam, dtype=F64, tol=1e-10, stop="objective")
    np.testing.assert_allclose(paper_rule.objective.numpy(), exact.objective.numpy(), rtol=1e-6)
    warm = lasso(X, Y, lam, dtype=F64, tol=1e-12, coef_init=exact.coef)
    np.testing.assert_allclose(warm.coef.numpy(), exact.coef.numpy(), atol=1e-9)
    assert warm.n_iter.sum() <= exact.n_iter.sum()


def test_warm_started_path_equals_cold_solves():
    X, Y = _problem(sparse=True, seed=8)
    path = lasso_path(X, Y, n_lams=6, eps=0.05, dtype=F64, tol=1e-10)
    assert path.lams.shape == (6, Y.shape[1]) and len(path.coefs) == 6
    assert (path.lams[0] == lam_max(X, Y)).all()
    assert (path.support_size[0] == 0).all() and (path.support_size[-1] > 0).all()
    for i in (2, 5):
        cold = lasso(X, Y, path.lams[i], dtype=F64, tol=1e-10)
        np.testing.assert_allclose(path.objective[i].numpy(), cold.objective.numpy(), rtol=1e-8)
        np.testing.assert_allclose(_dense(path.coefs[i]), _dense(cold.coef), atol=1e-6)


def test_upper_triangular_parents_with_parallel_heads():
    assert upper_triangular_parents(3) == [[], [0], [0, 1]]
    parents = upper_triangular_parents(4, parallel_groups=[[1, 2]])
    assert parents == [[], [0], [0], [0, 1, 2]]
    with pytest.raises(ValueError, match="block 5"):
        upper_triangular_parents(4, parallel_groups=[[5]])


@pytest.mark.parametrize("sparse", [False, True])
def test_block_lasso_masks_and_matches_per_child_lasso(sparse):
    rng = np.random.default_rng(9)
    M, sizes = 120, [4, 3, 5, 3]
    X = rng.standard_normal((M, sum(sizes)))
    X[:, 4:7] += X[:, :3] @ rng.standard_normal((3, 3))
    X[:, 12:] += X[:, 7:10]
    Xin = sp.csr_matrix(X) if sparse else X
    parents = upper_triangular_parents(4, parallel_groups=[[1, 2]])
    res = block_lasso(Xin, sizes, parents, 0.01, fit_intercept=True, dtype=F64, tol=1e-12)
    A = res.to_dense().numpy()
    allowed = np.zeros_like(A, dtype=bool)
    off = np.cumsum([0, *sizes])
    for j, ps in enumerate(parents):
        for i in ps:
            allowed[off[i] : off[i + 1], off[j] : off[j + 1]] = True
    assert (A[~allowed] == 0.0).all()
    np.testing.assert_array_equal(res.to_sparse().to_dense().numpy(), A)
    # child block 3 against a direct lasso on its parents' columns
    cols = np.concatenate([np.arange(off[i], off[i + 1]) for i in parents[3]])
    direct = lasso(X[:, cols], X[:, off[3] :], 0.01, fit_intercept=True, dtype=F64, tol=1e-12)
    np.testing.assert_allclose(A[cols, off[3] :], direct.coef.numpy(), atol=1e-9)
    np.testing.assert_allclose(res.gap[off[3] :].numpy(), direct.gap.numpy(), atol=1e-12)
    assert res.converged.all() and (res.gap[: off[1]] == 0).all()


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_logistic_matches_sklearn(fit_intercept):
    # mean cross-entropy + lam |a|_1 = (|a|_1 + C sum CE) / (C M) with C = 1 / (lam M);
    # l1_ratio=1.0 is the scikit-learn >= 1.8 spelling of penalty="l1"
    rng = np.random.default_rng(10)
    M, p = 150, 8
    X = rng.standard_normal((M, p))
    y = (X[:, 0] - 2 * X[:, 1] + 0.5 + rng.standard_normal(M) > 0).astype(float)
    lam = 0.02
    res = logistic_lasso(
        X, y, lam, fit_intercept=fit_intercept, normalize=False, tol=1e-8, dtype=F64
    )
    solver = "saga" if fit_intercept else "liblinear"
    ref = LogisticRegression(
        l1_ratio=1.0,
        C=1 / (lam * M),
        solver=solver,
        fit_intercept=fit_intercept,
        tol=1e-12,
        max_iter=200_000,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.fit(X, y)
    eta = X @ ref.coef_[0] + np.atleast_1d(ref.intercept_)[0]
    ref_obj = np.mean(np.logaddexp(0, eta) - y * eta) + lam * np.abs(ref.coef_).sum()
    assert res.converged and abs(res.objective.item() - ref_obj) <= 1e-6 * ref_obj
    np.testing.assert_allclose(res.coef.numpy(), ref.coef_[0], atol=1e-4)


def test_logistic_sparse_input_and_all_zero_at_large_lam():
    rng = np.random.default_rng(11)
    X = sp.random(200, 40, density=0.2, random_state=11, format="csr")
    y = rng.integers(0, 2, 200)
    dense = logistic_lasso(X.toarray(), y, 0.01, dtype=F64, tol=1e-9)
    sparse = logistic_lasso(X, y, 0.01, dtype=F64, tol=1e-9)
    np.testing.assert_allclose(sparse.coef.numpy(), dense.coef.numpy(), atol=1e-6)
    assert (logistic_lasso(X, y, 10.0).coef == 0).all()


def _sae_like(M: int = 400, p: int = 200, seed: int = 13):
    """Sparse nonnegative X (M, p) with correlated columns (a sparse dictionary of 40 codes plus
    sparse noise; the last column all zero) and binary y driven by 4 of its features."""
    rng = np.random.default_rng(seed)

    def exponential(n):
        return rng.exponential(1.0, n)

    codes = sp.random(M, 40, density=0.1, random_state=rng, data_rvs=exponential)
    dictionary = sp.random(40, p - 1, density=0.05, random_state=rng, data_rvs=exponential)
    noise = sp.random(M, p - 1, density=0.03, random_state=rng, data_rvs=exponential)
    X = sp.hstack([codes @ dictionary + noise, sp.csr_matrix((M, 1))]).tocsr()
    eta = np.asarray(X[:, :4] @ np.array([2.0, -2.0, 1.5, 1.0])).ravel()
    y = (rng.random(M) < 1 / (1 + np.exp(-(eta - eta.mean() + 0.8)))).astype(float)
    return X, y


def _logistic_objective(X, y, coef, intercept, lam, omega):
    eta = np.asarray(X @ coef).ravel() + intercept
    return np.mean(np.logaddexp(0, eta) - y * eta) + lam * np.sum(omega * np.abs(coef))


def test_logistic_working_sets_match_sklearn_and_certify_the_full_problem(monkeypatch):
    # normalize=True is the l1 problem on unit-norm centered columns: scikit-learn (saga, which
    # leaves the intercept unpenalized) solves it on X / norms, the centering going to the intercept
    X, y = _sae_like()
    M, p = X.shape
    dense = X.toarray()
    norms = np.linalg.norm(dense - dense.mean(0), axis=0)
    unit = sp.csr_matrix(dense / np.where(norms > 0, norms, 1.0))
    lam = 0.2 * np.abs(unit.T @ (y - y.mean())).max() / M
    ref = LogisticRegression(
        l1_ratio=1.0, C=1 / (lam * M), solver="saga", tol=1e-12, max_iter=1_000_000
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.fit(unit, y)
    ref_obj = _logistic_objective(unit, y, ref.coef_[0], ref.intercept_[0], lam, 1.0)
    null = -(y.mean() * np.log(y.mean()) + (1 - y.mean()) * np.log(1 - y.mean()))

    res = logistic_lasso(X, y, lam, tol=1e-10, dtype=F64)
    coef = res.coef.numpy()
    assert res.converged and res.gap.item() <= 1e-10 * null
    assert 0 < (coef != 0).sum() < p // 10 and coef[-1] == 0.0
    ours = _logistic_objective(X, y, coef, res.intercept.item(), lam, norms)
    assert abs(ours - res.objective.item()) <= 1e-12
    assert ours <= ref_obj + 1e-12
    np.testing.assert_allclose(coef * norms, ref.coef_[0], atol=1e-6)
    assert abs(res.intercept.item() - ref.intercept_[0]) <= 1e-6

    # a loose or cut-short solve: its gap still bounds its distance to the optimum
    loose = logistic_lasso(X, y, lam, tol=1e-3, dtype=F64)
    with pytest.warns(sklearn.exceptions.ConvergenceWarning):  # scikit-learn's filters apply
        cut = logistic_lasso(X, y, lam, tol=1e-10, max_iter=1, dtype=F64)
    assert loose.converged and not cut.converged and cut.gap.item() > 1e-10 * null
    for r in (loose, cut):
        value = _logistic_objective(X, y, r.coef.numpy(), r.intercept.item(), lam, norms)
        assert abs(value - r.objective.item()) <= 1e-12
        assert ref_obj - 1e-12 <= value <= ref_obj + r.gap.item() + 1e-12

    # restricted designs kept sparse, and the float32 default, give the same solution
    monkeypatch.setattr(logistic_design, "DENSE_MAX_ENTRIES", 0)
    kept_sparse = logistic_lasso(X, y, lam, tol=1e-10, dtype=F64)
    np.testing.assert_allclose(kept_sparse.coef.numpy(), coef, atol=1e-8)
    single = logistic_lasso(X, y, lam)
    assert single.coef.dtype == torch.float32 and single.converged
    assert abs(single.objective.item() - ref_obj) <= 1e-6 * ref_obj


# ---------------------------------------------------------------- multinomial
# Tolerances: against scikit-learn's saga at tol=1e-12, objectives agree to a relative 1e-6 and
# coefficients to 1e-4 (absolute, on coefficients of order 1); K = 3 (odd) makes the
# coefficients unique (each row's median is 0 at the optimum; for even K it may shift). The
# sweeps converge linearly, so the certified gap is asked to 1e-8, above its rounding floor.


def _multiclass(M: int = 150, p: int = 8, K: int = 3, seed: int = 14):
    """Dense X (M, p) and labels y in 0..K-1 drawn from a softmax model on 3 planted features."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((M, p))
    A = np.zeros((p, K))
    A[:3] = rng.uniform(-2.0, 2.0, (3, K))
    eta = X @ A
    P = np.exp(eta - eta.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    y = np.array([rng.choice(K, p=row) for row in P])
    return X, y


def _multinomial_objective(X, y, coef, intercept, lam, omega):
    eta = np.asarray(X @ coef) + intercept
    log_norm = np.log(np.exp(eta - eta.max(1, keepdims=True)).sum(1)) + eta.max(1)
    loss = np.mean(log_norm - eta[np.arange(len(y)), y])
    return loss + lam * np.sum(np.reshape(omega, (-1, 1)) * np.abs(coef))


def _saga(X, y, lam, fit_intercept=True):
    ref = LogisticRegression(
        l1_ratio=1.0, C=1 / (lam * len(y)), solver="saga", fit_intercept=fit_intercept,
        tol=1e-12, max_iter=1_000_000,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.fit(X, y)
    return ref.coef_.T, np.atleast_1d(ref.intercept_) * np.ones(ref.coef_.shape[0])


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_multinomial_matches_sklearn(fit_intercept):
    X, y = _multiclass()
    lam = 0.02
    res = multinomial_lasso(
        X, y, lam, fit_intercept=fit_intercept, normalize=False, tol=1e-8, dtype=F64
    )
    ref_coef, ref_intercept = _saga(X, y, lam, fit_intercept)
    ref_obj = _multinomial_objective(X, y, ref_coef, ref_intercept, lam, 1.0)
    coef, intercept = res.coef.numpy(), res.intercept.numpy()
    ours = _multinomial_objective(X, y, coef, intercept, lam, 1.0)
    assert res.converged and res.gap.item() <= 1e-8 * np.log(3)
    assert abs(ours - res.objective.item()) <= 1e-12
    assert abs(ours - ref_obj) <= 1e-6 * ref_obj
    assert coef.shape == (8, 3) and 0 < (coef != 0).sum() < coef.size
    np.testing.assert_allclose(coef, ref_coef, atol=1e-4)
    np.testing.assert_allclose(intercept, ref_intercept - ref_intercept.mean(), atol=1e-4)
    assert abs(intercept.sum()) <= 1e-12
    if fit_intercept:  # the intercepts are exactly optimal for the coefficients returned
        eta = X @ coef + intercept
        P = np.exp(eta) / np.exp(eta).sum(1, keepdims=True)
        np.testing.assert_allclose((P - np.eye(3)[y]).mean(0), 0.0, atol=1e-12)
    np.testing.assert_array_equal(res.classes.numpy(), [0, 1, 2])


def test_multinomial_working_sets_certify_the_full_problem(monkeypatch):
    # normalize=True is the problem on unit-norm centered columns: saga solves it on X / norms
    X, _ = _sae_like(M=300, p=120, seed=15)
    dense = X.toarray()
    codes = np.asarray(X[:, :6] @ np.array([2.0, -1.0, 1.5, 0.5, -2.0, 1.0])).ravel()
    y = np.digitize(codes + np.random.default_rng(15).normal(0, 0.3, len(codes)), [-0.3, 0.4])
    norms = np.linalg.norm(dense - dense.mean(0), axis=0)
    unit = dense / np.where(norms > 0, norms, 1.0)
    theta = np.eye(3)[y] - np.bincount(y) / len(y)
    top = np.abs(unit.T @ theta).max() / len(y)
    assert logistic_lam_max(X, y) == pytest.approx(top, rel=1e-12)
    lam = 0.2 * top
    ref_coef, ref_intercept = _saga(unit, y, lam)
    ref_obj = _multinomial_objective(unit, y, ref_coef, ref_intercept, lam, 1.0)
    null = -np.sum(np.bincount(y) / len(y) * np.log(np.bincount(y) / len(y)))

    res = multinomial_lasso(X, y, lam, tol=1e-8, dtype=F64)
    coef = res.coef.numpy()
    assert res.converged and res.gap.item() <= 1e-8 * null
    assert 0 < (coef != 0).any(1).sum() < 30 and not coef[-1].any()
    ours = _multinomial_objective(X, y, coef, res.intercept.numpy(), lam, norms)
    assert abs(ours - res.objective.item()) <= 1e-12
    assert abs(ours - ref_obj) <= 1e-6 * ref_obj
    np.testing.assert_allclose(coef * norms[:, None], ref_coef, atol=1e-4)

    # a loose or cut-short solve: its gap still bounds its distance to the optimum
    loose = multinomial_lasso(X, y, lam, tol=1e-3, dtype=F64)
    with pytest.warns(ConvergenceWarning, match="multinomial_lasso did not reach"):
        cut = multinomial_lasso(X, y, lam, tol=1e-8, max_iter=1, dtype=F64)
    assert loose.converged and not cut.converged and cut.gap.item() > 1e-8 * null
    for r in (loose, cut):
        value = _multinomial_objective(X, y, r.coef.numpy(), r.intercept.numpy(), lam, norms)
        assert abs(value - r.objective.item()) <= 1e-12
        assert ref_obj - 1e-6 * ref_obj <= value <= ref_obj + r.gap.item() + 1e-6 * ref_obj

    # restricted designs kept sparse give the same solution; at lam_max every coefficient is 0
    monkeypatch.setattr(logistic_design, "DENSE_MAX_ENTRIES", 0)
    kept_sparse = multinomial_lasso(X, y, lam, tol=1e-8, dtype=F64)
    np.testing.assert_allclose(kept_sparse.coef.numpy(), coef, atol=1e-6)
    assert not multinomial_lasso(X, y, 1.0001 * top, dtype=F64).coef.any()
    assert multinomial_lasso(X, y, 0.99 * top, dtype=F64).coef.any()


def test_two_class_multinomial_is_the_binary_problem():
    # eta_1 - eta_0 = x (A_1 - A_0) and |A_0| + |A_1| >= |A_1 - A_0|: same optimum, same lam_max
    X, y = _multiclass(seed=16)
    y2 = (y == 1).astype(float)
    binary = logistic_lasso(X, y2, 0.01, tol=1e-12, dtype=F64)
    multi = multinomial_lasso(X, y2, 0.01, tol=1e-12, dtype=F64)
    assert multi.objective.item() == pytest.approx(binary.objective.item(), rel=1e-9)
    difference = (multi.coef[:, 1] - multi.coef[:, 0]).numpy()
    np.testing.assert_allclose(difference, binary.coef.numpy(), atol=1e-6)
    Xc = X - X.mean(0)
    unit = Xc / np.linalg.norm(Xc, axis=0)
    expected = np.abs(unit.T @ (y2 - y2.mean())).max() / len(y2)
    assert logistic_lam_max(X, y2) == pytest.approx(expected, rel=1e-12)
    no_intercept = np.abs((X / np.linalg.norm(X, axis=0)).T @ (y2 - 0.5)).max() / len(y2)
    assert logistic_lam_max(X, y2, fit_intercept=False) == pytest.approx(no_intercept, rel=1e-12)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda X, Y: lasso(np.where(np.arange(6) == 3, np.nan, X), Y, 0.1), "column: 3"),
        (lambda X, Y: lasso(X, np.where(np.arange(2) == 1, np.inf, Y), 0.1), "Y has NaN or inf"),
        (
            lambda X, Y: lasso(sp.csr_matrix(np.where(np.arange(6) == 2, np.inf, X)), Y, 0.1),
            "column: 2",
        ),
        (lambda X, Y: lasso(X, Y[:-1], 0.1), "Y has 9 rows but X has 10"),
        (lambda X, Y: lasso(X, Y, -0.1), "lam must be >= 0"),
        (lambda X, Y: lasso(X, Y, [0.1, 0.2, 0.3]), "one entry per output"),
        (lambda X, Y: lasso(X, Y, 0.0), "lam must be > 0"),
        (lambda X, Y: lasso(np.zeros((0, 6)), Y[:0], 0.1), "X is empty"),
        (lambda X, Y: lasso(X, Y, 0.1, tol=0), "tol must be > 0"),
        (lambda X, Y: lasso(X, Y, 0.1, memory_gib=-1), "memory_gib must be a positive"),
        (lambda X, Y: block_lasso(X, [2, 2], [[], [0]], 0.1), "add up to 4 but X has 6"),
        (lambda X, Y: block_lasso(X, [3, 3], [[], [1]], 0.1), r"parents\[1\] names block 1"),
        (lambda X, Y: logistic_lasso(X, Y[:, 0] * 0, 0.1), "two classes"),
        (lambda X, Y: multinomial_lasso(X, Y[:, 0] * 0, 0.1), "at least two classes"),
        (lambda X, Y: multinomial_lasso(X, (Y[:, 0] > 0).astype(float), 0.0), "lam must be > 0"),
        (lambda X, Y: multinomial_lasso(X, Y, 0.1), "y must be 1-D"),
    ],
)
def test_bad_input_raises_clear_error(call, message):
    rng = np.random.default_rng(12)
    X, Y = rng.standard_normal((10, 6)), rng.standard_normal((10, 2))
    with pytest.raises(ValueError, match=message):
        call(X, Y)


def test_working_set_sizes():
    """The Lasso's policy: a first set takes an eighth of the violators at b = 0 (between 16
    and 64); later sets grow to 5/4 of the support or support plus violators, at most doubling,
    never shrinking, never past the largest the memory budget allows. The logistic policy's
    sets start at 16 and double, unrounded."""
    from circuitlasso.solve.workset import LASSO_POLICY, LOGISTIC_POLICY, next_size

    none = torch.zeros(4, dtype=torch.int64)
    first = next_size(LASSO_POLICY, none, torch.tensor([0, 100, 300, 5000]), none, 4096)
    assert first.tolist() == [16, 16, 64, 64]
    support, violators = torch.tensor([10, 30, 30]), torch.tensor([0, 500, 2])
    later = next_size(LASSO_POLICY, support, violators, torch.tensor([16, 32, 64]), 4096)
    assert later.tolist() == [16, 64, 64]
    assert next_size(LASSO_POLICY, none[:1], torch.tensor([5000]), none[:1], 32).tolist() == [32]
    first = next_size(LOGISTIC_POLICY, none, torch.tensor([0, 100, 300, 5000]), none, 4096)
    assert first.tolist() == [16, 16, 16, 16]
    later = next_size(LOGISTIC_POLICY, support, violators, torch.tensor([16, 32, 40]), 50)
    assert later.tolist() == [20, 50, 50]
