"""The logistic solvers' design: scaled predictors X~ (M, p), dense or sparse, their full products
X~^T u (in the dtype of dense X, or exactly in float64) and float64 column subsets X~[:, W] with
the products and weighted Grams of proximal Newton."""

from __future__ import annotations

import torch
from torch import Tensor

from circuitlasso.solve._sparse import (
    csr_from_parts,
    csr_rows,
    csr_transpose,
    row_ids,
    scale_columns,
)
from circuitlasso.solve.prepare import column_scale, column_stats

DENSE_MAX_ENTRIES = 2**24
"""Largest restricted design ``M x |W|`` held dense (128 MiB in float64); larger ones stay
sparse."""
EXACT_CHUNK_ENTRIES = 2**22
"""Entries of dense float32 X converted to float64 at a time for the exact products (32 MiB)."""
SCALE_RANGE = {torch.float64: (1e-250, 1e250), torch.float32: (1e-30, 1e30)}
"""Range, per dtype, for the largest ``|entry|`` of a column of X with spread: products with dual
points (entries in [-1, 1]) then neither overflow nor lose digits to subnormals, and the
coefficients in the user's units (the scaled ones divided by the column norm) fit the dtype."""


class Restricted:
    """A float64 design X_W (M, K), dense or CSR, with its products and weighted Gram."""

    def __init__(self, x: Tensor, x_t: Tensor | None = None) -> None:
        self.x = x
        self.x_t = x.t() if x_t is None else x_t

    def times(self, v: Tensor) -> Tensor:
        """X_W v (M, B) of v (K, B)."""
        return self.x @ v

    def t_times(self, u: Tensor) -> Tensor:
        """X_W^T u (K, B) of u (M, B)."""
        return self.x_t @ u

    def weighted_gram(self, w: Tensor) -> Tensor:
        """X_W^T diag(w) X_W (K, K)."""
        if self.x.layout == torch.strided:
            return (self.x_t * w) @ self.x
        values = self.x.values() * w[row_ids(self.x)]
        weighted = csr_from_parts(
            self.x.crow_indices(), self.x.col_indices(), values, (self.x.shape[0], self.x.shape[1])
        )
        return (self.x_t @ weighted).to_dense()


class Design:
    """Scaled predictors X~ = X diag(1 / norms) (M, p), columns of zero norm all zero: full
    products X~^T u, and column subsets X~[:, W] (float64).

    Dense X is kept as given (in its dtype, unscaled; the scale is applied to the products);
    sparse X is held scaled, transposed, in float64. `t_times` computes in the dtype of dense X;
    `exact_t_times` always in float64 (for float32 X in column chunks).
    """

    def __init__(self, x: Tensor, norms: Tensor) -> None:
        self.sparse = x.layout == torch.sparse_csr
        self.n_obs = x.shape[0]
        self.inverse = torch.where(norms > 0, 1 / norms, torch.zeros_like(norms))
        if self.sparse:
            shape = (x.shape[0], x.shape[1])
            x = csr_from_parts(x.crow_indices(), x.col_indices(), x.values().double(), shape)
            self.x_t = csr_transpose(scale_columns(x, self.inverse))
            self.exact = True
        else:
            self.x = x
            self.exact = x.dtype == torch.float64

    def t_times(self, u: Tensor) -> Tensor:
        """X~^T u (p, B) in float64 of u (M, B), the product in the dtype of X."""
        if self.sparse:
            return self.x_t @ u.double()
        product = (self.x.t() @ u.to(self.x.dtype)).double()
        if not self.exact and not bool(torch.isfinite(product).all()):
            return self.exact_t_times(u)  # float32 overflow
        return product * self.inverse.unsqueeze(1)

    def exact_t_times(self, u: Tensor) -> Tensor:
        """X~^T u (p, B) of u (M, B), the product in float64."""
        if self.exact:
            return self.t_times(u)
        step = max(1, EXACT_CHUNK_ENTRIES // max(1, self.n_obs))
        u = u.double()
        parts = [self.x[:, j : j + step].double().t() @ u for j in range(0, self.x.shape[1], step)]
        return torch.cat(parts) * self.inverse.unsqueeze(1)

    def columns(self, W: Tensor) -> Restricted:
        """X~[:, W] in float64: dense when ``M |W| <= DENSE_MAX_ENTRIES`` (or X is dense), else
        CSR."""
        M, K = self.n_obs, W.numel()
        if not self.sparse:
            return Restricted(self.x[:, W].double() * self.inverse[W])
        rows = csr_rows(self.x_t, W)
        values = rows.values().double()
        if M * K <= DENSE_MAX_ENTRIES:
            dense_t = torch.zeros(K, M, dtype=torch.float64, device=values.device)
            dense_t.view(-1)[row_ids(rows) * M + rows.col_indices()] = values
            return Restricted(dense_t.t(), dense_t)
        rows = csr_from_parts(rows.crow_indices(), rows.col_indices(), values, (K, M))
        return Restricted(csr_transpose(rows), rows)


def column_norms(x: Tensor, fit_intercept: bool) -> Tensor:
    """(p,) float64 centered (without intercept: plain) l2 norms of the columns of x (M, p),
    exactly 0 for constant columns (`prepare.column_stats`). A column with spread whose scale
    is outside SCALE_RANGE[x.dtype] raises ValueError."""
    _, norms = column_stats(x, fit_intercept)
    scale = column_scale(x)
    low, high = SCALE_RANGE[x.dtype]
    bad = (norms > 0) & ((scale < low) | (scale > high) | ~torch.isfinite(norms))
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"X column {k} has largest |entry| {float(scale[k]):.3g}: its scale overflows (or "
            f"underflows) the {x.dtype} arithmetic of the solver, which needs {low:g} to "
            f"{high:g}; rescale X"
            + (" or pass dtype=torch.float64" if x.dtype != torch.float64 else "")
        )
    return norms
