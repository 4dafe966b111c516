"""Working-set engine: certify every output on the full problem, solve small subproblems.

Each round has two passes over the outputs still pending:
  1. Certificate (chunks of outputs): the full gradient g = X~^T r gives the duality gap on the
     whole problem. Outputs within tolerance are done. The others get a new working set: their
     current support plus the features with the largest KKT scores |g_k| / (M w_k), sized to
     max(ws_start, 2 |support|, previous size) rounded up to a power of two (celer's rule,
     made monotone so that the set grows to the full problem if it ever has to).
  2. Solve (buckets of equal working-set size K): batched FISTA on the (B, K, K) Gram blocks,
     warm-started, to an inner gap of max(0.3 x certified gap, 0.5 x tol).
Outputs with y_c = 0 are solved by b = 0 without any work; lam >= lam_max is certified at b = 0
in the first certificate pass, so it returns exact zeros.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm

from circuitlasso.solve._sparse import csr_from_padded, padded_rows
from circuitlasso.solve.fista import StopRule, duality_gap, fista
from circuitlasso.solve.problems import GRAM_BUDGET, LassoProblem

MAX_ROUNDS = 200
INNER_FRACTION = 1e-3
"""Subproblems are solved to max(INNER_FRACTION x certified gap, tol / 2)."""


@dataclass
class WorkingSetSolution:
    """Solution in scaled coordinates: output j has coefficients b[j, :k] on features W[j, :k]."""

    W: Tensor  # (d, K) feature indices; entries with b == 0 are padding or inactive
    b: Tensor  # (d, K)
    gap: Tensor  # (d,) float64 duality gap, mean scale
    objective: Tensor  # (d,) float64 primal objective, mean scale
    n_iter: Tensor  # (d,) FISTA iterations
    converged: Tensor  # (d,) bool


@contextmanager
def _threads(n: int) -> Iterator[None]:
    """Run a block with `n` torch threads. The FISTA loop is a long chain of small kernels, for
    which thread synchronization costs more than it saves (and much more on a busy machine)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _next_pow2(k: Tensor) -> Tensor:
    return torch.pow(2, torch.ceil(torch.log2(k.clamp_min(1).double()))).long()


class _State:
    """Per-output working sets and coefficients, padded to a common width."""

    def __init__(self, d: int, dtype: torch.dtype, device: torch.device) -> None:
        self.size = torch.zeros(d, dtype=torch.int64, device=device)
        self.W = torch.zeros(d, 0, dtype=torch.int64, device=device)
        self.b = torch.zeros(d, 0, dtype=dtype, device=device)
        self.g = torch.zeros(d, 0, dtype=dtype, device=device)

    def widen(self, width: int) -> None:
        extra = width - self.W.shape[1]
        if extra > 0:
            self.W = torch.nn.functional.pad(self.W, (0, extra))
            self.b = torch.nn.functional.pad(self.b, (0, extra))
            self.g = torch.nn.functional.pad(self.g, (0, extra))

    def put(self, rows: Tensor, W: Tensor, b: Tensor, g: Tensor) -> None:
        k = W.shape[1]
        self.widen(k)
        self.W[rows] = 0
        self.b[rows] = 0
        self.g[rows] = 0
        self.W[rows, :k], self.b[rows, :k], self.g[rows, :k] = W, b, g
        self.size[rows] = k


