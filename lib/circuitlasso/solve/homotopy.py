"""The Lasso path (homotopy, LARS with the Lasso modification) of many outputs at once.

For few observations (M < p, the normal case for model components: a few hundred prompts against
thousands of component columns) the Lasso solution has at most M nonzeros, and the path from
lam_max down to lam takes about as many steps as the solution has nonzeros. Each step moves
every output of a batch along its own path to its next event (a feature joins, a coefficient
reaches zero, or the output reaches its lam) with one dense product ``X~^T (X~_A d_A)`` over
all outputs, so its cost follows the data's size, not the conditioning that slows a first-order
method down on these rank-deficient problems. The result is exact up to rounding; the caller
certifies it (and continues from it) with the working-set engine.

In scaled coordinates (as in `circuitlasso.solve.problems`) output j minimizes
``||y_j - X~ b||^2 / (2M) + lam_j sum_k omega_k |b_k|``. Along the path the correlations
``c = X~^T r / M`` of the active features A equal ``lam omega_A s_A`` and the direction is
``d_A = (X~_A^T X~_A / M)^-1 omega_A s_A``; each output keeps the inverse of its active Gram
block, updated as features join (a bordered inverse) and leave (a Schur complement). A feature
that would join while lying in the span of the active ones is left out until a feature leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from circuitlasso.solve._sparse import csr_from_parts

DEPENDENT = 1e-9
"""A joining feature whose squared distance to the active features' span is below this share
of its own squared norm is left out (its active Gram block would be singular)."""
RESYNC_EVERY = 32
"""Steps between exact recomputations of the correlations (each step updates them)."""


@dataclass(frozen=True)
class PathSolution:
    """Each output's coefficients b (q, S) on features W (q, S) (sorted where b != 0, padding
    b = 0), the path's steps taken, and which outputs reached their lam (q,)."""

    W: Tensor
    b: Tensor
    steps: int
    reached: Tensor


class _Active:
    """Per-output active sets, padded to a common width S: features A (q, S), coefficients
    b (q, S), signs s (q, S), sizes n (q,) and the inverse H (q, S, S) of each active Gram block
    (zero outside its n x n corner)."""

    def __init__(self, q: int, dtype: torch.dtype, device: torch.device) -> None:
        self.S = 16
        self.H = torch.zeros(q, self.S, self.S, dtype=dtype, device=device)
        self.A = torch.zeros(q, self.S, dtype=torch.int64, device=device)
        self.b = torch.zeros(q, self.S, dtype=dtype, device=device)
        self.s = torch.zeros(q, self.S, dtype=dtype, device=device)
        self.n = torch.zeros(q, dtype=torch.int64, device=device)

    def inside(self) -> Tensor:
        """(q, S) True at each output's first n positions."""
        return torch.arange(self.S, device=self.n.device).unsqueeze(0) < self.n.unsqueeze(1)

    def widen(self) -> None:
        """Double S where some active set is full."""
        if int(self.n.max()) < self.S:
            return
        pad = torch.nn.functional.pad
        self.H = pad(self.H, (0, self.S, 0, self.S))
        self.A, self.b, self.s = (pad(t, (0, self.S)) for t in (self.A, self.b, self.s))
        self.S *= 2

    def join(self, rows: Tensor, k: Tensor, v: Tensor, g: Tensor, sign: Tensor) -> Tensor:
        """Feature k (B,) joins the active set of outputs `rows` (B,), given its Gram entries
        with the active features v (B, S) (zero outside) and with itself g (B,). Returns (B,)
        where it was independent of them (elsewhere nothing changes)."""
        H = self.H[rows]
        w = torch.bmm(H, v.unsqueeze(2)).squeeze(2)
        sigma = g - (v * w).sum(1)
        ok = sigma > DEPENDENT * g
        rows, k, w, sigma, sign, H = rows[ok], k[ok], w[ok], sigma[ok], sign[ok], H[ok]
        at, ar = self.n[rows], torch.arange(rows.numel(), device=rows.device)
        ws = w / sigma.unsqueeze(1)
        H += ws.unsqueeze(2) * w.unsqueeze(1)
        H[ar, at, :] = -ws
        H[ar, :, at] = -ws
        H[ar, at, at] = 1 / sigma
        self.H[rows] = H
        self.A[rows, at], self.b[rows, at], self.s[rows, at] = k, 0.0, sign
        self.n[rows] += 1
        return ok

    def leave(self, rows: Tensor, at: Tensor) -> None:
        """The feature at position `at` (B,) leaves the active set of outputs `rows` (B,): it is
        swapped with the last one, whose row and column of H are then eliminated."""
        B, S = rows.numel(), self.S
        ar, last = torch.arange(B, device=rows.device), self.n[rows] - 1
        perm = torch.arange(S, device=rows.device).repeat(B, 1)
        perm[ar, at], perm[ar, last] = last, at
        H = self.H[rows].gather(1, perm.unsqueeze(2).expand(B, S, S))
        H = H.gather(2, perm.unsqueeze(1).expand(B, S, S))
        for name in ("A", "b", "s"):
            getattr(self, name)[rows] = getattr(self, name)[rows].gather(1, perm)
        h = H[ar, :, last]
        H -= h.unsqueeze(2) * h.unsqueeze(1) / H[ar, last, last].view(B, 1, 1)
        H[ar, last, :], H[ar, :, last] = 0.0, 0.0
        self.H[rows] = H
        self.A[rows, last], self.b[rows, last], self.s[rows, last] = 0, 0.0, 0.0
        self.n[rows] -= 1

    def dense(self, values: Tensor, p: int) -> Tensor:
        """values (q, S) placed at the active features: a (q, p) CSR matrix (its padding
        entries are explicit zeros)."""
        q = values.shape[0]
        crow = torch.arange(q + 1, device=values.device) * self.S
        masked = torch.where(self.inside(), values, 0.0)
        return csr_from_parts(crow, self.A.reshape(-1), masked.reshape(-1), (q, p))


