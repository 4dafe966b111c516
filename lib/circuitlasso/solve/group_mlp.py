"""The group-lasso MLP of the nonlinear component scores, fit by alternating proximal steps.

One child's fit (``circuitlasso.circuits.components.nonlinear_edge_scores``): with predictors
X (M, p) in groups of columns and a centered target Y (M, q), it minimizes

    1/(2Mq) ||Y - relu(X W1^T + b1) W2^T - b2||_F^2 + lam sum_g ||W1[:, g]||_F,  ||W2||_F <= 1,

by PALM (Bolte, Sabach and Teboulle, 2014): a gradient step on ``(W1, b1)`` with step ``1/L1``,
``L1 = ||[X, 1]||_2^2 / (Mq)``, then the group soft-threshold by ``lam / L1`` (exactly zero for a
group the fit does not need); a gradient step on ``(W2, b2)`` with step ``1/L2``,
``L2 = ||[H, 1]||_2^2 / (Mq)`` of the current hidden layer ``H``, then the projection onto the
unit ball. It stops when the objective changes by less than ``tol`` (relative) or after
``max_steps``. A step is a few products of (M, p) and (M, hidden) matrices: a compiled loop
(numba, float32 as the model's activations, cached on disk after the first call), where each
step's dozen small tensor operations would cost more in their calls than in their arithmetic.
"""

from __future__ import annotations

import numba
import numpy as np
from threadpoolctl import threadpool_limits

MIN_LIPSCHITZ = 1e-12
"""Floor of the second block's Lipschitz constant: a hidden layer that died (all zero) takes
bounded steps on the bias alone instead of dividing by zero."""


def group_sparse_mlp(
    x: np.ndarray,
    group_of: np.ndarray,
    y: np.ndarray,
    lam: float,
    w1: np.ndarray,
    w2: np.ndarray,
    *,
    max_steps: int,
    tol: float,
) -> np.ndarray:
    """Group norms ``(n_groups,)`` of the fitted first layer ``W1``.

    x: (M, p) predictors, group_of: (p,) each column's group (0 ... n_groups - 1), y: (M, q)
    centered target, lam: the group penalty, w1: (hidden, p) and w2: (q, hidden) the starting
    weights (float32; copied, not changed).
    """
    m, p = x.shape
    if y.shape[0] != m or group_of.shape != (p,) or w1.shape[1] != p or w2.shape[0] != y.shape[1]:
        raise ValueError(
            f"shapes do not match: x {x.shape}, group_of {group_of.shape}, y {y.shape}, "
            f"w1 {w1.shape}, w2 {w2.shape}"
        )
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    with_ones = np.concatenate([x32, np.ones((m, 1), np.float32)], 1)
    step1 = m * y.shape[1] / float(np.linalg.norm(with_ones, 2)) ** 2
    with threadpool_limits(1):  # products of a few hundred rows: threads only wait on each other
        return _palm(
            x32,
            np.ascontiguousarray(group_of, dtype=np.int64),
            int(group_of.max()) + 1 if p else 0,
            np.ascontiguousarray(y, dtype=np.float32),
            np.float32(lam),
            np.float32(step1),
            np.array(w1, dtype=np.float32),
            np.array(w2, dtype=np.float32),
            max_steps,
            tol,
        )


@numba.njit(cache=True)
def _group_norms(w1: np.ndarray, group_of: np.ndarray, n_groups: int) -> np.ndarray:
    squares = np.zeros(n_groups, np.float32)
    for j in range(w1.shape[1]):
        for h in range(w1.shape[0]):
            squares[group_of[j]] += w1[h, j] * w1[h, j]
    return np.sqrt(squares)


@numba.njit(cache=True)
def _palm(x, group_of, n_groups, y, lam, step1, w1, w2, max_steps, tol):  # type: ignore[no-untyped-def]
    m, p = x.shape
    q = y.shape[1]
    hidden = w1.shape[0]
    mq = np.float32(m * q)
    b1 = np.zeros(hidden, np.float32)
    b2 = np.zeros(q, np.float32)
    hidden_ones = np.ones((m, hidden + 1), np.float32)
    pre = np.dot(x, w1.T) + b1
    residual = np.dot(np.maximum(pre, 0), w2.T) + b2 - y
    previous = np.inf
    for _ in range(max_steps):
        grad_pre = np.dot(residual, w2) * (pre > 0) / mq  # (M, hidden)
        w1 -= step1 * np.dot(grad_pre.T, x)
        b1 -= step1 * grad_pre.sum(0)
        norms = _group_norms(w1, group_of, n_groups)
        for j in range(p):
            norm = norms[group_of[j]]
            shrink = max(1 - step1 * lam / norm, 0) if norm > 0 else 0
            for h in range(hidden):
                w1[h, j] *= shrink
        pre = np.dot(x, w1.T) + b1  # also the next step's
        h = np.maximum(pre, 0)
        residual = np.dot(h, w2.T) + b2 - y
        hidden_ones[:, :hidden] = h
        lip2 = np.linalg.eigvalsh(np.dot(hidden_ones.T, hidden_ones))[-1] / mq
        step2 = 1 / max(lip2, MIN_LIPSCHITZ)
        w2 -= step2 * np.dot(residual.T, h) / mq
        b2 -= step2 * residual.sum(0) / mq
        w2 /= max(np.linalg.norm(w2), 1.0)
        residual = np.dot(h, w2.T) + b2 - y  # also the next step's
        norms = _group_norms(w1, group_of, n_groups)
        objective = 0.5 * np.sum(residual * residual) / mq + lam * norms.sum()
        if abs(previous - objective) <= tol * abs(objective):
            break
        previous = objective
    return _group_norms(w1, group_of, n_groups)
