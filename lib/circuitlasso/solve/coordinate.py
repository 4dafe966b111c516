"""Coordinate descent on small quadratic Lasso problems: the working sets' inner solver on the CPU.

The problems and the contract are those of `circuitlasso.solve.fista.fista`: B problems

    F(b) = 1/2 b^T Q b - q^T b + yty/2 + sum_k w_k |b_k|,   Q (B, K, K), q (B, K),

each solved on its own by cyclic coordinate descent (one epoch updates every coordinate once
and costs one product with Q, as one FISTA step does), with Anderson extrapolation over the last
ANDERSON epochs' iterates, kept only where it lowers F (Bertrand and Massias, "Anderson
acceleration of coordinate descent", AISTATS 2021). On the small, dense and rank-deficient
problems of model components (fewer observations than predictors), it needs several times fewer
epochs than FISTA needs steps, and each epoch is one pass over Q in a compiled loop, where FISTA's
steps are batched matrix-vector products whose per-call cost dominates at these sizes.
A problem that meets its tolerance ends, where the gap stays within it, at the least-norm
solution on its equicorrelation set (`_spread`): copies of a column share its weight (on sets of
at most SPREAD_MAX features).

Compiled with numba (cached on disk after the first call). Everything runs in float64, and each
problem's result depends on its own data only, not on the batch it was solved in nor on the
threads that share the batch (`solve.threads`). On a GPU the working sets keep batched FISTA.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor
from typing_extensions import Unpack

from circuitlasso.solve.fista import RIDGE_EXPONENT, TINY, Subproblems
from circuitlasso.solve.options import INNER, InnerOptions, settle
from circuitlasso.solve.threads import over_threads

ANDERSON = 5
"""Epochs whose iterates one Anderson extrapolation combines."""
ANDERSON_RIDGE = 1e-10
"""Tikhonov term of the extrapolation's small system, relative to its trace."""
EQUICORRELATION = 1e-3
"""A feature is at the penalty's bound where |q_k - (Q b)_k| >= (1 - EQUICORRELATION) w_k."""
SPREAD_MAX = 256
"""Largest equicorrelation set moved to its least-norm solution: its Cholesky factor costs S^3/3
(at S = 2000 more than the whole descent); a larger set keeps the point descent reached."""


def coordinate_descent(
    problems: Subproblems, b0: Tensor, tol: Tensor, **options: Unpack[InnerOptions]
) -> tuple[Tensor, Tensor, Tensor]:
    """Minimize F above for B problems on the CPU.

    b0: (B, K) warm start, tol: (B,) absolute gap tolerance (stop="gap", checked every
    `check_every` epochs) or relative objective decrease over one epoch (stop="objective");
    max_iter: epochs (options as `fista`'s). Returns b (B, K) in the dtype of b0, epochs (B,)
    and converged (B,).
    """
    settings = settle(INNER, InnerOptions, options)
    b = b0.detach().to("cpu", torch.float64).contiguous().clone()
    B = b.shape[0]
    epochs = np.zeros(B, dtype=np.int64)
    converged = np.zeros(B, dtype=np.bool_)
    if B and b.shape[1]:
        over_threads(
            _solve_batch,
            B,
            _array(problems.Q),
            _array(problems.q),
            _array(problems.yty),
            _array(problems.w),
            b.numpy(),
            _array(tol),
            settings.stop == "gap",
            settings.max_iter,
            settings.check_every,
            epochs,
            converged,
        )
    elif B:
        converged[:] = True  # no coordinate: b = () is the minimizer
    device = b0.device
    return (
        b.to(device, b0.dtype),
        torch.from_numpy(epochs).to(device),
        torch.from_numpy(converged).to(device),
    )


def _array(t: Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).contiguous().numpy()


@numba.njit(cache=True, nogil=True)
def _solve_batch(  # type: ignore[no-untyped-def]
    Q, q, yty, w, b, tol, stop_gap, max_epochs, check_every, epochs, converged, lo, hi
):
    for i in range(lo, hi):
        epochs[i], converged[i] = _solve(
            Q[i], q[i], yty[i], w[i], b[i], tol[i], stop_gap, max_epochs, check_every
        )


