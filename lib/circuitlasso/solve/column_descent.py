"""Coordinate descent on the sparse columns themselves: the CPU's inner solver for working sets
whose Gram blocks would cost more than the epochs they serve.

The problems are those of `circuitlasso.solve.coordinate` with Q = X~_W^T X~_W and
q = X~_W^T y_c never formed: each output keeps its residual r = y - X_W b (M,) over the
scaled, uncentered columns X_W and its sum S, so that with centering (X~ = X - 1 mu^T)

    x~_k^T (y_c - X~_W b) = x_k^T r - mu_k S,

and a coordinate's update costs its column's nonzeros (an epoch: the set's nonzeros) where a
Gram epoch costs K per changed coordinate and the block itself sum over rows of (entries in W)^2.
Anderson extrapolation, the stopping rules and the least-norm solution on the equicorrelation set
are `coordinate`'s (its `_spread`, on the set's Gram block computed here from its columns), so
the two solvers end at the same kind of point. Everything runs in float64; each output depends
on its own data only (`solve.threads`).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor
from typing_extensions import Unpack

from circuitlasso.solve.coordinate import (
    ANDERSON,
    SPREAD_MAX,
    _extrapolate,
    equicorrelation_signs,
    least_norm_trial,
)
from circuitlasso.solve.fista import RIDGE_EXPONENT
from circuitlasso.solve.options import INNER, InnerOptions, settle
from circuitlasso.solve.sparse_kernels import _gram_of_set
from circuitlasso.solve.threads import over_threads


def column_descent(
    columns: Tensor,
    mu: Tensor | None,
    y: Tensor,
    y_mean: Tensor | None,
    W: Tensor,
    b0: Tensor,
    w: Tensor,
    tol: Tensor,
    **options: Unpack[InnerOptions],
) -> tuple[Tensor, Tensor, Tensor]:
    """Minimize 1/2 ||y_c - X~_W b||^2 + sum_k w_k |b_k| for B outputs on the CPU.

    columns: X^T as CSR (p, M) of the scaled uncentered columns; mu: (p,) their means (None: no
    centering); y: (B, M) dense targets, uncentered; y_mean: (B,) their means (None with mu
    None); W: (B, K) working sets; b0: (B, K) warm start; w: (B, K) penalty weights; tol: (B,)
    as `coordinate_descent`'s. Returns b (B, K) in the dtype of b0, epochs (B,), converged (B,).
    """
    settings = settle(INNER, InnerOptions, options)
    b = b0.detach().to("cpu", torch.float64).contiguous().clone()
    B, M = y.shape
    epochs = np.zeros(B, dtype=np.int64)
    converged = np.zeros(B, dtype=np.bool_)
    centered = mu is not None
    if B and b.shape[1]:
        over_threads(
            _solve_batch,
            B,
            columns.crow_indices().numpy(),
            columns.col_indices().numpy(),
            columns.values().to(torch.float64).numpy(),
            (mu if mu is not None else torch.zeros(columns.shape[0])).double().numpy(),
            centered,
            y.to(torch.float64).contiguous().numpy(),
            (y_mean if y_mean is not None else torch.zeros(B)).double().contiguous().numpy(),
            W.contiguous().numpy(),
            w.to(torch.float64).contiguous().numpy(),
            b.numpy(),
            tol.to(torch.float64).contiguous().numpy(),
            settings.stop == "gap",
            settings.max_iter,
            settings.check_every,
            epochs,
            converged,
        )
    elif B:
        converged[:] = True
    return b.to(b0.dtype), torch.from_numpy(epochs), torch.from_numpy(converged)


@numba.njit(cache=True, nogil=True)
def _solve_batch(  # type: ignore[no-untyped-def]
    indptr,
    indices,
    data,
    mu,
    centered,
    y,
    y_mean,
    W,
    w,
    b,
    tol,
    stop_gap,
    max_epochs,
    check_every,
    epochs,
    converged,
    lo,
    hi,
):
    marked = np.zeros(y.shape[1], dtype=np.bool_)
    for j in range(lo, hi):
        curvature = _curvature(indptr, data, mu, centered, W[j], y.shape[1])
        columns = (indptr, indices, data, mu, W[j], curvature)
        target = _target(indptr, indices, W[j], y[j], y_mean[j], centered, marked)
        epochs[j], converged[j] = _solve(
            columns, target, w[j], b[j], tol[j], stop_gap, max_epochs, check_every
        )


# One output's working set travels as `columns` = (indptr, indices, data, mu, W (K,),
# curvature (K,)): X^T's CSR parts, the column means, the set and ||x~_k||^2 of each slot;
# its target as `target` = (y (M,), mean of y, centered, rows (R,), untouched (3,)): the rows
# the set's columns touch, where the residual differs from y, and of the other rows their
# count, the sum of y and of y^2 (so that no step but the first reads all M rows).


@numba.njit(cache=True)
def _target(indptr, indices, W, y, y_mean, centered, marked):  # type: ignore[no-untyped-def]
    """`target` of one output; marked (M,): all False, left so."""
    n = 0
    for i in range(W.shape[0]):
        for t in range(indptr[W[i]], indptr[W[i] + 1]):
            if not marked[indices[t]]:
                marked[indices[t]] = True
                n += 1
    rows = np.empty(n, dtype=np.int64)
    untouched = np.zeros(3)
    n = 0
    for m in range(y.shape[0]):
        if marked[m]:
            rows[n] = m
            n += 1
            marked[m] = False
        else:
            untouched[0] += 1.0
            untouched[1] += y[m]
            untouched[2] += y[m] * y[m]
    return (y, y_mean, centered, rows, untouched)


@numba.njit(cache=True)
def _curvature(indptr, data, mu, centered, W, n_obs):  # type: ignore[no-untyped-def]
    """(K,) ||x~_k||^2 = ||x_k||^2 - M mu_k^2 of each slot."""
    out = np.empty(W.shape[0])
    for i in range(W.shape[0]):
        acc = 0.0
        for t in range(indptr[W[i]], indptr[W[i] + 1]):
            acc += data[t] * data[t]
        out[i] = acc - n_obs * mu[W[i]] * mu[W[i]] if centered else acc
    return out


@numba.njit(cache=True)
def _residual(columns, target, b, r):  # type: ignore[no-untyped-def]
    """r = y - X_W b (uncentered) on the touched rows (elsewhere r = y, never read); returns
    its sum over all rows."""
    indptr, indices, data, _, W, _ = columns
    y, rows, untouched = target[0], target[3], target[4]
    for m in rows:
        r[m] = y[m]
    for i in range(b.shape[0]):
        if b[i] != 0.0:
            for t in range(indptr[W[i]], indptr[W[i] + 1]):
                r[indices[t]] -= data[t] * b[i]
    total = untouched[1]
    for m in rows:
        total += r[m]
    return total


@numba.njit(cache=True)
def _correlation(columns, centered, i, r, total):  # type: ignore[no-untyped-def]
    """x~_k^T r_c of slot i, for the residual r with sum `total`."""
    indptr, indices, data, mu, W, _ = columns
    acc = 0.0
    for t in range(indptr[W[i]], indptr[W[i] + 1]):
        acc += data[t] * r[indices[t]]
    if centered:
        acc -= mu[W[i]] * total
    return acc


@numba.njit(cache=True)
def _move(columns, centered, i, delta, r, total):  # type: ignore[no-untyped-def]
    """b_i += delta: r and its sum follow; returns the new sum."""
    indptr, indices, data, mu, W, _ = columns
    for t in range(indptr[W[i]], indptr[W[i] + 1]):
        r[indices[t]] -= data[t] * delta
    if centered:
        total -= delta * r.shape[0] * mu[W[i]]
    return total


@numba.njit(cache=True)
def _sums(target, r, total):  # type: ignore[no-untyped-def]
    """||r_c||^2 and <y_c, r_c> of the centered residual and target: over the touched rows, plus
    the untouched rows' closed forms (there r = y)."""
    y, y_mean, centered, rows, untouched = target
    count, y_sum, y_squares = untouched[0], untouched[1], untouched[2]
    shift = total / y.shape[0] if centered else 0.0
    center = y_mean if centered else 0.0
    rr = y_squares - 2 * shift * y_sum + count * shift * shift
    yr = y_squares - (center + shift) * y_sum + count * center * shift
    for m in rows:
        rc = r[m] - shift
        rr += rc * rc
        yr += (y[m] - center) * rc
    return rr, yr


