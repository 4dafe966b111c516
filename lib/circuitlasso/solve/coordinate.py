"""Coordinate descent on small quadratic Lasso problems: the working sets' inner solver on the CPU.

The problems and the contract are those of `circuitlasso.solve.fista.fista`: B problems ::

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

The same descent runs in two forms, one loop (`_solve`) over the steps of either: on the Gram
blocks (`coordinate_descent`, the state Q b) and, for sparse predictors whose Gram blocks cost
more than they serve, on the working set's columns themselves (`column_descent`, the state the
residual: `solve.sparse_columns`).

Compiled with numba (cached on disk after the first call). Everything runs in float64, and each
problem's result depends on its own data only, not on the batch it was solved in nor on the
threads that share the batch (`solve.threads`). On a GPU the working sets keep batched FISTA.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
import torch
from torch import Tensor
from typing_extensions import Unpack

from circuitlasso.solve import sparse_columns as columns
from circuitlasso.solve.fista import RIDGE_EXPONENT, TINY, Subproblems, fista
from circuitlasso.solve.options import INNER, InnerOptions, settle
from circuitlasso.solve.sparse_kernels import csr_arrays
from circuitlasso.solve.threads import over_threads

ANDERSON = 5
"""Epochs whose iterates one Anderson extrapolation combines."""
ANDERSON_RIDGE = 1e-10
"""Tikhonov term of the extrapolation's small system, relative to its trace."""
EQUICORRELATION = 1e-3
"""A feature is at the penalty's bound where ``|q_k - (Q b)_k| >= (1 - EQUICORRELATION) w_k``."""
SPREAD_MAX = 256
"""Largest equicorrelation set moved to its least-norm solution: its Cholesky factor costs S^3/3
(at S = 2000 more than the whole descent); a larger set keeps the point descent reached."""
GRAM, COLUMNS = 0, 1
"""The two forms of a problem tuple (its first entry)."""


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
    problem = (_array(problems.Q), _array(problems.q), _array(problems.yty))
    epochs, converged = _run(_gram_batch, problem, _array(problems.w), b, _array(tol), settings)
    device = b0.device
    return (
        b.to(device, b0.dtype),
        torch.from_numpy(epochs).to(device),
        torch.from_numpy(converged).to(device),
    )


def inner_solver(device: torch.device) -> Callable[..., tuple[Tensor, Tensor, Tensor]]:
    """The quadratic subproblems' solver (the working sets', the Newton steps') on `device`:
    coordinate descent on the CPU, batched FISTA elsewhere (many small kernels in a compiled
    loop against a few large batched ones)."""
    return coordinate_descent if device.type == "cpu" else fista


def column_descent(
    columns_t: Tensor,
    mu: Tensor | None,
    y: Tensor,
    y_mean: Tensor | None,
    W: Tensor,
    b0: Tensor,
    w: Tensor,
    tol: Tensor,
    **options: Unpack[InnerOptions],
) -> tuple[Tensor, Tensor, Tensor]:
    """Minimize ``1/2 ||y_c - X~_W b||^2 + sum_k w_k |b_k|`` for B outputs on the CPU, on the
    working sets' sparse columns (`solve.sparse_columns`), as `coordinate_descent` on their Gram
    blocks.

    columns_t: X^T as CSR (p, M) of the scaled uncentered columns; mu: (p,) their means (None:
    no centering); y: (B, M) dense targets, uncentered; y_mean: (B,) their means (None with mu
    None); W: (B, K) working sets; b0: (B, K) warm start; w: (B, K) penalty weights; tol: (B,)
    and options as `coordinate_descent`'s. Returns b (B, K) in b0's dtype, epochs, converged.
    """
    settings = settle(INNER, InnerOptions, options)
    b = b0.detach().to("cpu", torch.float64).contiguous().clone()
    B = y.shape[0]
    problem = (
        csr_arrays(columns_t),
        (mu if mu is not None else torch.zeros(columns_t.shape[0])).double().numpy(),
        mu is not None,
        y.to(torch.float64).contiguous().numpy(),
        (y_mean if y_mean is not None else torch.zeros(B)).double().contiguous().numpy(),
        W.contiguous().numpy(),
    )
    epochs, converged = _run(_column_batch, problem, _array(w), b, _array(tol), settings)
    return b.to(b0.dtype), torch.from_numpy(epochs), torch.from_numpy(converged)