@numba.njit(cache=True)
def _solve(Q, q, yty, w, b, tol, stop_gap, max_epochs, check_every):  # type: ignore[no-untyped-def]
    """One problem, b updated in place; returns (epochs, converged)."""
    K = b.shape[0]
    Qb = np.empty(K)
    _product(Q, b, Qb)
    history = np.zeros((ANDERSON + 1, K))
    filled = 0
    trial = np.empty(K)
    Q_trial = np.empty(K)
    previous = _objective(q, yty, w, b, Qb)
    for epoch in range(1, max_epochs + 1):
        _epoch(Q, q, w, b, Qb)
        history[filled] = b
        filled += 1
        if filled == ANDERSON + 1:
            filled = 0
            if _extrapolate(history, trial):
                _product(Q, trial, Q_trial)
                if _objective(q, yty, w, trial, Q_trial) < _objective(q, yty, w, b, Qb):
                    b[:] = trial
                    Qb[:] = Q_trial
        if stop_gap:
            if epoch % check_every == 0 or epoch == max_epochs:
                _product(Q, b, Qb)  # exact again: the updates accumulate rounding
                if _gap(q, yty, w, b, Qb) <= tol:
                    _spread(Q, q, yty, w, b, tol)
                    return epoch, True
        else:
            current = _objective(q, yty, w, b, Qb)
            if abs(previous - current) <= tol * abs(current):
                return epoch, True
            previous = current
    return max_epochs, False


@numba.njit(cache=True)
def _spread(Q, q, yty, w, b, tol):  # type: ignore[no-untyped-def]
    """b moved, where the gap stays within tol, to the least-norm solution on its equicorrelation
    set: the exact minimizer for the signs of b on its support and the residual's signs on the
    features at the penalty's bound, with the ridge of `fista.polish` (RIDGE_EXPONENT). Among
    the many solutions of a rank-deficient problem it treats duplicate and collinear features
    alike, where cyclic descent gives the first in order the most weight."""
    K = b.shape[0]
    Qb = np.empty(K)
    _product(Q, b, Qb)
    signs = equicorrelation_signs(q - Qb, b, w)
    where = np.nonzero(signs)[0]
    S = where.size
    if S == 0 or S > SPREAD_MAX:
        return
    system = np.empty((S, S))
    for i in range(S):
        for j in range(S):
            system[i, j] = Q[where[i], where[j]]
    ridge = np.finfo(np.float64).eps ** RIDGE_EXPONENT * np.trace(Q) / K
    trial = np.zeros(K)
    if not least_norm_trial(system, q[where], ridge, w, signs, trial):
        return
    _product(Q, trial, Qb)
    if _gap(q, yty, w, trial, Qb) <= tol:
        b[:] = trial


@numba.njit(cache=True)
def equicorrelation_signs(correlation, b, w):  # type: ignore[no-untyped-def]
    """(K,) signs of the equicorrelation set (0 outside it): b's on its support, the residual's
    correlation's where it is at the penalty's bound (within EQUICORRELATION)."""
    K = b.shape[0]
    signs = np.zeros(K)
    for k in range(K):
        if b[k] != 0.0:
            signs[k] = np.sign(b[k])
        elif w[k] > 0.0 and abs(correlation[k]) >= (1 - EQUICORRELATION) * w[k]:
            signs[k] = np.sign(correlation[k])
    return signs


@numba.njit(cache=True)
def least_norm_trial(system, q_set, ridge, w, signs, trial):  # type: ignore[no-untyped-def]
    """The minimizer for `signs` on the equicorrelation set into trial (K,) (zeros elsewhere):
    system (S, S) the set's Gram block (the ridge is added to it), q_set (S,) its cross products
    with the target. False where the system is not numerically positive definite or the
    solution changes a sign."""
    where = np.nonzero(signs)[0]
    S = where.size
    rhs = np.empty(S)
    for i in range(S):
        system[i, i] += ridge
        rhs[i] = q_set[i] - w[where[i]] * signs[where[i]]
    try:
        factor = np.linalg.cholesky(system)
    except Exception:  # not numerically positive definite
        return False
    solution = _cholesky_solve(factor, rhs)
    for i in range(S):
        if np.sign(solution[i]) != signs[where[i]]:
            return False
        trial[where[i]] = solution[i]
    return True


