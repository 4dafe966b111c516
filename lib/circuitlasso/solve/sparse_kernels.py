"""Compiled products of sparse predictors on the CPU: the Gram blocks and the residual gradients
of `problems.SparseProblem`, output by output, at a cost set by the nonzeros they touch.

X (M, p) is held twice: by rows (CSR) and by columns (the CSR of X^T). For output j with
working set W_j and coefficients b_j:

- `gram_blocks`: X_W^T X_W (K, K) from the columns of W alone, row by row (sum over the rows
  of (entries in W)^2 / 2, no dense p x p Gram);
- `residual_gradients`: u = y - X_W b (M,) from the columns of W, then X^T u (p,), by
  scattering the rows where u is nonzero (a residual on a few rows costs those rows) or by
  gathering each column of X against a group of residuals (one read of X serves the group),
  whichever costs the batch less (`gathered_outputs`).

Every sum runs in float64, in an order fixed by the data (rows ascending within a column; a
scatter and a gather add the same products in the same order), so an output's result does not
depend on its batch or on the threads (`solve.threads`).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

from circuitlasso.solve.threads import over_threads

GATHER_OUTPUTS = 32
"""Residuals gathered together, at most: each entry of X read once serves that many outputs."""
GATHER_PASS = 2.0
GATHER_OUTPUT = 0.1
"""X^T u costs a scatter of the rows where u is nonzero, about 1 per entry they hold (1.3 to
2.7 ns on the solver sweep's shapes), or a share of a gather that reads every entry of X for a
group of outputs, about GATHER_PASS + GATHER_OUTPUT per output of the group, per entry of X, in
the same units (measured from 1 to 32 outputs a group on three of the sweep's shapes: 3.5 to 3.8
ns, plus 0.26 to 0.43 ns an output). A batch gathers the outputs with the most touched entries,
as many as make its total cost least."""
MIRROR_TILE = 32
"""Side of the tiles in which a Gram block's upper triangle is copied to its lower one."""


def csr_arrays(csr: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CPU CSR tensor's (indptr, indices, float64 data) as numpy arrays, for the kernels."""
    return (
        csr.crow_indices().numpy(),
        csr.col_indices().numpy(),
        csr.values().to(torch.float64).numpy(),
    )


def gram_blocks(columns: Tensor, W: Tensor, n_obs: int) -> Tensor:
    """Gram blocks (B, K, K) float64 of index sets W (B, K) from `columns`, the CSR (p, M) of
    X^T (rows sorted within each column)."""
    B, K = W.shape
    out = np.zeros((B, K, K))
    over_threads(_gram_blocks, B, *csr_arrays(columns), W.contiguous().numpy(), n_obs, out)
    return torch.from_numpy(out)


def residual_gradients(
    rows: Tensor,
    columns: Tensor,
    W: Tensor,
    b: Tensor,
    y: Tensor,
    mu: Tensor | None = None,
    y_mean: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """X~^T r (B, p), ||r||^2 and <y_c, r> (B,), float64, of the residuals r = y_c - X~_W b for
    coefficients b (B, K) on W (B, K) (padding carries b = 0) and dense targets y (B, M);
    `rows`: X (M, p) as CSR, `columns`: X^T as CSR. With column means mu (p,) and target means
    y_mean (B,), X~ = X - 1 mu^T and y_c = y - y_mean are centered implicitly (X~^T r =
    X^T u - M mean(u) mu for u = y - X_W b, and r = u - mean(u)); without them nothing is.

    Two passes over threads: every output's residual, then its product, scattered or gathered
    (`gathered_outputs`)."""
    B, M = y.shape
    if mu is None or y_mean is None:
        mu, y_mean, centered = torch.zeros(1), torch.zeros(B), False
    else:
        centered = True
    X, XT = csr_arrays(rows), csr_arrays(columns)
    y64 = y.to(torch.float64).contiguous().numpy()
    u = y64.copy()
    touched = np.zeros(B, dtype=np.int64)
    W_, b_ = W.contiguous().numpy(), b.to(torch.float64).contiguous().numpy()
    over_threads(_residuals, B, X[0], XT, W_, b_, u, touched)
    gathered = gathered_outputs(touched, int(X[0][-1]))
    n_groups = -(-gathered.size // GATHER_OUTPUTS)
    starts = np.linspace(0, gathered.size, n_groups + 1).round().astype(np.int64)
    scattered = np.setdiff1d(np.arange(B), gathered)
    g = np.zeros((B, columns.shape[0]))
    sums = np.zeros((B, 2))
    centering = (y64, mu.double().contiguous().numpy(), y_mean.double().contiguous().numpy())
    products = (X, XT, gathered, starts, scattered, u, g, *centering, centered, sums)
    over_threads(_products, n_groups + scattered.size, *products)
    sums_t = torch.from_numpy(sums)
    return torch.from_numpy(g), sums_t[:, 0].contiguous(), sums_t[:, 1].contiguous()


def gathered_outputs(touched: np.ndarray, nnz: int) -> np.ndarray:
    """The outputs (ascending) whose X^T u is gathered rather than scattered, given the entries
    of X (nnz in all) on the rows each residual touches (B,): those with the most, as many as
    make the cost least (GATHER_PASS)."""
    order = np.argsort(-touched, kind="stable")
    n = np.arange(touched.size + 1)
    scatter = touched.sum() - np.concatenate([[0], np.cumsum(touched[order])])
    gather = nnz * (GATHER_PASS * -(-n // GATHER_OUTPUTS) + GATHER_OUTPUT * n)
    return np.sort(order[: int(np.argmin(scatter + gather))])


@numba.njit(cache=True, nogil=True)
def _gram_blocks(indptr, indices, data, W, n_obs, out, lo, hi):  # type: ignore[no-untyped-def]
    """out[j] = X_W^T X_W for j in [lo, hi)."""
    start = np.zeros(n_obs, dtype=np.int64)
    for j in range(lo, hi):
        _fill_gram(indptr, indices, data, W[j], start, out[j])


@numba.njit(cache=True)
def gram_of_set(indptr, indices, data, features, n_obs):  # type: ignore[no-untyped-def]
    """X_F^T X_F (S, S) of one set of features F (S,)."""
    out = np.zeros((features.size, features.size))
    _fill_gram(indptr, indices, data, features, np.zeros(n_obs, dtype=np.int64), out)
    return out


@numba.njit(cache=True)
def _fill_gram(indptr, indices, data, features, start, block):  # type: ignore[no-untyped-def]
    """block (K, K) += X_F^T X_F for features F (K,): the entries of F's columns sorted by row
    (a counting sort over the rows they touch, slots ascending within a row), each row's
    products added to the upper triangle, then mirrored. start (M,): zeros, left as found."""
    K = features.size
    total = 0
    for i in range(K):
        total += indptr[features[i] + 1] - indptr[features[i]]
    touched = np.empty(total, dtype=np.int64)
    n_touched = 0
    for i in range(K):
        for t in range(indptr[features[i]], indptr[features[i] + 1]):
            m = indices[t]
            if start[m] == 0:
                touched[n_touched] = m
                n_touched += 1
            start[m] += 1
    offset = 0
    for r in range(n_touched):
        m = touched[r]
        count = start[m]
        start[m] = offset + 1  # where row m's next entry goes, plus one (0 means untouched)
        offset += count
    slot = np.empty(total, dtype=np.int64)
    value = np.empty(total)
    for i in range(K):
        for t in range(indptr[features[i]], indptr[features[i] + 1]):
            m = indices[t]
            at = start[m] - 1
            slot[at] = i
            value[at] = data[t]
            start[m] += 1
    first = 0
    for r in range(n_touched):
        end = start[touched[r]] - 1  # one past row r's last entry
        for a in range(first, end):
            va = value[a]
            row = block[slot[a]]
            for c in range(a, end):
                row[slot[c]] += va * value[c]
        start[touched[r]] = 0
        first = end
    for a0 in range(0, K, MIRROR_TILE):  # tile by tile: the lower triangle's writes stride K
        for c0 in range(a0, K, MIRROR_TILE):
            for a in range(a0, min(a0 + MIRROR_TILE, K)):
                for c in range(max(c0, a + 1), min(c0 + MIRROR_TILE, K)):
                    block[c, a] = block[a, c]


@numba.njit(cache=True, nogil=True)
def _residuals(row_starts, XT, W, b, u, touched, lo, hi):  # type: ignore[no-untyped-def]
    """For j in [lo, hi): u[j] -= X_W b[j] (u holds y), and touched[j] = the entries of X on
    the rows where u[j] is nonzero. XT: the CSR parts (indptr, indices, data) of X^T."""
    c_indptr, c_indices, c_data = XT
    for j in range(lo, hi):
        uj = u[j]
        for i in range(W.shape[1]):
            coefficient = b[j, i]
            if coefficient != 0.0:
                feature = W[j, i]
                for t in range(c_indptr[feature], c_indptr[feature + 1]):
                    uj[c_indices[t]] -= c_data[t] * coefficient
        count = 0
        for m in range(uj.size):
            if uj[m] != 0.0:
                count += row_starts[m + 1] - row_starts[m]
        touched[j] = count


@numba.njit(cache=True, nogil=True)
def _products(X, XT, gathered, starts, scattered, u, g, y, mu, y_mean, centered, sums, lo, hi):  # type: ignore[no-untyped-def]
    """Items [lo, hi): the groups of `gathered` first (group q: gathered[starts[q]:starts[q+1]]),
    then the outputs of `scattered`. g[j] = X^T u[j], centered, and sums[j] for each output j:
    a group gathers each column of X against its residuals (one read of X for all of them), an
    output alone scatters its residual's nonzero rows. X, XT: the CSR parts of X and X^T."""
    n_groups = starts.size - 1
    for item in range(lo, hi):
        if item < n_groups:
            members = gathered[starts[item] : starts[item + 1]]
            _gather(XT, members, u, g)
        else:
            members = scattered[item - n_groups : item - n_groups + 1]
            _scatter(X, u[members[0]], g[members[0]])
        for j in members:
            _center(u[j], g[j], y[j], mu, y_mean[j], centered, sums[j])


@numba.njit(cache=True)
def _scatter(X, u, g):  # type: ignore[no-untyped-def]
    """g += X^T u (p,) from the rows where u (M,) is nonzero."""
    r_indptr, r_indices, r_data = X
    for m in range(u.size):
        um = u[m]
        if um != 0.0:
            for t in range(r_indptr[m], r_indptr[m + 1]):
                g[r_indices[t]] += r_data[t] * um


@numba.njit(cache=True)
def _gather(XT, members, u, g):  # type: ignore[no-untyped-def]
    """g[j] = X^T u[j] for the outputs j of `members` at once: column by column of X, rows
    ascending (each sum in the same order whatever the group)."""
    c_indptr, c_indices, c_data = XT
    n, M = members.size, u.shape[1]
    group = np.empty((M, n))
    for c in range(n):
        for m in range(M):
            group[m, c] = u[members[c], m]
    acc = np.empty(n)
    for k in range(g.shape[1]):
        acc[:] = 0.0
        for t in range(c_indptr[k], c_indptr[k + 1]):
            x = c_data[t]
            row = group[c_indices[t]]
            for c in range(n):
                acc[c] += x * row[c]
        for c in range(n):
            g[members[c], k] = acc[c]


@numba.njit(cache=True)
def _center(u, g, y, mu, y_mean, centered, sums):  # type: ignore[no-untyped-def]
    """g -= M mean(u) mu (X~^T u), and sums = (||u - mean(u)||^2, <y - y_mean, u - mean(u)>)
    (centered residual and target: no cancellation near an exact fit); uncentered, the plain
    sums."""
    M = u.shape[0]
    shift = 0.0
    center = 0.0
    if centered:
        total = 0.0
        for m in range(M):
            total += u[m]
        shift = total / M
        center = y_mean
        scale = M * shift
        for k in range(g.shape[0]):
            g[k] -= scale * mu[k]
    rr = 0.0
    yr = 0.0
    for m in range(M):
        rc = u[m] - shift
        rr += rc * rc
        yr += (y[m] - center) * rc
    sums[0] = rr
    sums[1] = yr
