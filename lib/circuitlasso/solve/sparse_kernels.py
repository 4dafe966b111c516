"""Compiled products of sparse predictors on the CPU: the Gram blocks and the residual gradients
of `problems.SparseProblem`, output by output, at a cost set by the nonzeros they touch.

X (M, p) is held twice: by rows (CSR) and by columns (the CSR of X^T). For output j with
working set W_j and coefficients b_j:
  - `gram_blocks`: X_W^T X_W (K, K) from the columns of W alone, row by row (sum over the rows
    of (entries in W)^2 / 2, no dense p x p Gram);
  - `residual_gradients`: u = y - X_W b (M,) from the columns of W, then X^T u (p,), by
    scattering the rows where u is nonzero when they hold fewer entries than X (a residual
    on a few rows costs those rows), else by gathering each column against u.
Every sum runs in float64, in an order fixed by the data (rows ascending within a column),
so an output's result does not depend on its batch or on the threads (`solve.threads`).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

from circuitlasso.solve.threads import over_threads

SCATTER_SHARE = 0.5
"""X^T u scatters the rows where u is nonzero when they hold fewer than this share of X's
entries; else it gathers every column, GATHER_OUTPUTS residuals at a time. (A scatter writes
into one output's p gradients, a gather reads a group's rows of residuals: on the solver sweep's
shapes neither wins everywhere; between 0.2 and 1, 0.5 was the best compromise measured.)"""
MIRROR_TILE = 32
"""Side of the tiles in which a Gram block's upper triangle is copied to its lower one."""
GATHER_OUTPUTS = 8
"""Residuals gathered together: each entry of X read once serves that many outputs (the index
and value read cost more than one multiply-add)."""


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
    X^T u - M mean(u) mu for u = y - X_W b, and r = u - mean(u)); without them nothing is."""
    B, M = y.shape
    if mu is None or y_mean is None:
        mu, y_mean, centered = torch.zeros(1), torch.zeros(B), False
    else:
        centered = True
    u = y.to(torch.float64).contiguous().clone().numpy()
    g = np.zeros((B, columns.shape[0]))
    sums = np.zeros((B, 2))
    over_threads(
        _residual_gradients,
        B,
        csr_arrays(rows),
        csr_arrays(columns),
        W.contiguous().numpy(),
        b.to(torch.float64).contiguous().numpy(),
        y.to(torch.float64).contiguous().numpy(),
        mu.double().contiguous().numpy(),
        y_mean.double().contiguous().numpy(),
        centered,
        u,
        g,
        sums,
        grain=GATHER_OUTPUTS,
    )
    sums_t = torch.from_numpy(sums)
    return torch.from_numpy(g), sums_t[:, 0].contiguous(), sums_t[:, 1].contiguous()


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
def _residual_gradients(X, XT, W, b, y, mu, y_mean, centered, u, g, sums, lo, hi):  # type: ignore[no-untyped-def]
    """For j in [lo, hi): u[j] = y[j] - X_W b[j], g[j] = X^T u[j] (residuals on few rows scatter
    those rows; the others gather each column, GATHER_OUTPUTS residuals at a time: one read of X
    for all of them, each sum in the same order whatever the group), then the centering and
    sums[j] = (||r||^2, <y_c, r>). X, XT: the CSR parts (indptr, indices, data) of X and X^T."""
    r_indptr, r_indices, r_data = X
    c_indptr, c_indices, c_data = XT
    M = u.shape[1]
    p = g.shape[1]
    nnz = r_indptr[M]
    gather = np.empty(hi - lo, dtype=np.int64)
    n_gather = 0
    for j in range(lo, hi):
        uj = u[j]
        gj = g[j]
        for i in range(W.shape[1]):
            coefficient = b[j, i]
            if coefficient != 0.0:
                feature = W[j, i]
                for t in range(c_indptr[feature], c_indptr[feature + 1]):
                    uj[c_indices[t]] -= c_data[t] * coefficient
        touched = 0
        for m in range(M):
            if uj[m] != 0.0:
                touched += r_indptr[m + 1] - r_indptr[m]
        if touched >= SCATTER_SHARE * nnz:
            gather[n_gather] = j
            n_gather += 1
            continue
        for m in range(M):
            um = uj[m]
            if um != 0.0:
                for t in range(r_indptr[m], r_indptr[m + 1]):
                    gj[r_indices[t]] += r_data[t] * um
    group = np.zeros((M, GATHER_OUTPUTS))  # a partial group's unused columns stay zero
    acc = np.empty(GATHER_OUTPUTS)
    for first in range(0, n_gather, GATHER_OUTPUTS):
        n = min(GATHER_OUTPUTS, n_gather - first)
        for c in range(n):
            for m in range(M):
                group[m, c] = u[gather[first + c], m]
        for k in range(p):
            for c in range(GATHER_OUTPUTS):
                acc[c] = 0.0
            for t in range(c_indptr[k], c_indptr[k + 1]):
                x = c_data[t]
                row = group[c_indices[t]]
                for c in range(GATHER_OUTPUTS):
                    acc[c] += x * row[c]
            for c in range(n):
                g[gather[first + c], k] = acc[c]
    for j in range(lo, hi):
        _center(u[j], g[j], y[j], mu, y_mean[j], centered, sums[j])


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