@numba.njit(cache=True)
def _objective(target, w, b, r, total):  # type: ignore[no-untyped-def]
    rr, _ = _sums(target, r, total)
    value = rr / 2
    for i in range(b.shape[0]):
        value += w[i] * abs(b[i])
    return value


@numba.njit(cache=True)
def _solve(columns, target, w, b, tol, stop_gap, max_epochs, check_every):  # type: ignore[no-untyped-def]
    """One problem, b updated in place; returns (epochs, converged)."""
    K = b.shape[0]
    M = target[0].shape[0]
    r = np.empty(M)
    total = _residual(columns, target, b, r)
    history = np.zeros((ANDERSON + 1, K))
    filled = 0
    trial = np.empty(K)
    r_trial = np.empty(M)
    previous = _objective(target, w, b, r, total)
    for epoch in range(1, max_epochs + 1):
        total = _epoch(columns, target[2], w, b, r, total)
        history[filled] = b
        filled += 1
        if filled == ANDERSON + 1:
            filled = 0
            if _extrapolate(history, trial):
                total_trial = _residual(columns, target, trial, r_trial)
                if _objective(target, w, trial, r_trial, total_trial) < _objective(
                    target, w, b, r, total
                ):
                    b[:] = trial
                    for m in target[3]:
                        r[m] = r_trial[m]
                    total = total_trial
        if stop_gap:
            if epoch % check_every == 0 or epoch == max_epochs:
                total = _residual(columns, target, b, r)  # exact again: updates accumulate rounding
                if _gap(columns, target, w, b, r, total) <= tol:
                    _spread(columns, target, w, b, r, total, tol)
                    return epoch, True
        else:
            current = _objective(target, w, b, r, total)
            if abs(previous - current) <= tol * abs(current):
                return epoch, True
            previous = current
    return max_epochs, False