def _run(batch, problem, w, b, tol, settings):  # type: ignore[no-untyped-def]
    """A batch kernel over the problems on torch's threads; (epochs, converged)."""
    B = b.shape[0]
    epochs = np.zeros(B, dtype=np.int64)
    converged = np.zeros(B, dtype=np.bool_)
    if B and b.shape[1]:
        stop_gap = settings.stop == "gap"
        limits = (stop_gap, settings.max_iter, settings.check_every)
        over_threads(batch, B, *problem, w, b.numpy(), tol, limits, epochs, converged)
    elif B:
        converged[:] = True  # no coordinate: b = () is the minimizer
    return epochs, converged


def _array(t: Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).contiguous().numpy()


@numba.njit(cache=True, nogil=True)
def _gram_batch(Q, q, yty, w, b, tol, limits, epochs, converged, lo, hi):  # type: ignore[no-untyped-def]
    stop_gap, max_epochs, check_every = limits
    for i in range(lo, hi):
        problem = gram_problem(Q[i], q[i], yty[i])
        epochs[i], converged[i] = _solve(
            problem, w[i], b[i], tol[i], stop_gap, max_epochs, check_every
        )


@numba.njit(cache=True, nogil=True)
def _column_batch(XT, mu, centered, y, y_mean, W, w, b, tol, limits, epochs, converged, lo, hi):  # type: ignore[no-untyped-def]
    indptr, indices, data = XT
    stop_gap, max_epochs, check_every = limits
    marked = np.zeros(y.shape[1], dtype=np.bool_)
    for j in range(lo, hi):
        problem = column_problem(indptr, indices, data, mu, centered, y[j], y_mean[j], W[j], marked)
        epochs[j], converged[j] = _solve(
            problem, w[j], b[j], tol[j], stop_gap, max_epochs, check_every
        )


@numba.njit(cache=True)
def gram_problem(Q, q, yty):  # type: ignore[no-untyped-def]
    """A problem tuple of the Gram form: (GRAM, Q, q, yty, then the column form's parts, empty)."""
    no_int, no_float = np.zeros(0, dtype=np.int64), np.zeros(0)
    return (GRAM, Q, q, yty, no_int, no_int, no_float, no_float, no_int, no_float, no_float,
            0.0, False, no_int, no_float)  # fmt: skip


@numba.njit(cache=True)
def column_problem(indptr, indices, data, mu, centered, y, y_mean, W, marked):  # type: ignore[no-untyped-def]
    """A problem tuple of the column form: (COLUMNS, the Gram form's parts, empty, then the parts
    `solve.sparse_columns` reads); marked (M,): all False, left so."""
    curvature = columns.curvature(indptr, data, mu, centered, W, y.shape[0])
    rows, untouched = columns.touched_rows(indptr, indices, W, y, marked)
    return (COLUMNS, np.zeros((0, 0)), np.zeros(0), 0.0, indptr, indices, data, mu, W,
            curvature, y, y_mean, centered, rows, untouched)  # fmt: skip


@numba.njit(cache=True)
def _solve(problem, w, b, tol, stop_gap, max_epochs, check_every):  # type: ignore[no-untyped-def]
    """One problem, b updated in place; returns (epochs, converged). Its state: Q b (GRAM) or
    the residual and its sum (COLUMNS), kept by the steps below."""
    K = b.shape[0]
    size = K if problem[0] == GRAM else problem[columns.Y].shape[0]
    state = np.empty(size)
    state_trial = np.empty(size)
    total = _refresh(problem, b, state)
    history = np.zeros((ANDERSON + 1, K))
    filled = 0
    trial = np.empty(K)
    previous = _objective(problem, w, b, state, total)
    for epoch in range(1, max_epochs + 1):
        total = _epoch(problem, w, b, state, total)
        history[filled] = b
        filled += 1
        if filled == ANDERSON + 1:
            filled = 0
            if _extrapolate(history, trial):
                total_trial = _refresh(problem, trial, state_trial)
                if _objective(problem, w, trial, state_trial, total_trial) < _objective(
                    problem, w, b, state, total
                ):
                    b[:] = trial
                    _accept(problem, state, state_trial)
                    total = total_trial
        if stop_gap:
            if epoch % check_every == 0 or epoch == max_epochs:
                total = _refresh(problem, b, state)  # exact again: updates accumulate rounding
                if _gap(problem, w, b, state, total) <= tol:
                    _spread(problem, w, b, state, total, tol)
                    return epoch, True
        else:
            current = _objective(problem, w, b, state, total)
            if abs(previous - current) <= tol * abs(current):
                return epoch, True
            previous = current
    return max_epochs, False


# The steps, in either form: `state` is Q b (GRAM) or the residual with sum `total` (COLUMNS).


@numba.njit(cache=True)
def _refresh(problem, b, state):  # type: ignore[no-untyped-def]
    """The state of b, computed anew; returns its `total` (0 in the Gram form)."""
    if problem[0] == GRAM:
        _product(problem[1], b, state)
        return 0.0
    return columns.residual(problem, b, state)


