"""Coordinate descent on sparse columns (`circuitlasso.solve.coordinate.column_descent`, the
CPU's inner solver where Gram blocks cost more than they serve) against scikit-learn and the Gram
form on the same problems, centered or not, with copies of columns, both stop rules, and the same
bits on one thread or two."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.linear_model import Lasso

from circuitlasso.solve._sparse import csr_from_scipy, csr_transpose
from circuitlasso.solve.coordinate import column_descent, coordinate_descent
from circuitlasso.solve.fista import Subproblems

TOL = 1e-13


def _problem(x: np.ndarray, y: np.ndarray, lam: np.ndarray, centered: bool):  # type: ignore[no-untyped-def]
    """`column_descent`'s arguments for every output on all of x's columns, and the dense
    centered arrays (xc, yc) of the same problems."""
    M, p = x.shape
    B = y.shape[1]
    rows = csr_from_scipy(sp.csr_matrix(x), torch.float64, torch.device("cpu"))
    mu = torch.from_numpy(x.mean(0)) if centered else None
    y_mean = torch.from_numpy(y.mean(0)) if centered else None
    xc = x - x.mean(0) if centered else x
    yc = y - y.mean(0) if centered else y
    W = torch.arange(p).expand(B, p).contiguous()
    w = torch.from_numpy(M * lam[:, None] * np.ones((1, p)))
    tol = torch.from_numpy(TOL * np.maximum((yc**2).sum(0), 1.0))
    args = (csr_transpose(rows), mu, torch.from_numpy(y.T.copy()), y_mean, W)
    return args, w, tol, xc, yc


def _gram(xc: np.ndarray, yc: np.ndarray, w: torch.Tensor) -> Subproblems:
    B = yc.shape[1]
    Q = torch.from_numpy(np.broadcast_to(xc.T @ xc, (B, xc.shape[1], xc.shape[1])).copy())
    return Subproblems(
        Q, torch.from_numpy((xc.T @ yc).T.copy()), torch.from_numpy((yc**2).sum(0)), w
    )


def _objective(xc: np.ndarray, yc: np.ndarray, coef: np.ndarray, lam: np.ndarray) -> np.ndarray:
    M = xc.shape[0]
    return ((yc - xc @ coef) ** 2).sum(0) / (2 * M) + lam * np.abs(coef).sum(0)


def _sparse_data(M: int = 60, p: int = 25, n_out: int = 5, seed: int = 0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    x = sp.random(M, p, density=0.2, random_state=seed, data_rvs=rng.standard_normal).toarray()
    x += (rng.random((M, p)) < 0.05) * 3.0  # a few large entries
    y = x[:, :4] @ rng.standard_normal((4, n_out)) + 0.2 * rng.standard_normal((M, n_out))
    return x, y


@pytest.mark.parametrize("centered", [True, False], ids=["centered", "uncentered"])
def test_column_descent_reaches_the_lasso_solution(centered: bool) -> None:
    x, y = _sparse_data()
    M = x.shape[0]
    xc = x - x.mean(0) if centered else x
    yc = y - y.mean(0) if centered else y
    lam = np.abs(xc.T @ yc / M).max(0) * np.array([0.5, 0.1, 0.03, 0.01, 2.0])
    args, w, tol, xc, yc = _problem(x, y, lam, centered)
    b, _, converged = column_descent(
        *args, torch.zeros(w.shape, dtype=torch.float64), w, tol, max_iter=100_000
    )
    assert bool(converged.all())
    ours = b.numpy().T
    for j in range(y.shape[1]):
        ref = Lasso(alpha=lam[j], fit_intercept=False, tol=1e-14, max_iter=10**6).fit(xc, yc[:, j])
        np.testing.assert_allclose(ours[:, j], ref.coef_, atol=1e-6)
    assert not ours[:, -1].any()  # above lam_max: b = 0
    gram, _, ok = coordinate_descent(_gram(xc, yc, w), torch.zeros_like(b), tol, max_iter=100_000)
    assert bool(ok.all())
    np.testing.assert_allclose(
        _objective(xc, yc, ours, lam), _objective(xc, yc, gram.numpy().T, lam), rtol=1e-10
    )


def test_copies_of_a_column_share_its_weight() -> None:
    """Duplicated and negated copies of unit-norm centered columns (the solver's coordinates):
    the least-norm point on the equicorrelation set, as the Gram solver's."""
    x, y = _sparse_data(p=20, n_out=3, seed=1)
    x = np.column_stack([x, x[:, :3], -2 * x[:, 3:4]])
    x /= np.sqrt(((x - x.mean(0)) ** 2).sum(0))
    M = x.shape[0]
    lam = np.abs((x - x.mean(0)).T @ (y - y.mean(0)) / M).max(0) * np.array([0.2, 0.05, 0.01])
    args, w, tol, xc, yc = _problem(x, y, lam, True)
    zeros = torch.zeros(w.shape, dtype=torch.float64)
    b, _, ok = column_descent(*args, zeros, w, 1e-9 * tol / TOL)
    assert bool(ok.all())
    even = b.numpy().T
    assert np.abs(even[:4]).sum() > 0
    np.testing.assert_allclose(even[:3], even[20:23], rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(even[3], -even[23], rtol=1e-4, atol=1e-9)
    gram, _, _ = coordinate_descent(_gram(xc, yc, w), zeros, 1e-9 * tol / TOL)
    np.testing.assert_allclose(even, gram.numpy().T, rtol=1e-4, atol=1e-9)


def test_objective_stop_and_a_zero_target() -> None:
    x, y = _sparse_data(n_out=3, seed=2)
    y[:, 2] = 0.0
    lam = np.full(3, 0.05)
    args, w, tol, xc, yc = _problem(x, y, lam, True)
    zeros = torch.zeros(w.shape, dtype=torch.float64)
    by_gap, _, _ = column_descent(*args, zeros, w, tol, max_iter=100_000)
    by_objective, _, ok = column_descent(
        *args, zeros, w, torch.full_like(tol, 1e-12), stop="objective", max_iter=100_000
    )
    assert bool(ok.all())
    assert not by_objective[2].any() and not by_gap[2].any()
    np.testing.assert_allclose(
        _objective(xc, yc, by_objective.numpy().T, lam),
        _objective(xc, yc, by_gap.numpy().T, lam),
        rtol=1e-8,
    )


def test_an_unmet_tolerance_is_reported_and_threads_do_not_matter() -> None:
    x, y = _sparse_data(n_out=6, seed=3)
    lam = np.full(6, 0.01)
    args, w, tol, _, _ = _problem(x, y, lam, True)
    zeros = torch.zeros(w.shape, dtype=torch.float64)
    _, epochs, converged = column_descent(*args, zeros, w, tol, max_iter=1)
    assert not bool(converged.any()) and bool((epochs == 1).all())
    before = torch.get_num_threads()
    runs = []
    for n in (1, 2):
        torch.set_num_threads(n)
        runs.append(column_descent(*args, zeros, w, tol, max_iter=100_000)[0])
    torch.set_num_threads(before)
    assert torch.equal(runs[0], runs[1])
    alone, _, _ = column_descent(
        *(a[2:3] if i in (2, 3, 4) and a is not None else a for i, a in enumerate(args)),
        zeros[2:3],
        w[2:3],
        tol[2:3],
        max_iter=100_000,
    )
    assert torch.equal(alone[0], runs[0][2])


@pytest.mark.parametrize("centered", [True, False], ids=["centered", "uncentered"])
def test_a_set_whose_columns_miss_most_rows(centered: bool) -> None:
    """Rows no column of the set touches keep r = y: their share of the sums comes in closed
    form, and the solution is still scikit-learn's on the set's columns."""
    rng = np.random.default_rng(4)
    M, p = 80, 8
    x = np.zeros((M, p))
    x[rng.choice(M, 20, replace=False)[:, None], np.arange(p)] = rng.standard_normal((20, p))
    y = x[:, :3] @ rng.standard_normal((3, 2)) + rng.standard_normal((M, 2)) + 2.0
    xc = x - x.mean(0) if centered else x
    yc = y - y.mean(0) if centered else y
    lam = np.abs(xc.T @ yc / M).max(0) * 0.05
    args, w, tol, xc, yc = _problem(x, y, lam, centered)
    zeros = torch.zeros(w.shape, dtype=torch.float64)
    b, _, ok = column_descent(*args, zeros, w, tol, max_iter=100_000)
    assert bool(ok.all()) and (np.abs(x).sum(1) == 0).sum() >= M - 20
    for j in range(2):
        ref = Lasso(alpha=lam[j], fit_intercept=False, tol=1e-14, max_iter=10**6).fit(xc, yc[:, j])
        np.testing.assert_allclose(b[j].numpy(), ref.coef_, atol=1e-7)
