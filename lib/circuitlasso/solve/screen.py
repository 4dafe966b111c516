"""KKT scores from a sparse gradient, and the working sets they pick, without a dense (B, p) pass.

The gradient of B outputs arrives as g = S - shift ⊗ mu: S (B, p) sparse CSR (columns in any
order within a row), shift (B,) and mu (p,) the means of the scaled columns (both absent without
an intercept, when g = S). A feature's score is |g_k| / (M lam_j omega_k). Scores are computed on
the entries of S and on the first n features, in decreasing mu_k / omega_k order, outside S
("extras"). Any other feature has score |shift_j| mu_k / omega_k / (M lam_j), so the first one
of them in that order bounds them all, and the maximum over all p features is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from circuitlasso.solve._sparse import row_ids

_LEVELS = torch.tensor([0.0, 0.1, 0.25, 0.5, 1.0, torch.inf], dtype=torch.float64)
"""Score thresholds of the coarse pre-selection before the per-row sort (see `select`)."""


@dataclass
class Gradient:
    """g = S - shift ⊗ mu for B outputs: S (B, p) CSR; shift (B,) or None (g = S)."""

    S: Tensor
    shift: Tensor | None


class Ranking:
    """Features in decreasing mu_k / omega_k (index order without an intercept).

    mu: (p,) or None; omega: (p,) penalty weights. order: (p,) features; nu: (p,) float64 their
    mu / omega; rank: (p,) position of each feature in `order`; unit: all omega are 1.
    """

    def __init__(self, mu: Tensor | None, omega: Tensor) -> None:
        p = omega.numel()
        self.mu, self.omega = mu, omega
        self.unit = bool((omega == 1).all())
        if mu is None:
            self.order = torch.arange(p, device=omega.device)
            self.nu = torch.zeros(p, dtype=torch.float64, device=omega.device)
        else:
            self.nu, self.order = torch.sort(
                mu.double().abs() / omega, descending=True, stable=True
            )
        self.rank = torch.empty_like(self.order)
        self.rank[self.order] = torch.arange(p, device=omega.device)


@dataclass
class Candidates:
    """Scored features of B outputs: the entries of S and the extras, each flat.

    row, feature, score: (n,) for S's entries and (n_x,) for the extras (`x_` prefix);
    max_score: (B,) float64 over all p features; violators: (B,) features outside the working
    set with score > 1 (0 exactly when there are none); n_features: p.
    """

    row: Tensor
    feature: Tensor
    score: Tensor
    x_row: Tensor
    x_feature: Tensor
    x_score: Tensor
    max_score: Tensor
    violators: Tensor
    n_features: int


def _scores(g: Tensor, scale: Tensor, feature: Tensor, ranking: Ranking) -> Tensor:
    s = g.abs().mul_(scale)
    return s if ranking.unit else s.div_(ranking.omega.to(s.dtype)[feature])


def _ws_keys(W: Tensor, valid: Tensor, p: int) -> Tensor:
    """Sorted keys row * (p + 1) + feature of the marked entries of W (others -> feature p)."""
    rows = torch.arange(W.shape[0], device=W.device).unsqueeze(1)
    return torch.sort((rows * (p + 1) + torch.where(valid, W, p)).reshape(-1)).values


def _member(keys: Tensor, row: Tensor, feature: Tensor, p: int) -> Tensor:
    """(n,) bool: is (row, feature) among the sorted `keys` (see `_ws_keys`)?"""
    if keys.numel() == 0:
        return torch.zeros(row.shape, dtype=torch.bool, device=row.device)
    query = row * (p + 1) + feature
    pos = torch.searchsorted(keys, query).clamp_max_(keys.numel() - 1)
    return keys[pos] == query


def score(
    grad: Gradient, ranking: Ranking, W: Tensor, valid: Tensor, scale: Tensor, n_extra: int
) -> Candidates:
    """Scores for B outputs with working sets W (B, K), sorted along rows (`valid` marks slots).

    scale: (B,) float64 1 / (M lam_j); n_extra: number of features outside S, in ranking order,
    to score explicitly (at least the largest working set wanted next, so every row has enough
    candidates to fill it).
    """
    S, shift, mu = grad.S, grad.shift, ranking.mu
    B, p = S.shape
    n = min(p, n_extra)
    row, feature, g = row_ids(S), S.col_indices(), S.values()
    dtype = g.dtype
    row_scale = scale.to(dtype)
    if shift is not None and mu is not None:
        g = g - shift.to(dtype)[row] * mu.to(dtype)[feature]
    s = _scores(g, row_scale[row], feature, ranking)
    # Extras: the first n features in ranking order that are not entries of S.
    early = (ranking.rank[feature] < n).nonzero().squeeze(1)
    taken = torch.zeros(B, n, dtype=torch.bool, device=row.device)
    taken[row[early], ranking.rank[feature[early]]] = True
    x_row, x_pos = (~taken).nonzero(as_tuple=True)
    x_feature = ranking.order[x_pos]
    beyond = torch.zeros(B, dtype=torch.float64, device=row.device)
    if shift is not None and mu is not None:
        x_g = -shift.to(dtype)[x_row] * mu.to(dtype)[x_feature]
        beyond = _first_free_nu(S, ranking, taken) * shift.double().abs() * scale
    else:
        x_g = torch.zeros(x_row.shape, dtype=dtype, device=row.device)
    x_s = _scores(x_g, row_scale[x_row], x_feature, ranking)
    max_score = beyond.clone()
    max_score.scatter_reduce_(0, row, s.double(), reduce="amax")
    max_score.scatter_reduce_(0, x_row, x_s.double(), reduce="amax")
    keys = _ws_keys(W, valid, p)
    violators = (beyond > 1).long()
    for r, f, v in ((row, feature, s), (x_row, x_feature, x_s)):
        high = (v > 1).nonzero().squeeze(1)
        outside = ~_member(keys, r[high], f[high], p)
        violators.index_add_(0, r[high], outside.long())
    return Candidates(row, feature, s, x_row, x_feature, x_s, max_score, violators, p)


def _first_free_nu(S: Tensor, ranking: Ranking, taken: Tensor) -> Tensor:
    """(B,) nu of the first feature after the first n (in ranking order) that is not in S."""
    B, n = taken.shape
    p = S.shape[1]
    out = torch.zeros(B, dtype=torch.float64, device=taken.device)
    todo = torch.arange(B, device=taken.device)
    rows, rank = row_ids(S), ranking.rank[S.col_indices()]
    start = n
    while todo.numel() and start < p:
        stop = min(p, 4 * max(start, 1))
        inside = (rank >= start) & (rank < stop)
        block = torch.zeros(B, stop - start, dtype=torch.bool, device=taken.device)
        block[rows[inside], rank[inside] - start] = True
        free = ~block[todo]
        hit = free.any(1)
        out[todo[hit]] = ranking.nu[start + free[hit].int().argmax(1)]
        todo, start = todo[~hit], stop
    return out


def select(
    c: Candidates, W: Tensor, valid: Tensor, b_ws: Tensor, size: Tensor, rows: Tensor
) -> list[tuple[Tensor, Tensor, Tensor]]:
    """New working sets for the chunk's outputs `rows` (R,), ascending: size[r] features each.

    Current support (b_ws != 0) first, then the highest scores. Returns, per distinct size k,
    (outputs (n_k,), W (n_k, k) sorted along each row, warm b (n_k, k)).
    """
    B, p = W.shape[0], c.n_features
    want = torch.zeros(B, dtype=torch.int64, device=W.device)
    want[rows] = size
    forced = valid & (b_ws != 0) & (want > 0).unsqueeze(1)
    f_row, f_slot = forced.nonzero(as_tuple=True)
    n_forced = forced.sum(1)
    # Coarse filter: per row, the highest score level that still leaves enough candidates
    # (the support's own entries may be among them, hence the margin of n_forced).
    levels = _LEVELS.to(c.score.device)
    n_levels = levels.numel()
    level = n_levels - torch.bucketize(c.score.double(), levels, right=True)
    x_level = n_levels - torch.bucketize(c.x_score.double(), levels, right=True)
    counts = torch.zeros(B * n_levels, dtype=torch.int64, device=W.device)
    counts.index_add_(0, c.row * n_levels + level, torch.ones_like(level))
    counts.index_add_(0, c.x_row * n_levels + x_level, torch.ones_like(x_level))
    enough = counts.view(B, n_levels).cumsum(1) >= (want + n_forced).unsqueeze(1)
    cutoff = torch.where(enough.any(1), enough.int().argmax(1), n_levels - 1)
    cutoff = torch.where(want > 0, cutoff, -1)
    take = (level <= cutoff[c.row]).nonzero().squeeze(1)
    x_take = (x_level <= cutoff[c.x_row]).nonzero().squeeze(1)
    row = torch.cat([c.row[take], c.x_row[x_take]])
    feature = torch.cat([c.feature[take], c.x_feature[x_take]])
    priority = torch.cat([c.score[take], c.x_score[x_take]]).double()
    fresh = ~_member(_ws_keys(W, forced, p), row, feature, p)
    row = torch.cat([f_row, row[fresh]])
    feature = torch.cat([W[f_row, f_slot], feature[fresh]])
    priority = torch.cat([torch.full(f_row.shape, torch.inf, device=W.device), priority[fresh]])
    zeros = torch.zeros(int(fresh.sum()), dtype=b_ws.dtype, device=W.device)
    warm = torch.cat([b_ws[f_row, f_slot], zeros])
    order = torch.argsort(priority, descending=True, stable=True)
    order = order[torch.argsort(row[order], stable=True)]
    starts = torch.zeros(B + 1, dtype=torch.int64, device=W.device)
    starts[1:] = torch.bincount(row, minlength=B).cumsum(0)
    rank = torch.arange(order.numel(), device=W.device) - starts[row[order]]
    chosen = order[rank < want[row[order]]]
    chosen = chosen[torch.argsort(row[chosen] * p + feature[chosen])]
    row, feature, warm = row[chosen], feature[chosen], warm[chosen]
    out = []
    for k in size.unique().tolist():
        mask = want[row] == k
        shape = (int((size == k).sum()), k)
        out.append((rows[size == k], feature[mask].view(shape), warm[mask].view(shape)))
    return out
