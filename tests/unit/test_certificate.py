"""The Lasso certificate is a promise: every reported duality gap bounds the true suboptimality.

Property-based (hypothesis): random small problems drawn towards the corners where a gap is
easy to get wrong (noiseless targets, lam near zero, fewer rows than columns, duplicate,
collinear, constant and all-zero columns, scales from 1e-6 to 1e6, float32 and float64, dense
and sparse X, with and without intercept or normalization). For each output, the true optimum
is bounded from above independently: scikit-learn's coordinate descent at tol 1e-14 and its LARS
each give a point, the better of the two is the reference, and

    objective(ours) - objective(reference) <= gap(ours) + rounding

must hold: the left side is at most the true suboptimality, so a violation is a certain false
certificate. How close the reference is to the optimum is measured by its own duality gap
(computed here in numpy, from its residual) and shown as a hypothesis event (pytest
--hypothesis-show-statistics). The data a solve sees are X and Y rounded to its dtype; the
reference solves those. `rounding` is float64 rounding: of the centering, eps64 ||y|| ||y_c|| / M
(a target far from zero mean keeps few digits once centered, and likewise a column), and of the
residual's norm, eps64 (||y_c||^2 + ||b||_1^2) / M with b the coefficients of the unit-norm
columns; plus, for dtype float32, the rounding of the returned coefficients to float32 (a
float32 solve certifies its iterate before that rounding: the objective then moves by at most
eps32 sum_k |b_k| (|x~_k^T r| / M + lam omega_k), to first order).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import strategies as st
from sklearn.linear_model import Lasso, LassoLars

from circuitlasso.solve import ConvergenceWarning, block_lasso, lasso, lasso_path

CORNERS = ["plain", "duplicate", "collinear", "constant", "zero", "wide"]
TOL = 1e-6
EPS64 = float(np.finfo(np.float64).eps)
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


class Problem:
    """X (M, p), Y (M, d) as the solver sees them (rounded to `dtype`, held in float64 here)."""

    def __init__(self, draw: st.DrawFn) -> None:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        self.corner = draw(st.sampled_from(CORNERS))
        M = draw(st.integers(2, 12))
        p = draw(st.integers(1, 10))
        if self.corner == "wide":
            p = M + draw(st.integers(1, 8))  # fewer observations than columns
        d = draw(st.integers(1, 3))
        self.dtype = draw(st.sampled_from([torch.float32, torch.float64]))
        self.sparse = draw(st.booleans())
        self.fit_intercept = draw(st.booleans())
        self.normalize = draw(st.booleans())
        X = rng.standard_normal((M, p))
        if self.sparse:
            X *= rng.random((M, p)) < 0.6
        if p >= 2 and self.corner == "duplicate":
            X[:, 1] = X[:, 0]
        if p >= 2 and self.corner == "collinear":
            X[:, 1] = -3.0 * X[:, 0]
        if self.corner == "constant":
            X[:, 0] = 2.5
        if self.corner == "zero":
            X[:, -1] = 0.0
        X *= 10.0 ** draw(st.sampled_from([-6, 0, 6]))
        noise = draw(st.sampled_from([0.0, 1e-6, 0.1, 1.0]))  # 0: noiseless
        A = rng.standard_normal((p, d)) * (rng.random((p, d)) < 0.5)
        Y = X @ A + noise * rng.standard_normal((M, d)) * np.abs(X).max()
        Y *= 10.0 ** draw(st.sampled_from([-6, 0, 6]))
        Y += draw(st.sampled_from([0.0, 3.0]))
        self.lam_ratio = 10.0 ** draw(st.floats(-6, 0.3))
        as_np = np.float32 if self.dtype == torch.float32 else np.float64
        self.X = X.astype(as_np).astype(np.float64)
        self.Y = Y.astype(as_np).astype(np.float64)
        self.x_mean = self.X.mean(0) if self.fit_intercept else np.zeros(p)
        self.y_mean = self.Y.mean(0) if self.fit_intercept else np.zeros(d)
        centered = self.X - self.x_mean
        self.norms = np.linalg.norm(centered, axis=0)
        self.usable = self.norms**2 > 1e-12 * (self.X**2).sum(0)  # constant columns cannot enter
        unit = centered[:, self.usable] / self.norms[self.usable]
        self.unit = unit
        self.yc = self.Y - self.y_mean
        # penalty weight of each usable unit-norm column: 1, or 1/norm without normalization
        self.omega = np.ones(unit.shape[1]) if self.normalize else 1 / self.norms[self.usable]
        top = np.abs(unit.T @ self.yc) / (M * self.omega[:, None]) if unit.shape[1] else None
        lam_max = top.max(0) if top is not None else np.zeros(d)
        self.lam = np.where(lam_max > 0, self.lam_ratio * lam_max, self.lam_ratio)

    def __repr__(self) -> str:
        return (
            f"Problem({self.corner}, X {self.X.shape}, d={self.Y.shape[1]}, {self.dtype}, "
            f"sparse={self.sparse}, fit_intercept={self.fit_intercept}, "
            f"normalize={self.normalize}, lam_ratio={self.lam_ratio:.3g})\nX={self.X!r}\n"
            f"Y={self.Y!r}"
        )

    def options(self) -> dict:
        """The solver options this problem is solved with."""
        return dict(fit_intercept=self.fit_intercept, normalize=self.normalize, tol=TOL,
                    dtype=self.dtype)  # fmt: skip

    def x_input(self):
        return sp.csr_matrix(self.X) if self.sparse else self.X

    def objective(self, j: int, b: np.ndarray) -> float:
        """Mean-scaled objective of output j at coefficients b of the unit-norm columns."""
        r = self.yc[:, j] - self.unit @ b
        return float(r @ r / (2 * len(r)) + self.lam[j] * (self.omega * np.abs(b)).sum())

    def gap(self, j: int, b: np.ndarray) -> float:
        """Duality gap of b: the dual point is the residual scaled into the feasible box."""
        M, y = len(self.yc), self.yc[:, j]
        r = y - self.unit @ b
        rr, yr = r @ r, y @ r
        corr = np.abs(self.unit.T @ r) / (M * self.lam[j] * self.omega)
        s_max = 1 / corr.max() if corr.size and corr.max() > 0 else np.inf
        s = np.clip(yr / rr, -s_max, s_max) if rr > 0 else 0.0
        dual = (s * yr - s * s * rr / 2) / M
        return self.objective(j, b) - dual

    def reference(self, j: int) -> tuple[float, float]:
        """(objective, own gap) of the better of two independent solutions of output j:
        scikit-learn's coordinate descent (random order: the cyclic one zigzags for long on
        collinear columns) and LARS (exact, but fragile on duplicate columns)."""
        if not self.unit.shape[1]:
            return self.objective(j, np.zeros(0)), 0.0
        # unit penalty weights (b = w / omega), then columns and target of unit scale
        # (w = w' c / a): min ||y' - X' w'||^2 / (2M) + lam / (a c) ||w'||_1
        scaled = self.unit / self.omega
        a = np.linalg.norm(scaled, axis=0).max()
        c = np.linalg.norm(self.yc[:, j]) or 1.0
        alpha = self.lam[j] / (a * c)
        models = [
            Lasso(
                alpha=alpha,
                fit_intercept=False,
                tol=1e-14,
                max_iter=300_000,
                selection="random",
                random_state=0,
            ),  # cyclic zigzags on collinear columns
            LassoLars(alpha=alpha, fit_intercept=False, max_iter=10_000),
        ]
        bounds = []
        for model in models:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(scaled / a, self.yc[:, j] / c)
            b = np.ravel(model.coef_) * c / a / self.omega
            bounds.append((self.objective(j, b), self.gap(j, b)))
        return max(bounds, key=lambda bound: bound[0] - bound[1])

    def scaled_coef(self, coef: np.ndarray) -> np.ndarray:
        """User-unit coefficients (p,) as coefficients of the unit-norm columns."""
        return (coef * self.norms)[self.usable]

    def check(self, j: int, coef, intercept, gap, converged) -> float:
        """Check the certificate of output j (coef (p,), intercept, gap, converged as returned);
        return its true suboptimality over the bound it must stay within."""
        coef = np.asarray(coef, dtype=np.float64)
        assert np.all(coef[~self.usable] == 0)
        if self.fit_intercept:
            expected = self.y_mean[j] - self.x_mean @ coef
            assert intercept == pytest.approx(expected, rel=1e-5, abs=1e-5 * abs(self.y_mean[j]))
        b = self.scaled_coef(coef)
        M = len(self.yc)
        yty = float(self.yc[:, j] @ self.yc[:, j])
        ours = self.objective(j, b)
        best, ref_gap = self.reference(j)
        eps = torch.finfo(self.dtype).eps if self.dtype == torch.float32 else 0.0
        # float64 rounding of the centering (a column or target far from zero mean keeps few
        # digits once centered) and of the residual's norm
        kappa = np.sqrt(M) * np.abs(self.X).max(0)[self.usable] / self.norms[self.usable]
        raw = np.linalg.norm(self.Y[:, j]) * np.sqrt(yty)
        rounding = 64 * EPS64 * (yty + raw + (np.abs(b) * (1 + kappa)).sum() ** 2) / M
        # float32: coefficients rounded after certification move the objective by at most
        # eps32 sum_k |b_k| (|x~_k^T r| / M + lam omega_k), to first order
        r = self.yc[:, j] - self.unit @ b
        slope = np.abs(self.unit.T @ r) / M + self.lam[j] * self.omega
        rounding += 2 * eps * (np.abs(b) * slope).sum()
        # ours - best is at most the true suboptimality: exceeding the gap is a false certificate
        suboptimality = ours - best
        event("reference within 1e-9 of the optimum" if ref_gap <= 1e-9 * yty / M + rounding
              else "reference looser than 1e-9")  # fmt: skip
        assert suboptimality <= float(gap) + rounding, (
            f"{self.corner}: true suboptimality {suboptimality:.3g} > reported gap {float(gap):.3g}"
            f" (+ rounding {rounding:.3g}); objective {ours:.6g}, reference {best:.6g}"
        )
        if converged:
            assert float(gap) <= TOL * yty / M + 1e-300
        return suboptimality / max(float(gap) + rounding, 1e-300)


def _quiet():
    warnings.simplefilter("ignore", ConvergenceWarning)


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    return Problem(draw)


@SETTINGS
@given(problems())
def test_lasso_gap_bounds_the_suboptimality(problem: Problem) -> None:
    with warnings.catch_warnings():
        _quiet()
        result = lasso(problem.x_input(), problem.Y, problem.lam, **problem.options())
    coef = result.coef.to_dense() if result.coef.layout != torch.strided else result.coef
    ratios = [
        problem.check(j, coef[:, j], result.intercept[j], result.gap[j], result.converged[j])
        for j in range(problem.Y.shape[1])
    ]
    target(max(ratios), label="suboptimality / bound")


@settings(SETTINGS, max_examples=60)
@given(problems())
def test_lasso_path_gaps_bound_the_suboptimality(problem: Problem) -> None:
    ratios = np.array([1.0, 0.3, 0.1]) * problem.lam_ratio
    grid = ratios[:, None] * problem.lam / problem.lam_ratio
    with warnings.catch_warnings():
        _quiet()
        path = lasso_path(problem.x_input(), problem.Y, lams=grid, **problem.options())
    ratios = []
    for i, lam in enumerate(grid):
        problem.lam = lam
        coef = path.coefs[i]
        coef = coef.to_dense() if coef.layout != torch.strided else coef
        for j in range(problem.Y.shape[1]):
            gap = path.gap[i, j]
            ratios.append(problem.check(j, coef[:, j], path.intercepts[i, j], gap, False))
    target(max(ratios), label="suboptimality / bound")


@settings(SETTINGS, max_examples=60)
@given(problems())
def test_block_lasso_gap_bounds_the_suboptimality(problem: Problem) -> None:
    """Block 1 (the targets) regresses on block 0 (X) only: the Lasso of each target on X."""
    p, d = problem.X.shape[1], problem.Y.shape[1]
    stacked = np.column_stack([problem.X, problem.Y])
    X = sp.csr_matrix(stacked) if problem.sparse else stacked
    lam = np.concatenate([np.ones(p), problem.lam])
    with warnings.catch_warnings():
        _quiet()
        result = block_lasso(X, [p, d], [[], [0]], lam, **problem.options())
    coef = result.coef[(0, 1)]
    coef = coef.to_dense() if coef.layout != torch.strided else coef
    ratios = []
    for j in range(d):
        t = p + j
        gap, converged = result.gap[t], result.converged[t]
        ratios.append(problem.check(j, coef[:, j], result.intercept[t], gap, converged))
    target(max(ratios), label="suboptimality / bound")
