"""Multi-output Lasso problems in scaled coordinates, behind one small interface.

A problem holds predictors X~ (M, p) whose columns are centered (when an intercept is fitted)
and scaled to unit l2 norm, and targets y_j (centered likewise). The working-set engine only
asks a problem for

- `gram(W)`: Gram blocks X~_W^T X~_W (B, K, K) for index sets W (B, K), and
- `gradient(cols, W, b)`: g = X~^T r (B, p) dense with r = y_c - X~_W b for outputs `cols`,
  plus ||r||^2 and <y_c, r> (float64).

(A subproblem's cross products X~_W^T y_c = g_W + X~_W^T X~_W b come from these two, so no
problem computes them.) Each also states its memory: `held_bytes` (what it keeps) and the bytes
one output adds to a batch of `gradient` calls (`gradient_bytes`) and of `gram` calls at
working-set size K (`gram_bytes`), so that the engine can size batches by a memory budget
(`circuitlasso.solve.memory`). Three implementations trade memory for speed:

- `GramProblem`: a dense p x p Gram and X~^T Y in memory (dense X with moderate p, blocks).
- `SparseProblem`: sparse X (and sparse or dense Y); Gram blocks gathered from a dense Gram of
  the scaled columns when it fits its share of the budget and enough outputs share it, else
  (the cheaper form in memory) computed from the working set's columns alone; a gradient is
  X~^T r of each output's residual r. On the CPU both are compiled loops over the nonzeros
  they touch (`solve.sparse_kernels`); elsewhere sparse and dense products over the batch.
- `DenseProblem`: dense X too wide for a Gram; Gram blocks gathered from X on demand.

Every problem holds its data and computes its products in float64 (the data as read in the
solve's dtype, scaled in float64), so that the certificate is the duality gap of that data: near
an exact fit, ||r||^2 = ||y_c||^2 - 2 c^T b + b^T G b cancels to far below float32's rounding.
"""

from __future__ import annotations

from typing import Protocol

import numba
import torch
from torch import Tensor

from circuitlasso.solve import sparse_kernels
from circuitlasso.solve._sparse import (
    block_products,
    csr_from_dense,
    csr_from_padded,
    csr_rows,
    csr_transpose,
    dense_gram,
    row_sq_sums,
    row_sums,
    scale_columns,
    sparse_product,
    with_int32_indices,
)

SMALL_GRAM_ENTRIES = 2**24
"""A dense Gram of sparse columns this small (128 MiB in float64) is built for any number of
outputs. A larger one on the CPU only for at least p / GRAM_OUTPUT_SHARE outputs: its p^2
entries cost more to build than the compiled Gram blocks (`sparse_kernels`) of fewer outputs
(at 10k to 48k features and 16 to 400 active per row: 0.5 to 8 s against a few ms per output);
off the CPU for at least GRAM_MIN_OUTPUTS outputs, against block-diagonal sparse products."""
GRAM_OUTPUT_SHARE = 4
GRAM_MIN_OUTPUTS = 64
SPARSE_RESIDUALS = 0.03
"""Off the CPU, residuals of a batch with fewer nonzeros than this share go through a sparse
product. (On the CPU `sparse_kernels` picks rows or columns output by output.)"""
COLUMN_SHARE = 0.125
"""Working sets are solved on their columns where a column holds fewer than this share of the
set's size in entries (see `SparseProblem.columns_pay`)."""
GRAM_BLOCK_BYTES = 2**24
"""... and where their float64 Gram block would be larger than this (K > 1448): built by random
additions into memory outside the cache, and read from there every epoch, such a block cost the
solver sweep's largest sets (K 1400 to 1728) twice the time of a descent on their columns."""
BLOCK_OUTPUTS = 256
"""Outputs per block-diagonal sparse product (larger ones sort more entries at once)."""
F64 = 8


def _nbytes(t: Tensor | None) -> int:
    if t is None:
        return 0
    if t.layout == torch.sparse_csr:
        parts = (t.crow_indices(), t.col_indices(), t.values())
        return sum(p.numel() * p.element_size() for p in parts)
    return t.numel() * t.element_size()


