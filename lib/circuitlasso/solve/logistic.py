"""l1-penalized logistic regression: binary (paper Eq. 5 with a class target) and multinomial.

    binary:       min_{a, b}  1/M sum_i [log(1 + exp(eta_i)) - y_i eta_i] + lam sum_k omega_k |a_k|,
                  eta = X a + b,  y in {0, 1};
    multinomial:  min_{A, b}  1/M sum_i [log sum_c exp(eta_ic) - eta_{i, y_i}]
                              + lam sum_{k, c} omega_k |A_kc|,   eta = X A + 1 b^T,  A (p, K),

y in {0, ..., K-1}. The multinomial penalty is on every entry of A (scikit-learn's multinomial
penalty="l1"); with K = 2 it is the binary problem at the same lam (a = A[:, 1] - A[:, 0]).
The loss sees only differences between a row's entries, so the penalty puts each row's median
at 0: for odd K the solution is as unique as the binary one, for even K a row may shift within
its middle interval at no cost.

Columns are scaled to unit (centered) norm as for `lasso`. The solver uses working sets, as
`lasso` does. Starting from the features with the largest KKT scores
max_c |x~_k^T theta_c| / (M lam omega_k) at the intercept-only model, it solves the problem
restricted to a set W of features (all K coefficients of each), on X~[:, W] (dense unless M |W|
is large), by proximal Newton sweeps. A sweep takes one step per column c of A (one for the
binary loss), each from the probabilities the previous step left (Gauss-Seidel over the classes,
as glmnet's multinomial fit): the step minimizes the quadratic model of the loss in
(A[:, c], b_c), whose Hessian X~_W^T diag(p_c (1 - p_c)) X~_W / M is exact for that block, plus
the l1 penalty (a Lasso on the |W| x |W| Hessian, solved by the FISTA of `fista`, the intercept
eliminated by weighted centering), and is followed by a backtracking line search. For the binary
loss this is proximal Newton; for K classes the sweeps converge linearly: with nearly separable
classes at small lam they can need many sweeps, and a stalled solve stops with a
ConvergenceWarning that reports its certified gap. Then one full gradient gives the duality gap
of the whole problem. If it is above the tolerance, W grows to
the support plus the worst KKT violators (size max(16, 2 |support|, |support| + violators), at
most doubling, never shrinking) and the restricted problem is solved again, warm-started, to a
gap of a tenth of the full one.

The certificate is the duality gap of the full problem, whatever the model: with
Theta = Y - P (M, K) (Y the one-hot labels, P the class probabilities; for the binary loss the
one column y - sigmoid(eta)) at the best intercept for the current A (so that every column of
Theta sums to 0), the dual point s Theta, s = min(1, M lam / max_{k, c} |x~_k^T theta_c| /
omega_k), has dual value 1/M sum_i H(Y_i - s Theta_i), H the entropy (the binary entropy for
the binary loss). The returned gap is always this full-problem gap.
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
"""A restricted solve stops (not converged) when this many sweeps per column of A (binary: this
many Newton steps; K classes: K times as many sweeps) did not halve its gap."""


@dataclass(frozen=True)
class LogisticResult:
    """coef: (p,) (binary) or (p, K) (multinomial) in the user's units; intercept: 0-d (binary)
    or (K,) summing to 0 (multinomial); classes: (K,) the label values, in the order of coef's
    columns (binary: the second is class 1); gap, objective: 0-d float64 tensors.

    gap is the certified duality gap of the mean-scaled objective on the full problem; converged
    means gap <= tol * (objective of the intercept-only model). n_iter counts the proximal
    Newton steps over all working sets.
    """

    coef: Tensor
    intercept: Tensor
    classes: Tensor
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
        """X~^T u (p, B) in float64 of u (M, B)."""
        return (self.x_t @ u.to(self.x_t.dtype)).double()

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


class _Binary:
    """Binary cross-entropy of logits eta (M, 1) against labels y (M, 1) in {0, 1}."""

    name = "logistic_lasso"

    def __init__(self, y: Tensor) -> None:
        self.classes = torch.unique(y)
        if self.classes.numel() != 2:
            raise ValueError(
                f"y must hold exactly two classes, got {self.classes.numel()}: "
                f"{self.classes.tolist()[:5]}"
            )
        self.labels = (y == self.classes[1]).to(torch.float64).unsqueeze(1)

    def value(self, eta: Tensor) -> float:
        """Mean loss."""
        return float((torch.nn.functional.softplus(eta) - self.labels * eta).mean())

    def probabilities(self, eta: Tensor) -> Tensor:
        return torch.sigmoid(eta)

    def dual(self, q: Tensor) -> float:
        """Mean binary entropy of q (M, 1)."""
        return float((-(torch.xlogy(q, q) + torch.xlogy(1 - q, 1 - q))).mean())

    def null(self, fit_intercept: bool) -> tuple[Tensor, float]:
        """Intercept and objective of the model with A = 0 (its best intercept, or 0)."""
        y_bar = float(self.labels.mean())
        if not fit_intercept:
            return torch.zeros(1, dtype=torch.float64), math.log(2)
        entropy = -(y_bar * math.log(y_bar) + (1 - y_bar) * math.log(1 - y_bar))
        return torch.tensor([math.log(y_bar / (1 - y_bar))], dtype=torch.float64), entropy

    def best_intercept(self, eta0: Tensor, b: Tensor) -> Tensor:
        """The b minimizing the mean loss of eta0 + b (Newton's method, steps capped at 1)."""
        target, eta0, value = float(self.labels.mean()), eta0[:, 0], float(b[0])
        for _ in range(50):
            p = torch.sigmoid(eta0 + value)
            slope = float((p * (1 - p)).mean())
            step = (float(p.mean()) - target) / max(slope, 1e-12)
            value -= max(-1.0, min(1.0, step))
            if abs(step) < 1e-12:
                break
        return torch.tensor([value], dtype=torch.float64, device=b.device)


class _Multinomial:
    """Softmax cross-entropy of logits eta (M, K) against one-hot labels Y (M, K)."""

    name = "multinomial_lasso"

    def __init__(self, y: Tensor) -> None:
        self.classes, codes = torch.unique(y, return_inverse=True)
        K = self.classes.numel()
        if K < 2:
            raise ValueError(f"y must hold at least two classes, got {self.classes.tolist()}")
        self.labels = torch.nn.functional.one_hot(codes, K).to(torch.float64)

    def value(self, eta: Tensor) -> float:
        return float((torch.logsumexp(eta, 1) - (self.labels * eta).sum(1)).mean())

    def probabilities(self, eta: Tensor) -> Tensor:
        return torch.softmax(eta, 1)

    def dual(self, q: Tensor) -> float:
        """Mean entropy of the rows of q (M, K)."""
        return float(-torch.xlogy(q, q).sum(1).mean())

    def null(self, fit_intercept: bool) -> tuple[Tensor, float]:
        K = self.labels.shape[1]
        if not fit_intercept:
            return torch.zeros(K, dtype=torch.float64), math.log(K)
        frequencies = self.labels.mean(0).cpu()
        log_f = frequencies.log()
        return log_f - log_f.mean(), float(-(frequencies * log_f).sum())

    def best_intercept(self, eta0: Tensor, b: Tensor) -> Tensor:
        """Newton's method on b (K,) keeping sum(b) fixed: (H + 11^T / K) step = gradient, H the
        mean of diag(p_i) - p_i p_i^T (singular along 1), step capped at 1 in max norm."""
        target, M = self.labels.mean(0), eta0.shape[0]
        shift = torch.full((b.numel(), b.numel()), 1 / b.numel(), dtype=torch.float64)
        shift = shift.to(b.device)
        for _ in range(50):
            p = torch.softmax(eta0 + b, 1)
            mean = p.mean(0)
            hessian = torch.diag(mean) - p.t() @ p / M + shift
            step = torch.linalg.solve(hessian, mean - target)
            size = float(step.abs().max())
            b = b - step / max(1.0, size)
            if size < 1e-12:
                break
        return b


_Loss = _Binary | _Multinomial


def _setup(
    X: Matrix,
    y: Matrix,
    make_loss: Callable[[Tensor], _Loss],
    fit_intercept: bool,
    normalize: bool,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[_Design, _Loss, Tensor, Tensor]:
    """The scaled design, the loss with its labels, the column norms (p,) and the penalty
    factors omega (p,) (inf for columns of zero norm, which never enter)."""
    x, _ = as_matrix(X, "X", dtype, device)
    target, _ = as_matrix(y, "y", torch.float64, device, allow_1d=True)
    check_rows(x.shape[0], target, "y")
    if target.shape[1] != 1:
        raise ValueError(f"y must be 1-D (one label per row), got shape {tuple(target.shape)}")
    loss = make_loss(target.to_dense()[:, 0] if target.layout != torch.strided else target[:, 0])
    _, norms = column_stats(x, fit_intercept)
    omega = torch.where(norms > 0, torch.ones_like(norms) if normalize else 1 / norms, torch.inf)
    return _Design(x, norms), loss, norms, omega


def logistic_lam_max(
    X: Matrix,
    y: Matrix,
    *,
    fit_intercept: bool = True,
    normalize: bool = True,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> float:
    """Smallest lam for which A = 0 solves the binary (two classes in y) or multinomial (more)
    problem: max_{k, c} |x~_k^T theta_c| / (M omega_k) at the intercept-only model (theta = the
    one-hot labels minus the class frequencies; minus 1/K without intercept). For two classes
    the binary and the multinomial problem have the same lam_max."""
    device = torch.device(device or "cpu")
    design, loss, _, omega = _setup(X, y, _Multinomial, fit_intercept, normalize, dtype, device)
    b0, _ = loss.null(fit_intercept)
    theta = loss.labels - loss.probabilities(torch.zeros_like(loss.labels) + b0.to(device))
    return float((design.t_times(theta).abs().amax(1) / (design.n_obs * omega)).max())


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
    return _solve(X, y, _Binary, lam, fit_intercept, normalize, tol, max_iter, dtype, device,
                  check_every)  # fmt: skip


def multinomial_lasso(
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
    """Multinomial (softmax) l1 logistic regression with mean cross-entropy and unpenalized
    intercepts: coef (p, K), one column per class of y.

    y: (M,) with K >= 2 distinct numbers (columns in sorted order). Equals scikit-learn's
    LogisticRegression(penalty="l1", C=1/(lam*M), solver="saga") for K >= 3 when normalize=False.
    The sweeps converge linearly, so rounding keeps the certified gap above about 1e-9 (relative):
    tol below that ends in a ConvergenceWarning. Other arguments as in `logistic_lasso`.
    """
    return _solve(X, y, _Multinomial, lam, fit_intercept, normalize, tol, max_iter, dtype, device,
                  check_every)  # fmt: skip


@dataclass
class _Point:
    """Coefficients a (K, B) on a working set of K features, intercepts b (B,) and
    eta0 = X~_W a (M, B), float64 (B = 1 for the binary loss, the number of classes else)."""

    a: Tensor
    b: Tensor
    eta0: Tensor


def _certificate(
    point: _Point,
    loss: _Loss,
    weight: Tensor,
    scores_of: Callable[[Tensor], Tensor],
    fit_intercept: bool,
) -> tuple[float, float, Tensor]:
    """(duality gap, primal objective, per-feature KKT scores) at `point`, its intercept first
    made best.

    weight: (K,) penalties lam * omega_k of the rows of a; scores_of(theta) gives
    x~_k^T theta_c / (M lam omega_k) for every feature whose dual constraint is checked (all
    features: the full gap; the working set: the restricted gap) and every class.
    """
    if fit_intercept:
        point.b = loss.best_intercept(point.eta0, point.b)
    eta = point.eta0 + point.b
    theta = loss.labels - loss.probabilities(eta)
    scores = scores_of(theta).abs().amax(1)
    top = float(scores.max()) if scores.numel() else 0.0
    s = min(1.0, 1.0 / top) if top > 0 else 1.0
    primal = loss.value(eta) + float((weight.unsqueeze(1) * point.a.abs()).sum())
    dual = loss.dual(loss.labels - s * theta)
    return max(primal - dual, 0.0), primal, scores


def _solve(
    X: Matrix,
    y: Matrix,
    make_loss: Callable[[Tensor], _Loss],
    lam: float,
    fit_intercept: bool,
    normalize: bool,
    tol: float,
    max_iter: int,
    dtype: torch.dtype,
    device: torch.device | str | None,
    check_every: int,
) -> LogisticResult:
    """The working-set loop of the module docstring, for either loss."""
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    device = torch.device(device or "cpu")
    design, loss, norms, omega = _setup(X, y, make_loss, fit_intercept, normalize, dtype, device)
    M, p = design.n_obs, norms.numel()
    B = loss.labels.shape[1]
    weight = lam * omega
    usable = norms > 0
    b0, null_objective = loss.null(fit_intercept)
    tol_abs = tol * null_objective

    def full_scores(theta: Tensor) -> Tensor:
        return design.t_times(theta) / (M * weight.unsqueeze(1))

    W = torch.zeros(0, dtype=torch.int64, device=device)
    point = _Point(
        torch.zeros(0, B, dtype=torch.float64, device=device),
        b0.to(device),
        torch.zeros_like(loss.labels),
    )
    restricted = design.columns(W)
    n_iter, at_floor, stalled = 0, False, False
    for _ in range(MAX_ROUNDS):
        gap, objective, scores = _certificate(point, loss, weight[W], full_scores, fit_intercept)
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
            loss,
            point,
            weight[W],
            inner_tol,
            max_iter - n_iter,
            check_every,
            fit_intercept,
        )
        n_iter += steps
    else:  # rounds used up: certify the last point
        gap, objective, _ = _certificate(point, loss, weight[W], full_scores, fit_intercept)
    converged = gap <= tol_abs
    if not converged:
        warnings.warn(
            f"{loss.name} did not reach tol={tol} within max_iter={max_iter} "
            f"(certified relative gap {gap / null_objective:.2g})",
            ConvergenceWarning,
            stacklevel=3,
        )
    coef = torch.zeros(p, B, dtype=torch.float64, device=device)
    coef[W] = point.a / norms[W].unsqueeze(1)
    intercept = point.b if B == 1 else point.b - point.b.mean()
    return LogisticResult(
        (coef[:, 0] if isinstance(loss, _Binary) else coef).to(dtype),
        (intercept[0] if isinstance(loss, _Binary) else intercept).cpu(),
        loss.classes.cpu(),
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
    support = W[(point.a != 0).any(1)]
    violators = int(((score > 1) & outside).sum())
    n_support, previous = support.numel(), W.numel()
    target = max(2 * n_support, n_support + violators, WS_START)
    target = min(target, max(2 * previous, WS_START))
    size = min(max(target, previous), int(usable.sum()))
    score[support] = torch.inf
    new_W = score.topk(size).indices.sort().values
    a = torch.zeros(scores.numel(), point.a.shape[1], dtype=torch.float64, device=scores.device)
    a[W] = point.a
    return new_W, _Point(a[new_W], point.b, point.eta0)


def _prox_newton(
    design: _Restricted,
    loss: _Loss,
    point: _Point,
    weight: Tensor,
    tol: float,
    max_iter: int,
    check_every: int,
    fit_intercept: bool,
) -> tuple[int, bool]:
    """Proximal Newton sweeps on the restricted problem until its gap <= tol; updates `point`.

    A sweep takes one step per column c of a (one for the binary loss), each from the
    probabilities the previous one left (as glmnet's multinomial fit does). Each step minimizes
    the quadratic model of the loss in (a_c, b_c), whose Hessian is exact for that block: with
    weights w = p_c (1 - p_c) / M it is a Lasso in Gram form,
    H = X_c^T diag(w) X_c (X_c centered with the weights w, which eliminates the intercept),
    q = H a_c - (g_a - g_b m), with a working response z with A^T z = q for
    A = diag(sqrt(w)) X_c (H = A^T A), which gives the model its own duality gap (solved to a
    quarter of the current gap over the number of columns). The step to its minimizer is then
    shortened until the objective decreases by at least 1 % of the model's predicted decrease.
    Returns (sweeps, stalled).
    """
    M, B = loss.labels.shape

    def scores_of(theta: Tensor) -> Tensor:
        return design.t_times(theta) / (M * weight.unsqueeze(1))

    gaps: list[float] = []
    for sweep in range(max_iter):
        gap, primal, _ = _certificate(point, loss, weight, scores_of, fit_intercept)
        if gap <= tol:
            return sweep, False
        gaps.append(gap)
        if len(gaps) > STALL_STEPS * B and gap > 0.5 * gaps[-1 - STALL_STEPS * B]:
            return sweep, True
        for c in range(B):
            if not _column_step(design, loss, point, weight, c, 0.25 * gap / B, check_every,
                                fit_intercept):  # fmt: skip
                return sweep, True
    return max_iter, False


def _column_step(
    design: _Restricted,
    loss: _Loss,
    point: _Point,
    weight: Tensor,
    c: int,
    tol: float,
    check_every: int,
    fit_intercept: bool,
) -> bool:
    """One proximal Newton step in column c of a and b (see `_prox_newton`); False when it
    cannot decrease the objective."""
    M = loss.labels.shape[0]
    eta = point.eta0 + point.b
    prob = loss.probabilities(eta)[:, c]
    r = prob - loss.labels[:, c]
    a, eta0 = point.a[:, c], point.eta0[:, c]
    grad = design.t_times(r.unsqueeze(1))[:, 0] / M
    w = (prob * (1 - prob)).clamp_min(1e-10) / M
    root = w.sqrt()
    H = design.weighted_gram(w)
    z = root * eta0 - r / (M * root)
    g, g_b, S, m = grad, 0.0, 1.0, torch.zeros_like(grad)
    if fit_intercept:
        g_b, S = float(r.mean()), float(w.sum())
        m = design.t_times(w.unsqueeze(1))[:, 0] / S
        H = H - S * torch.outer(m, m)
        g = grad - g_b * m
        z = z - root * float(root @ z) / S
    u, _, _ = fista(
        H.unsqueeze(0),
        (H @ a - g).unsqueeze(0),
        (z @ z).reshape(1),
        weight.unsqueeze(0),
        a.unsqueeze(0),
        torch.tensor([tol], dtype=torch.float64, device=w.device),
        max_iter=QP_MAX_ITER,
        check_every=check_every,
    )
    d = u[0] - a
    d_b = -g_b / S - float(m @ d)
    decrease = float(grad @ d) + g_b * d_b + float((weight * (u[0].abs() - a.abs())).sum())
    if not decrease < 0:
        return False
    before = loss.value(eta) + float((weight.unsqueeze(1) * point.a.abs()).sum())
    Xd, t = design.times(d.unsqueeze(1))[:, 0], 1.0
    column = torch.zeros(point.b.numel(), dtype=torch.float64, device=w.device)
    column[c] = 1.0
    for _ in range(40):
        a_t, eta0_t, b_t = point.a.clone(), point.eta0.clone(), point.b + t * d_b * column
        a_t[:, c] = a + t * d
        eta0_t[:, c] = eta0 + t * Xd
        value = loss.value(eta0_t + b_t) + float((weight.unsqueeze(1) * a_t.abs()).sum())
        if value <= before + 0.01 * t * decrease:
            break
        t /= 2
    else:
        return False
    point.a, point.eta0, point.b = a_t, eta0_t, b_t
    return True