def lasso_path_to(
    x: Tensor,
    y: Tensor,
    lam: Tensor,
    omega: Tensor,
    *,
    gram: Tensor | None = None,
    max_steps: int | None = None,
) -> PathSolution:
    """Follow every output's Lasso path from its lam_max down to its ``lam``.

    x: (M, p) float64 scaled predictors X~; y: (M, q) float64 centered targets; lam: (q,);
    omega: (p,) > 0 feature weights; gram: optional (p, p) ``X~^T X~`` (the Gram entries of a
    joining feature are then read from it rather than computed); max_steps: at most this many
    events per output (default ``4 min(M, p) + 64``). Outputs that have not reached their lam
    by then stop where they are, a point of their path.
    """
    M, p = x.shape
    q = y.shape[1]
    device, dtype = x.device, x.dtype
    xt = x.t().contiguous()
    c = xt @ y / M
    weights = omega.unsqueeze(1)
    lam_now = (c.abs() / weights).amax(0)
    reached = lam_now <= lam
    lam_now = torch.maximum(lam_now, lam)
    active = _Active(q, dtype, device)
    blocked = torch.zeros(p, q, dtype=torch.bool, device=device)  # active or left out
    sq_norms = (x * x).sum(0) / M
    rows = torch.arange(q, device=device)
    inf = torch.tensor(torch.inf, dtype=dtype, device=device)
    joining = torch.where(reached, -1, (c.abs() / weights).argmax(0))
    max_steps = 4 * min(M, p) + 64 if max_steps is None else max_steps
    step = 0
    for step in range(max_steps + 1):
        join = joining >= 0
        if bool(join.any()):
            active.widen()
            r, k = rows[join], joining[join]
            if gram is not None:
                v = gram[k.unsqueeze(1), active.A[r]] / M
            else:
                v = torch.bmm(xt[active.A[r]], xt[k].unsqueeze(2)).squeeze(2) / M
            v = torch.where(active.inside()[r], v, 0.0)
            active.join(r, k, v, sq_norms[k], torch.sign(c[k, r]))
            blocked[k, r] = True  # joined, or left out while dependent
        joining.fill_(-1)
        if bool(reached.all()) or step == max_steps:
            break
        live = active.inside() & ~reached.unsqueeze(1)
        d = torch.bmm(active.H, torch.where(live, omega[active.A] * active.s, 0.0).unsqueeze(2))
        d = torch.where(live, d.squeeze(2), 0.0)
        a = xt @ (active.dense(d, p) @ xt).t() / M  # (p, q) correlation change per unit step
        limit = lam_now * weights
        down = torch.where(blocked, 0.0, weights - a)
        up = torch.where(blocked, 0.0, weights + a)
        to_join = torch.minimum(
            torch.where(down > 1e-12, (limit - c) / down, inf),
            torch.where(up > 1e-12, (limit + c) / up, inf),
        )
        join_step, join_k = to_join.min(0)
        to_leave = torch.where(live & (active.b * d < 0), -active.b / d, inf)
        leave_step, leave_at = to_leave.min(1)
        end_step = lam_now - lam
        event = torch.minimum(join_step.clamp_min(0), leave_step)
        gamma = torch.where(reached, 0.0, torch.minimum(event, end_step).clamp_min(0))
        active.b += gamma.unsqueeze(1) * d
        c -= gamma.unsqueeze(0) * a
        lam_now -= gamma
        ending = ~reached & (end_step <= event)
        leaving = ~reached & ~ending & (leave_step < join_step)
        lam_now = torch.where(ending, lam, lam_now)
        reached |= ending
        if bool(leaving.any()):
            r, at = rows[leaving], leave_at[leaving]
            blocked[:, r] = False  # a feature left out may be independent now
            active.leave(r, at)
            inside = active.inside()[r]
            blocked[active.A[r][inside], r.unsqueeze(1).expand_as(inside)[inside]] = True
        joining = torch.where(~reached & ~ending & ~leaving, join_k, joining)
        if step % RESYNC_EVERY == RESYNC_EVERY - 1:
            c = xt @ (y - (active.dense(active.b, p) @ xt).t()) / M
    order = torch.where(active.inside() & (active.b != 0), active.A, p).argsort(1)
    W, b = active.A.gather(1, order), torch.where(active.inside(), active.b, 0.0).gather(1, order)
    return PathSolution(W, b, step, reached)
