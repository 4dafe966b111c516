"""l1-penalized binary logistic regression (paper Eq. 5 with a classification target).

    min_{a, b}  1/M sum_i [log(1 + exp(eta_i)) - y_i eta_i] + lam sum_k omega_k |a_k|,
    eta = X a + b,  y in {0, 1}.

FISTA with backtracking on all predictors at once (one X product and one X^T product per
iteration; sparse X stays sparse), columns scaled to unit norm as for `lasso`. The certificate is
the duality gap: with theta = y - sigmoid(eta) at the best intercept for the current a (so that
sum(theta) = 0), the dual point s * theta, s = min(1, M lam / max_k |x~_k^T theta| / omega_k),
has dual value 1/M sum_i H(y_i - s theta_i), H the binary entropy.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from circuitlasso.solve._inputs import Matrix, as_matrix, check_rows
from circuitlasso.solve._sparse import csr_transpose
from circuitlasso.solve.lasso import ConvergenceWarning
from circuitlasso.solve.prepare import column_stats
from circuitlasso.solve.problems import scaled_sparse


@dataclass(frozen=True)
class LogisticResult:
    """coef: (p,) in the user's units; intercept, gap, objective: 0-d float64 tensors.

    gap is the certified duality gap of the mean-scaled objective; converged means
    gap <= tol * (objective of the intercept-only model).
    """

    coef: Tensor
    intercept: Tensor
    gap: Tensor
    objective: Tensor
    n_iter: int
    converged: bool
    lam: float


class _Design:
    """Scaled predictors X~ (M, p) with products X~ v and X~^T u, dense or sparse alike."""

    def __init__(self, x: Tensor, norms: Tensor) -> None:
        scale = torch.where(norms > 0, 1 / norms, torch.zeros_like(norms)).to(x.dtype)
        if x.layout == torch.sparse_csr:
            self.x = scaled_sparse(x, norms)
            self.x_t = csr_transpose(self.x)
        else:
            self.x = x * scale
            self.x_t = self.x.t()

    def times(self, v: Tensor) -> Tensor:
        return (self.x @ v.unsqueeze(1)).squeeze(1)

    def t_times(self, u: Tensor) -> Tensor:
        return (self.x_t @ u.unsqueeze(1)).squeeze(1)


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
    M = x.shape[0]
    _, norms = column_stats(x, fit_intercept)
    design = _Design(x, norms)
    omega = torch.where(norms > 0, torch.ones_like(norms) if normalize else 1 / norms, torch.inf)
    weight = (lam * omega).to(dtype)

    def certificate(a: Tensor, b: float) -> tuple[Tensor, Tensor, float]:
        eta0 = design.times(a).double()
        if fit_intercept:
            b = _best_intercept(eta0, labels, b)
        eta = eta0 + b
        theta = labels - torch.sigmoid(eta)
        corr = design.t_times(theta.to(dtype)).double().abs() / (M * lam * omega)
        s = min(1.0, 1.0 / float(corr.max())) if float(corr.max()) > 0 else 1.0
        l1 = float((lam * omega * a.double().abs()).nan_to_num(0.0).sum())
        primal = _loss(eta, labels) + l1
        dual = _entropy(labels - s * theta).mean()
        return primal - dual, primal, b

    y_bar = float(labels.mean())
    b0 = math.log(y_bar / (1 - y_bar)) if fit_intercept else 0.0
    null_objective = float(_entropy(torch.tensor(y_bar))) if fit_intercept else math.log(2)
    tol_abs = tol * null_objective

    a = torch.zeros(x.shape[1], dtype=dtype, device=device)
    b = b0
    L = _lipschitz(design, x.shape[1], M, dtype, device, fit_intercept)
    v_a, v_b, t = a.clone(), b, 1.0
    eta_a = design.times(a).double() + b
    eta_v = eta_a
    gap, objective = torch.tensor(math.inf), torch.tensor(math.inf)
    n_iter, converged = 0, False
    for n_iter in range(1, max_iter + 1):
        residual = torch.sigmoid(eta_v) - labels
        grad_a = design.t_times(residual.to(dtype)) / M
        grad_b = float(residual.mean()) if fit_intercept else 0.0
        f_v = _loss(eta_v, labels)
        while True:
            z_a = _soft(v_a - grad_a / L, weight / L)
            z_b = v_b - grad_b / L
            eta_z = design.times(z_a).double() + z_b
            da, db = (z_a - v_a).double(), z_b - v_b
            bound = (
                f_v + float(grad_a.double() @ da) + grad_b * db + L / 2 * (float(da @ da) + db * db)
            )
            if float(_loss(eta_z, labels)) <= float(bound) + 1e-12 * abs(float(f_v)):
                break
            L *= 2
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        restart = float((v_a - z_a).double() @ (z_a - a).double()) + (v_b - z_b) * (z_b - b) > 0
        momentum = 0.0 if restart else (t - 1) / t_next
        t = 1.0 if restart else t_next
        v_a = z_a + momentum * (z_a - a)
        v_b = z_b + momentum * (z_b - b)
        eta_v = eta_z + momentum * (eta_z - eta_a)
        a, b, eta_a = z_a, z_b, eta_z
        if n_iter % check_every == 0 or n_iter == max_iter:
            gap, objective, b_best = certificate(a, b)
            if float(gap) <= tol_abs:
                b, converged = b_best, True
                break
    if not converged:
        warnings.warn(
            f"logistic_lasso did not reach tol={tol} within max_iter={max_iter}",
            ConvergenceWarning,
            stacklevel=2,
        )
    scale = torch.where(norms > 0, 1 / norms, torch.zeros_like(norms))
    coef = (a.double() * scale).to(dtype)
    intercept = torch.tensor(b, dtype=torch.float64)
    return LogisticResult(coef, intercept, gap, objective, n_iter, converged, float(lam))


def _soft(x: Tensor, threshold: Tensor) -> Tensor:
    return torch.sign(x) * (x.abs() - threshold).clamp_min(0.0)


def _lipschitz(
    design: _Design, p: int, M: int, dtype: torch.dtype, device: torch.device, intercept: bool
) -> float:
    """Upper estimate of the gradient's Lipschitz constant, ||[X~, 1]||_2^2 / (4M)."""
    generator = torch.Generator().manual_seed(0)
    v = torch.rand(p, generator=generator, dtype=dtype).to(device)
    c = 1.0
    estimate = 0.0
    for _ in range(30):
        u = design.times(v) + (c if intercept else 0.0)
        v_new = design.t_times(u)
        c_new = float(u.sum()) if intercept else 0.0
        norm = math.sqrt(float(v_new.double() @ v_new.double()) + c_new * c_new)
        estimate = norm / max(math.sqrt(float(v.double() @ v.double()) + c * c), 1e-300)
        v, c = v_new / norm, c_new / norm
    return 1.05 * estimate / (4 * M)
