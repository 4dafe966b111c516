"""Batched FISTA on small quadratic Lasso problems, with a per-problem duality-gap certificate.

Each of B problems (one output restricted to its working set of K features) reads, in the mean
scale and scaled coordinates, ::

    F(b) = 1/2 b^T Q b - q^T b + yty/(2M) + sum_k w_k |b_k|,   Q = G/M (B, K, K), q = c/M (B, K),

with G the Gram block and c = X~_W^T y_c. All B problems advance together: one batched
matrix-vector product per iteration. The step is 1/L with L from a shared batched power iteration,
checked every step by backtracking (L doubles wherever the sufficient-decrease test fails) and
combined with gradient-based adaptive restart. A problem's result is taken as soon as it meets
its tolerance; the batch drops its finished problems whenever they are half of it, so it shrinks
as it converges without copying the Gram blocks at every finish.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor
from typing_extensions import Unpack

from circuitlasso.solve.options import INNER, InnerOptions, settle

LIPSCHITZ_MARGIN = 1.05
"""The power iteration's estimate of L (from below) is raised by 5 %, so that backtracking
rarely has to double it."""
BACKTRACK_SLACK = 1e-6
"""Relative slack of the sufficient-decrease test: rounding in the products must not count as a
step too long."""
POLISH_GAIN = 0.5
"""A polished point replaces a running iterate only where it at least halves the gap (one that
finishes must merely not raise it)."""
RIDGE_EXPONENT = 0.6
"""Ridge of the support systems: machine epsilon ** RIDGE_EXPONENT x the mean diagonal, large
enough to keep duplicate columns solvable, small enough (about 4e-10 in float64) to leave
well-posed supports' solutions within the gap tolerances."""
TINY = 1e-300
"""Denominator floor against division by zero, below any value that carries meaning."""


@dataclass(frozen=True)
class Subproblems:
    """B problems F(b) above: Q (B, K, K) symmetric PSD, q (B, K), yty (B,), w (B, K) >= 0."""

    Q: Tensor
    q: Tensor
    yty: Tensor
    w: Tensor


def duality_gap(rr: Tensor, yr: Tensor, l1: Tensor, s_max: Tensor) -> tuple[Tensor, Tensor]:
    """Duality gap and primal value of a Lasso point from residual statistics (all mean-scaled).

    rr = ||r||^2/M, yr = <y_c, r>/M, l1 = ``sum_k w_k |b_k|``, s_max = largest s for which s*r
    is dual feasible (``|x~_k^T s r|/M <= w_k`` for all k). The dual point is s*r with s the best
    feasible step along r: s = yr/rr clipped to [-s_max, s_max] (a residual anti-correlated with
    y_c gives a negative step, which feasibility bounds from below too). Returns (gap, primal),
    each (B,) float64.
    """
    primal = rr / 2 + l1
    s = torch.where(rr > 0, yr / rr.clamp_min(TINY), s_max)
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
        estimate = (x * y).sum(1) / (x * x).sum(1).clamp_min(TINY)
        x = y / y.norm(dim=1, keepdim=True).clamp_min(TINY)
    return estimate


