"""l1-penalized binary logistic regression (paper Eq. 5 with a classification target).

    min_{a, b}  1/M sum_i [log(1 + exp(eta_i)) - y_i eta_i] + lam sum_k omega_k |a_k|,
    eta = X a + b,  y in {0, 1}.

Columns are scaled to unit (centered) norm as for `lasso`. The solver uses working sets, as
`lasso` does. Starting from the features with the largest KKT scores |x~_k^T theta| / (M lam
omega_k) at the intercept-only model, it solves the problem restricted to a set W of features,
on X~[:, W] (dense unless M |W| is large), by proximal Newton steps: each minimizes the quadratic
model of the loss plus the l1 penalty (a Lasso on the |W| x |W| Hessian, solved by the batched
FISTA of `fista`, the intercept eliminated by weighted centering) and is followed by a
backtracking line search. Then one full gradient gives the duality gap of the whole problem. If
it is above the tolerance, W grows to the support plus the worst KKT violators (size
max(16, 2 |support|, |support| + violators), at most doubling, never shrinking) and the
restricted problem is solved again, warm-started, to a gap of a tenth of the full one.

The certificate is the duality gap of the full problem: with theta = y - sigmoid(eta) at the
best intercept for the current a (so that sum(theta) = 0), the dual point s * theta,
s = min(1, M lam / max_k |x~_k^T theta| / omega_k), has dual value 1/M sum_i H(y_i - s theta_i),
H the binary entropy. The returned gap is always this full-problem gap.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from circuitlasso.solve._inputs import Matrix, as_matrix, check_rows
from circuitlasso.solve._sparse import csr_from_parts, csr_rows, csr_transpose, row_ids
from circuitlasso.solve.fista import fista
from circuitlasso.solve.lasso import ConvergenceWarning
from circuitlasso.solve.prepare import column_stats
from circuitlasso.solve.problems import scaled_sparse

WS_START = 16
"""Size of the first working set."""
MAX_ROUNDS = 200
"""Working-set rounds at most (each ends with one full gradient)."""
INNER_FRACTION = 0.1
"""Restricted problems are solved to a gap of max(INNER_FRACTION x full gap, tol / 2)."""
DENSE_MAX_ENTRIES = 2**24
"""Largest restricted design M x |W| held dense (128 MiB in float64); larger ones stay sparse."""
QP_MAX_ITER = 300
"""FISTA iterations allowed for the quadratic model of one Newton step."""
STALL_STEPS = 5
"""A restricted solve stops (not converged) when this many steps did not halve its gap."""


@dataclass(frozen=True)
class LogisticResult:
    """coef: (p,) in the user's units; intercept, gap, objective: 0-d float64 tensors.

    gap is the certified duality gap of the mean-scaled objective on the full problem; converged
    means gap <= tol * (objective of the intercept-only model). n_iter counts the proximal
    Newton steps over all working sets.
    """

    coef: Tensor
    intercept: Tensor
    gap: Tensor
    objective: Tensor
    n_iter: int
    converged: bool
    lam: float


def _transpose(csr: Tensor) -> Tensor:
    """Transpose of a CSR tensor, as CSR with sorted columns (by scipy on the CPU: faster)."""
    if csr.device.type != "cpu":
        return csr_transpose(csr)
    shape = (csr.shape[0], csr.shape[1])
    parts = (csr.values().numpy(), csr.col_indices().numpy(), csr.crow_indices().numpy())
    csc = sp.csr_matrix(parts, shape=shape).tocsc()
    return csr_from_parts(
        torch.from_numpy(csc.indptr.astype(np.int64)),
        torch.from_numpy(csc.indices.astype(np.int64)),
        torch.from_numpy(csc.data),
        (shape[1], shape[0]),
    )


class _Restricted:
    """A float64 design X_W (M, K), dense or CSR, with its products and weighted Gram."""

    def __init__(self, x: Tensor, x_t: Tensor | None = None) -> None:
        self.x = x
        self.x_t = x.t() if x_t is None else x_t

    def times(self, v: Tensor) -> Tensor:
        return (self.x @ v.unsqueeze(1)).squeeze(1)

    def t_times(self, u: Tensor) -> Tensor:
        return (self.x_t @ u.unsqueeze(1)).squeeze(1)

    def weighted_gram(self, w: Tensor) -> Tensor:
        """X_W^T diag(w) X_W (K, K)."""
        if self.x.layout == torch.strided:
            return (self.x_t * w) @ self.x
        values = self.x.values() * w[row_ids(self.x)]
        weighted = csr_from_parts(
            self.x.crow_indices(), self.x.col_indices(), values, (self.x.shape[0], self.x.shape[1])
        )
        return (self.x_t @ weighted).to_dense()


class _Design:
    """Scaled predictors X~ (M, p): full products X~^T u, and column subsets X~[:, W]."""

    def __init__(self, x: Tensor, norms: Tensor) -> None:
        self.sparse = x.layout == torch.sparse_csr
        self.n_obs = x.shape[0]
        if self.sparse:
            shape = (x.shape[0], x.shape[1])
            x = csr_from_parts(x.crow_indices(), x.col_indices(), x.values().double(), shape)
            self.x_t = _transpose(scaled_sparse(x, norms))
        else:
            scale = torch.where(norms > 0, 1 / norms, torch.zeros_like(norms)).to(x.dtype)
            self.x = x * scale
            self.x_t = self.x.t()

    def t_times(self, u: Tensor) -> Tensor:
        """X~^T u (p,) in float64."""
        return (self.x_t @ u.to(self.x_t.dtype).unsqueeze(1)).squeeze(1).double()

    def columns(self, W: Tensor) -> _Restricted:
        """X~[:, W] in float64: dense when M |W| <= DENSE_MAX_ENTRIES (or X is dense), else CSR."""
        M, K = self.n_obs, W.numel()
        if not self.sparse:
            return _Restricted(self.x[:, W].double())
        rows = csr_rows(self.x_t, W)
        values = rows.values().double()
        if M * K <= DENSE_MAX_ENTRIES:
            dense_t = torch.zeros(K, M, dtype=torch.float64, device=values.device)
            dense_t.view(-1)[row_ids(rows) * M + rows.col_indices()] = values
            return _Restricted(dense_t.t(), dense_t)
        rows = csr_from_parts(rows.crow_indices(), rows.col_indices(), values, (K, M))
        return _Restricted(_transpose(rows), rows)


def _labels(y: Tensor) -> Tensor:
    values = torch.unique(y)
    if values.numel() != 2:
        raise ValueError(
            f"y must hold exactly two classes, got {values.numel()}: {values.tolist()[:5]}"
        )
    return (y == values[1]).to(torch.float64)


def _loss(eta: Tensor, y: Tensor) -> Tensor:
    """Mean cross-entropy (float64) of logits eta against labels y in {0, 1}."""
    eta = eta.double()
    return (torch.nn.functional.softplus(eta) - y * eta).mean()


def _entropy(q: Tensor) -> Tensor:
    return -(torch.xlogy(q, q) + torch.xlogy(1 - q, 1 - q))


def _best_intercept(eta0: Tensor, y: Tensor, b: float) -> float:
    """The b minimizing the mean cross-entropy of eta0 + b (Newton's method, steps capped)."""
    target = float(y.mean())
    for _ in range(50):
        p = torch.sigmoid(eta0 + b)
        slope = float((p * (1 - p)).mean())
        step = (float(p.mean()) - target) / max(slope, 1e-12)
        b -= max(-1.0, min(1.0, step))
        if abs(step) < 1e-12:
            break
    return b


@dataclass
class _Point:
    """Coefficients a (K,) on a working set, intercept b, and eta0 = X~_W a (M,), float64."""

    a: Tensor
    b: float
    eta0: Tensor


def _certificate(
    point: _Point,
    labels: Tensor,
    weight: Tensor,
    scores_of: Callable[[Tensor], Tensor],
    fit_intercept: bool,
) -> tuple[float, float, Tensor]:
    """(duality gap, primal objective, KKT scores) at `point`, its intercept first made best.

    weight: (K,) penalties lam * omega_k of the coefficients a; scores_of(theta) gives
    x~_k^T theta / (M lam omega_k) for every feature whose dual constraint is checked (all
    features: the full gap; the working set: the restricted gap).
    """
    if fit_intercept:
        point.b = _best_intercept(point.eta0, labels, point.b)
    eta = point.eta0 + point.b
    theta = labels - torch.sigmoid(eta)
    scores = scores_of(theta).abs()
    top = float(scores.max()) if scores.numel() else 0.0
    s = min(1.0, 1.0 / top) if top > 0 else 1.0
    primal = float(_loss(eta, labels)) + float((weight * point.a.abs()).sum())
    dual = float(_entropy(labels - s * theta).mean())
    return max(primal - dual, 0.0), primal, scores


def logistic_lasso(
    X: Matrix,
    y: Matrix,
    lam: float,
    *,
    fit_intercept: bool = True,
    normalize: bool = True,
    tol: float = 1e-6,
    max_iter: int = 20_000,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    check_every: int = 10,
) -> LogisticResult:
    """Binary l1 logistic regression with mean cross-entropy and an unpenalized intercept.

    X: (M, p) dense or sparse; y: (M,) with two distinct values (the larger is class 1);
    lam > 0. Equals scikit-learn's LogisticRegression(penalty="l1", C=1/(lam*M)) when
    normalize=False (and fit_intercept=False, or its intercept left unpenalized).
    max_iter bounds the proximal Newton steps; check_every is the number of FISTA iterations
    between gap checks on each Newton step's quadratic model. X is rounded to dtype, the dtype
    of coef; dense X stays in it for the full gradients, while sparse X and the restricted
    problems are held in float64 (an index costs more than a value anyway).
    """
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    device = torch.device(device or "cpu")
    x, _ = as_matrix(X, "X", dtype, device)
    target, _ = as_matrix(y, "y", torch.float64, device, allow_1d=True)
    check_rows(x.shape[0], target, "y")
    if target.shape[1] != 1:
        raise ValueError(f"y must be 1-D (one binary target), got shape {tuple(target.shape)}")
    labels = _labels(target.to_dense()[:, 0] if target.layout != torch.strided else target[:, 0])
    M, p = x.shape
    _, norms = column_stats(x, fit_intercept)
    design = _Design(x, norms)
    omega = torch.where(norms > 0, torch.ones_like(norms) if normalize else 1 / norms, torch.inf)
    weight = lam * omega
    usable = norms > 0

    y_bar = float(labels.mean())
    b0 = math.log(y_bar / (1 - y_bar)) if fit_intercept else 0.0
    null_objective = float(_entropy(torch.tensor(y_bar))) if fit_intercept else math.log(2)
    tol_abs = tol * null_objective

    def full_scores(theta: Tensor) -> Tensor:
        return design.t_times(theta) / (M * weight)

    W = torch.zeros(0, dtype=torch.int64, device=device)
    point = _Point(torch.zeros(0, dtype=torch.float64, device=device), b0, torch.zeros_like(labels))
    restricted = design.columns(W)
    n_iter, at_floor, stalled = 0, False, False
    for _ in range(MAX_ROUNDS):
        gap, objective, scores = _certificate(point, labels, weight[W], full_scores, fit_intercept)
        if gap <= tol_abs or n_iter >= max_iter or stalled:
            break
        new_W, point = _grow(W, point, scores, usable)
        same = torch.equal(new_W, W)
        if same and at_floor:
            break  # solved to tol / 2 on this very set: only rounding keeps the full gap above tol
        if not same:
            W, restricted = new_W, design.columns(new_W)
        inner_tol = 0.5 * tol_abs if same else max(INNER_FRACTION * gap, 0.5 * tol_abs)
        at_floor = inner_tol == 0.5 * tol_abs
        steps, stalled = _prox_newton(
            restricted,
            labels,
            point,
            weight[W],
            inner_tol,
            max_iter - n_iter,
            check_every,
            fit_intercept,
        )
        n_iter += steps
    else:  # rounds used up: certify the last point
        gap, objective, _ = _certificate(point, labels, weight[W], full_scores, fit_intercept)
    converged = gap <= tol_abs
    if not converged:
        warnings.warn(
            f"logistic_lasso did not reach tol={tol} within max_iter={max_iter} "
            f"(certified relative gap {gap / null_objective:.2g})",
            ConvergenceWarning,
            stacklevel=2,
        )
    coef = torch.zeros(p, dtype=torch.float64, device=device)
    coef[W] = point.a / norms[W]
    return LogisticResult(
        coef.to(dtype),
        torch.tensor(point.b, dtype=torch.float64),
        torch.tensor(gap, dtype=torch.float64),
        torch.tensor(objective, dtype=torch.float64),
        n_iter,
        converged,
        float(lam),
    )


def _grow(W: Tensor, point: _Point, scores: Tensor, usable: Tensor) -> tuple[Tensor, _Point]:
    """The next working set (sorted) and the point's coefficients on it.

    Keeps the support and adds the usable features with the largest KKT scores; its size is
    max(WS_START, 2 |support|, |support| + violators), at most twice the previous size, never
    smaller than before and at most the number of usable features.
    """
    score = torch.where(usable, scores, -torch.inf)
    outside = usable.clone()
    outside[W] = False
    support = W[point.a != 0]
    violators = int(((score > 1) & outside).sum())
    n_support, previous = support.numel(), W.numel()
    target = max(2 * n_support, n_support + violators, WS_START)
    target = min(target, max(2 * previous, WS_START))
    size = min(max(target, previous), int(usable.sum()))
    score[support] = torch.inf
    new_W = score.topk(size).indices.sort().values
    a = torch.zeros(scores.numel(), dtype=torch.float64, device=scores.device)
    a[W] = point.a
    return new_W, _Point(a[new_W], point.b, point.eta0)


def _prox_newton(
    design: _Restricted,
    labels: Tensor,
    point: _Point,
    weight: Tensor,
    tol: float,
    max_iter: int,
    check_every: int,
    fit_intercept: bool,
) -> tuple[int, bool]:
    """Proximal Newton on the restricted problem until its gap <= tol; updates `point`.

    The quadratic model of the loss at (a, b), with weights w = p(1 - p) / M, is a Lasso in
    Gram form: H = X_c^T diag(w) X_c (X_c centered with the weights w, which eliminates the
    intercept), q = H a - (g_a - g_b m), and a working response z with A^T z = q for
    A = diag(sqrt(w)) X_c (H = A^T A), which gives the model its own duality gap. The step to
    its minimizer is then shortened until the objective decreases by at least 1 % of the
    model's predicted decrease. Returns (steps, stalled).
    """
    M = labels.numel()

    def scores_of(theta: Tensor) -> Tensor:
        return design.t_times(theta) / (M * weight)

    gaps: list[float] = []
    for step in range(max_iter):
        gap, primal, _ = _certificate(point, labels, weight, scores_of, fit_intercept)
        if gap <= tol:
            return step, False
        gaps.append(gap)
        if len(gaps) > STALL_STEPS and gap > 0.5 * gaps[-1 - STALL_STEPS]:
            return step, True
        prob = torch.sigmoid(point.eta0 + point.b)
        r = prob - labels
        grad = design.t_times(r) / M
        w = (prob * (1 - prob)).clamp_min(1e-10) / M
        root = w.sqrt()
        H = design.weighted_gram(w)
        z = root * point.eta0 - r / (M * root)
        g, g_b, S, m = grad, 0.0, 1.0, torch.zeros_like(grad)
        if fit_intercept:
            g_b, S = float(r.mean()), float(w.sum())
            m = design.t_times(w) / S
            H = H - S * torch.outer(m, m)
            g = grad - g_b * m
            z = z - root * float(root @ z) / S
        u, _, _ = fista(
            H.unsqueeze(0),
            (H @ point.a - g).unsqueeze(0),
            (z @ z).reshape(1),
            weight.unsqueeze(0),
            point.a.unsqueeze(0),
            torch.tensor([0.25 * gap], dtype=torch.float64, device=w.device),
            max_iter=QP_MAX_ITER,
            check_every=check_every,
        )
        d = u[0] - point.a
        d_b = -g_b / S - float(m @ d)
        decrease = (
            float(grad @ d) + g_b * d_b + float((weight * (u[0].abs() - point.a.abs())).sum())
        )
        if not decrease < 0:
            return step, True
        Xd, t = design.times(d), 1.0
        for _ in range(40):
            a_t, eta0_t, b_t = point.a + t * d, point.eta0 + t * Xd, point.b + t * d_b
            value = float(_loss(eta0_t + b_t, labels)) + float((weight * a_t.abs()).sum())
            if value <= primal + 0.01 * t * decrease:
                break
            t /= 2
        else:
            return step, True
        point.a, point.eta0, point.b = a_t, eta0_t, b_t
    return max_iter, False