@numba.njit(cache=True)
def _epoch(problem, w, b, state, total):  # type: ignore[no-untyped-def]
    if problem[0] == GRAM:
        _gram_epoch(problem[1], problem[2], w, b, state)
        return 0.0
    return columns.epoch(problem, w, b, state, total)


@numba.njit(cache=True)
def _accept(problem, state, state_trial):  # type: ignore[no-untyped-def]
    if problem[0] == GRAM:
        state[:] = state_trial
    else:
        columns.accept(problem, state, state_trial)


@numba.njit(cache=True)
def _objective(problem, w, b, state, total):  # type: ignore[no-untyped-def]
    if problem[0] == GRAM:
        return _gram_objective(problem[2], problem[3], w, b, state)
    rr, _ = columns.sums(problem, state, total)
    value = rr / 2
    for i in range(b.shape[0]):
        value += w[i] * abs(b[i])
    return value


@numba.njit(cache=True)
def _correlations(problem, b, state, total):  # type: ignore[no-untyped-def]
    """(K,) q - Q b: each slot's correlation with the residual."""
    if problem[0] == GRAM:
        return problem[2] - state
    out = np.empty(b.shape[0])
    for i in range(b.shape[0]):
        out[i] = columns.correlation(problem, i, state, total)
    return out


@numba.njit(cache=True)
def _gap(problem, w, b, state, total):  # type: ignore[no-untyped-def]
    """The duality gap of `fista.duality_gap` for one problem (the same dual point s r)."""
    if problem[0] == GRAM:
        q, yty = problem[2], problem[3]
        qb = 0.0
        bQb = 0.0
        for k in range(b.shape[0]):
            qb += q[k] * b[k]
            bQb += b[k] * state[k]
        rr, yr = yty - 2 * qb + bQb, yty - qb
    else:
        rr, yr = columns.sums(problem, state, total)
    correlations = _correlations(problem, b, state, total)
    l1 = 0.0
    violation = 0.0
    for k in range(b.shape[0]):
        l1 += w[k] * abs(b[k])
        correlation = abs(correlations[k])
        if correlation > 0.0:
            ratio = correlation / w[k] if w[k] > 0.0 else np.inf
            violation = max(violation, ratio)
    s_max = 1.0 / violation if violation > 0.0 else np.inf
    if rr <= 0.0:
        return l1  # an exact fit: the dual point 0
    s = max(min(yr / rr, s_max), -s_max)
    return max(rr / 2 + l1 - (s * yr - s * s * rr / 2), 0.0)


@numba.njit(cache=True)
def _spread(problem, w, b, state, total, tol):  # type: ignore[no-untyped-def]
    """b moved, where the gap stays within tol, to the least-norm solution on its equicorrelation
    set: the exact minimizer for the signs of b on its support and the residual's signs on the
    features at the penalty's bound, with the ridge of `fista.polish` (RIDGE_EXPONENT). Among
    the many solutions of a rank-deficient problem it treats duplicate and collinear features
    alike, where cyclic descent gives the first in order the most weight."""
    K = b.shape[0]
    correlations = _correlations(problem, b, state, total)
    signs = equicorrelation_signs(correlations, b, w)
    where = np.nonzero(signs)[0]
    S = where.size
    if S == 0 or S > SPREAD_MAX:
        return
    if problem[0] == GRAM:
        Q = problem[1]
        system = np.empty((S, S))
        for i in range(S):
            for j in range(S):
                system[i, j] = Q[where[i], where[j]]
        q_set = problem[2][where]
        ridge = np.finfo(np.float64).eps ** RIDGE_EXPONENT * np.trace(Q) / K
    else:
        system, q_set = columns.set_system(problem, where, correlations, b)
        ridge = np.finfo(np.float64).eps ** RIDGE_EXPONENT * problem[columns.CURVATURE].sum() / K
    trial = np.zeros(K)
    if not least_norm_trial(system, q_set, ridge, w, signs, trial):
        return
    state_trial = np.empty(state.shape[0])
    total_trial = _refresh(problem, trial, state_trial)
    if _gap(problem, w, trial, state_trial, total_trial) <= tol:
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
def _gram_epoch(Q, q, w, b, Qb):  # type: ignore[no-untyped-def]
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
def _gram_objective(q, yty, w, b, Qb):  # type: ignore[no-untyped-def]
    value = yty / 2
    for k in range(b.shape[0]):
        value += b[k] * Qb[k] / 2 - q[k] * b[k] + w[k] * abs(b[k])
    return value
