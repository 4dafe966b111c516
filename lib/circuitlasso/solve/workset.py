"""Working-set engine: certify every output on the full problem, solve small subproblems.

Each round has two passes over the outputs still pending:
  1. Certificate (batches of outputs): the full gradient g = X~^T r, scored by `screen`,
     gives the duality gap on the whole problem. Outputs within tolerance are done.
     The others get a new working set: their current support plus the features with the
     largest KKT scores |g_k| / (M w_k), sized to max(ws_start, 5/4 |support|, |support| +
     violators) (celer's rule, with 5/4 in place of 2: the Gram blocks, and FISTA's work on
     them, grow with the square of the size), rounded up to a power of two or a multiple of
     SET_STEP, at most doubling (a first set: up to an eighth of the violators at b = 0,
     FIRST_SET_SHARE) and never shrinking, so that a set can grow to the full problem
     if it ever has to.
  2. Solve (buckets of equal working-set size K): the subproblems on the (B, K, K) Gram blocks
     G_W, by coordinate descent on the CPU (`circuitlasso.solve.coordinate`) and batched FISTA
     on a GPU (`circuitlasso.solve.fista`), warm-started at b, with cross products
     X~_W^T y_c = g_W + G_W b from the certificate's gradient (no product with the targets), to
     an inner gap of max(INNER_FRACTION x certified gap, tol / 2).
Outputs with y_c = 0 are solved by b = 0 without any work; lam >= lam_max is certified at b = 0
in the first certificate pass, so it returns exact zeros.
Both passes batch outputs by the bytes a batch allocates, within a memory budget
(`circuitlasso.solve.memory`); working sets stop growing where one more doubling would not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm

from circuitlasso.memory import PLANNED_SHARE, MemoryBudgetError, batch_size, gib
from circuitlasso.solve._sparse import csr_from_padded, padded_rows
from circuitlasso.solve.coordinate import coordinate_descent
from circuitlasso.solve.fista import StopRule, bmv, duality_gap, fista
from circuitlasso.solve.problems import LassoProblem
from circuitlasso.solve.screen import score, select

MAX_ROUNDS = 200
INNER_FRACTION = 1e-3
"""Subproblems are solved to max(INNER_FRACTION x certified gap, tol / 2)."""
SCORE_BYTES = 12 * 8
"""Bytes per gradient entry taken by scoring and selecting working sets (`screen`)."""
CPU_CERTIFICATE_ENTRIES = 2**20
CPU_SOLVE_ENTRIES = 2**21
"""On the CPU, batches stay small enough for the cache: a certificate batch holds at most
CPU_CERTIFICATE_ENTRIES gradient entries (8 MiB in float64) and a solve batch at most
CPU_SOLVE_ENTRIES Gram-block entries (16 MiB), so that their many passes do not stream from
main memory. (On a GPU the budget alone sizes them: larger batches there mean fewer kernels.)"""
SET_STEP = 64
"""Working sets grow in powers of two up to SET_STEP features, then in multiples of it."""
FIRST_SET_SHARE = 8
FIRST_SET_MAX = 64
"""An output's first working set takes up to 1/FIRST_SET_SHARE of the features that violate
the KKT conditions at b = 0 (at most FIRST_SET_MAX, at least ws_start): where many features
correlate with a target its support is large, and each doubling from ws_start towards it would
cost a certificate pass."""
INNER_SOLVER_BYTES = 6 * 8
"""Bytes per Gram-block entry taken by the inner solver: float64 copies of Q alive at once
(FISTA's: the batch's, its compaction as problems finish, the support systems and their
factors; coordinate descent takes fewer)."""


@dataclass
class WorkingSetSolution:
    """Solution in scaled coordinates: output j has coefficients b[j, :k] on features W[j, :k]."""

    W: Tensor  # (d, K) feature indices; entries with b == 0 are padding or inactive
    b: Tensor  # (d, K)
    gap: Tensor  # (d,) float64 duality gap, mean scale
    objective: Tensor  # (d,) float64 primal objective, mean scale
    n_iter: Tensor  # (d,) inner iterations (epochs or FISTA steps)
    converged: Tensor  # (d,) bool


def _round_size(k: Tensor) -> Tensor:
    """k rounded up to a power of two up to SET_STEP, else to a multiple of SET_STEP."""
    k = k.clamp_min(1)
    pow2 = torch.pow(2, torch.ceil(torch.log2(k.double()))).long()
    return torch.where(pow2 > SET_STEP, (k + SET_STEP - 1) // SET_STEP * SET_STEP, pow2)


class _State:
    """Per-output working sets W, coefficients b and the full problem's gradient g on W at
    the b it was selected with (float64), padded to a common width."""

    def __init__(self, d: int, dtype: torch.dtype, device: torch.device) -> None:
        self.size = torch.zeros(d, dtype=torch.int64, device=device)
        self.W = torch.zeros(d, 0, dtype=torch.int64, device=device)
        self.b = torch.zeros(d, 0, dtype=dtype, device=device)
        self.g = torch.zeros(d, 0, dtype=torch.float64, device=device)

    def put(self, rows: Tensor, W: Tensor, b: Tensor, g: Tensor | None = None) -> None:
        k = W.shape[1]
        extra = k - self.W.shape[1]
        if extra > 0:
            self.W = torch.nn.functional.pad(self.W, (0, extra))
            self.b = torch.nn.functional.pad(self.b, (0, extra))
            self.g = torch.nn.functional.pad(self.g, (0, extra))
        for field, value in ((self.W, W), (self.b, b), (self.g, g)):
            field[rows] = 0
            if value is not None:
                field[rows, :k] = value
        self.size[rows] = k

    def nbytes(self, width: int | None = None) -> int:
        """Bytes of W, b and g at `width` (default: the current one), twice over while padding."""
        k = self.W.shape[1] if width is None else width
        return 2 * self.W.shape[0] * k * (8 + self.b.element_size() + 8)


class _Budget:
    """Batch sizes of a solve within `memory` bytes: the problem and the working sets are held;
    the rest is shared by the outputs of one batch."""

    def __init__(
        self, problem: LassoProblem, memory: int, state: _State, device: torch.device
    ) -> None:
        self.problem, self.memory, self.state = problem, memory, state
        self.on_cpu = device.type == "cpu"
        self.held = problem.held_bytes + 16 * 8 * problem.n_outputs  # (d,) vectors of the solve

    def _free(self, width: int | None = None) -> int:
        return int(PLANNED_SHARE * self.memory) - self.held - self.state.nbytes(width)

    def _certificate_bytes(self) -> int:
        return self.problem.gradient_bytes() + SCORE_BYTES * self.problem.n_features

    def _solve_bytes(self, k: int) -> int:
        return self.problem.gram_bytes(k) + INNER_SOLVER_BYTES * k * k

    def certificate_batch(self) -> int:
        step = batch_size(self._free(), self._certificate_bytes())
        if self.on_cpu:
            step = min(step, max(1, CPU_CERTIFICATE_ENTRIES // self.problem.n_features))
        return step

    def solve_batch(self, k: int) -> int:
        step = batch_size(self._free(), self._solve_bytes(k))
        if self.on_cpu:
            step = min(step, max(1, CPU_SOLVE_ENTRIES // (k * k)))
        return step

    def largest_set(self, ws_start: int) -> int:
        """The largest working-set size (a power of two, or p) one output can have in budget."""
        p, k = self.problem.n_features, min(ws_start, self.problem.n_features)
        while k < p and self._solve_bytes(min(2 * k, p)) <= self._free(min(2 * k, p)):
            k = min(2 * k, p)
        return k

    def check(self, ws_start: int) -> None:
        """MemoryBudgetError unless the problem, the working sets at `ws_start` and one output's
        batch work fit."""
        k = min(ws_start, self.problem.n_features)
        work = max(self._certificate_bytes(), self._solve_bytes(k))
        if self._free(k) >= work:
            return
        need = (self.held + self.state.nbytes(k) + work) / PLANNED_SHARE
        raise MemoryBudgetError(
            f"this solve needs at least {gib(need)} (the problem holds {gib(self.held)}, one "
            f"output's work takes {gib(work)}) but its memory budget is {gib(self.memory)}: "
            "raise memory_gib, or solve fewer outputs or predictors at once"
        )


def solve_working_sets(
    problem: LassoProblem,
    lam: Tensor,
    omega: Tensor,
    *,
    tol: float,
    stop: StopRule,
    max_iter: int,
    memory: int,
    init: tuple[Tensor, Tensor] | None = None,
    ws_start: int = 16,
    progress: bool = False,
) -> WorkingSetSolution:
    """Solve min_b ||y_c - X~ b||^2/(2M) + lam_j sum_k omega_k |b_k| for every output j.

    lam: (d,) float64 > 0 where y_c != 0; omega: (p,) float64 > 0 feature weights;
    memory: the budget in bytes (see `_Budget`); init: optional warm start (W (d, K), b (d, K))
    in scaled coordinates, W sorted along each row wherever b != 0.
    """
    M, p, d = problem.n_obs, problem.n_features, problem.n_outputs
    device = lam.device
    work_dtype = problem.dtype
    omega_w = omega.to(work_dtype)
    yty = problem.yty
    tol_abs = tol * yty / M
    state = _State(d, work_dtype, device)
    budget = _Budget(problem, memory, state, device)
    budget.check(ws_start)
    if init is not None:
        W0, b0 = padded_rows(csr_from_padded(init[0], init[1].to(work_dtype), p))
        state.put(torch.arange(d, device=device), W0, b0)
        state.size = (b0 != 0).sum(1)
    gap = torch.zeros(d, dtype=torch.float64, device=device)
    objective = yty / (2 * M)
    n_iter = torch.zeros(d, dtype=torch.int64, device=device)
    converged = (yty <= 0) | (p == 0)  # b = 0 is exact: no target, or no predictor to enter
    inner_converged = torch.zeros_like(converged)
    inner_tol = tol_abs.clone() if stop == "gap" else torch.full_like(yty, tol)
    pending = (~converged).nonzero().squeeze(1)
    largest = budget.largest_set(ws_start)
    bar = tqdm(total=d, disable=not progress, desc="lasso outputs", unit="output")
    bar.update(d - pending.numel())
    for round_ in range(MAX_ROUNDS):
        still = []
        start = 0
        while start < pending.numel():
            chunk = budget.certificate_batch()
            cols = pending[start : start + chunk]
            start += chunk
            size = state.size[cols]
            k = int(size.max()) if cols.numel() else 0
            W, b = state.W[cols, :k], state.b[cols, :k]
            valid = torch.arange(k, device=device).unsqueeze(0) < size.unsqueeze(1)
            grad, rr, yr = problem.gradient(cols, W, b)
            c = score(grad, omega, W, valid, 1.0 / (M * lam[cols]))
            l1 = (lam[cols].unsqueeze(1) * omega[W] * b.double().abs()).sum(1)
            s_max = torch.where(c.max_score > 0, 1.0 / c.max_score, torch.inf)
            gap_c, obj_c = duality_gap(rr / M, yr / M, l1, s_max)
            gap[cols], objective[cols] = gap_c, obj_c
            if stop == "gap":
                ok = gap_c <= tol_abs[cols]
                inner_tol[cols] = torch.maximum(INNER_FRACTION * gap_c, 0.5 * tol_abs[cols])
            else:
                ok = (c.violators == 0) & (inner_converged[cols] | (size == 0))
            converged[cols] = gap_c <= tol_abs[cols] if stop == "gap" else ok
            ok |= (n_iter[cols] >= max_iter) | (round_ == MAX_ROUNDS - 1)
            redo = (~ok).nonzero().squeeze(1)
            bar.update(int(ok.sum()))
            if redo.numel():
                support = (b[redo] != 0).sum(1)
                new_size = _next_size(support, c.violators[redo], size[redo], ws_start, largest)
                for rows, new_W, new_b, new_g in select(c, grad, W, valid, b, new_size, redo):
                    state.put(cols[rows], new_W, new_b, new_g)
                still.append(cols[redo])
        if not still:  # every output's certificate is of the coefficients returned
            break
        pending = torch.cat(still)
        _solve_buckets(
            problem,
            budget,
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


def _next_size(
    support: Tensor, violators: Tensor, previous: Tensor, ws_start: int, largest: int
) -> Tensor:
    """Working-set sizes: max(ws_start, 5/4 |support|, |support| + violators), at most doubling
    (a first set: at most 1/FIRST_SET_SHARE of the violators, up to FIRST_SET_MAX), rounded up
    (`_round_size`) and never shrinking (so a set can grow to the full problem, or to the
    `largest` the memory budget allows)."""
    target = torch.maximum(support + support // 4, support + violators)
    first = (violators // FIRST_SET_SHARE).clamp_max(FIRST_SET_MAX)
    cap = torch.where(previous > 0, 2 * previous, first).clamp_min(ws_start)
    target = torch.minimum(target.clamp_min(ws_start), cap)
    return torch.maximum(_round_size(target), previous).clamp_max(largest)


def inner_solver(device: torch.device) -> Callable[..., tuple[Tensor, Tensor, Tensor]]:
    """The subproblems' solver on `device`: coordinate descent on the CPU, batched FISTA
    elsewhere (many small kernels in a compiled loop against a few large batched ones)."""
    return coordinate_descent if device.type == "cpu" else fista


def _solve_buckets(
    problem: LassoProblem,
    budget: _Budget,
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
    """The subproblem of every pending output, grouped by working-set size."""
    M = problem.n_obs
    sizes = state.size[pending]
    for k in sizes.unique().tolist():
        bucket = pending[sizes == k]
        step = budget.solve_batch(k)
        for start in range(0, bucket.numel(), step):
            rows = bucket[start : start + step]
            W, b = state.W[rows, :k], state.b[rows, :k]
            # The subproblem M F(b) in the sum scale: the Gram blocks as they come
            Q = problem.gram(W).double()
            q = state.g[rows, :k] + bmv(Q, b.double())  # X~_W^T y_c
            w = M * lam[rows].to(omega.dtype).unsqueeze(1) * omega[W]
            iterations = max(1, max_iter - int(n_iter[rows].min()))
            scale = M if stop == "gap" else 1  # an absolute gap scales with F, a relative one not
            b_new, iters, ok = inner_solver(Q.device)(
                Q, q, yty[rows], w, b, scale * inner_tol[rows], stop=stop, max_iter=iterations
            )
            state.b[rows, :k] = b_new
            n_iter[rows] += iters
            inner_converged[rows] = ok
