"""KKT scores from the full gradient of a batch of outputs, and the working sets they pick.

The gradient of B outputs arrives dense, g = X~^T r (B, p), in a batch the memory budget sized.
A feature's score is ``|g_k| / (M lam_j omega_k)``: the features outside a working set with a
score above 1 violate the KKT conditions, and the largest score over all p features scales the
residual to a dual feasible point (the certificate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import torch
from torch import Tensor

from circuitlasso.solve.threads import over_threads
from circuitlasso.solve.workset import outside_violators


@dataclass
class Scores:
    """Scores of B outputs: score (B, p) float64; max_score (B,) over all p features;
    violators (B,) features outside the working set with score > 1."""

    score: Tensor
    max_score: Tensor
    violators: Tensor


def score(g: Tensor, omega: Tensor, W: Tensor, valid: Tensor, scale: Tensor) -> Scores:
    """Scores ``|g_k| scale_j / omega_k`` of B outputs with gradient g (B, p), penalty weights
    omega (p,), working sets W (B, K) (`valid` marks the slots in use) and scale (B,)
    1 / (M lam_j)."""
    if g.device.type == "cpu" and g.shape[1]:
        return _scores_on_threads(g, omega, W, valid, scale)
    s = g.abs().double().mul_(scale.unsqueeze(1))
    if not bool((omega == 1).all()):
        s.div_(omega.double())
    violators = outside_violators(s, W, valid)
    max_score = s.amax(1) if s.shape[1] else s.new_zeros(s.shape[0])
    return Scores(s, max_score, violators)


def _scores_on_threads(g: Tensor, omega: Tensor, W: Tensor, valid: Tensor, scale: Tensor) -> Scores:
    """`score` on the CPU in one compiled pass per output (the same operations in the same
    order, so the same numbers)."""
    B = g.shape[0]
    s = torch.empty(g.shape, dtype=torch.float64)
    max_score = torch.empty(B, dtype=torch.float64)
    violators = torch.empty(B, dtype=torch.int64)
    weights = omega.double().contiguous()
    over_threads(
        _scores,
        B,
        g.contiguous().numpy(),
        scale.double().contiguous().numpy(),
        weights.numpy(),
        bool((weights == 1).all()),
        W.contiguous().numpy(),
        valid.contiguous().numpy(),
        s.numpy(),
        max_score.numpy(),
        violators.numpy(),
    )
    return Scores(s, max_score, violators)


@numba.njit(cache=True, nogil=True)
def _scores(g, scale, omega, unit, W, valid, s, max_score, violators, lo, hi):  # type: ignore[no-untyped-def]
    for j in range(lo, hi):
        top = 0.0
        count = 0
        for k in range(g.shape[1]):
            value = abs(g[j, k]) * scale[j]
            if not unit:
                value /= omega[k]
            s[j, k] = value
            top = max(top, value)
            if value > 1.0:
                count += 1
        for i in range(W.shape[1]):
            if valid[j, i] and s[j, W[j, i]] > 1.0:
                count -= 1
        max_score[j] = top
        violators[j] = count


def select(
    c: Scores, g: Tensor, W: Tensor, valid: Tensor, b_ws: Tensor, size: Tensor, rows: Tensor
) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """New working sets for the batch's outputs `rows` (R,), ascending: size[r] features each.

    Current support (b_ws != 0) first, then the highest scores. Returns, per distinct size k,
    (outputs (n_k,), W (n_k, k) sorted along each row, warm b (n_k, k), the gradient g (B, p)
    on W (n_k, k) in float64).
    """
    out = []
    for k in size.unique().tolist():
        these = rows[size == k]
        W_k, b_k = W[these], b_ws[these]
        r, slot = (valid[these] & (b_k != 0)).nonzero(as_tuple=True)
        support = W_k[r, slot]
        priority = c.score[these]  # a copy: `these` indexes
        priority[r, support] = torch.inf
        new_W = priority.topk(int(k), dim=1).indices.sort(1).values
        warm = torch.zeros(new_W.shape, dtype=b_ws.dtype, device=b_ws.device)
        at = torch.searchsorted(new_W[r], support.unsqueeze(1)).squeeze(1).clamp_max(int(k) - 1)
        kept = new_W[r, at] == support  # all of it, unless a set was capped below its support
        warm[r[kept], at[kept]] = b_k[r[kept], slot[kept]]
        out.append((these, new_W, warm, g[these.unsqueeze(1), new_W].double()))
    return out