class LassoProblem(Protocol):
    n_obs: int
    n_features: int
    n_outputs: int
    dtype: torch.dtype
    yty: Tensor
    """(d,) float64 squared norm of each centered target."""
    held_bytes: int
    """Bytes the problem keeps in memory."""

    def gram(self, W: Tensor) -> Tensor:
        """Gram blocks X~_W^T X~_W (B, K, K) of index sets W (B, K)."""
        ...

    def gradient(self, cols: Tensor, W: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """For outputs `cols` (B,) with coefficients b (B, K) on features W (B, K): X~^T r (B, p),
        ||r||^2 (B,) and <y_c, r> (B,), r = y_c - X~_W b. Padding entries carry b = 0."""
        ...

    def gradient_bytes(self) -> int:
        """Bytes one output adds to a `gradient` call (the result included)."""
        ...

    def gram_bytes(self, K: int) -> int:
        """Bytes one output with a working set of K features adds to a `gram` call."""
        ...


def gram_blocks(G: Tensor, W: Tensor) -> Tensor:
    """Blocks G[W_b, W_b] (B, K, K) of a dense (p, p) G for index sets W (B, K). On the CPU a
    compiled gather (no (B, K, K) index tensor), elsewhere one flat `take` (twice as fast as
    two-dimensional indexing on a Gram too large for the cache)."""
    if G.device.type == "cpu":
        out = torch.empty(*W.shape, W.shape[1], dtype=G.dtype)
        _gather_blocks(G.contiguous().numpy(), W.contiguous().numpy(), out.numpy())
        return out
    p = G.shape[1]
    return G.reshape(-1).take(W.unsqueeze(2) * p + W.unsqueeze(1))


@numba.njit(cache=True)
def _gather_blocks(G, W, out):  # type: ignore[no-untyped-def]
    for b in range(W.shape[0]):
        for i in range(W.shape[1]):
            row = G[W[b, i]]
            for j in range(W.shape[1]):
                out[b, i, j] = row[W[b, j]]


def _dense_from_padded(W: Tensor, b: Tensor, p: int) -> Tensor:
    return torch.zeros(W.shape[0], p, dtype=b.dtype, device=b.device).scatter_add_(1, W, b)


class GramProblem:
    """Problem given by G = X~^T X~ (p, p), C^T = Y_c^T X~ (d, p) and ||y_c||^2 (d,), held in
    float64; `dtype` is the precision of the coefficients between rounds and returned.

    x_scaled: X~ (M, p) itself, optional: with fewer observations than half the predictors the
    gradients' G b go through it, (b X~^T) X~, at 2 M p instead of p^2 per output.
    """

    def __init__(
        self,
        gram: Tensor,
        cross_t: Tensor,
        yty: Tensor,
        n_obs: int,
        dtype: torch.dtype,
        x_scaled: Tensor | None = None,
    ) -> None:
        self.G, self.Ct, self.yty = gram.double().contiguous(), cross_t.double(), yty.double()
        self.n_obs = n_obs
        self.n_features = gram.shape[0]
        self.n_outputs = cross_t.shape[0]
        self.dtype = dtype
        thin = x_scaled is not None and 2 * n_obs < self.n_features
        self.X = x_scaled.double().contiguous() if thin and x_scaled is not None else None
        self.held_bytes = _nbytes(gram) + _nbytes(cross_t) + _nbytes(self.X)

    def gram(self, W: Tensor) -> Tensor:
        return gram_blocks(self.G, W)

    def gradient(self, cols: Tensor, W: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        c, b = self.Ct[cols], b.double()
        dense = _dense_from_padded(W, b, self.n_features)
        Gb = dense @ self.G if self.X is None else (dense @ self.X.t()) @ self.X
        cb = (c.gather(1, W) * b).sum(1)
        bGb = (Gb.gather(1, W) * b).sum(1)
        yty = self.yty[cols]
        return c - Gb, yty - 2 * cb + bGb, yty - cb

    def gradient_bytes(self) -> int:
        return 6 * F64 * self.n_features

    def gram_bytes(self, K: int) -> int:
        return F64 * K * K


class DenseProblem:
    """Dense X~ (M, p) kept in memory in float64; Gram blocks are gathered from its columns."""

    def __init__(self, x_scaled: Tensor, y_centered_t: Tensor, dtype: torch.dtype) -> None:
        self.Xt = x_scaled.t().double().contiguous()  # (p, M)
        self.Yt = y_centered_t.double()  # (d, M)
        self.yty = (self.Yt**2).sum(1)
        self.n_features, self.n_obs = self.Xt.shape
        self.n_outputs = y_centered_t.shape[0]
        self.dtype = dtype
        self.held_bytes = _nbytes(self.Xt) + _nbytes(self.Yt)

    def gram(self, W: Tensor) -> Tensor:
        x = self.Xt[W]  # (B, K, M): counted in gram_bytes
        return x @ x.transpose(1, 2)

    def gradient(self, cols: Tensor, W: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        y = self.Yt[cols]
        r = y - _dense_from_padded(W, b.double(), self.n_features) @ self.Xt
        rr = (r**2).sum(1)
        yr = (y * r).sum(1)
        return r @ self.Xt.t(), rr, yr

    def gradient_bytes(self) -> int:
        return F64 * (3 * self.n_obs + 4 * self.n_features)

    def gram_bytes(self, K: int) -> int:
        return F64 * K * K + self.Xt.element_size() * K * self.n_obs


class SparseProblem:
    """Sparse X~ (CSR). Centering, when asked, is implicit: X~ = X_s - 1 mu^T, never densified.

    x_scaled: (M, p) CSR of the scaled uncentered columns X_s; mu: (p,) column means of X_s or
    None (no intercept); y_t: (d, M) targets as CSR rows or dense rows, uncentered;
    gram_bytes: the most memory a dense Gram of the scaled columns may take; dtype: the
    precision of the coefficients between rounds and returned.
    Products run in float64 whatever the inputs' dtype: X is small next to the work on it, and
    the certificate then sees the same numbers as the subproblems, not two float32 roundings.
    Gram blocks are gathered from the dense Gram X_s^T X_s when it fits `gram_bytes` (float64,
    or float32 where only that fits; see SMALL_GRAM_ENTRIES for when it is worth building),
    else computed by one block-diagonal sparse product per batch of outputs.
    """

    def __init__(
        self,
        x_scaled: Tensor,
        mu: Tensor | None,
        y_t: Tensor,
        gram_bytes: int,
        dtype: torch.dtype,
    ) -> None:
        self.Xs = x_scaled.to(torch.float64)
        self.Xst = csr_transpose(self.Xs)
        self.column_entries = self.Xst.crow_indices().diff()  # (p,) nonzeros of each column
        self.on_cpu = x_scaled.device.type == "cpu"
        # off the CPU, the gradient's CSR times dense product
        self.Xst_product = None if self.on_cpu else with_int32_indices(self.Xst)
        self.n_obs, self.n_features = x_scaled.shape
        self.n_outputs = y_t.shape[0]
        self.G = self._dense_gram(gram_bytes)
        self.mu = mu.double() if mu is not None else None
        self.Yt = y_t
        self.dtype = dtype
        self.sparse_y = y_t.layout == torch.sparse_csr
        self.ybar = _row_sums(y_t) / self.n_obs if mu is not None else None
        self.yty = _centered_sq_sums(y_t, self.ybar)
        parts = (self.Xs, self.Xst, self.Xst_product, self.G, y_t)
        self.held_bytes = sum(_nbytes(part) for part in parts)

    def _dense_gram(self, gram_bytes: int) -> Tensor | None:
        p = self.n_features
        few = p / GRAM_OUTPUT_SHARE if self.on_cpu else GRAM_MIN_OUTPUTS
        if p * p > SMALL_GRAM_ENTRIES and self.n_outputs < few:
            return None
        for dtype in (torch.float64, torch.float32):
            if p * p * dtype.itemsize <= gram_bytes:
                return dense_gram(self.Xst, self.Xs, dtype)
        return None

    def gram(self, W: Tensor) -> Tensor:
        B, K = W.shape
        if self.G is None and self.on_cpu:
            gram = sparse_kernels.gram_blocks(self.Xst, W, self.n_obs)
        else:
            gram = torch.empty(B, K, K, dtype=torch.float64, device=W.device)
            for start in range(0, B, BLOCK_OUTPUTS):
                part = slice(start, start + BLOCK_OUTPUTS)
                if self.G is None:
                    gram[part] = block_products(self.Xst, W[part])
                else:
                    gram[part] = gram_blocks(self.G, W[part])
        if self.mu is not None:
            m = self.mu[W]
            gram -= self.n_obs * m.unsqueeze(2) * m.unsqueeze(1)
        return gram

    def target_rows(self, cols: Tensor) -> Tensor:
        """Targets of outputs `cols` (B,) as float64 rows (B, M): CSR or dense, as stored."""
        return (csr_rows(self.Yt, cols) if self.sparse_y else self.Yt[cols]).to(torch.float64)

    def columns_pay(self, W: Tensor) -> bool:
        """Whether the working sets W (B, K) are solved on their columns
        (`solve.coordinate.column_descent`) rather than on Gram blocks: on the CPU, where their
        columns hold fewer than COLUMN_SHARE x K entries on average (an epoch then reads fewer
        numbers than a Gram epoch, and no block is formed). The sets' own columns count: under
        a power law the features that enter are the frequent ones. Sets whose Gram block would
        exceed GRAM_BLOCK_BYTES too."""
        if not self.on_cpu or W.numel() == 0:
            return False
        K = W.shape[1]
        column = self.column_entries[W].double().mean()
        return bool(column < COLUMN_SHARE * K) or K * K * F64 > GRAM_BLOCK_BYTES

    def gradient(self, cols: Tensor, W: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        M = self.n_obs
        y = self.target_rows(cols).to_dense()
        if self.on_cpu:
            y_mean = self.ybar[cols] if self.ybar is not None else None
            return sparse_kernels.residual_gradients(self.Xs, self.Xst, W, b, y, self.mu, y_mean)
        u = y - sparse_product(csr_from_padded(W, b.double(), self.n_features), self.Xst)
        if int(torch.count_nonzero(u)) < SPARSE_RESIDUALS * u.numel():
            g = sparse_product(csr_from_dense(u), self.Xs)  # cost ~ nonzeros of u, not M
        else:
            assert self.Xst_product is not None  # built off the CPU
            g = (self.Xst_product @ u.t()).t()
        if self.mu is None or self.ybar is None:
            return g, (u**2).sum(1), (y * u).sum(1)
        ubar = u.mean(1)  # X~ = X_s - 1 mu^T: X~^T u = X_s^T u - (M ubar) mu
        g -= (M * ubar).unsqueeze(1) * self.mu.unsqueeze(0)
        u -= ubar.unsqueeze(1)  # centered residual and target: no cancellation near an exact fit
        y -= self.ybar[cols].unsqueeze(1)
        return g, (u**2).sum(1), (y * u).sum(1)

    def gradient_bytes(self) -> int:
        return F64 * (4 * self.n_obs + 5 * self.n_features)

    def gram_bytes(self, K: int) -> int:
        gathered = K * K * (self.G.element_size() if self.G is not None else 0)
        products = 0 if self.G is not None else 6 * F64 * K * K  # block-diagonal products
        return F64 * K * K + gathered + products


def _centered_sq_sums(y_t: Tensor, center: Tensor | None) -> Tensor:
    """(d,) float64 sum of (y_jm - center_j)^2 over each row of y_t (d, M), CSR or dense."""
    if y_t.layout == torch.sparse_csr:
        return row_sq_sums(y_t, center)
    y = y_t.double()
    return ((y - center.unsqueeze(1) if center is not None else y) ** 2).sum(1)


def _row_sums(y_t: Tensor) -> Tensor:
    return row_sums(y_t) if y_t.layout == torch.sparse_csr else y_t.double().sum(1)


def scaled_sparse(x: Tensor, norms: Tensor) -> Tensor:
    """CSR X (M, p) with column k divided by norms[k] (columns of zero norm are left as is)."""
    inverse = torch.where(norms > 0, 1.0 / norms, torch.zeros_like(norms))
    return scale_columns(x, inverse)
