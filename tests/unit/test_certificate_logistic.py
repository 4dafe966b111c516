"""Soundness of the certificates of `logistic_lasso` and `multinomial_lasso`, and their handling
of degenerate inputs.

The property test draws small problems over the hard corners (separable and nearly separable
classes with lam down to 1e-4 lam_max, so that the optimum sits at large coefficients; M < p;
duplicate, collinear, constant, all-zero and offset columns; columns scaled by 1e-6 .. 1e6 and
spread over six decades; float32 and float64; dense numpy, torch dense, scipy CSR and torch CSR;
with and without intercept and normalization; binary, and 2 to 4 classes for the multinomial
solver; tolerances 1e-3 .. 1e-9 and runs cut short by max_iter) and checks that every returned
gap bounds the true suboptimality of the returned point:

    objective(returned point) - objective(reference) <= gap + SLACK * null_objective,

with everything evaluated here in float64 by code independent of the solver. X rounded to the
solver's dtype defines the problem (for float32 the reference is built on X cast to float32 and
back); the solver certifies the point it returns (coef rounded to dtype) in float64, so one slack
serves both dtypes. The reference starts from scikit-learn's saga (LogisticRegression with
l1_ratio=1, C = 1/(M lam), the conventions of `circuitlasso.solve`, on the scaled problem), is
polished by L-BFGS-B on the split (a = a+ - a-) formulation and by an active-set Newton method,
and its own duality gap (from a dual feasible point built from its residual, as below) must be
at most REFERENCE_GAP * null_objective or REFERENCE_FRACTION * the gap checked: a suboptimal
reference would weaken the test by its gap. Each draw also checks that the reported objective is
the returned point's (within SLACK), that converged implies gap <= tol * null_objective, that
columns without spread get coefficient 0 and that `logistic_lam_max` matches. With `pytest -s`
the test prints the number of problems, the corners drawn, the largest ratio
(objective - reference) / gap and the largest reference gap.

Broken on purpose (the certificate's scaling s dropped; the intercept left unoptimized without
the mixing that restores its equality constraint; the loss computed by torch's softplus; the
gap of the unrounded iterate returned with float32 coefficients), the property test fails within
the first draws; the solver before this audit failed it too (gap 1.04e-9 below a suboptimality
of 1.19e-9: `test_float32_coefficients_are_certified_as_returned`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp
from sklearn.linear_model import LogisticRegression

from circuitlasso.solve import (
    ConvergenceWarning,
    logistic_lam_max,
    logistic_lasso,
    multinomial_lasso,
)

SLACK = 1e-11
"""Rounding allowance, relative to the intercept-only objective, for objective(ours) -
objective(reference) - gap: the float64 sums of M <= 30 losses at logits up to ~1e4."""
REFERENCE_GAP = 1e-11
REFERENCE_FRACTION = 0.01
"""Largest duality gap of the reference: REFERENCE_GAP x the intercept-only objective, or
REFERENCE_FRACTION x the gap it checks (nearly collinear columns, once rounded to float32, leave
directions of curvature ~1e-16 along which the reference resolves the optimum less finely)."""
RATIO_FLOOR = 1e-10
"""Gaps below RATIO_FLOOR * null_objective are rounding-level: left out of the reported largest
ratio (objective - reference) / gap."""
MAX_EXAMPLES = 200
"""About 35 s of CPU on one thread."""
CORNERS = ("duplicate", "collinear", "constant", "zero", "offset")

# ---------------------------------------------------------------- independent float64 reference


def _cross_entropy(eta: np.ndarray, codes: np.ndarray) -> float:
    """Mean softmax cross-entropy of logits eta (M, K) against class indices codes (M,)."""
    own = eta[np.arange(len(codes)), codes]
    return float(np.mean(logsumexp(eta - own[:, None], axis=1)))


def _softmax(eta: np.ndarray) -> np.ndarray:
    e = np.exp(eta - eta.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@dataclass
class Problem:
    """The scaled problem min CE(Z A + 1 b^T) + sum_k pen_k |A_k| (binary: A (q, 2) with its
    column 0 held at 0, b likewise). Z: the usable columns of X, centered with an intercept,
    divided by their norms (q may be 0)."""

    Z: np.ndarray
    codes: np.ndarray
    K: int
    pen: np.ndarray
    fit_intercept: bool
    binary: bool

    @property
    def free(self) -> int:
        """Columns of A that are variables."""
        return 1 if self.binary else self.K

    def full(self, A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(A (q, K), b (K,)) from the variables (binary: prepend the fixed class-0 zeros)."""
        if self.binary:
            return np.hstack([np.zeros((A.shape[0], 1)), A]), np.concatenate([[0.0], b])
        return A, b

    def objective(self, A: np.ndarray, b: np.ndarray) -> float:
        A_full, b_full = self.full(A, b)
        penalty = float((self.pen[:, None] * np.abs(A_full)).sum())
        return _cross_entropy(self.Z @ A_full + b_full, self.codes) + penalty

    def lower_bound(self, A: np.ndarray, b: np.ndarray) -> float:
        """Dual value of the feasible point s (Y - P') built from the residual at (A, b): P'
        mixes the probabilities with a constant row so that every column of Y - P' sums to 0
        (with an intercept), s scales it into the box |Z^T theta_c| <= M pen."""
        A_full, b_full = self.full(A, b)
        M = len(self.codes)
        Y = np.eye(self.K)[self.codes]
        P = _softmax(self.Z @ A_full + b_full)
        if self.fit_intercept:
            f, mean = Y.mean(0), P.mean(0)
            over = mean > f
            t = float(np.max((mean[over] - f[over]) / mean[over])) if over.any() else 0.0
            P = (1 - t) * P + np.maximum(f - (1 - t) * mean, 0.0)
        theta = Y - P
        if self.Z.shape[1]:
            constrained = theta[:, 1:] if self.binary else theta
            top = float((np.abs(self.Z.T @ constrained) / (M * self.pen[:, None])).max())
        else:
            top = 0.0
        s = min(1.0, 1.0 / top) if top > 0 else 1.0
        Q = (1 - s) * Y + s * P
        logs = np.log(np.where(Q > 0, Q, 1.0))
        return float(-(Q * logs).sum(1).mean())

    def null_objective(self) -> float:
        if not self.fit_intercept:
            return float(np.log(self.K))
        f = np.bincount(self.codes, minlength=self.K) / len(self.codes)
        return float(-(f * np.log(f)).sum())

    # -------------------------------------------------------------- the reference solve

    def _value_and_gradient(self, A: np.ndarray, b: np.ndarray):
        A_full, b_full = self.full(A, b)
        eta = self.Z @ A_full + b_full
        R = (_softmax(eta) - np.eye(self.K)[self.codes]) / len(self.codes)
        gA, gb = self.Z.T @ R, R.sum(0)
        if self.binary:
            gA, gb = gA[:, 1:], gb[1:]
        return _cross_entropy(eta, self.codes), gA, gb

    def solve(self) -> tuple[np.ndarray, np.ndarray]:
        """(A (q, free), b (free,)): saga, then L-BFGS-B, then Newton on the support."""
        q, C = self.Z.shape[1], self.free
        A, b = np.zeros((q, C)), np.zeros(C)
        if q:
            A, b = self._saga()
            A, b = self._lbfgs(A, b)
            A = self._pruned(self._centered(A), b)
            A, b = self._newton(A, b)
        elif self.fit_intercept:
            A, b = self._newton(A, b)
        return A, b

    def _saga(self) -> tuple[np.ndarray, np.ndarray]:
        """scikit-learn on Z diag(lam / pen) with the uniform penalty lam = min(pen) (the same
        problem in the coordinates g = a pen / lam)."""
        M = len(self.codes)
        lam = float(self.pen.min())
        stretch = lam / self.pen
        binary = self.binary or self.K == 2
        ref = LogisticRegression(
            l1_ratio=1.0,
            C=1 / (lam * M),
            solver="saga",
            fit_intercept=self.fit_intercept,
            tol=1e-8,
            max_iter=3000,
            random_state=0,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref.fit(self.Z * stretch, self.codes)
        coef = ref.coef_.T * stretch[:, None]
        intercept = np.atleast_1d(ref.intercept_) * np.ones(ref.coef_.shape[0])
        if not self.fit_intercept:
            intercept = np.zeros_like(intercept)
        if binary and not self.binary:  # a two-class multinomial: class 1 against class 0
            return np.hstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
        return coef, intercept

    def _lbfgs(self, A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q, C = A.shape
        n = q * C
        nb = C if self.fit_intercept else 0
        weights = np.repeat(self.pen, C)

        def unpack(z):
            return (z[:n] - z[n : 2 * n]).reshape(q, C), (z[2 * n :] if nb else np.zeros(C))

        def fun(z):
            A_z, b_z = unpack(z)
            value, gA, gb = self._value_and_gradient(A_z, b_z)
            value += float(weights @ (z[:n] + z[n : 2 * n]))
            grad = np.concatenate([gA.ravel() + weights, -gA.ravel() + weights, gb[:nb]])
            return value, grad

        z = np.concatenate([np.maximum(A, 0).ravel(), np.maximum(-A, 0).ravel(), b[:nb]])
        bounds = [(0.0, None)] * (2 * n) + [(None, None)] * nb
        for _ in range(3):
            z = so.minimize(
                fun,
                z,
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                options={"maxiter": 20_000, "maxcor": 30, "ftol": 0.0, "gtol": 1e-15},
            ).x
        return unpack(z)

    def _centered(self, A: np.ndarray) -> np.ndarray:
        """Multinomial: each row shifted by its middle entry nearest 0 (the loss sees only
        differences within a row; the penalty is smallest with a middle entry at 0, which also
        takes the flat shift out of the support)."""
        if self.binary:
            return A
        ordered = np.sort(A, 1)
        middle = ordered[:, [(self.K - 1) // 2, self.K // 2]]
        pick = np.abs(middle).argmin(1)
        return A - middle[np.arange(len(A)), pick][:, None]

    def _pruned(self, A: np.ndarray, b: np.ndarray) -> np.ndarray:
        """A with the small entries (|A| <= 1e-6 max |A|) set to 0 wherever that leaves the
        objective within rounding (L-BFGS-B leaves some near its bound)."""
        A = A.copy()
        scale = np.abs(A).max()
        for k, c in zip(*np.nonzero((A != 0) & (np.abs(A) <= 1e-6 * scale)), strict=True):
            before, trial = self.objective(A, b), A.copy()
            trial[k, c] = 0.0
            if self.objective(trial, b) <= before + 1e-13 * abs(before):
                A = trial
        return A

    def _newton(self, A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """An active-set Newton method: Newton's method on the smooth problem with the support
        and signs of A fixed (intercepts free), an entry dropped where a step would change its
        sign (or where the objective falls linearly along a direction the loss does not see:
        collinear columns), a zero entry added where it violates |gradient| <= pen."""
        for _ in range(30):
            A, b, dropped = self._newton_on_support(A, b)
            if dropped:
                continue
            _, gA, _ = self._value_and_gradient(A, b)
            excess = np.where(A == 0, np.abs(gA) - self.pen[:, None] * (1 + 1e-9), -np.inf)
            if not excess.size or excess.max() <= 0:
                break
            k, j = np.unravel_index(excess.argmax(), excess.shape)
            trial = A.copy()
            trial[k, j] = -np.sign(gA[k, j]) * 1e-9 * max(1.0, np.abs(A).max())
            if self.objective(trial, b) >= self.objective(A, b):
                break
            A = trial
        return A, b

    def _newton_on_support(self, A: np.ndarray, b: np.ndarray):
        """(A, b, dropped): Newton's method with the support and signs of A fixed, until it
        stops lowering the objective (or the gradient, once the objective no longer resolves
        the decrease) or drops an entry."""
        M, K = len(self.codes), self.K
        offset = 1 if self.binary else 0
        rows, cols = np.nonzero(A)
        n = len(rows)
        signs = np.sign(A[rows, cols])
        features = [self.Z[:, k] for k in rows]
        classes = list(cols + offset)
        weights = list(self.pen[rows] * signs)
        if self.fit_intercept:
            features += [np.ones(M)] * self.free
            classes += list(np.arange(self.free) + offset)
            weights += [0.0] * self.free
        if not features:
            return A, b, False
        F, c, w = np.stack(features, 1), np.array(classes), np.array(weights)
        Y = np.eye(K)[self.codes]

        def split(v):
            A_v = np.zeros_like(A)
            A_v[rows, cols] = v[:n]
            return A_v, (v[n:] if self.fit_intercept else b)

        def value(v):
            return self.objective(*split(v))

        def derivatives(v):
            A_full, b_full = self.full(*split(v))
            Pc = _softmax(self.Z @ A_full + b_full)[:, c]
            gradient = (F * (Pc - Y[:, c])).mean(0) + w
            FP = F * Pc
            hessian = (FP.T @ F) * (c[:, None] == c[None, :]) / M - FP.T @ FP / M
            return gradient, hessian

        def to_zero(v, direction):
            """Largest t in (0, 1] with v - t direction keeping the signs, and the entry it
            zeroes (None when t = 1 keeps them all)."""
            moving = direction[:n] * signs > 0
            if not moving.any():
                return 1.0, None
            t = np.where(moving, v[:n] / np.where(moving, direction[:n], 1.0), np.inf)
            i = int(t.argmin())
            return (float(t[i]), i) if t[i] < 1.0 else (1.0, None)

        v = np.concatenate([A[rows, cols], b if self.fit_intercept else []])
        best = value(v)
        gradient, hessian = derivatives(v)
        for _ in range(60):
            step = np.linalg.lstsq(hessian, gradient, rcond=1e-13)[0]
            unseen = gradient - hessian @ step  # gradient along directions the loss misses
            moving = unseen[:n] * signs > 0
            if moving.any() and np.abs(unseen[:n]).max() > 1e-6 * np.abs(gradient).max():
                # the objective falls linearly along -unseen: go to the first zero
                ratios = np.where(moving, v[:n] / np.where(moving, unseen[:n], 1.0), np.inf)
                i = int(ratios.argmin())
                trial = v - ratios[i] * unseen
                trial[i] = 0.0
                if value(trial) <= best:
                    A_t, b_t = split(trial)
                    return A_t, b_t, True
            t, i = to_zero(v, step)
            if i is not None:  # the full step changes a sign: stop at the first zero
                trial = v - t * step
                trial[i] = 0.0
                if value(trial) <= best:
                    A_t, b_t = split(trial)
                    return A_t, b_t, True
            t = 1.0
            while t > 1e-12:  # a step that lowers the objective, or that keeps it within
                trial = v - t * step  # rounding and shrinks the gradient
                if np.all(np.sign(trial[:n]) == signs):
                    trial_value = value(trial)
                    trial_gradient, trial_hessian = derivatives(trial)
                    if trial_value < best or (
                        trial_value <= best + 1e-15 * abs(best)
                        and np.abs(trial_gradient).max() < np.abs(gradient).max()
                    ):
                        break
                t /= 2
            else:
                break
            v, best, gradient, hessian = trial, trial_value, trial_gradient, trial_hessian
        return (*split(v), False)


# ---------------------------------------------------------------- drawn problems


@dataclass
class Drawn:
    kind: str
    K: int
    M: int
    p: int
    labels: str
    corners: frozenset[str]
    scale: float
    spread: bool
    ratio: float
    dtype: str
    layout: str
    fit_intercept: bool
    normalize: bool
    tol: float
    max_iter: int
    seed: int


@st.composite
def problems(draw) -> Drawn:
    kind = draw(st.sampled_from(["multinomial", "binary"]))
    return Drawn(
        kind=kind,
        K=2 if kind == "binary" else draw(st.sampled_from([3, 4, 2, 3])),
        M=draw(st.integers(6, 30)),
        p=draw(st.integers(1, 12)),
        labels=draw(st.sampled_from(["separable", "nearly separable", "noisy"])),
        corners=frozenset(draw(st.sets(st.sampled_from(CORNERS), max_size=3))),
        scale=draw(st.sampled_from([1.0, 1e6, 1e-6])),
        spread=draw(st.booleans()),
        ratio=draw(st.sampled_from([1e-4, 1e-2, 0.3, 1e-3, 0.1, 0.9])),
        dtype=draw(st.sampled_from(["float32", "float64"])),
        layout=draw(st.sampled_from(["numpy", "torch", "scipy csr", "torch csr"])),
        fit_intercept=draw(st.sampled_from([True, False])),
        normalize=draw(st.sampled_from([True, False])),
        tol=draw(st.sampled_from([1e-6, 1e-9, 1e-3])),
        max_iter=draw(st.sampled_from([20_000, 20_000, 20_000, 2])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def _data(d: Drawn) -> tuple[np.ndarray, np.ndarray]:
    """X (M, p) float64 and labels y (M,) (arbitrary label values, every class present)."""
    rng = np.random.default_rng(d.seed)
    M, p, K = d.M, d.p, d.K
    X = rng.standard_normal((M, p))
    if d.layout.endswith("csr"):
        X *= rng.random((M, p)) < 0.6
    if d.spread:
        X *= 10.0 ** rng.uniform(-3, 3, p)
    columns = rng.permutation(p)
    if "duplicate" in d.corners and p >= 2:
        X[:, columns[1]] = X[:, columns[0]]
    if "collinear" in d.corners and p >= 3:
        X[:, columns[2]] = 2 * X[:, columns[0]] - 0.5 * X[:, columns[1]]
    if "offset" in d.corners:
        X[:, columns[-1]] += 10 * (X[:, columns[-1]].std() + 1.0)
    scores = X @ rng.standard_normal((p, K))
    if "constant" in d.corners:
        X[:, columns[min(3, p - 1)]] = 0.7
    if "zero" in d.corners:
        X[:, columns[min(4, p - 1)]] = 0.0
    X *= d.scale
    scores /= scores.std() + 1e-300
    if d.labels == "nearly separable":
        scores += 0.1 * rng.standard_normal((M, K))
    elif d.labels == "noisy":
        scores += rng.gumbel(size=(M, K))
    codes = scores.argmax(1) if K > 2 else (scores[:, 1] - scores[:, 0] > 0).astype(int)
    if K == 2 and np.bincount(codes, minlength=K).min() == 0:  # split at the median instead
        diff = scores[:, 1] - scores[:, 0]
        codes = (diff > np.median(diff)).astype(int)
    for c in np.flatnonzero(np.bincount(codes, minlength=K) == 0):  # relabel a row of a
        donors = np.flatnonzero(np.bincount(codes, minlength=K)[codes] > 1)  # populous class
        codes[rng.choice(donors)] = c
    values = np.sort(rng.choice([-3.0, 0.0, 1.0, 2.5, 7.0], K, replace=False))
    return X, values[codes]


def _as_input(X: np.ndarray, layout: str):
    if layout == "numpy":
        return X
    if layout == "torch":
        return torch.tensor(X)
    if layout == "scipy csr":
        return sp.csr_matrix(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.tensor(X).to_sparse_csr()


@dataclass
class Stats:
    drawn: int = 0
    corners: dict[str, int] = field(default_factory=dict)
    worst_ratio: float = 0.0  # largest (objective - reference) / gap, gaps above RATIO_FLOOR
    worst_excess: float = -np.inf  # largest (objective - reference - gap) / null
    worst_reference_gap: float = 0.0  # relative to null
    converged: int = 0

    def count(self, name: str) -> None:
        self.corners[name] = self.corners.get(name, 0) + 1


def _check(d: Drawn, stats: Stats) -> None:
    X, y = _data(d)
    M, p = X.shape
    codes = np.unique(y, return_inverse=True)[1]
    # the problem: X rounded to the solver's dtype, columns scaled to unit (centered) norm
    Xr = X.astype(d.dtype).astype(np.float64)
    mean = Xr.mean(0) if d.fit_intercept else np.zeros(p)
    spread = np.ptp(Xr, 0) > 0 if d.fit_intercept else np.abs(Xr).max(0) > 0
    norms = np.where(spread, np.linalg.norm(Xr - mean, axis=0), 0.0)
    usable = norms > 0
    Z = (Xr[:, usable] - mean[usable]) / norms[usable]
    omega = np.ones(usable.sum()) if d.normalize else 1 / norms[usable]
    Y = np.eye(d.K)[codes]
    theta0 = Y - (Y.mean(0) if d.fit_intercept else 1 / d.K)
    top = np.abs(Z.T @ theta0).max(1) / (M * omega) if usable.any() else np.zeros(0)
    lam_max = float(top.max()) if top.size else 0.0
    lam = d.ratio * lam_max if lam_max > 0 else 1.0
    binary = d.kind == "binary"
    problem = Problem(Z, codes, d.K, lam * omega, d.fit_intercept, binary)
    null = problem.null_objective()

    solver = logistic_lasso if binary else multinomial_lasso
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = solver(
            _as_input(X, d.layout),
            y,
            lam,
            fit_intercept=d.fit_intercept,
            normalize=d.normalize,
            tol=d.tol,
            max_iter=d.max_iter,
            dtype=getattr(torch, d.dtype),
        )
    coef = res.coef.double().numpy().reshape(p, -1)
    intercept = np.atleast_1d(res.intercept.double().numpy())
    assert res.coef.dtype == getattr(torch, d.dtype)
    assert not coef[~usable].any(), "columns without spread must get coefficient 0"
    np.testing.assert_array_equal(res.classes.numpy(), np.unique(y))
    if lam_max > 0:
        assert logistic_lam_max(
            _as_input(X, d.layout),
            y,
            fit_intercept=d.fit_intercept,
            normalize=d.normalize,
            dtype=getattr(torch, d.dtype),
        ) == pytest.approx(lam_max, rel=1e-9)

    # the returned point in the problem's coordinates (the centering moves into b)
    A = coef[usable] * norms[usable, None]
    b = intercept + mean[usable] @ coef[usable]
    ours = problem.objective(A, b)
    A_ref, b_ref = problem.solve()
    reference = problem.objective(A_ref, b_ref)
    reference_gap = reference - problem.lower_bound(A_ref, b_ref)
    gap = float(res.gap)

    assert abs(ours - float(res.objective)) <= SLACK * null, "objective of another point"
    assert ours - reference <= gap + SLACK * null, (
        f"gap {gap:.3g} below the suboptimality {ours - reference:.3g} ({d})"
    )
    assert not res.converged or gap <= d.tol * null * (1 + 1e-12)
    assert gap >= 0 and np.isfinite(gap)
    assert reference_gap <= max(REFERENCE_GAP * null, REFERENCE_FRACTION * gap), (
        f"reference gap {reference_gap:.3g} ({d})"
    )

    stats.drawn += 1
    stats.converged += res.converged
    if gap > RATIO_FLOOR * null:
        stats.worst_ratio = max(stats.worst_ratio, (ours - reference) / gap)
    stats.worst_excess = max(stats.worst_excess, (ours - reference - gap) / null)
    stats.worst_reference_gap = max(stats.worst_reference_gap, reference_gap / null)
    for corner in d.corners:
        stats.count(corner)
    for name, hit in [
        (d.kind, True),
        (f"K={d.K}", True),
        (d.labels, True),
        (f"ratio={d.ratio:g}", True),
        (d.dtype, True),
        (d.layout, True),
        (f"scale={d.scale:g}", True),
        ("spread scales", d.spread),
        ("intercept", d.fit_intercept),
        ("no intercept", not d.fit_intercept),
        ("normalize=False", not d.normalize),
        ("M < p", M < p),
        ("cut short", d.max_iter == 2),
        (f"tol={d.tol:g}", True),
        ("not converged", not res.converged),
    ]:
        if hit:
            stats.count(name)


@pytest.mark.slow  # 200 drawn problems solved
def test_gaps_bound_the_suboptimality_of_the_returned_point() -> None:
    stats = Stats()
    start, cpu = time.perf_counter(), time.process_time()

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )  # no time limit: CPUs are shared
    @given(problems())
    def check(d: Drawn) -> None:
        _check(d, stats)

    check()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    expected = {*CORNERS, "separable", "nearly separable", "noisy", "ratio=0.0001", "M < p"}
    expected |= {"float32", "float64", "numpy", "torch", "scipy csr", "torch csr"}
    expected |= {"scale=1e-06", "scale=1e+06", "spread scales", "intercept", "no intercept"}
    expected |= {"binary", "multinomial", "K=2", "K=3", "K=4", "normalize=False", "cut short"}
    expected |= {"tol=1e-09", "not converged"}
    assert expected <= set(stats.corners), f"corners not drawn: {expected - set(stats.corners)}"
    print(
        f"\n{stats.drawn} problems in {elapsed:.1f} s ({cpu:.1f} s CPU; {stats.converged} "
        f"converged); largest "
        f"(objective - reference) / gap {stats.worst_ratio!r}; largest "
        f"(objective - reference - gap) / null {stats.worst_excess:.3g}; largest reference "
        f"gap / null {stats.worst_reference_gap:.3g}\ncorners: {sorted(stats.corners.items())}"
    )


# ---------------------------------------------------------------- regressions of the audit


def test_float32_coefficients_are_certified_as_returned() -> None:
    # the gap was that of the float64 iterate while coef came back rounded to float32 (and the
    # loss took log(1 + e^eta) = eta beyond eta = 20): gap 1.04e-9 < suboptimality 1.19e-9 here
    d = Drawn(
        kind="binary", K=2, M=12, p=1, labels="separable", corners=frozenset(), scale=1.0,
        spread=False, ratio=1e-4, dtype="float32", layout="numpy", fit_intercept=True,
        normalize=True, tol=1e-6, max_iter=20_000, seed=0,
    )  # fmt: skip
    _check(d, Stats())


def test_binary_loss_is_exact_beyond_the_softplus_threshold() -> None:
    # torch's softplus returns eta for eta > 20: the loss lost up to e^-20 = 2e-9 per sample
    x = np.linspace(-1, 1, 41)[np.arange(41) != 20]
    y = (x > 0).astype(float)
    X = np.stack([x, x**3], 1)
    lam = 1e-4 * logistic_lam_max(X, y)
    res = logistic_lasso(X, y, lam, tol=1e-10, dtype=torch.float64)
    eta = X @ res.coef.numpy() + res.intercept.item()
    assert 30 <= int((np.abs(eta) > 20).sum())
    loss = np.mean(np.where(y > 0, np.logaddexp(0, -eta), np.logaddexp(0, eta)))
    norms = np.linalg.norm(X - X.mean(0), axis=0)
    objective = loss + lam * np.sum(norms * np.abs(res.coef.numpy()))
    assert res.converged and abs(res.objective.item() - objective) <= 1e-15


def _noisy_multiclass(seed: int, M: int, p: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((M, p)), rng.integers(0, K, M)


@pytest.mark.parametrize(
    ("seed", "M", "p", "K", "ratio", "fit_intercept"),
    [(7, 11, 2, 4, 1e-4, True), (25, 32, 10, 3, 1e-3, False)],
)
def test_multinomial_rows_move_to_their_median(seed, M, p, K, ratio, fit_intercept) -> None:
    # steps on one column of A at a time cannot shift a row (the loss sees only differences
    # within it): these stalled at relative gaps 0.05 and 0.2 before rows were re-centered
    X, y = _noisy_multiclass(seed, M, p, K)
    lam = ratio * logistic_lam_max(X, y, fit_intercept=fit_intercept)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = multinomial_lasso(X, y, lam, fit_intercept=fit_intercept, tol=1e-8)
    null = np.log(K) if not fit_intercept else -np.sum((f := np.bincount(y) / M) * np.log(f))
    assert res.converged and res.gap.item() <= 1e-8 * null


def test_best_intercept_from_far_away() -> None:
    # Newton's method with steps capped at 1 stopped 50 short of an intercept 300 away: the
    # dual point then broke the intercept's equality constraint
    import circuitlasso.solve.logistic_losses as losses

    y = torch.tensor([0.0, 1.0] * 5)
    eta0 = torch.linspace(-300.0, -298.0, 10, dtype=torch.float64).unsqueeze(1)
    binary = losses.Binary(y)
    b = losses.best_intercept(binary, eta0, torch.zeros(1, dtype=torch.float64))
    p = torch.sigmoid(eta0 + b)
    assert abs(float(p.mean()) - 0.5) <= 1e-14
    multinomial = losses.Multinomial(torch.tensor([0, 1, 2, 2, 1, 0, 0, 0]))
    eta0 = torch.zeros(8, 3, dtype=torch.float64)
    eta0[:, 0] = 400.0
    b = losses.best_intercept(multinomial, eta0, torch.zeros(3, dtype=torch.float64))
    P = torch.softmax(eta0 + b, 1)
    np.testing.assert_allclose(P.mean(0).numpy(), [0.5, 0.25, 0.25], atol=1e-14)


def test_certificate_modifies_none_of_its_arguments() -> None:
    import circuitlasso.solve.logistic_losses as losses

    rng = np.random.default_rng(3)
    x = torch.tensor(rng.standard_normal((20, 3)))
    loss = losses.Multinomial(torch.tensor(rng.integers(0, 3, 20)))
    a = torch.tensor(rng.standard_normal((3, 3)))
    args = [a, x @ a, torch.tensor([0.3, -0.1, 0.5], dtype=torch.float64)]
    weight = torch.full((3,), 0.01, dtype=torch.float64)
    copies = [t.clone() for t in (*args, weight, loss.labels)]
    cert = losses.certificate(
        *args, loss, weight, lambda theta: x.t() @ theta / (20 * 0.01), True, x @ a * 0.9
    )
    for before, after in zip(copies, (*args, weight, loss.labels), strict=True):
        assert torch.equal(before, after)
    assert cert.b is not args[2] and abs(float(cert.b.sum())) <= 1e-15


# ---------------------------------------------------------------- degenerate inputs

Y6 = np.array([0, 1, 0, 1, 1, 1])
SOLVERS = [logistic_lasso, multinomial_lasso]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(
    ("columns", "fit_intercept"),
    [("zero", True), ("zero", False), ("constant", True)],
)
@pytest.mark.parametrize("sparse", [False, True])
def test_no_column_with_spread_gives_the_intercept_only_model(
    solver, columns, fit_intercept, sparse
) -> None:
    # scikit-learn's answer: coef 0 and the intercept of the class frequencies (its lbfgs; with
    # no column to penalize, l1 and l2 agree; its saga stops after one epoch on such data, and
    # without intercept raises on under/overflow)
    y = Y6 if solver is logistic_lasso else np.array([0, 1, 2, 1, 1, 2])
    X = np.zeros((6, 3)) if columns == "zero" else np.tile([2.5, -1.0, 7.0], (6, 1))
    X_in = sp.csr_matrix(X) if sparse else X
    res = solver(X_in, y, 0.1, fit_intercept=fit_intercept, tol=1e-12)
    assert res.converged and res.gap.item() <= 1e-15 and not res.coef.any()
    assert logistic_lam_max(X_in, y, fit_intercept=fit_intercept) == 0.0
    ref = LogisticRegression(C=1 / (0.1 * 6), tol=1e-12, fit_intercept=fit_intercept)
    ref.fit(X, y)
    np.testing.assert_allclose(ref.coef_, 0.0, atol=1e-8)
    frequencies = np.bincount(y) / 6
    if solver is logistic_lasso:
        odds = np.log(frequencies[1] / frequencies[0]) if fit_intercept else 0.0
        assert res.intercept.item() == pytest.approx(odds, abs=1e-14)
        assert res.intercept.item() == pytest.approx(float(ref.intercept_[0]), abs=1e-6)
        null = -np.sum(frequencies * np.log(frequencies)) if fit_intercept else np.log(2)
    else:
        logs = np.log(frequencies) - np.log(frequencies).mean() if fit_intercept else 0.0
        np.testing.assert_allclose(res.intercept.numpy(), logs + np.zeros(3), atol=1e-14)
        reference = np.atleast_1d(ref.intercept_) * np.ones(3)
        np.testing.assert_allclose(res.intercept.numpy(), reference - reference.mean(), atol=1e-6)
        null = -np.sum(frequencies * np.log(frequencies)) if fit_intercept else np.log(3)
    assert res.objective.item() == pytest.approx(null, abs=1e-15)


@pytest.mark.parametrize("solver", [*SOLVERS, logistic_lam_max])
def test_degenerate_inputs_raise_value_errors_that_name_the_problem(solver) -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 2))

    def call(X, y, **kwargs):
        if solver is logistic_lam_max:
            kwargs.pop("lam", None)
            return solver(X, y, **kwargs)
        return solver(X, y, kwargs.pop("lam", 0.1), **kwargs)

    with pytest.raises(ValueError, match="classes"):
        call(X, np.ones(6))
    with pytest.raises(ValueError, match="X is empty"):
        call(np.zeros((0, 2)), np.zeros(0))
    with pytest.raises(ValueError, match="X is empty"):
        call(np.zeros((6, 0)), Y6)
    with pytest.raises(ValueError, match="X has NaN or inf"):
        call(np.where(np.eye(6, 2) > 0, np.nan, X), Y6)
    with pytest.raises(ValueError, match="X has NaN or inf"):
        call(sp.csr_matrix(np.where(np.eye(6, 2) > 0, np.inf, X)), Y6)
    with pytest.raises(ValueError, match="y has NaN or inf"):
        call(X, np.where(np.arange(6) == 2, np.nan, Y6))
    with pytest.raises(ValueError, match="X must hold real numbers"):
        call(np.array([["a", "b"]] * 6, dtype=object), Y6)
    with pytest.raises(ValueError, match="y must hold real numbers"):
        call(X, np.array(["a", "b"] * 3))
    with pytest.raises(ValueError, match="y must be 1-D"):
        call(X, np.ones((6, 2)))
    with pytest.raises(ValueError, match="rows"):
        call(X, Y6[:5])
    with pytest.raises(ValueError, match="dtype"):
        call(X, Y6, dtype=torch.float16)
    with pytest.raises(ValueError, match="overflows"):  # squares beyond float64
        call(X * 1e300, Y6, dtype=torch.float64)
    with pytest.raises(ValueError, match="float32"):  # 1e200 is no float32
        call(X * 1e200, Y6, dtype=torch.float32)
    with pytest.raises(ValueError, match="overflows"):  # coefficients ~1e40 in float32
        call(X * 1e-36, Y6, dtype=torch.float32)
    if solver is not logistic_lam_max:
        for lam in (0.0, -1.0, np.nan, np.inf):
            with pytest.raises(ValueError, match="lam"):
                call(X, Y6, lam=lam)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("scale", [1e200, 1e-200])
@pytest.mark.parametrize("sparse", [False, True])
def test_huge_and_tiny_float64_scales_solve_the_unit_problem(solver, scale, sparse) -> None:
    # squared, 1e200 overflows and 1e-200 underflows: such columns must not pass for constant
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 4))
    y = (X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(30) > 0).astype(int)
    unit = solver(X, y, 0.01, dtype=torch.float64, tol=1e-8)
    big = X * scale
    res = solver(sp.csr_matrix(big) if sparse else big, y, 0.01, dtype=torch.float64, tol=1e-8)
    assert res.converged and res.coef.any()
    np.testing.assert_allclose(res.coef.numpy() * scale, unit.coef.numpy(), rtol=1e-6, atol=1e-9)
    assert res.objective.item() == pytest.approx(unit.objective.item(), rel=1e-12)
    assert logistic_lam_max(big, y) == pytest.approx(logistic_lam_max(X, y), rel=1e-12)


@pytest.mark.parametrize("layout", ["numpy", "torch", "scipy csr", "torch csr"])
def test_inputs_are_not_modified(layout) -> None:
    rng = np.random.default_rng(2)
    X = rng.standard_normal((25, 5)) * (rng.random((25, 5)) < 0.7)
    y = rng.integers(0, 3, 25).astype(np.float64)
    X_in = _as_input(X, layout)
    y_in = torch.tensor(y) if layout.startswith("torch") else y.copy()
    before = (X_in.copy() if hasattr(X_in, "copy") else X_in.clone(), y_in.copy()
              if isinstance(y_in, np.ndarray) else y_in.clone())  # fmt: skip
    for dtype in (torch.float64, torch.float32):
        logistic_lam_max(X_in, y_in, dtype=dtype)
        multinomial_lasso(X_in, y_in, 0.01, dtype=dtype)
        logistic_lasso(X_in, (y_in > 0) * 1.0, 0.01, dtype=dtype)
    for original, now in zip(before, (X_in, y_in), strict=True):
        if sp.issparse(now):
            assert (original != now).nnz == 0
        elif isinstance(now, torch.Tensor) and now.layout == torch.sparse_csr:
            assert torch.equal(original.to_dense(), now.to_dense())
        else:
            np.testing.assert_array_equal(np.asarray(original), np.asarray(now))