@numba.njit(cache=True)
def _cholesky_solve(factor, rhs):  # type: ignore[no-untyped-def]
    """x with L L^T x = rhs for the lower-triangular factor L (S, S)."""
    S = rhs.size
    y = np.empty(S)
    for i in range(S):
        acc = rhs[i]
        for j in range(i):
            acc -= factor[i, j] * y[j]
        y[i] = acc / factor[i, i]
    x = np.empty(S)
    for i in range(S - 1, -1, -1):
        acc = y[i]
        for j in range(i + 1, S):
            acc -= factor[j, i] * x[j]
        x[i] = acc / factor[i, i]
    return x


@numba.njit(cache=True)
def _epoch(Q, q, w, b, Qb):  # type: ignore[no-untyped-def]
    """One cyclic pass: b_k <- the minimizer of F over b_k alone, Qb kept equal to Q b."""
    K = b.shape[0]
    for k in range(K):
        curvature = Q[k, k]
        if curvature <= 0.0:
            continue  # a zero column: its coefficient stays where it is (0 from any start)
        old = b[k]
        z = old - (Qb[k] - q[k]) / curvature
        threshold = w[k] / curvature
        new = z - threshold if z > threshold else (z + threshold if z < -threshold else 0.0)
        if new != old:
            delta = new - old
            b[k] = new
            row = Q[k]
            for j in range(K):
                Qb[j] += row[j] * delta


@numba.njit(cache=True)
def _extrapolate(history, out):  # type: ignore[no-untyped-def]
    """Anderson extrapolation of the iterates history (n+1, K) into out (K,); False if the
    small system is singular."""
    n = history.shape[0] - 1
    K = history.shape[1]
    U = np.empty((n, K))
    for j in range(n):
        for k in range(K):
            U[j, k] = history[j + 1, k] - history[j, k]
    C = U @ U.T
    ridge = ANDERSON_RIDGE * (np.trace(C) + TINY)
    for j in range(n):
        C[j, j] += ridge
    try:
        z = np.linalg.solve(C, np.ones(n))
    except Exception:  # singular: no extrapolation this time
        return False
    total = z.sum()
    if total == 0.0 or not np.isfinite(total):
        return False
    for k in range(K):
        acc = 0.0
        for j in range(n):
            acc += z[j] * history[j + 1, k]
        out[k] = acc / total
    return True


@numba.njit(cache=True)
def _product(Q, b, out):  # type: ignore[no-untyped-def]
    """out = Q b for symmetric Q, skipping the zeros of b."""
    K = b.shape[0]
    out[:] = 0.0
    for k in range(K):
        if b[k] != 0.0:
            bk = b[k]
            row = Q[k]
            for j in range(K):
                out[j] += row[j] * bk


@numba.njit(cache=True)
def _objective(q, yty, w, b, Qb):  # type: ignore[no-untyped-def]
    value = yty / 2
    for k in range(b.shape[0]):
        value += b[k] * Qb[k] / 2 - q[k] * b[k] + w[k] * abs(b[k])
    return value


@numba.njit(cache=True)
def _gap(q, yty, w, b, Qb):  # type: ignore[no-untyped-def]
    """The duality gap of `fista.duality_gap` for one problem (the same dual point s r)."""
    qb = 0.0
    bQb = 0.0
    l1 = 0.0
    violation = 0.0
    for k in range(b.shape[0]):
        qb += q[k] * b[k]
        bQb += b[k] * Qb[k]
        l1 += w[k] * abs(b[k])
        correlation = abs(q[k] - Qb[k])
        if correlation > 0.0:
            ratio = correlation / w[k] if w[k] > 0.0 else np.inf
            violation = max(violation, ratio)
    rr = yty - 2 * qb + bQb
    yr = yty - qb
    s_max = 1.0 / violation if violation > 0.0 else np.inf
    if rr <= 0.0:
        return l1  # an exact fit: the dual point 0
    s = max(min(yr / rr, s_max), -s_max)
    return max(rr / 2 + l1 - (s * yr - s * s * rr / 2), 0.0)
