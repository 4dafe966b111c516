"""The logistic losses (binary, multinomial) and the duality gap that certifies their solutions.

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
- ``s = min(1, M lam / max_{k, c} |x~_k^T (Y - P')_c| / omega_k)`` scales it into the box of the
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
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

INTERCEPT_NEWTON_STEPS = 100
"""Newton steps at most for the best intercept of given coefficients."""
INTERCEPT_RIDGE = 1e-12
"""Ridge of the intercept's Newton system: keeps a saturated Hessian (every probability 0 or 1)
solvable, far below any curvature a step needs."""
INTERCEPT_GRADIENT_FLOOR = 1e-15
"""Intercept gradient (a difference of mean probabilities) at rounding level, a few float64 eps:
Newton stops; `_balanced` absorbs what is left."""
INTERCEPT_STEP_FLOOR = 1e-16
"""A Newton step or move of the intercept below this, relative to ``1 + |b|``, is below float64's
half-eps rounding: nothing more to gain."""
LOSS_ROUNDING = 4e-16
"""Relative rounding of the mean loss (about two float64 eps): a step within it that shrinks the
gradient is taken, as the loss can no longer tell it from a decrease."""
INTERCEPT_HALVINGS = 60
"""Backtracking halvings of an intercept step at most (2**-60 is below float64's resolution)."""


class Binary:
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
        """Mean loss, ``log(1 + exp(-|eta|)) + max(0, +-eta)`` (no cancellation, no threshold)."""
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


class Multinomial:
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


Loss = Binary | Multinomial


def best_intercept(loss: Loss, eta0: Tensor, b: Tensor) -> Tensor:
    """The b minimizing the mean loss of eta0 + b (a new tensor; multinomial: centered).

    Newton's method with backtracking: a step is taken where it lowers the loss, or, once the
    loss no longer resolves the decrease, where it leaves it within rounding and shrinks the
    gradient (so the gradient, the residual of the intercept's equality, goes to rounding
    level). A tiny ridge keeps saturated (all-probabilities-0-or-1) Hessians solvable.
    """
    b = loss.center(b)
    value, gradient, hessian = loss.intercept_model(eta0, b)
    ridge = INTERCEPT_RIDGE * torch.eye(b.numel(), dtype=torch.float64, device=b.device)
    for _ in range(INTERCEPT_NEWTON_STEPS):
        size = float(gradient.abs().max())
        if size <= INTERCEPT_GRADIENT_FLOOR:
            break
        step, info = torch.linalg.solve_ex(hessian + ridge, gradient)
        if int(info) != 0 or not bool(torch.isfinite(step).all()):
            step = gradient
        if float(step.abs().max()) <= INTERCEPT_STEP_FLOOR * (1 + float(b.abs().max())):
            break
        t, taken = 1.0, False
        for _ in range(INTERCEPT_HALVINGS):
            trial = loss.center(b - t * step)
            t_value, t_gradient, t_hessian = loss.intercept_model(eta0, trial)
            slack = LOSS_ROUNDING * abs(value)
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
        if moved <= INTERCEPT_STEP_FLOOR * (1 + float(b.abs().max())):
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
class Certificate:
    """Duality gap and primal objective at (a, b) (b the intercept the certificate used: the
    best one for a with an intercept), and the per-feature KKT scores (K,)."""

    gap: float
    primal: float
    scores: Tensor
    b: Tensor


def certificate(
    a: Tensor,
    eta0: Tensor,
    b: Tensor,
    loss: Loss,
    weight: Tensor,
    scores_of: Callable[[Tensor], Tensor],
    fit_intercept: bool,
    dual_eta0: Tensor | None = None,
) -> Certificate:
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
    b = best_intercept(loss, eta0, b) if fit_intercept else loss.center(b)
    eta = eta0 + b
    if dual_eta0 is None:
        dual_eta = eta
    elif fit_intercept:
        dual_eta = dual_eta0 + best_intercept(loss, dual_eta0, b)
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
    return Certificate(max(primal - dual, 0.0), primal, scores, b)