def fista(
    problems: Subproblems, b0: Tensor, tol: Tensor, **options: Unpack[InnerOptions]
) -> tuple[Tensor, Tensor, Tensor]:
    """Minimize F above for B problems at once.

    b0: (B, K) warm start, tol: (B,) absolute gap tolerance (stop="gap") or relative objective
    decrease (stop="objective"); options: stop, max_iter, check_every (defaults
    `options.INNER`). Every `check_every` iterations, problems whose support and signs did not
    change since the last check also try the exact solution for that support and signs
    (`polish`); it is kept where it at least halves the gap. A problem that meets its tolerance
    tries it once more and keeps it where the gap is not larger, so that a solution does not
    depend on when its batch happened to stop (the same support gives the same coefficients).
    The iterations run in float64 (the gap's cancellations sit near float32 rounding; these
    kernels are small, so it costs little).
    Returns b (B, K) in the dtype of b0, iterations (B,) and converged (B,).
    """
    settings = settle(INNER, InnerOptions, options)
    stop, max_iter, check_every = settings.stop, settings.max_iter, settings.check_every
    out_dtype = b0.dtype
    Q, q, w, b0 = problems.Q.double(), problems.q.double(), problems.w.double(), b0.double()
    yty = problems.yty
    B = Q.shape[0]
    out_b = b0.clone()
    out_iter = torch.zeros(B, dtype=torch.int64, device=Q.device)
    out_conv = torch.zeros(B, dtype=torch.bool, device=Q.device)
    if B == 0:
        return out_b.to(out_dtype), out_iter, out_conv
    batch = _Batch.start(Q, q, yty, w, b0.clone(), tol)
    for it in range(1, max_iter + 1):
        too_long = batch.step()
        if stop == "objective":
            current = batch.objective()
            done = ((batch.previous - current).abs() <= batch.tol * current.abs()) & ~too_long
            batch.previous = current
        elif it % check_every == 0 or it == max_iter:
            done = batch.polished_gap() <= batch.tol
        else:
            continue
        if it == max_iter:
            break
        new = done & ~batch.finished
        if bool(new.any()):
            out_b[batch.rows[new]] = batch.b[new]
            out_iter[batch.rows[new]] = it
            out_conv[batch.rows[new]] = True
            batch.finished |= new
            if bool(batch.finished.all()):
                return out_b.to(out_dtype), out_iter, out_conv
            if 2 * int(batch.finished.sum()) >= batch.finished.numel():
                batch.keep(~batch.finished)  # copying Q pays off: compact
    batch.keep(~batch.finished)
    out_b[batch.rows] = batch.b
    out_iter[batch.rows] = max_iter
    if stop == "gap":
        out_conv[batch.rows] = batch.gap() <= batch.tol
    return out_b.to(out_dtype), out_iter, out_conv