def solve_working_sets(
    problem: LassoProblem,
    lam: Tensor,
    omega: Tensor,
    *,
    tol: float,
    stop: StopRule,
    max_iter: int,
    init: tuple[Tensor, Tensor] | None = None,
    ws_start: int = 16,
    chunk_size: int | None = None,
    progress: bool = False,
) -> WorkingSetSolution:
    """Solve min_b ||y_c - X~ b||^2/(2M) + lam_j sum_k omega_k |b_k| for every output j.

    lam: (d,) float64 > 0 where y_c != 0; omega: (p,) float64 > 0 feature weights;
    init: optional warm start (W (d, K), b (d, K)) in scaled coordinates, W sorted along each
    row wherever b != 0.
    """
    M, p, d = problem.n_obs, problem.n_features, problem.n_outputs
    device = lam.device
    work_dtype = problem.dtype
    normalize_weights = bool((omega == 1).all())
    omega_w = omega.to(work_dtype)
    yty = problem.yty
    tol_abs = tol * yty / M
    state = _State(d, work_dtype, device)
    if init is not None:
        W0, b0 = padded_rows(csr_from_padded(init[0], init[1].to(work_dtype), p))
        state.put(torch.arange(d, device=device), W0, b0, torch.zeros_like(b0))
        state.size = (b0 != 0).sum(1)
    gap = torch.zeros(d, dtype=torch.float64, device=device)
    objective = yty / (2 * M)
    n_iter = torch.zeros(d, dtype=torch.int64, device=device)
    converged = yty <= 0
    inner_converged = torch.zeros_like(converged)
    inner_tol = tol_abs.clone() if stop == "gap" else torch.full_like(yty, tol)
    pending = (~converged).nonzero().squeeze(1)
    chunk = chunk_size or max(16, min(8192, GRAM_BUDGET // max(1, p)))
    bar = tqdm(total=d, disable=not progress, desc="lasso outputs", unit="output")
    bar.update(d - pending.numel())
    for _ in range(MAX_ROUNDS):
        still = []
        for start in range(0, pending.numel(), chunk):
            cols = pending[start : start + chunk]
            k = int(state.size[cols].max()) if cols.numel() else 0
            W, b = state.W[cols, :k], state.b[cols, :k]
            g, rr, yr = problem.gradient(cols, W, b)
            score = g.abs().div_(M * lam[cols].to(work_dtype).unsqueeze(1))
            if not normalize_weights:
                score.div_(omega_w.unsqueeze(0))
            valid = torch.arange(k, device=device).unsqueeze(0) < state.size[cols].unsqueeze(1)
            l1 = (lam[cols].unsqueeze(1) * omega[W] * b.double().abs()).sum(1)
            max_score = score.amax(1).double()
            s_max = torch.where(max_score > 0, 1.0 / max_score, torch.inf)
            gap_c, obj_c = duality_gap(rr / M, yr / M, l1, s_max)
            gap[cols], objective[cols] = gap_c, obj_c
            violators = (score > 1).sum(1) - ((score.gather(1, W) > 1) & valid).sum(1)
            if stop == "gap":
                ok = gap_c <= tol_abs[cols]
                inner_tol[cols] = torch.maximum(INNER_FRACTION * gap_c, 0.5 * tol_abs[cols])
            else:
                ok = (violators == 0) & (inner_converged[cols] | (state.size[cols] == 0))
            ok |= n_iter[cols] >= max_iter
            converged[cols] = gap_c <= tol_abs[cols] if stop == "gap" else ok
            redo = (~ok).nonzero().squeeze(1)
            bar.update(int(ok.sum()))
            if redo.numel():
                _grow(
                    state,
                    cols[redo],
                    torch.where(valid, W, p)[redo],
                    b[redo],
                    g[redo],
                    score[redo],
                    violators[redo],
                    ws_start,
                )
                still.append(cols[redo])
        if not still:
            break
        pending = torch.cat(still)
        _solve_buckets(
            problem,
            state,
            pending,
            lam,
            omega_w,
            yty,
            inner_tol,
            stop,
            max_iter,
            n_iter,
            inner_converged,
        )
    bar.close()
    return WorkingSetSolution(state.W, state.b, gap, objective, n_iter, converged)


def _grow(
    state: _State,
    rows: Tensor,
    W: Tensor,
    b: Tensor,
    g: Tensor,
    score: Tensor,
    violators: Tensor,
    ws_start: int,
) -> None:
    """New working sets for `rows`: support plus top-scoring features, warm values, gradients.

    W: (B, k) current sets, sorted, padded with the out-of-range index p; score is overwritten.
    """
    p = g.shape[1]
    support = (b != 0).sum(1)
    previous = state.size[rows]
    target = torch.maximum(2 * support, support + violators)
    target = torch.minimum(target.clamp_min(ws_start), (2 * previous).clamp_min(ws_start))
    size = torch.maximum(_next_pow2(target), previous).clamp_max(p)
    forced = torch.where(b != 0, torch.inf, -torch.inf).to(score.dtype)
    score.scatter_reduce_(1, W.clamp_max(p - 1), forced, reduce="amax")
    for k in size.unique().tolist():
        pick = (size == k).nonzero().squeeze(1)
        new_W = score[pick].topk(k, dim=1, sorted=False).indices.sort(dim=1).values
        old_W = W[pick]
        slot = torch.searchsorted(old_W, new_W).clamp_max(max(old_W.shape[1] - 1, 0))
        if old_W.shape[1]:
            found = old_W.gather(1, slot) == new_W
            new_b = torch.where(found, b[pick].gather(1, slot), torch.zeros((), dtype=b.dtype))
        else:
            new_b = torch.zeros(new_W.shape, dtype=b.dtype, device=b.device)
        state.put(rows[pick], new_W, new_b, g[pick].gather(1, new_W))


def _solve_buckets(
    problem: LassoProblem,
    state: _State,
    pending: Tensor,
    lam: Tensor,
    omega: Tensor,
    yty: Tensor,
    inner_tol: Tensor,
    stop: StopRule,
    max_iter: int,
    n_iter: Tensor,
    inner_converged: Tensor,
) -> None:
    """Batched FISTA on every pending output, grouped by working-set size."""
    M = problem.n_obs
    sizes = state.size[pending]
    for k in sizes.unique().tolist():
        bucket = pending[sizes == k]
        step = max(1, GRAM_BUDGET // (k * k))
        for start in range(0, bucket.numel(), step):
            rows = bucket[start : start + step]
            W, b, g = state.W[rows, :k], state.b[rows, :k], state.g[rows, :k]
            Q = problem.gram(W).double() / M
            q = g.double() / M + torch.bmm(Q, b.double().unsqueeze(2)).squeeze(2)
            w = lam[rows].to(omega.dtype).unsqueeze(1) * omega[W]
            budget = max(1, max_iter - int(n_iter[rows].min()))
            with _threads(1):
                b_new, iters, ok = fista(
                    Q, q, yty[rows] / M, w, b, inner_tol[rows], stop=stop, max_iter=budget
                )
            state.b[rows, :k] = b_new
            n_iter[rows] += iters
            inner_converged[rows] = ok
