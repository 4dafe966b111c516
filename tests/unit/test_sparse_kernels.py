"""The compiled loops of the solver on the CPU (sparse products, scores) against dense algebra and
torch, in both of the gradient's forms, and the same to the bit on one thread and on two."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from circuitlasso.solve._sparse import csr_from_scipy, csr_transpose
from circuitlasso.solve.screen import score
from circuitlasso.solve.sparse_kernels import gathered_outputs, gram_blocks, residual_gradients

M, P, B, K = 120, 70, 9, 12


def _design(seed: int = 0) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    X = sp.random(M, P, density=0.08, random_state=seed, format="csr", dtype=np.float64)
    rows = csr_from_scipy(X, torch.float64, torch.device("cpu"))
    return X.toarray(), rows, csr_transpose(rows)


def _sets(seed: int = 1) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.stack([np.sort(rng.choice(P, K, replace=False)) for _ in range(B)]))


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def test_gram_blocks_are_the_dense_products_of_the_sets_columns(threads):
    dense, _, columns = _design()
    W = _sets()
    blocks = gram_blocks(columns, W, M).numpy()
    for j in range(B):
        x = dense[:, W[j].numpy()]
        np.testing.assert_allclose(blocks[j], x.T @ x, rtol=1e-13, atol=1e-15)


def _coefficients(W: torch.Tensor, seed: int = 2) -> torch.Tensor:
    b = torch.from_numpy(np.random.default_rng(seed).standard_normal(W.shape))
    b[:, ::3] = 0.0  # padding and inactive slots carry b = 0
    return b


@pytest.mark.parametrize("centered", [False, True], ids=["uncentered", "centered"])
@pytest.mark.parametrize("targets", ["a few rows", "every row"])
def test_residual_gradients_match_dense_algebra(threads, targets, centered):
    """A target on a few rows with few coefficients scatters the residual's rows; a dense target
    gathers every column: both are X~^T r, ||r||^2 and <y_c, r> of r = y_c - X~_W b, with the
    centering implicit (X~ = X - 1 mu^T) or none."""
    dense, rows, columns = _design()
    W = _sets()
    rng = np.random.default_rng(3)
    y = np.zeros((B, M))
    if targets == "a few rows":
        y[:, rng.choice(M, 4, replace=False)] = 1.0
        b = torch.zeros(W.shape, dtype=torch.float64)
        b[:, 0] = 0.5
    else:
        y[:] = rng.standard_normal((B, M))
        b = _coefficients(W)
    mu = torch.from_numpy(dense.mean(0)) if centered else None
    y_mean = torch.from_numpy(y.mean(1)) if centered else None
    g, rr, yr = residual_gradients(rows, columns, W, b, torch.from_numpy(y), mu, y_mean)
    x = dense - dense.mean(0) if centered else dense
    for j in range(B):
        target = y[j] - y[j].mean() if centered else y[j]
        r = target - x[:, W[j].numpy()] @ b[j].numpy()
        np.testing.assert_allclose(g[j].numpy(), x.T @ r, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(rr[j].item(), r @ r, rtol=1e-12)
        np.testing.assert_allclose(yr[j].item(), target @ r, rtol=1e-12, atol=1e-12)


def test_results_do_not_depend_on_the_threads():
    _, rows, columns = _design()
    W = _sets()
    y = torch.from_numpy(np.random.default_rng(4).standard_normal((B, M)))
    b = _coefficients(W)
    before = torch.get_num_threads()
    results = []
    for n in (1, 2):
        torch.set_num_threads(n)
        mu = torch.ones(P) / 3
        gradients = residual_gradients(rows, columns, W, b, y, mu, y.mean(1))
        results.append((gram_blocks(columns, W, M), *gradients))
    torch.set_num_threads(before)
    for one, two in zip(*results, strict=True):
        assert torch.equal(one, two)


def test_an_outputs_gradient_is_the_same_alone_and_in_a_large_mixed_batch(threads):
    """70 outputs, half on a few rows (scattered), half dense (gathered in several groups, the
    last one partial): each has the bits it has when solved alone."""
    _, rows, columns = _design()
    rng = np.random.default_rng(6)
    n = 70
    W = torch.from_numpy(np.stack([np.sort(rng.choice(P, K, replace=False)) for _ in range(n)]))
    b = torch.from_numpy(rng.standard_normal(W.shape))
    y = rng.standard_normal((n, M))
    y[::2] = 0.0
    y[::2, :3] = 1.0
    b[::2, 1:] = 0.0
    y_t, mu = torch.from_numpy(y), torch.ones(P) / 3
    batch = residual_gradients(rows, columns, W, b, y_t, mu, y_t.mean(1))
    for j in range(n):
        alone = residual_gradients(rows, columns, W[j : j + 1], b[j : j + 1], y_t[j : j + 1],
                                   mu, y_t[j : j + 1].mean(1))  # fmt: skip
        for part, whole in zip(alone, batch, strict=True):
            assert torch.equal(part[0], whole[j])


def test_a_batch_gathers_the_outputs_that_share_a_read_of_X():
    """A residual on every row, alone, scatters (a read of X costs more than its entries); 40
    of them gather, and outputs on a few rows beside them still scatter."""
    nnz = 1000
    assert gathered_outputs(np.array([nnz]), nnz).size == 0
    full = np.full(40, nnz)
    np.testing.assert_array_equal(gathered_outputs(full, nnz), np.arange(40))
    mixed = np.concatenate([np.full(5, 10), full])
    np.testing.assert_array_equal(gathered_outputs(mixed, nnz), np.arange(5, 45))


@pytest.mark.parametrize("unit_weights", [True, False])
def test_compiled_scores_are_the_tensor_expressions_to_the_bit(threads, unit_weights):
    """`screen.score` on the CPU (one compiled pass) against its expressions in torch."""
    rng = np.random.default_rng(5)
    g = torch.from_numpy(rng.standard_normal((B, P)) * 3)
    omega = torch.ones(P, dtype=torch.float64)
    if not unit_weights:
        omega = torch.from_numpy(rng.uniform(0.5, 2.0, P))
    W = _sets()
    valid = torch.from_numpy(rng.random(W.shape) < 0.7)
    scale = torch.from_numpy(rng.uniform(0.2, 0.6, B))
    found = score(g, omega, W, valid, scale)
    expected = g.abs() * scale.unsqueeze(1) / omega
    assert torch.equal(found.score, expected)
    assert torch.equal(found.max_score, expected.amax(1))
    inside = ((expected.gather(1, W) > 1) & valid).sum(1)
    assert torch.equal(found.violators, (expected > 1).sum(1) - inside)