@dataclass(slots=True)
class _Batch:
    """The problems of a `fista` call still in its batch: row i is problem rows[i] of the call.

    rows (B,); Q (B, K, K), q (B, K), yty (B,), w (B, K), tol (B,) as in `fista`; b, Qb (B, K)
    the iterate and Q b; v, Qv (B, K) the extrapolated point and Q v; t (B,) the momentum
    sequence; L (B,) the Lipschitz estimates; previous (B,) the last objective (stop="objective");
    last_signs (B, K) the signs at the last gap check; polished_signs (B, K) the signs last
    polished (2 where none yet); finished (B,) the problems whose result is taken.
    """

    rows: Tensor
    Q: Tensor
    q: Tensor
    yty: Tensor
    w: Tensor
    tol: Tensor
    b: Tensor
    Qb: Tensor
    v: Tensor
    Qv: Tensor
    t: Tensor
    L: Tensor
    previous: Tensor
    last_signs: Tensor
    polished_signs: Tensor
    finished: Tensor

    @classmethod
    def start(cls, Q: Tensor, q: Tensor, yty: Tensor, w: Tensor, b: Tensor, tol: Tensor) -> _Batch:
        """All B problems at b (B, K), with no momentum and L from `lipschitz`."""
        B = Q.shape[0]
        Qb = bmv(Q, b)
        rows = torch.arange(B, device=Q.device)
        t = torch.ones(B, dtype=Q.dtype, device=Q.device)
        L = (lipschitz(Q) * LIPSCHITZ_MARGIN).clamp_min(torch.finfo(Q.dtype).tiny)
        previous = _objective(b, Qb, q, yty, w)
        signs, unpolished = torch.sign(b), torch.full_like(b, 2.0)
        finished = torch.zeros(B, dtype=torch.bool, device=Q.device)
        # the fields in order; the extrapolated point (v, Qv) starts at (b, Qb)
        return cls(
            rows, Q, q, yty, w, tol, b, Qb, b, Qb, t, L, previous, signs, unpolished, finished
        )

    def keep(self, mask: Tensor) -> None:
        """Keep only the problems where mask (B,) is True, in every tensor."""
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name)[mask])

    def objective(self) -> Tensor:
        """F at b, (B,)."""
        return _objective(self.b, self.Qb, self.q, self.yty, self.w)

    def gap(self) -> Tensor:
        """Duality gap at b, (B,)."""
        return restricted_gap(self.b, self.Qb, self.q, self.yty, self.w)

    def step(self) -> Tensor:
        """One FISTA step with backtracking and adaptive restart; returns (B,) where L doubled
        (those problems stay at b)."""
        Q, q, w, b, Qb, v, Qv = self.Q, self.q, self.w, self.b, self.Qb, self.v, self.Qv
        L, t = self.L, self.t
        z = _soft_threshold(v - (Qv - q) / L.unsqueeze(1), w / L.unsqueeze(1))
        Qz = bmv(Q, z)
        dz = z - v
        too_long = (dz * (Qz - Qv)).sum(1) > L * (dz * dz).sum(1) * (1 + BACKTRACK_SLACK)
        if bool(too_long.any()):
            L = torch.where(too_long, 2 * L, L)
            stay = too_long.unsqueeze(1)
            z, Qz = torch.where(stay, b, z), torch.where(stay, Qb, Qz)
            t = torch.where(too_long, torch.ones_like(t), t)
        t_next = (1 + torch.sqrt(1 + 4 * t * t)) / 2
        momentum = (t - 1) / t_next
        restart = ((v - z) * (z - b)).sum(1) > 0
        momentum = torch.where(restart, torch.zeros_like(momentum), momentum)
        self.L, self.t = L, torch.where(restart, torch.ones_like(t_next), t_next)
        self.v = z + momentum.unsqueeze(1) * (z - b)
        self.Qv = Qz + momentum.unsqueeze(1) * (Qz - Qb)
        self.b, self.Qb = z, Qz
        return too_long

    def polished_gap(self) -> Tensor:
        """Duality gap (B,) after `polish` where the signs are stable or the gap meets tol (see
        `fista`); polished points replace b and v and restart the momentum."""
        gap = self.gap()
        signs = torch.sign(self.b)
        finishing = gap <= self.tol
        tried = (signs == self.polished_signs).all(1)
        stable = (signs == self.last_signs).all(1) & ~finishing & ~tried
        self.last_signs = signs
        if bool((stable | finishing).any()):
            idx = (stable | finishing).nonzero().squeeze(1)
            self.polished_signs[idx] = signs[idx]
            Q, q, w = self.Q[idx], self.q[idx], self.w[idx]
            b_p = polish(Q, q, w, signs[idx])
            Qb_p = bmv(Q, b_p)
            gap_p = restricted_gap(b_p, Qb_p, q, self.yty[idx], w)
            better = torch.where(finishing[idx], gap_p <= gap[idx], gap_p < POLISH_GAIN * gap[idx])
            idx, b_p, Qb_p = idx[better], b_p[better], Qb_p[better]
            self.b[idx], self.Qb[idx], self.v[idx], self.Qv[idx] = b_p, Qb_p, b_p, Qb_p
            gap[idx], self.t[idx] = gap_p[better], 1.0
        return gap


def polish(Q: Tensor, q: Tensor, w: Tensor, signs: Tensor) -> Tensor:
    """Exact minimizer of F on the support and signs `signs` (B, K): Q_SS b_S = q_S - w_S s_S.

    Each system is solved at the size S of the largest support in the batch, not K. A ridge
    (RIDGE_EXPONENT) keeps duplicate columns solvable (their weight is then split evenly).
    Problems whose solve fails keep b = 0 (their gap is then not lower, so the caller ignores
    them).
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
    ridge = torch.finfo(Q.dtype).eps ** RIDGE_EXPONENT * diag.mean(1, keepdim=True)
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


def restricted_gap(b: Tensor, Qb: Tensor, q: Tensor, yty: Tensor, w: Tensor) -> Tensor:
    bd, qd = b.double(), q.double()
    qb = (qd * bd).sum(1)
    rr = yty - 2 * qb + (bd * Qb.double()).sum(1)
    yr = yty - qb
    residual_corr = (qd - Qb.double()).abs()
    violation = (residual_corr / w.double().clamp_min(TINY)).amax(1)
    s_max = torch.where(violation > 0, 1.0 / violation.clamp_min(TINY), torch.inf)
    gap, _ = duality_gap(rr, yr, (w.double() * bd.abs()).sum(1), s_max)
    return gap
