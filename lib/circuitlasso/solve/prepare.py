"""From user inputs (X, Y) to a `LassoProblem` in scaled coordinates, and back to coefficients.

Columns of X with zero (centered) norm cannot enter any model; they are dropped from the problem
and get coefficient 0. The remaining columns are centered (with an intercept; implicitly for
sparse X) and divided by their l2 norm, as App. B.1 of the paper does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from circuitlasso.memory import budget_bytes
from circuitlasso.solve._inputs import Matrix, as_matrix, check_rows, per_output
from circuitlasso.solve._sparse import column_sums, csr_rows, csr_transpose, padded_rows
from circuitlasso.solve.memory import gram_share
from circuitlasso.solve.options import SolverOptions
from circuitlasso.solve.problems import (
    F64,
    DenseProblem,
    GramProblem,
    LassoProblem,
    SparseProblem,
    scaled_sparse,
)

GRAM_MAX_ENTRIES = 2**28
"""Largest dense p x p Gram kept in memory (2 GiB in float64), whatever the budget: beyond it
gathering Gram blocks from X costs less than building the Gram."""
GRAM_WIDE_MAX = 2048
"""Dense X with more columns than rows gets a Gram only up to this many columns (beyond, its
p^2 entries outweigh the M p of X itself)."""
CONSTANT_COLUMN = 1e-12
"""A centered squared norm below CONSTANT_COLUMN x the column's sum of squares is rounding of a
constant column (float64 keeps about 1e-16 of it): such a column has no spread."""


def has_gram(p: int, M: int, gram_bytes: int) -> bool:
    """Whether dense X (M, p) is solved from its float64 Gram within `gram_bytes`."""
    fits = p * p <= GRAM_MAX_ENTRIES and F64 * p * p <= gram_bytes
    return fits and (p <= GRAM_WIDE_MAX or p <= M)


@dataclass
class Prepared:
    """A problem plus what maps its scaled, column-dropped solution back to the user's units."""

    problem: LassoProblem
    keep: Tensor  # (p_kept,) user column index of each problem feature
    norms: Tensor  # (p_kept,) float64 centered l2 norm of each problem feature
    x_mean: Tensor  # (p,) float64 column means (zeros without intercept)
    y_mean: Tensor  # (d,) float64 target means (zeros without intercept)
    n_features: int
    sparse: bool
    was_1d: bool

    def omega(self, normalize: bool) -> Tensor:
        """(p_kept,) penalty weight per scaled feature: 1, or 1/norm for the unscaled problem."""
        return torch.ones_like(self.norms) if normalize else 1.0 / self.norms


def column_scale(x: Tensor) -> Tensor:
    """(p,) float64 largest absolute entry of each column of x (M, p), dense or CSR."""
    if x.layout == torch.sparse_csr:
        values = x.values().double().abs()
        zeros = torch.zeros(x.shape[1], dtype=torch.float64, device=values.device)
        return zeros.scatter_reduce(0, x.col_indices(), values, "amax")
    return x.abs().amax(0).double()


def column_stats(x: Tensor, fit_intercept: bool) -> tuple[Tensor, Tensor]:
    """(p,) float64 column means (zeros without intercept) and centered l2 norms of x (M, p).

    Each column is divided by its largest absolute entry before it is squared, so that neither
    huge entries (1e200 squared overflows float64) nor tiny ones (1e-200 squared underflows)
    make a column look constant, and the centered norm is summed from centered entries (the
    one-pass sum(x^2) - M mean^2 loses a relative (mean / spread)^2 eps of it). Norms at
    rounding level (constant columns) are set to exactly 0.
    """
    M, p = x.shape
    scale = column_scale(x)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    if x.layout == torch.sparse_csr:
        columns = x.col_indices()
        unit = x.values().double() / safe[columns]
        zeros = torch.zeros(p, dtype=torch.float64, device=unit.device)
        sums, squares = zeros.index_add(0, columns, unit), zeros.index_add(0, columns, unit**2)
        mean = sums / M if fit_intercept else torch.zeros_like(sums)
        empty = M - torch.bincount(columns, minlength=p).to(torch.float64)
        norm_sq = zeros.index_add(0, columns, (unit - mean[columns]) ** 2) + empty * mean**2
    else:
        unit = x.double() / safe
        squares = (unit**2).sum(0)
        mean = unit.mean(0) if fit_intercept else torch.zeros_like(squares)
        norm_sq = ((unit - mean) ** 2).sum(0)
    norm_sq = torch.where(norm_sq > CONSTANT_COLUMN * squares, norm_sq, torch.zeros_like(norm_sq))
    return mean * scale, norm_sq.sqrt() * scale


