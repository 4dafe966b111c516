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

The certificate is the duality gap of the full problem at the point returned: the coefficients
as returned (rounded to dtype), with the intercept that is best for them (Newton's method on
the intercept alone), and eta = X~ a + b recomputed from them: that is the primal value. The
dual point comes from the unrounded iterate (any dual feasible point bounds the optimum from
below; rounding to float32 moves the objective only to second order, a dual point built from
the rounded coefficients to first). With P (M, K) the class probabilities there (binary: K = 2,
[sigmoid(-eta), sigmoid(eta)]), at its own best intercept, and Y the one-hot labels, the dual
point is Theta = s (Y - P'):
  - P' = (1 - t) P + 1 (f - (1 - t) mean(P))^T (with an intercept; P' = P without) mixes P with
    the constant row that makes every column of Y - P' sum to exactly 0 (the dual constraint of
    the unpenalized intercept), f the class frequencies, t in [0, 1) the smallest mixing that
    keeps that row >= 0 (t = 0 when the intercept is exactly best, tiny after Newton's method);
  - s = min(1, M lam / max_{k, c} |x~_k^T (Y - P')_c| / omega_k) scales it into the box of the
    penalty (binary: only the class-1 column is constrained, the other is its negative);
  - every row of Q = Y - Theta = (1 - s) Y + s P' is a probability vector (in the domain of the
    conjugate of the log-sum-exp), and the dual value is 1/M sum_i H(Q_i), H the entropy,
    evaluated without cancellation (off-label entries s P', the label's 1 minus their sum).
The primal loss is evaluated without cancellation as well (log1p of the non-maximal terms).
By weak duality the gap bounds the suboptimality of the returned point, up to float64 rounding
of these sums. The products X~^T Theta of the working-set loop run in the dtype of dense X;
the gap that decides convergence and the one returned are computed with float64 products.
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
from circuitlasso.solve._sparse import (
    csr_from_parts,
    csr_rows,
    csr_transpose,
    row_ids,
    scale_columns,
)
from circuitlasso.solve.fista import fista
from circuitlasso.solve.lasso import ConvergenceWarning
from circuitlasso.solve.prepare import column_scale, column_stats

WS_START = 16
"""Size of the first working set."""
MAX_ROUNDS = 200
"""Working-set rounds at most (each ends with one full gradient)."""
INNER_FRACTION = 0.1
"""Restricted problems are solved to a gap of max(INNER_FRACTION x full gap, tol / 2)."""
DENSE_MAX_ENTRIES = 2**24
"""Largest restricted design M x |W| held dense (128 MiB in float64); larger ones stay sparse."""
EXACT_CHUNK_ENTRIES = 2**22
"""Entries of dense float32 X converted to float64 at a time for the exact products (32 MiB)."""
QP_MAX_ITER = 300
"""FISTA iterations allowed for the quadratic model of one Newton step."""
STALL_STEPS = 5
STALL_FACTOR = 0.9
"""A restricted solve stops (not converged) when STALL_STEPS sweeps per column of A (binary:
this many Newton steps; K classes: K times as many sweeps) did not lower its smallest gap so far
by the factor STALL_FACTOR (rounding keeps it from going lower). Slow but steady linear
convergence (nearly separable classes) goes on, up to max_iter."""
SCALE_RANGE = {torch.float64: (1e-250, 1e250), torch.float32: (1e-30, 1e30)}
"""Range, per dtype, for the largest |entry| of a column of X with spread: products with dual
points (entries in [-1, 1]) then neither overflow nor lose digits to subnormals, and the
coefficients in the user's units (the scaled ones divided by the column norm) fit the dtype."""
INTERCEPT_NEWTON_STEPS = 100
"""Newton steps at most for the best intercept of given coefficients."""


@dataclass(frozen=True)
class LogisticResult:
    """coef: (p,) (binary) or (p, K) (multinomial) in the user's units; intercept: 0-d (binary)
    or (K,) summing to 0 (multinomial); classes: (K,) the label values, in the order of coef's
    columns (binary: the second is class 1); gap, objective: 0-d float64 tensors.

    gap is the certified duality gap of the mean-scaled objective on the full problem at the
    returned (coef, intercept) (coef as returned, rounded to dtype; X rounded to dtype defines
    the problem); objective is that point's objective; converged means
    gap <= tol * (objective of the intercept-only model). n_iter counts the proximal Newton
    steps over all working sets.
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
            self.x_t = _transpose(scale_columns(x, self.inverse))
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

    def columns(self, W: Tensor) -> _Restricted:
        """X~[:, W] in float64: dense when M |W| <= DENSE_MAX_ENTRIES (or X is dense), else CSR."""
        M, K = self.n_obs, W.numel()
        if not self.sparse:
            return _Restricted(self.x[:, W].double() * self.inverse[W])
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
        self.onehot = torch.cat([1 - self.labels, self.labels], 1)

    def value(self, eta: Tensor) -> float:
        """Mean loss, log(1 + exp(-|eta|)) + max(0, +-eta) (no cancellation, no threshold)."""
        signed = torch.where(self.labels > 0, -eta, eta)
        return float((torch.log1p(torch.exp(-eta.abs())) + signed.clamp_min(0)).mean())

    def probabilities(self, eta: Tensor) -> Tensor:
        return torch.sigmoid(eta)

    def class_probabilities(self, eta: Tensor) -> Tensor:
        """(M, 2) probabilities of class 0 and class 1, each to full relative precision."""
        return torch.cat([torch.sigmoid(-eta), torch.sigmoid(eta)], 1)

    def constrained(self, theta: Tensor) -> Tensor:
        """The columns of Y - P (M, 2) that the dual box constrains: class 1's."""
        return theta[:, 1:]

    def center(self, b: Tensor) -> Tensor:
        return b

    def null(self, fit_intercept: bool) -> tuple[Tensor, float]:
        """Intercept and objective of the model with A = 0 (its best intercept, or 0)."""
        y_bar = float(self.labels.mean())
        if not fit_intercept:
            return torch.zeros(1, dtype=torch.float64), math.log(2)
        entropy = -(y_bar * math.log(y_bar) + (1 - y_bar) * math.log(1 - y_bar))
        return torch.tensor([math.log(y_bar / (1 - y_bar))], dtype=torch.float64), entropy

    def intercept_model(self, eta0: Tensor, b: Tensor) -> tuple[float, Tensor, Tensor]:
        """Mean loss of eta0 + b, its gradient (1,) and Hessian (1, 1) in b."""
        eta = eta0 + b
        p = torch.sigmoid(eta)
        gradient = (p - self.labels).mean(0)
        return self.value(eta), gradient, (p * (1 - p)).mean().reshape(1, 1)


class _Multinomial:
    """Softmax cross-entropy of logits eta (M, K) against one-hot labels Y (M, K)."""

    name = "multinomial_lasso"

    def __init__(self, y: Tensor) -> None:
        self.classes, codes = torch.unique(y, return_inverse=True)
        K = self.classes.numel()
        if K < 2:
            raise ValueError(f"y must hold at least two classes, got {self.classes.tolist()}")
        self.labels = torch.nn.functional.one_hot(codes, K).to(torch.float64)
        self.onehot = self.labels
        self.codes = codes.unsqueeze(1)

    def value(self, eta: Tensor) -> float:
        """Mean loss, (max_c eta_c - eta_y) + log1p(sum over the non-maximal c of
        exp(eta_c - max)) (no cancellation when the label's logit is the largest)."""
        top, where = eta.max(1, keepdim=True)
        terms = torch.exp(eta - top).scatter(1, where, 0.0)
        own = eta.gather(1, self.codes)
        return float((torch.log1p(terms.sum(1, keepdim=True)) + (top - own)).mean())

    def probabilities(self, eta: Tensor) -> Tensor:
        return torch.softmax(eta, 1)

    def class_probabilities(self, eta: Tensor) -> Tensor:
        return torch.softmax(eta, 1)

    def constrained(self, theta: Tensor) -> Tensor:
        return theta

    def center(self, b: Tensor) -> Tensor:
        return b - b.mean()

    def null(self, fit_intercept: bool) -> tuple[Tensor, float]:
        K = self.labels.shape[1]
        if not fit_intercept:
            return torch.zeros(K, dtype=torch.float64), math.log(K)
        frequencies = self.labels.mean(0).cpu()
        log_f = frequencies.log()
        return log_f - log_f.mean(), float(-(frequencies * log_f).sum())

    def intercept_model(self, eta0: Tensor, b: Tensor) -> tuple[float, Tensor, Tensor]:
        """Mean loss of eta0 + 1 b^T, its gradient (K,) and Hessian (K, K) in b plus 11^T / K
        (the loss is flat along 1, where b is kept centered)."""
        eta = eta0 + b
        p = torch.softmax(eta, 1)
        mean = p.mean(0)
        K = b.numel()
        hessian = torch.diag(mean) - p.t() @ p / p.shape[0] + 1 / K
        return self.value(eta), mean - self.labels.mean(0), hessian


_Loss = _Binary | _Multinomial


def _best_intercept(loss: _Loss, eta0: Tensor, b: Tensor) -> Tensor:
    """The b minimizing the mean loss of eta0 + b (a new tensor; multinomial: centered).

    Newton's method with backtracking: a step is taken where it lowers the loss, or, once the
    loss no longer resolves the decrease, where it leaves it within rounding and shrinks the
    gradient (so the gradient, the residual of the intercept's equality, goes to rounding
    level). A tiny ridge keeps saturated (all-probabilities-0-or-1) Hessians solvable.
    """
    b = loss.center(b)
    value, gradient, hessian = loss.intercept_model(eta0, b)
    ridge = 1e-12 * torch.eye(b.numel(), dtype=torch.float64, device=b.device)
    for _ in range(INTERCEPT_NEWTON_STEPS):
        size = float(gradient.abs().max())
        if size <= 1e-15:  # rounding level: the mixing of `_balanced` absorbs the rest
            break
        step, info = torch.linalg.solve_ex(hessian + ridge, gradient)
        if int(info) != 0 or not bool(torch.isfinite(step).all()):
            step = gradient
        if float(step.abs().max()) <= 1e-16 * (1 + float(b.abs().max())):
            break
        t, taken = 1.0, False
        for _ in range(60):
            trial = loss.center(b - t * step)
            t_value, t_gradient, t_hessian = loss.intercept_model(eta0, trial)
            slack = 4e-16 * abs(value)
            if t_value < value or (
                t_value <= value + slack and float(t_gradient.abs().max()) < size
            ):
                taken = True
                break
            t /= 2
        if not taken:
            break
        moved = float((trial - b).abs().max())
        b, value, gradient, hessian = trial, t_value, t_gradient, t_hessian
        if moved <= 1e-16 * (1 + float(b.abs().max())):
            break
    return b


def _balanced(P: Tensor, onehot: Tensor) -> Tensor:
    """P' = (1 - t) P + 1 c^T with c >= 0, sum(c) = t, mean(P') = the class frequencies and
    t in [0, 1) the smallest such mixing (0 when mean(P) already matches them)."""
    frequencies, mean = onehot.mean(0), P.mean(0)
    excess = torch.where(mean > frequencies, (mean - frequencies) / mean, torch.zeros_like(mean))
    t = float(excess.max())
    if not t > 0:
        return P
    return (1 - t) * P + (frequencies - (1 - t) * mean).clamp_min(0.0)


def _dual_value(P: Tensor, onehot: Tensor, s: float) -> float:
    """Mean entropy of the rows of Q = (1 - s) Y + s P (Y the one-hot labels, rows of P
    probability vectors): off-label entries s P, the label's 1 - m with m their sum, its term
    (1 - m) log(1 - m) through log1p for small m."""
    off = torch.where(onehot > 0, torch.zeros_like(P), s * P)
    m = off.sum(1).clamp(0.0, 1.0)
    own = torch.where(m < 0.5, (1 - m) * torch.log1p(-m), torch.xlogy(1 - m, 1 - m))
    return float(-(torch.xlogy(off, off).sum(1) + own).mean())


@dataclass(frozen=True)
class _Certificate:
    """Duality gap and primal objective at (a, b) (b the intercept the certificate used: the
    best one for a with an intercept), and the per-feature KKT scores (K,)."""

    gap: float
    primal: float
    scores: Tensor
    b: Tensor


def _certificate(
    a: Tensor,
    eta0: Tensor,
    b: Tensor,
    loss: _Loss,
    weight: Tensor,
    scores_of: Callable[[Tensor], Tensor],
    fit_intercept: bool,
    dual_eta0: Tensor | None = None,
) -> _Certificate:
    """The duality gap of the module docstring at coefficients a (K, B) with eta0 = X~_W a
    (M, B) and intercept b (B,), which is first replaced by the best one for a. Modifies none of
    its arguments.

    weight: (K,) penalties lam * omega_k of the rows of a; scores_of(theta) gives
    x~_k^T theta_c / (M lam omega_k) for every feature whose dual constraint is checked (all
    features: the full gap; the working set: the restricted gap) and every constrained class.
    dual_eta0: X~ a' (M, B) of other coefficients a' to build the dual point from (any dual
    feasible point bounds the optimum from below: the unrounded iterate gives a tighter one
    than a rounded to float32, whose distance to the optimum enters the gap to first order and
    its objective only to second); default a itself. The scores are those of the dual point.
    """
    b = _best_intercept(loss, eta0, b) if fit_intercept else loss.center(b)
    eta = eta0 + b
    if dual_eta0 is None:
        dual_eta = eta
    elif fit_intercept:
        dual_eta = dual_eta0 + _best_intercept(loss, dual_eta0, b)
    else:
        dual_eta = dual_eta0 + b
    P = loss.class_probabilities(dual_eta)
    if fit_intercept:
        P = _balanced(P, loss.onehot)
    scores = scores_of(loss.constrained(loss.onehot - P)).abs().amax(1)
    top = float(scores.max()) if scores.numel() else 0.0
    if not math.isfinite(top):
        s = 0.0  # no usable scale: Q = Y, dual value 0
    else:
        s = min(1.0, 1.0 / top) if top > 0 else 1.0
    primal = loss.value(eta) + float((weight.unsqueeze(1) * a.abs()).sum())
    dual = _dual_value(P, loss.onehot, s)
    return _Certificate(max(primal - dual, 0.0), primal, scores, b)


def _column_norms(x: Tensor, fit_intercept: bool) -> Tensor:
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
            f"{high:g}; rescale X" + (" or pass dtype=torch.float64" if low > 1e-250 else "")
        )
    return norms


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
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    x, _ = as_matrix(X, "X", dtype, device)
    target, _ = as_matrix(y, "y", torch.float64, device, allow_1d=True)
    check_rows(x.shape[0], target, "y")
    if target.shape[1] != 1:
        raise ValueError(f"y must be 1-D (one label per row), got shape {tuple(target.shape)}")
    loss = make_loss(target.to_dense()[:, 0] if target.layout != torch.strided else target[:, 0])
    norms = _column_norms(x, fit_intercept)
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
    the binary and the multinomial problem have the same lam_max. 0.0 when no column of X has
    spread (every lam > 0 gives the intercept-only model)."""
    device = torch.device(device or "cpu")
    design, loss, _, omega = _setup(X, y, _Multinomial, fit_intercept, normalize, dtype, device)
    b0, _ = loss.null(fit_intercept)
    theta = loss.labels - loss.probabilities(torch.zeros_like(loss.labels) + b0.to(device))
    scores = design.exact_t_times(theta).abs().amax(1) / (design.n_obs * omega)
    return float(scores.max())


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
    between gap checks on each Newton step's quadratic model. X is rounded to dtype (float32 or
    float64), the dtype of coef; dense X stays in it for the products of the working-set loop,
    while sparse X, the restricted problems and the certificate that decides convergence use
    float64. Columns of X without spread (constant with an intercept, all zero without) get
    coefficient 0; the scale of a column with spread must lie within SCALE_RANGE[dtype]
    (ValueError otherwise).
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
    if not (lam > 0 and math.isfinite(lam)):
        raise ValueError(f"lam must be > 0 and finite, got {lam}")
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

    def fast_scores(theta: Tensor) -> Tensor:
        return design.t_times(theta) / (M * weight.unsqueeze(1))

    def exact_scores(theta: Tensor) -> Tensor:
        return design.exact_t_times(theta) / (M * weight.unsqueeze(1))

    def certify(exact: bool) -> tuple[_Certificate, Tensor]:
        """The full certificate at the point as returned (coefficients rounded to dtype in the
        user's units, eta recomputed from them, and their best intercept), its dual point from
        the unrounded iterate."""
        coef_w = (point.a * design.inverse[W].unsqueeze(1)).to(dtype)
        a = coef_w.double() * norms[W].unsqueeze(1)
        scores_of = exact_scores if exact else fast_scores
        cert = _certificate(a, restricted.times(a), point.b, loss, weight[W], scores_of,
                            fit_intercept, point.eta0)  # fmt: skip
        return cert, coef_w

    W = torch.zeros(0, dtype=torch.int64, device=device)
    point = _Point(
        torch.zeros(0, B, dtype=torch.float64, device=device),
        b0.to(device),
        torch.zeros_like(loss.labels),
    )
    restricted = design.columns(W)
    exact = design.exact  # whether the loop's gaps use float64 products
    n_iter, at_floor, stalled, reason = 0, False, False, "max_rounds"
    for _ in range(MAX_ROUNDS):
        cert, coef_w = certify(exact)
        if cert.gap <= tol_abs and not exact:  # confirm with float64 products
            cert, coef_w = certify(True)
            exact = cert.gap > tol_abs  # float32 products were too optimistic: use float64
        if cert.gap <= tol_abs:
            reason = "converged"
            break
        if n_iter >= max_iter or stalled:
            reason = "max_iter" if n_iter >= max_iter else "stalled"
            break
        new_W, point = _grow(W, point, cert.scores, usable)
        same = torch.equal(new_W, W)
        if same and at_floor:  # solved to tol / 2 on this very set: only rounding keeps the
            reason = "at_floor"  # full gap above tol
            break
        if not same:
            W, restricted = new_W, design.columns(new_W)
        inner_tol = 0.5 * tol_abs if same else max(INNER_FRACTION * cert.gap, 0.5 * tol_abs)
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
        cert, coef_w = certify(exact)
    if not exact and reason != "converged":
        cert, coef_w = certify(True)
    converged = cert.gap <= tol_abs
    if not converged:
        why = {
            "max_iter": f"max_iter={max_iter} proximal Newton steps were used up",
            "stalled": "the restricted solve stalled",
            "at_floor": "rounding keeps the gap of the restricted solution above tol",
            "max_rounds": f"{MAX_ROUNDS} working-set rounds were used up",
        }[reason]
        warnings.warn(
            f"{loss.name} did not reach tol={tol} ({why}; certified relative gap "
            f"{cert.gap / null_objective:.2g})",
            ConvergenceWarning,
            stacklevel=3,
        )
    coef = torch.zeros(p, B, dtype=dtype, device=device)
    coef[W] = coef_w
    intercept = cert.b
    return LogisticResult(
        coef[:, 0] if isinstance(loss, _Binary) else coef,
        (intercept[0] if isinstance(loss, _Binary) else intercept).cpu(),
        loss.classes.cpu(),
        torch.tensor(cert.gap, dtype=torch.float64),
        torch.tensor(cert.primal, dtype=torch.float64),
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
    Returns (sweeps, stalled) (see STALL_FACTOR).
    """
    M, B = loss.labels.shape

    def scores_of(theta: Tensor) -> Tensor:
        return design.t_times(theta) / (M * weight.unsqueeze(1))

    best: list[float] = []  # smallest gap so far, after each sweep
    for sweep in range(max_iter):
        cert = _certificate(point.a, point.eta0, point.b, loss, weight, scores_of, fit_intercept)
        point.b = cert.b
        gap = cert.gap
        if gap <= tol:
            return sweep, False
        best.append(min(gap, best[-1]) if best else gap)
        window = STALL_STEPS * B
        if len(best) > window and best[-1] > STALL_FACTOR * best[-1 - window]:
            return sweep, True
        for c in range(B):
            if not _column_step(design, loss, point, weight, c, 0.25 * gap / B, check_every,
                                fit_intercept):  # fmt: skip
                return sweep, True
        if B > 1:
            _center_rows(design, point)
    return max_iter, False


def _center_rows(design: _Restricted, point: _Point) -> None:
    """Shift every row of a (K, B) by the m nearest 0 in its median interval (between its two
    middle entries; m = 0 where 0 lies in it): the softmax sees only differences within a row of
    eta, so the loss stays, and the row's penalty sum_c |a_kc - m| is smallest there. Steps on
    one column at a time cannot make this move (it changes every column at once): without it,
    rows drift toward their medians over thousands of sweeps."""
    ordered = point.a.sort(1).values
    B = ordered.shape[1]
    low, high = ordered[:, (B - 1) // 2], ordered[:, B // 2]
    shift = torch.where(low > 0, low, torch.where(high < 0, high, torch.zeros_like(low)))
    if not bool((shift != 0).any()):
        return
    point.a = point.a - shift.unsqueeze(1)
    point.eta0 = point.eta0 - design.times(shift.unsqueeze(1))


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
