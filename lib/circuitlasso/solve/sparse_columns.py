"""The steps of coordinate descent on a working set's sparse columns themselves (no Gram block):
the column form of `circuitlasso.solve.coordinate`'s problems.

With Q = X~_W^T X~_W and q = X~_W^T y_c never formed, an output keeps its residual
r = y - X_W b (M,) over the scaled, uncentered columns X_W and its sum S, so that with
centering (X~ = X - 1 mu^T)

    x~_k^T (y_c - X~_W b) = x_k^T r - mu_k S,

and a coordinate's update costs its column's nonzeros. Only the rows the set's columns touch are
ever read (elsewhere r = y: their share of ||r_c||^2 and <y_c, r_c> comes in closed form).

A problem travels as the tuple of `coordinate.column_problem`; these functions unpack what they
need of it: X^T's CSR parts (indptr, indices, data), the column means mu, the set W (K,), each
slot's ||x~_k||^2 (curvature), the target y (M,), its mean, whether to center, the touched rows
(R,) and of the other rows their count, sum of y and sum of y^2 (untouched, (3,)).
"""

from __future__ import annotations

import numba
import numpy as np

from circuitlasso.solve.sparse_kernels import gram_of_set

# the places of the column form's parts in a problem tuple (see `coordinate.column_problem`)
INDPTR, INDICES, DATA, MU, SET, CURVATURE, Y, Y_MEAN, CENTERED, ROWS, UNTOUCHED = range(4, 15)


@numba.njit(cache=True)
def curvature(indptr, data, mu, centered, W, n_obs):  # type: ignore[no-untyped-def]
    """(K,) ||x~_k||^2 = ||x_k||^2 - M mu_k^2 of each slot."""
    out = np.empty(W.shape[0])
    for i in range(W.shape[0]):
        acc = 0.0
        for t in range(indptr[W[i]], indptr[W[i] + 1]):
            acc += data[t] * data[t]
        out[i] = acc - n_obs * mu[W[i]] * mu[W[i]] if centered else acc
    return out


@numba.njit(cache=True)
def touched_rows(indptr, indices, W, y, marked):  # type: ignore[no-untyped-def]
    """The rows (R,) W's columns touch, and of the others their count, sum of y and of y^2 (3,);
    marked (M,): all False, left so."""
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
    return rows, untouched


@numba.njit(cache=True)
def residual(P, b, r):  # type: ignore[no-untyped-def]
    """r = y - X_W b on the touched rows (elsewhere r = y, never read); returns its sum over
    all rows."""
    indptr, indices, data, W = P[INDPTR], P[INDICES], P[DATA], P[SET]
    y, rows = P[Y], P[ROWS]
    for m in rows:
        r[m] = y[m]
    for i in range(b.shape[0]):
        if b[i] != 0.0:
            for t in range(indptr[W[i]], indptr[W[i] + 1]):
                r[indices[t]] -= data[t] * b[i]
    total = P[UNTOUCHED][1]
    for m in rows:
        total += r[m]
    return total


@numba.njit(cache=True)
def correlation(P, i, r, total):  # type: ignore[no-untyped-def]
    """x~_k^T r_c of slot i, for the residual r with sum `total`."""
    indptr, indices, data, W = P[INDPTR], P[INDICES], P[DATA], P[SET]
    acc = 0.0
    for t in range(indptr[W[i]], indptr[W[i] + 1]):
        acc += data[t] * r[indices[t]]
    if P[CENTERED]:
        acc -= P[MU][W[i]] * total
    return acc


@numba.njit(cache=True)
def epoch(P, w, b, r, total):  # type: ignore[no-untyped-def]
    """One cyclic pass: b_k <- the minimizer over b_k alone; returns the residual's new sum."""
    indptr, indices, data, W, curvatures = P[INDPTR], P[INDICES], P[DATA], P[SET], P[CURVATURE]
    shift_per_unit = P[Y].shape[0] if P[CENTERED] else 0
    for i in range(b.shape[0]):
        curvature_i = curvatures[i]
        if curvature_i <= 0.0:
            continue  # a constant column: its coefficient stays where it is
        old = b[i]
        z = old + correlation(P, i, r, total) / curvature_i
        threshold = w[i] / curvature_i
        new = z - threshold if z > threshold else (z + threshold if z < -threshold else 0.0)
        if new != old:
            b[i] = new
            delta = new - old
            for t in range(indptr[W[i]], indptr[W[i] + 1]):
                r[indices[t]] -= data[t] * delta
            if shift_per_unit:
                total -= delta * shift_per_unit * P[MU][W[i]]
    return total


@numba.njit(cache=True)
def sums(P, r, total):  # type: ignore[no-untyped-def]
    """||r_c||^2 and <y_c, r_c>: over the touched rows, plus the others' closed forms."""
    y, rows, untouched, centered = P[Y], P[ROWS], P[UNTOUCHED], P[CENTERED]
    count, y_sum, y_squares = untouched[0], untouched[1], untouched[2]
    shift = total / y.shape[0] if centered else 0.0
    center = P[Y_MEAN] if centered else 0.0
    rr = y_squares - 2 * shift * y_sum + count * shift * shift
    yr = y_squares - (center + shift) * y_sum + count * center * shift
    for m in rows:
        rc = r[m] - shift
        rr += rc * rc
        yr += (y[m] - center) * rc
    return rr, yr


@numba.njit(cache=True)
def accept(P, r, r_trial):  # type: ignore[no-untyped-def]
    """r = r_trial on the touched rows."""
    for m in P[ROWS]:
        r[m] = r_trial[m]


@numba.njit(cache=True)
def set_system(P, where, correlations, b):  # type: ignore[no-untyped-def]
    """The Gram block (S, S) of the slots `where`, from their columns, and their cross products
    with the target (S,): the correlations plus the block times b (b lives on the set)."""
    W, mu = P[SET], P[MU]
    features = W[where]
    system = gram_of_set(P[INDPTR], P[INDICES], P[DATA], features, P[Y].shape[0])
    if P[CENTERED]:
        M = P[Y].shape[0]
        for i in range(where.size):
            for j in range(where.size):
                system[i, j] -= M * mu[features[i]] * mu[features[j]]
    return system, correlations[where] + system @ b[where]
