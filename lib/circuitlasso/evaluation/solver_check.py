"""The certified Lasso checked against scikit-learn's coordinate descent.

:func:`planted_problem` draws a dense problem whose outputs depend on a few predictors;
:func:`compare_with_sklearn` solves it with :func:`circuitlasso.solve.lasso` (the plain Lasso,
float64, each output's duality gap below ``tol`` times its variance) and with scikit-learn's
``Lasso`` at a tighter tolerance, at one penalty for every output: ``lam_ratio`` times the
smallest penalty that zeroes every output. Both solutions are scored by :func:`lasso_objective`.
:func:`sae_like_problem` draws the SAE-shaped sparse problems the solver benchmark and the cost
of a cluster run are measured on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from sklearn.linear_model import Lasso

from circuitlasso.solve import lam_max, lasso

SKLEARN_TOL = 1e-12  # scikit-learn's tolerance: the reference is solved tighter than ours
OBJECTIVE_AGREEMENT = 1e-12  # relative objective difference counted as the same optimum


def planted_problem(
    seed: int = 0,
    M: int = 400,
    p: int = 60,
    outputs: int = 8,
    informative: int = 5,
    noise: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """``X: (M, p)`` standard normal and ``Y: (M, outputs)``, each output a random linear function
    of the first ``informative`` predictors plus ``noise`` times standard normal noise."""
    if not 1 <= informative <= p:
        raise ValueError(f"need 1 <= informative <= p, got informative={informative}, p={p}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((M, p))
    weights = rng.standard_normal((informative, outputs))
    Y = X[:, :informative] @ weights + noise * rng.standard_normal((M, outputs))
    return X, Y


def lasso_objective(X, Y: np.ndarray, coef: np.ndarray, lam: float) -> np.ndarray:
    """``1/(2M) ||Y - X coef||^2 + lam ||coef||_1`` per output: ``(d,)`` for ``Y: (M, d)`` and
    ``coef: (p, d)``, a scalar for 1-D ``Y`` and ``coef``; ``X: (M, p)`` dense or sparse."""
    residual = Y - X @ coef
    return (residual**2).sum(0) / (2 * X.shape[0]) + lam * np.abs(coef).sum(0)


@dataclass(frozen=True)
class SklearnComparison:
    """Per output (rows of ``table``): both objectives, the largest ``|coef|`` difference, our
    duality gap and support size; the penalty ``lam`` and our tolerance ``tol``."""

    table: pd.DataFrame
    lam: float
    tol: float
    relative_gap: np.ndarray  # (d,) our duality gap / the output's variance
    same_support: bool

    @property
    def max_rel_objective_diff(self) -> float:
        """The largest ``|ours / sklearn - 1|`` of the objectives."""
        ratio = self.table["objective (ours)"] / self.table["objective (sklearn)"]
        return float(np.max(np.abs(ratio - 1)))

    @property
    def support_sizes(self) -> list[int]:
        """Our number of nonzero coefficients per output."""
        return [int(n) for n in self.table["support"]]

    def __str__(self) -> str:
        below = self.max_rel_objective_diff < OBJECTIVE_AGREEMENT
        certified = bool((self.relative_gap <= self.tol).all())
        return (
            f"largest relative objective difference below {OBJECTIVE_AGREEMENT:g}: {below}\n"
            f"every duality gap below tol times the output's variance: {certified}\n"
            f"same supports as scikit-learn: {self.same_support}"
        )


def compare_with_sklearn(
    X: np.ndarray, Y: np.ndarray, lam_ratio: float = 0.1, tol: float = 1e-10
) -> SklearnComparison:
    """Solve the plain Lasso of ``Y: (M, d)`` on ``X: (M, p)`` without intercept by
    :func:`~circuitlasso.solve.lasso` and by scikit-learn, at ``lam_ratio`` times the largest
    ``lam_max`` of the outputs, and compare the two."""
    if np.ndim(Y) != 2:
        raise ValueError(f"Y must be (M, d), got shape {np.shape(Y)}")
    if not 0 < lam_ratio < 1:
        raise ValueError(f"lam_ratio must be in (0, 1), got {lam_ratio}")
    lam = lam_ratio * float(lam_max(X, Y, normalize=False).max())
    ours = lasso(X, Y, lam, normalize=False, dtype=torch.float64, tol=tol)
    reference = Lasso(alpha=lam, fit_intercept=False, tol=SKLEARN_TOL, max_iter=100_000).fit(X, Y)
    ref_coef, coef = reference.coef_.T, ours.coef.numpy()
    table = pd.DataFrame(
        {
            "objective (ours)": ours.objective.numpy(),
            "objective (sklearn)": lasso_objective(X, Y, ref_coef, lam),
            "max |coef diff|": np.abs(coef - ref_coef).max(0),
            "duality gap": ours.gap.numpy(),
            "support": ours.support_size.numpy(),
        }
    )
    return SklearnComparison(
        table=table,
        lam=lam,
        tol=tol,
        relative_gap=ours.gap.numpy() / Y.var(0),
        same_support=bool(((ref_coef != 0) == (coef != 0)).all()),
    )


def sae_like_problem(
    M: int = 8551,
    p: int = 32768,
    d: int = 32768,
    active_per_row: int = 64,
    active_outputs_per_row: float = 30,
    seed: int = 0,
    frequency: str = "power-law",
) -> tuple[sp.csr_matrix, sp.csc_matrix, sp.csc_matrix]:
    """X (M, p) CSR, Y (M, d) CSC, planted A (p, d) CSC, all float32 (A float64).

    Feature k is active in each row independently with probability f_k: proportional to
    rank^-1 (`frequency="power-law"`, capped at 0.25) or the same for every feature
    ("uniform"), scaled to `active_per_row` per row; values are 0.1 + Exp(1).
    Output j has 1 + Poisson(2) parents with weights +-U(0.5, 1.5) (80 % positive). Y is
    ReLU(X A + noise on the nonzeros - b_j), with b_j keeping the top share of output j's
    positive pre-activations that leaves about `active_outputs_per_row` active outputs per row.
    """
    if frequency not in ("power-law", "uniform"):
        raise ValueError(f"frequency is 'power-law' or 'uniform', got {frequency!r}")
    rng = np.random.default_rng(seed)
    if frequency == "uniform":
        freq = np.full(p, min(active_per_row / p, 0.25))
    else:
        ranks = np.arange(1, p + 1, dtype=np.float64)
        lo, hi = 1e-6, 1e3
        for _ in range(100):  # bisection for the scale giving `active_per_row` actives per row
            c = np.sqrt(lo * hi)
            lo, hi = (c, hi) if np.minimum(c / ranks, 0.25).sum() < active_per_row else (lo, c)
        freq = rng.permutation(np.minimum(c / ranks, 0.25))
    counts = rng.binomial(M, freq)
    cols = np.repeat(np.arange(p), counts)
    rows = np.concatenate([rng.choice(M, size=n, replace=False) for n in counts])
    X = sp.csc_matrix((0.1 + rng.exponential(1.0, rows.size), (rows, cols)), shape=(M, p))
    n_parents = 1 + rng.poisson(2.0, size=d)
    child = np.repeat(np.arange(d), n_parents)
    parent = rng.integers(0, p, size=child.size)
    weight = rng.uniform(0.5, 1.5, child.size) * rng.choice([-1.0, 1.0], child.size, p=[0.2, 0.8])
    A = sp.csc_matrix((weight, (parent, child)), shape=(p, d))
    A.sum_duplicates()
    Z = (X.tocsr() @ A).tocsc()
    Z.data += 0.1 * rng.standard_normal(Z.data.size)
    share = active_outputs_per_row * M / max(int((Z.data > 0).sum()), 1)
    bias = np.zeros(d)
    for j in range(d):
        v = np.sort(Z.data[Z.indptr[j] : Z.indptr[j + 1]])[::-1]
        v = v[v > 0]
        keep = max(1, int(round(share * v.size)))
        bias[j] = 0.999 * v[keep - 1] if 0 < keep < v.size else 0.0
    Z.data = np.maximum(Z.data - np.repeat(bias, np.diff(Z.indptr)), 0.0)
    Z.eliminate_zeros()
    return X.tocsr().astype(np.float32), Z.astype(np.float32), A


def section_summary(
    check: SklearnComparison,
    slopes: pd.DataFrame,
    regimes: pd.DataFrame,
    fits: pd.DataFrame,
    pairs: pd.DataFrame,
) -> dict[str, Any]:
    """The solver section's summary from its results: the comparison with scikit-learn
    (``check``: largest relative objective difference, largest relative duality gap, support
    sizes), Proposition 1's measured log-log ``slopes`` by size (to 3 decimals), how many rows of
    the Proposition 2 table ``regimes`` meet its condition, the crossover ``fits`` (to 3
    decimals, by row) and the largest coefficient difference between the executors of
    ``pairs`` (``cluster.time_layer_pairs``)."""
    measured = slopes["measured_slope"].round(3)
    return {
        "max_rel_objective_diff_vs_sklearn": check.max_rel_objective_diff,
        "max_relative_duality_gap": float(check.relative_gap.max()),
        "support_sizes": check.support_sizes,
        "loglog_slopes": dict(zip(slopes["size"], measured, strict=True)),
        "proposition2_regimes_where_condition_holds": int(regimes["condition_holds"].sum()),
        "crossover": fits.round(3).to_dict("index"),
        "ray_vs_serial_coef_diff": float(pairs["coef_diff_vs_first"].max()),
    }