def prepare(X: Matrix, Y: Matrix, settings: SolverOptions, *, gram_blocks: bool = True) -> Prepared:
    """Validate (X (M, p), Y (M, d) or (M,)) and build the matching problem (fit_intercept,
    dtype, device and memory_gib of `settings`); a dense Gram takes at most its share of the
    budget (`memory.gram_share`), and none is built for sparse X without `gram_blocks` (a
    problem that only needs gradients)."""
    fit_intercept, dtype = settings.fit_intercept, settings.dtype
    device = torch.device(settings.device or "cpu")
    gram_bytes = gram_share(budget_bytes(settings.memory_gib))
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    x, _ = as_matrix(X, "X", dtype, device)
    y, was_1d = as_matrix(Y, "Y", dtype, device, allow_1d=True)
    check_rows(x.shape[0], y, "Y")
    x_mean, norms = column_stats(x, fit_intercept)
    keep = (norms > 0).nonzero().squeeze(1)
    y_mean = (
        _column_means(y)
        if fit_intercept
        else torch.zeros(y.shape[1], dtype=torch.float64, device=device)
    )
    if x.layout == torch.sparse_csr:
        x_t = csr_transpose(x)
        x_kept = x if keep.numel() == x.shape[1] else csr_transpose(csr_rows(x_t, keep))
        mu = x_mean[keep] / norms[keep] if fit_intercept else None
        x_scaled = scaled_sparse(x_kept.to(torch.float64), norms[keep])
        sparse_gram = gram_bytes if gram_blocks else 0
        problem: LassoProblem = SparseProblem(x_scaled, mu, _rows_of(y), sparse_gram, dtype)
    else:
        problem = dense_problem(
            x[:, keep], norms[keep], x_mean[keep], _dense(y), y_mean, gram_bytes
        )
    if not bool(torch.isfinite(problem.yty).all()):
        raise ValueError(
            f"Y's squares overflow float64 (largest |Y| entry {_largest(y):.3g}): rescale Y"
        )
    return Prepared(
        problem, keep, norms[keep], x_mean, y_mean, x.shape[1], x.layout == torch.sparse_csr, was_1d
    )


def dense_problem(
    x: Tensor, norms: Tensor, x_mean: Tensor, y: Tensor, y_mean: Tensor, gram_bytes: int
) -> LassoProblem:
    """Gram or dense problem for dense x (M, p) with nonzero `norms`, and dense targets y (M, d),
    built in float64 from x and y as given (see `problems`); a Gram only where it fits
    `gram_bytes` (and `has_gram`)."""
    M, p = x.shape
    x_scaled = (x.double() - x_mean) / norms
    y_centered = y.double() - y_mean
    if has_gram(p, M, gram_bytes):
        gram = x_scaled.t() @ x_scaled
        cross_t = y_centered.t() @ x_scaled
        yty = (y_centered**2).sum(0)
        return GramProblem(gram, cross_t, yty, M, x.dtype)
    return DenseProblem(x_scaled, y_centered.t().contiguous(), x.dtype)


def _largest(y: Tensor) -> float:
    values = y.values() if y.layout == torch.sparse_csr else y
    return float(values.abs().max()) if values.numel() else 0.0


def _column_means(y: Tensor) -> Tensor:
    if y.layout == torch.sparse_csr:
        return column_sums(y) / y.shape[0]
    return y.double().mean(0)


def _rows_of(y: Tensor) -> Tensor:
    """Targets as rows (d, M): CSR for sparse y, dense otherwise."""
    return csr_transpose(y) if y.layout == torch.sparse_csr else y.t().contiguous()


def _dense(y: Tensor) -> Tensor:
    return y.to_dense() if y.layout == torch.sparse_csr else y


def check_lam(lam: object, prepared: Prepared) -> Tensor:
    """(d,) float64 penalty per output, on the problem's device; > 0 wherever the centered
    target is nonzero and some predictor can enter (with none, b = 0 is exact at any lam)."""
    lam_t = per_output(lam, prepared.problem.n_outputs, "lam").to(prepared.keep.device)
    zero = (lam_t == 0) & (prepared.problem.yty > 0) & (prepared.problem.n_features > 0)
    if bool(zero.any()):
        raise ValueError(
            f"lam must be > 0 for outputs with a nonzero target (output {int(zero.nonzero()[0, 0])}"
            " has lam = 0): lam = 0 is least squares, which a duality gap cannot certify"
        )
    return lam_t


def scaled_init(coef: Matrix, prepared: Prepared) -> tuple[Tensor, Tensor]:
    """Warm start (W, b) in scaled coordinates from user coefficients (p, d) or (p,)."""
    problem = prepared.problem
    c, _ = as_matrix(coef, "coef_init", problem.dtype, prepared.keep.device, allow_1d=True)
    expected = (prepared.n_features, problem.n_outputs)
    if tuple(c.shape) != expected:
        raise ValueError(f"coef_init must have shape {expected}, got {tuple(c.shape)}")
    by_output = csr_transpose(c) if c.layout == torch.sparse_csr else c.t().to_sparse_csr()
    coo = by_output.to_sparse_coo().coalesce()
    outputs, features = coo.indices()
    position = torch.full((prepared.n_features,), -1, dtype=torch.int64, device=features.device)
    position[prepared.keep] = torch.arange(prepared.keep.numel(), device=features.device)
    feature = position[features]
    use = (feature >= 0) & (coo.values() != 0)
    values = coo.values()[use] * prepared.norms.to(coo.values().dtype)[feature[use]]
    size = (problem.n_outputs, prepared.keep.numel())
    kept = torch.sparse_coo_tensor(torch.stack([outputs[use], feature[use]]), values, size)
    return padded_rows(kept.coalesce().to_sparse_csr())
