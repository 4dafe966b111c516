"""Batched FISTA on small quadratic Lasso problems, with a per-problem duality-gap certificate.

Each of B problems (one output restricted to its working set of K features) reads, in the mean
scale and scaled coordinates,

    F(b) = 1/2 b^T Q b - q^T b + yty/(2M) + sum_k w_k |b_k|,   Q = G/M (B, K, K), q = c/M (B, K),

with G the Gram block and c = X~_W^T y_c. All B problems advance together: one batched
matrix-vector product per iteration. The step is 1/L with L from a shared batched power iteration,
checked every step by backtracking (L doubles wherever the sufficient-decrease test fails) and
combined with gradient-based adaptive restart. A problem's result is taken as soon as it meets
its tolerance; the batch drops its finished problems whenever they are half of it, so it shrinks
as it converges without copying the Gram blocks at every finish.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

StopRule = Literal["gap", "objective"]


def duality_gap(rr: Tensor, yr: Tensor, l1: Tensor, s_max: Tensor) -> tuple[Tensor, Tensor]:
    """Duality gap and primal value of a Lasso point from residual statistics (all mean-scaled).

    rr = ||r||^2/M, yr = <y_c, r>/M, l1 = sum_k w_k |b_k|, s_max = largest s for which s*r is
    dual feasible (|x~_k^T s r|/M <= w_k for all k). The dual point is s*r with s the best
    feasible step along r: s = yr/rr clipped to [-s_max, s_max] (a residual anti-correlated with
    y_c gives a negative step, which feasibility bounds from below too). Returns (gap, primal),
    each (B,) float64.
    """
    primal = rr / 2 + l1
    s = torch.where(rr > 0, yr / rr.clamp_min(1e-300), s_max)
    s = torch.maximum(torch.minimum(s, s_max), -s_max)
    dual = s * yr - s * s * rr / 2
    return (primal - dual).clamp_min(0.0), primal


def _soft_threshold(x: Tensor, threshold: Tensor) -> Tensor:
    return torch.sign(x) * (x.abs() - threshold).clamp_min(0.0)


def bmv(Q: Tensor, x: Tensor) -> Tensor:
    """Q x for symmetric Q (B, K, K), x (B, K), computed as x^T Q: on the CPU batched row-vector
    products run several times faster than batched matrix-vector ones."""
    return torch.bmm(x.unsqueeze(1), Q).squeeze(1)


def lipschitz(Q: Tensor, n_iter: int = 8) -> Tensor:
    """(B,) estimate of the largest eigenvalue of each symmetric PSD block Q (B, K, K), from
    below (FISTA's backtracking doubles it where it is too low)."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.rand(Q.shape[:2], generator=generator, dtype=Q.dtype).to(Q.device) + 0.5
    estimate = torch.zeros(Q.shape[0], dtype=Q.dtype, device=Q.device)
    for _ in range(n_iter):
        y = bmv(Q, x)
        estimate = (x * y).sum(1) / (x * x).sum(1).clamp_min(1e-300)
        x = y / y.norm(dim=1, keepdim=True).clamp_min(1e-300)
    return estimate


def fista(
    Q: Tensor,
    q: Tensor,
    yty: Tensor,
    w: Tensor,
    b0: Tensor,
    tol: Tensor,
    *,
    stop: StopRule = "gap",
    max_iter: int = 10_000,
    check_every: int = 10,
) -> tuple[Tensor, Tensor, Tensor]:
    """Minimize F above for B problems at once.

    Q: (B, K, K), q: (B, K), yty: (B,) ||y_c||^2 / M, w: (B, K) penalty weights, b0: (B, K)
    warm start, tol: (B,) absolute gap tolerance (stop="gap") or relative objective decrease
    (stop="objective"). Every `check_every` iterations, problems whose support and signs did not
    change since the last check also try the exact solution for that support and signs
    (`polish`); it is kept where it at least halves the gap. A problem that meets its tolerance
    tries it once more and keeps it where the gap is not larger, so that a solution does not
    depend on when its batch happened to stop (the same support gives the same coefficients).
    The iterations run in float64 (the gap's cancellations sit near float32 rounding; these
    kernels are small, so it costs little).
    Returns b (B, K) in the dtype of b0, iterations (B,) and converged (B,).
    """
    out_dtype = b0.dtype
    Q, q, w, b0 = Q.double(), q.double(), w.double(), b0.double()
    B = Q.shape[0]
    out_b = b0.clone()
    out_iter = torch.zeros(B, dtype=torch.int64, device=Q.device)
    out_conv = torch.zeros(B, dtype=torch.bool, device=Q.device)
    if B == 0:
        return out_b.to(out_dtype), out_iter, out_conv
    rows = torch.arange(B, device=Q.device)
    finished = torch.zeros(B, dtype=torch.bool, device=Q.device)
    L = (lipschitz(Q) * 1.05).clamp_min(torch.finfo(Q.dtype).tiny)
    b = b0.clone()
    Qb = bmv(Q, b)
    v, Qv = b, Qb
    t = torch.ones(B, dtype=Q.dtype, device=Q.device)
    previous = _objective(b, Qb, q, yty, w)
    last_signs = torch.sign(b)
    polished_signs = torch.full_like(b, 2.0)  # signs each problem last polished (none yet)
    for it in range(1, max_iter + 1):
        z = _soft_threshold(v - (Qv - q) / L.unsqueeze(1), w / L.unsqueeze(1))
        Qz = bmv(Q, z)
        dz = z - v
        too_long = (dz * (Qz - Qv)).sum(1) > L * (dz * dz).sum(1) * (1 + 1e-6)
        if bool(too_long.any()):
            L = torch.where(too_long, 2 * L, L)
            keep = too_long.unsqueeze(1)
            z, Qz = torch.where(keep, b, z), torch.where(keep, Qb, Qz)
            t = torch.where(too_long, torch.ones_like(t), t)
        t_next = (1 + torch.sqrt(1 + 4 * t * t)) / 2
        momentum = (t - 1) / t_next
        restart = ((v - z) * (z - b)).sum(1) > 0
        momentum = torch.where(restart, torch.zeros_like(momentum), momentum)
        t = torch.where(restart, torch.ones_like(t_next), t_next)
        v = z + momentum.unsqueeze(1) * (z - b)
        Qv = Qz + momentum.unsqueeze(1) * (Qz - Qb)
        b, Qb = z, Qz
        if stop == "objective":
            current = _objective(b, Qb, q, yty, w)
            done = ((previous - current).abs() <= tol * current.abs()) & ~too_long
            previous = current
        elif it % check_every == 0 or it == max_iter:
            gap = _restricted_gap(b, Qb, q, yty, w)
            signs = torch.sign(b)
            finishing = gap <= tol
            tried = (signs == polished_signs).all(1)
            stable = (signs == last_signs).all(1) & ~finishing & ~tried
            last_signs = signs
            if bool((stable | finishing).any()):
                idx = (stable | finishing).nonzero().squeeze(1)
                polished_signs[idx] = signs[idx]
                b_p = polish(Q[idx], q[idx], w[idx], signs[idx])
                Qb_p = bmv(Q[idx], b_p)
                gap_p = _restricted_gap(b_p, Qb_p, q[idx], yty[idx], w[idx])
                better = torch.where(finishing[idx], gap_p <= gap[idx], gap_p < 0.5 * gap[idx])
                idx, b_p, Qb_p = idx[better], b_p[better], Qb_p[better]
                b[idx], Qb[idx], v[idx], Qv[idx] = b_p, Qb_p, b_p, Qb_p
                gap[idx], t[idx] = gap_p[better], 1.0
            done = gap <= tol
        else:
            continue
        if it == max_iter:
            break
        new = done & ~finished
        if bool(new.any()):
            out_b[rows[new]] = b[new]
            out_iter[rows[new]] = it
            out_conv[rows[new]] = True
            finished |= new
            if bool(finished.all()):
                return out_b.to(out_dtype), out_iter, out_conv
            if 2 * int(finished.sum()) >= finished.numel():  # copying Q pays off: compact
                keep = ~finished
                rows, Q, q = rows[keep], Q[keep], q[keep]
                yty, w, tol = yty[keep], w[keep], tol[keep]
                b, Qb, v, Qv, t, L = b[keep], Qb[keep], v[keep], Qv[keep], t[keep], L[keep]
                previous, last_signs, finished = previous[keep], last_signs[keep], finished[keep]
                polished_signs = polished_signs[keep]
    left = ~finished
    rows, b = rows[left], b[left]
    out_b[rows] = b
    out_iter[rows] = max_iter
    if stop == "gap":
        out_conv[rows] = _restricted_gap(b, Qb[left], q[left], yty[left], w[left]) <= tol[left]
    return out_b.to(out_dtype), out_iter, out_conv


def polish(Q: Tensor, q: Tensor, w: Tensor, signs: Tensor) -> Tensor:
    """Exact minimizer of F on the support and signs `signs` (B, K): Q_SS b_S = q_S - w_S s_S.

    Each system is solved at the size S of the largest support in the batch, not K. A ridge of
    machine epsilon ** 0.6 x the mean diagonal keeps duplicate columns solvable (their weight is
    then split evenly). Problems whose solve fails keep b = 0 (their gap is then not lower, so
    the caller ignores them).
    """
    B, K = signs.shape
    support = signs != 0
    n_support = support.sum(1)
    S = int(n_support.max()) if B else 0
    if S == 0:
        return torch.zeros_like(q)
    where = torch.argsort((~support).to(torch.int8), dim=1, stable=True)[:, :S]  # (B, S)
    inside = torch.arange(S, device=Q.device).unsqueeze(0) < n_support.unsqueeze(1)
    rows_s = Q.gather(1, where.unsqueeze(2).expand(B, S, K))
    Q_s = rows_s.gather(2, where.unsqueeze(1).expand(B, S, S))
    diag = torch.diagonal(Q, dim1=1, dim2=2)
    ridge = torch.finfo(Q.dtype).eps ** 0.6 * diag.mean(1, keepdim=True)
    pair = inside.unsqueeze(2) & inside.unsqueeze(1)
    system = torch.where(pair, Q_s, torch.zeros((), dtype=Q.dtype, device=Q.device))
    system.diagonal(dim1=1, dim2=2).add_(torch.where(inside, ridge, torch.ones_like(Q_s[:, 0])))
    rhs = torch.where(inside, (q - w * signs).gather(1, where), torch.zeros((), dtype=q.dtype))
    factor, info = torch.linalg.cholesky_ex(system)
    solution_s = torch.cholesky_solve(rhs.unsqueeze(2), factor).squeeze(2)
    solution = torch.zeros_like(q).scatter_(1, where, torch.where(inside, solution_s, 0.0))
    consistent = (torch.sign(solution) == signs).all(1) & (info == 0)
    return torch.where(consistent.unsqueeze(1), solution, torch.zeros_like(solution))


def _objective(b: Tensor, Qb: Tensor, q: Tensor, yty: Tensor, w: Tensor) -> Tensor:
    bd = b.double()
    return (
        (bd * Qb.double()).sum(1) / 2
        - (q.double() * bd).sum(1)
        + yty / 2
        + (w.double() * bd.abs()).sum(1)
    )


def _restricted_gap(b: Tensor, Qb: Tensor, q: Tensor, yty: Tensor, w: Tensor) -> Tensor:
    bd, qd = b.double(), q.double()
    qb = (qd * bd).sum(1)
    rr = yty - 2 * qb + (bd * Qb.double()).sum(1)
    yr = yty - qb
    residual_corr = (qd - Qb.double()).abs()
    violation = (residual_corr / w.double().clamp_min(1e-300)).amax(1)
    s_max = torch.where(violation > 0, 1.0 / violation.clamp_min(1e-300), torch.inf)
    gap, _ = duality_gap(rr, yr, (w.double() * bd.abs()).sum(1), s_max)
    return gap