@numba.njit(cache=True)
def _epoch(columns, centered, w, b, r, total):  # type: ignore[no-untyped-def]
    """One cyclic pass: b_k <- the minimizer over b_k alone; returns the residual's new sum."""
    curvatures = columns[5]
    for i in range(b.shape[0]):
        curvature = curvatures[i]
        if curvature <= 0.0:
            continue  # a constant column: its coefficient stays where it is
        old = b[i]
        z = old + _correlation(columns, centered, i, r, total) / curvature
        threshold = w[i] / curvature
        new = z - threshold if z > threshold else (z + threshold if z < -threshold else 0.0)
        if new != old:
            b[i] = new
            total = _move(columns, centered, i, new - old, r, total)
    return total


@numba.njit(cache=True)
def _gap(columns, target, w, b, r, total):  # type: ignore[no-untyped-def]
    """The duality gap of `coordinate._gap` (the same dual point s r_c), from the residual."""
    violation = 0.0
    l1 = 0.0
    for i in range(b.shape[0]):
        l1 += w[i] * abs(b[i])
        correlation = abs(_correlation(columns, target[2], i, r, total))
        if correlation > 0.0:
            violation = max(violation, correlation / w[i] if w[i] > 0.0 else np.inf)
    rr, yr = _sums(target, r, total)
    s_max = 1.0 / violation if violation > 0.0 else np.inf
    if rr <= 0.0:
        return l1
    s = max(min(yr / rr, s_max), -s_max)
    return max(rr / 2 + l1 - (s * yr - s * s * rr / 2), 0.0)


@numba.njit(cache=True)
def _spread(columns, target, w, b, r, total, tol):  # type: ignore[no-untyped-def]
    """`coordinate._spread` on the equicorrelation set's Gram block, computed from its columns."""
    indptr, indices, data, mu, W, curvatures = columns
    centered = target[2]
    K = b.shape[0]
    M = r.shape[0]
    correlation = np.empty(K)
    for i in range(K):
        correlation[i] = _correlation(columns, centered, i, r, total)
    signs = equicorrelation_signs(correlation, b, w)
    where = np.nonzero(signs)[0]
    S = where.size
    if S == 0 or S > SPREAD_MAX:
        return
    features = W[where]
    system = _gram_of_set(indptr, indices, data, features, M)
    if centered:
        for i in range(S):
            for j in range(S):
                system[i, j] -= M * mu[features[i]] * mu[features[j]]
    q_set = correlation[where] + system @ b[where]  # X~_S^T y_c: b lives on the set
    ridge = np.finfo(np.float64).eps ** RIDGE_EXPONENT * curvatures.sum() / K
    trial = np.zeros(K)
    if not least_norm_trial(system, q_set, ridge, w, signs, trial):
        return
    r_trial = np.empty(M)
    total_trial = _residual(columns, target, trial, r_trial)
    if _gap(columns, target, w, trial, r_trial, total_trial) <= tol:
        b[:] = trial
