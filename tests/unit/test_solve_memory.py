"""The solver's memory budget: batches sized by bytes, the Gram's cheaper forms, clear refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.linear_model import Lasso

import circuitlasso.solve.problems as problems_module
from circuitlasso.solve import MemoryBudgetError, block_lasso, lam_max, lasso
from circuitlasso.solve._sparse import csr_from_scipy, csr_transpose
from circuitlasso.solve.problems import SparseProblem


def _sparse_problem(seed: int = 0, M: int = 120, p: int = 40, d: int = 6):
    rng = np.random.default_rng(seed)
    X = sp.random(M, p, density=0.25, random_state=seed, format="csr")
    A = np.zeros((p, d))
    A[rng.choice(p, 6, replace=False)] = rng.standard_normal((6, d))
    return X, np.asarray(X @ A) + 0.1 * rng.standard_normal((M, d)) + 0.3


def test_gram_blocks_from_sparse_products_match_the_dense_gram_and_sklearn(monkeypatch):
    """The cheaper form (Gram blocks from the working sets' columns, no p x p Gram) solves the
    same problem."""
    X, Y = _sparse_problem()
    lam = 0.05 * lam_max(X, Y, fit_intercept=True, normalize=False).numpy()
    options = dict(fit_intercept=True, normalize=False, tol=1e-12, dtype=torch.float64)
    with_gram = lasso(X, Y, lam, **options)
    built = []
    original = SparseProblem._dense_gram
    monkeypatch.setattr(problems_module, "SMALL_GRAM_ENTRIES", 0)  # 6 outputs: too few for one
    monkeypatch.setattr(
        SparseProblem, "_dense_gram", lambda self, b: built.append(original(self, b)) or built[-1]
    )
    products = lasso(X, Y, lam, **options)
    assert built == [None]
    assert products.converged.all()
    a, b = with_gram.coef.to_dense().numpy(), products.coef.to_dense().numpy()
    assert np.abs(a - b).max() <= 1e-7 * np.abs(a).max()
    for j in range(Y.shape[1]):
        ref = Lasso(alpha=lam[j], tol=1e-14, max_iter=1_000_000).fit(X, Y[:, j])
        assert np.abs(b[:, j] - ref.coef_).max() <= 1e-6 * np.abs(ref.coef_).max()


def test_dense_gram_is_built_in_the_precision_that_fits():
    X, Y = _sparse_problem(p=40, d=80)
    x = csr_from_scipy(sp.csr_matrix(X), torch.float64, torch.device("cpu"))
    y_t = csr_transpose(csr_from_scipy(sp.csr_matrix(Y), torch.float64, torch.device("cpu")))
    reference = (X.T @ X).toarray()
    p = X.shape[1]
    for gram_bytes, dtype in [(8 * p * p, torch.float64), (8 * p * p - 1, torch.float32)]:
        problem = SparseProblem(x, None, y_t, gram_bytes, torch.float64)
        assert problem.G is not None and problem.G.dtype == dtype
        assert np.abs(problem.G.double().numpy() - reference).max() <= 1e-6 * reference.max()
    assert SparseProblem(x, None, y_t, 4 * p * p - 1, torch.float64).G is None


def test_gradients_of_a_batch_of_outputs_match_dense_algebra():
    """X~^T r, ||r||^2 and <y_c, r> of 21 outputs against the same algebra on dense, explicitly
    centered arrays."""
    X, Y = _sparse_problem(M=90, p=30, d=21)
    x = csr_from_scipy(sp.csr_matrix(X), torch.float64, torch.device("cpu"))
    y_t = torch.from_numpy(np.ascontiguousarray(Y.T))
    mu = torch.from_numpy(np.asarray(X.mean(0)).ravel())
    problem = SparseProblem(x, mu, y_t, 0, torch.float64)
    rng = np.random.default_rng(1)
    W = torch.from_numpy(np.stack([rng.choice(30, 5, replace=False) for _ in range(21)]))
    b = torch.from_numpy(rng.standard_normal((21, 5)))
    g, rr, yr = problem.gradient(torch.arange(21), W, b)
    Xc = X.toarray() - X.toarray().mean(0)
    B = np.zeros((30, 21))
    for j in range(21):
        B[W[j].numpy(), j] = b[j].numpy()
    Yc = Y - Y.mean(0)
    R = Yc - Xc @ B
    np.testing.assert_allclose(g.numpy(), (Xc.T @ R).T, rtol=0, atol=1e-10)
    np.testing.assert_allclose(rr.numpy(), (R**2).sum(0), rtol=1e-12)
    np.testing.assert_allclose(yr.numpy(), (Yc * R).sum(0), rtol=1e-12)


def test_a_budget_too_small_for_the_problem_is_refused_before_any_work():
    X, Y = _sparse_problem()
    with pytest.raises(MemoryBudgetError, match=r"needs at least .* GiB .* budget is 0\.00 GiB"):
        lasso(X, Y, 0.1, memory_gib=1e-6)
    with pytest.raises(ValueError, match="memory_gib must be a positive number of GiB"):
        lasso(X, Y, 0.1, memory_gib=0)


_SOLVE = textwrap.dedent(
    """
    import json, sys, threading, time
    import numpy as np, scipy.sparse as sp, torch
    import circuitlasso.solve.problems as problems
    from circuitlasso.solve import lam_max, lasso

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    M, p, d = 2000, 6000, 512
    problems.GRAM_OUTPUT_SHARE = p / d  # enough outputs for a dense Gram, where it fits
    X = sp.random(M, p, density=60 / p, random_state=0, format="csr", dtype=np.float32)
    A = sp.random(p, d, density=3 / p, random_state=1, format="csc")
    Y = sp.csc_matrix(np.maximum(np.asarray((X @ A).todense()) - 0.05, 0.0), dtype=np.float32)
    lam = 0.05 * lam_max(X, Y).numpy()

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**30

    base, peak, done = rss(), [0.0], []

    def sample():
        while not done:
            peak[0] = max(peak[0], rss())
            time.sleep(0.002)

    threading.Thread(target=sample, daemon=True).start()
    options = {} if sys.argv[1] == "default" else {"memory_gib": float(sys.argv[1])}
    result = lasso(X, Y, lam, tol=1e-6, **options)
    done.append(True)
    coef = result.coef.to_dense()
    print(json.dumps({
        "added_gib": max(peak[0], rss()) - base,
        "objective": result.objective.tolist(),
        "gap": result.gap.tolist(),
        "converged": bool(result.converged.all()),
        "coef_max": float(coef.abs().max()),
        "coef": coef.flatten().tolist(),
    }))
    """
)


def _solve_in_a_fresh_process(budget: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _SOLVE, budget], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_block_coefficients_over_the_budget_are_refused_before_any_work():
    # 3 blocks of 2048 columns, each fed by those before it: 3 blocks of 2048^2 coefficients,
    # 96 MiB solved in float64, over a budget of 64 MiB; 48 MiB in float32, and sparse blocks
    # for a sparse X, within it
    x = torch.zeros(4, 3 * 2048)
    parents = [[], [0], [0, 1]]
    double = {"dtype": torch.float64}
    with pytest.raises(MemoryBudgetError, match=r"take 0\.09 GiB, more than memory_gib"):
        block_lasso(x, [2048] * 3, parents, 0.1, memory_gib=1 / 16, **double)
    wider = block_lasso(x, [2048] * 3, parents, 0.1, memory_gib=1 / 8, **double)
    assert wider.coef[(1, 2)].shape == (2048, 2048)
    single = block_lasso(x, [2048] * 3, parents, 0.1, memory_gib=1 / 16, dtype=torch.float32)
    assert single.coef[(1, 2)].dtype == torch.float32
    sparse = block_lasso(x.to_sparse_csr(), [2048] * 3, parents, 0.1, memory_gib=1 / 16, **double)
    assert sparse.coef[(1, 2)].shape == (2048, 2048)


@pytest.mark.slow  # solves in subprocesses
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_solve_within_a_small_budget_equals_the_unconstrained_solve():
    """Unconstrained, this solve builds a dense 6000 x 6000 Gram (0.27 GiB in float64); under a
    0.2 GiB budget it computes its Gram blocks from the sets' columns instead, stays within the
    budget (resident memory sampled every 2 ms, in a fresh process) and returns the same
    certified solution."""
    budget = 0.2
    free = _solve_in_a_fresh_process("default")
    small = _solve_in_a_fresh_process(str(budget))
    assert free["added_gib"] > budget  # the unconstrained solve would break this budget
    assert small["added_gib"] <= budget
    assert free["converged"] and small["converged"]
    objective = np.array(free["objective"])
    assert np.abs(np.array(small["objective"]) - objective).max() <= 1e-5 * objective.max()
    diff = np.abs(np.array(small["coef"]) - np.array(free["coef"])).max()
    assert diff <= 1e-3 * free["coef_max"]


def test_sets_whose_gram_block_outgrows_the_cap_are_solved_on_their_columns():
    """Dense columns (182 entries, more than COLUMN_SHARE of the sets) take Gram blocks up to
    GRAM_BLOCK_BYTES (K = 1448 in float64), and their columns beyond."""
    M, p = 182, 1449
    X = sp.csr_matrix(np.random.default_rng(0).standard_normal((M, p)))
    x = csr_from_scipy(X, torch.float64, torch.device("cpu"))
    y_t = torch.zeros(1, M, dtype=torch.float64)
    problem = SparseProblem(x, None, y_t, 0, torch.float64)
    assert not problem.columns_pay(torch.arange(1448).unsqueeze(0))
    assert problem.columns_pay(torch.arange(1449).unsqueeze(0))
