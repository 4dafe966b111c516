"""The squared loss on the working-set engine (`solve.workset`): multi-output Lasso problems.

Each round has two passes over the outputs still pending:

1. Certificate (batches of outputs): the full gradient g = X~^T r, scored by `screen`,
   gives the duality gap on the whole problem. Outputs within tolerance are done.
   The others get a new working set (`workset.next_size` under `workset.LASSO_POLICY`): their
   current support plus the features with the largest KKT scores ``|g_k| / (M w_k)``.
2. Solve (buckets of equal working-set size K): the subproblems on the (B, K, K) Gram blocks
   G_W, by coordinate descent on the CPU (`circuitlasso.solve.coordinate`) and batched FISTA
   on a GPU (`circuitlasso.solve.fista`), warm-started at b, with cross products
   X~_W^T y_c = g_W + G_W b from the certificate's gradient (no product with the targets), to
   the policy's inner tolerance.

Outputs with y_c = 0 are solved by b = 0 without any work; lam >= lam_max is certified at b = 0
in the first certificate pass, so it returns exact zeros.
Both passes batch outputs by the bytes a batch allocates, within a memory budget
(`circuitlasso.solve.memory`); working sets stop growing where one more doubling would not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm

from circuitlasso.memory import PLANNED_SHARE, MemoryBudgetError, batch_size, gib
from circuitlasso.solve._sparse import csr_from_padded, padded_rows
from circuitlasso.solve.coordinate import column_descent, inner_solver
from circuitlasso.solve.fista import Subproblems, bmv, duality_gap
from circuitlasso.solve.options import InnerOptions, SolverOptions
from circuitlasso.solve.problems import LassoProblem, SparseProblem
from circuitlasso.solve.screen import score, select
from circuitlasso.solve.workset import LASSO_POLICY, inner_tolerance, next_size, run_rounds

SCORE_BYTES = 12 * 8
"""Bytes per gradient entry taken by scoring and selecting working sets (`screen`)."""
CPU_CERTIFICATE_ENTRIES = 2**22
CPU_SOLVE_ENTRIES = 2**21
"""On the CPU, batches stay small enough for the cache: a certificate batch holds at most
CPU_CERTIFICATE_ENTRIES gradient entries (32 MiB in float64: at p = 48k still 87 outputs, enough
for full groups of `sparse_kernels.GATHER_OUTPUTS` on every thread) and a solve batch at most
CPU_SOLVE_ENTRIES Gram-block entries (16 MiB), or residual entries where it solves on the sets'
columns, so that their many passes do not stream from main memory. (On a GPU the budget alone
sizes them: larger batches there mean fewer kernels.)"""
INNER_SOLVER_BYTES = 6 * 8
"""Bytes per Gram-block entry taken by the inner solver: float64 copies of Q alive at once
(FISTA's: the batch's, its compaction as problems finish, the support systems and their
factors; coordinate descent takes fewer)."""
COLUMN_SOLVE_ROWS = 3
"""Float64 rows of length M per output of a solve on the sets' columns (the dense target, the
residual, the coordinate loop's copy)."""


@dataclass
class WorkingSetSolution:
    """Solution in scaled coordinates: output j has coefficients b[j, :k] on features W[j, :k]."""

    W: Tensor  # (d, K) feature indices; entries with b == 0 are padding or inactive
    b: Tensor  # (d, K)
    gap: Tensor  # (d,) float64 duality gap, mean scale
    objective: Tensor  # (d,) float64 primal objective, mean scale
    n_iter: Tensor  # (d,) inner iterations (epochs or FISTA steps)
    converged: Tensor  # (d,) bool


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


class Budget:
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
            step = min(step, max(1, CPU_CERTIFICATE_ENTRIES // max(1, self.problem.n_features)))
        return step

    def solve_batch(self, k: int, on_columns: bool = False) -> int:
        """Outputs per restricted solve on sets of size k, on Gram blocks or `on_columns`."""
        if on_columns:
            entries = COLUMN_SOLVE_ROWS * self.problem.n_obs
            step = batch_size(self._free(), 8 * entries)
        else:
            entries = k * k
            step = batch_size(self._free(), self._solve_bytes(k))
        if self.on_cpu:
            step = min(step, max(1, CPU_SOLVE_ENTRIES // entries))
        return step

    def largest_set(self, start: int) -> int:
        """The largest working-set size (a power of two, or p) one output can have in budget."""
        p, k = self.problem.n_features, min(start, self.problem.n_features)
        while k < p and self._solve_bytes(min(2 * k, p)) <= self._free(min(2 * k, p)):
            k = min(2 * k, p)
        return k

    def check(self, start: int) -> None:
        """MemoryBudgetError unless the problem, the working sets at size `start` and one output's
        batch work fit."""
        k = min(start, self.problem.n_features)
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
    settings: SolverOptions,
    memory: int,
    init: tuple[Tensor, Tensor] | None = None,
) -> WorkingSetSolution:
    """Solve ``min_b ||y_c - X~ b||^2/(2M) + lam_j sum_k omega_k |b_k|`` for every output j.

    lam: (d,) float64 > 0 where y_c != 0; omega: (p,) float64 > 0 feature weights; settings:
    tol, stop, max_iter and progress; memory: the budget in bytes (see `Budget`); init:
    optional warm start (W (d, K), b (d, K)) in scaled coordinates, W sorted along each row
    wherever b != 0.
    """
    rounds = _LassoRounds(problem, lam, omega, settings, memory, init)
    run_rounds(rounds, rounds.policy)
    rounds.bar.close()
    state = rounds.state
    return WorkingSetSolution(
        state.W, state.b, rounds.gap, rounds.objective, rounds.n_iter, rounds.converged
    )


class _LassoRounds:
    """The squared loss's certificate pass and bucketed subproblem solves (`workset.Rounds`)."""

    def __init__(
        self,
        problem: LassoProblem,
        lam: Tensor,
        omega: Tensor,
        settings: SolverOptions,
        memory: int,
        init: tuple[Tensor, Tensor] | None,
    ) -> None:
        self.policy = LASSO_POLICY
        tol, stop, max_iter = settings.tol, settings.stop, settings.max_iter
        M, p, d = problem.n_obs, problem.n_features, problem.n_outputs
        device = lam.device
        self.problem, self.lam, self.omega = problem, lam, omega
        self.stop, self.max_iter = stop, max_iter
        self.omega_w = omega.to(problem.dtype)
        self.tol_abs = tol * problem.yty / M
        self.state = _State(d, problem.dtype, device)
        self.budget = Budget(problem, memory, self.state, device)
        self.budget.check(self.policy.start)
        if init is not None:
            W0, b0 = padded_rows(csr_from_padded(init[0], init[1].to(problem.dtype), p))
            self.state.put(torch.arange(d, device=device), W0, b0)
            self.state.size = (b0 != 0).sum(1)
        self.gap = torch.zeros(d, dtype=torch.float64, device=device)
        self.objective = problem.yty / (2 * M)
        self.n_iter = torch.zeros(d, dtype=torch.int64, device=device)
        # b = 0 is exact: no target, or no predictor to enter
        self.converged = (problem.yty <= 0) | (p == 0)
        self.inner_converged = torch.zeros_like(self.converged)
        self.inner_tol = (
            self.tol_abs.clone() if stop == "gap" else torch.full_like(problem.yty, tol)
        )
        self.pending = (~self.converged).nonzero().squeeze(1)
        self.largest = self.budget.largest_set(self.policy.start)
        self.bar = tqdm(total=d, disable=not settings.progress, desc="lasso outputs", unit="output")
        self.bar.update(d - self.pending.numel())

    def certify(self, last: bool) -> bool:
        still = []
        start = 0
        while start < self.pending.numel():
            chunk = self.budget.certificate_batch()
            cols = self.pending[start : start + chunk]
            start += chunk
            redo = self._certify_batch(cols, last)
            if redo.numel():
                still.append(cols[redo])
        if not still:  # every output's certificate is of the coefficients returned
            return False
        self.pending = torch.cat(still)
        return True

    def _certify_batch(self, cols: Tensor, last: bool) -> Tensor:
        """Certify outputs `cols` (B,); new working sets for those not done, returned (R,)."""
        problem, lam, omega, state = self.problem, self.lam, self.omega, self.state
        M, device = problem.n_obs, lam.device
        size = state.size[cols]
        k = int(size.max()) if cols.numel() else 0
        W, b = state.W[cols, :k], state.b[cols, :k]
        valid = torch.arange(k, device=device).unsqueeze(0) < size.unsqueeze(1)
        grad, rr, yr = problem.gradient(cols, W, b)
        c = score(grad, omega, W, valid, 1.0 / (M * lam[cols]))
        l1 = (lam[cols].unsqueeze(1) * omega[W] * b.double().abs()).sum(1)
        s_max = torch.where(c.max_score > 0, 1.0 / c.max_score, torch.inf)
        gap_c, obj_c = duality_gap(rr / M, yr / M, l1, s_max)
        self.gap[cols], self.objective[cols] = gap_c, obj_c
        tol_abs = self.tol_abs[cols]
        if self.stop == "gap":
            ok = gap_c <= tol_abs
            self.inner_tol[cols] = inner_tolerance(self.policy, gap_c, tol_abs)
        else:
            ok = (c.violators == 0) & (self.inner_converged[cols] | (size == 0))
        self.converged[cols] = gap_c <= tol_abs if self.stop == "gap" else ok
        ok |= (self.n_iter[cols] >= self.max_iter) | last
        redo = (~ok).nonzero().squeeze(1)
        self.bar.update(int(ok.sum()))
        if redo.numel():
            support = (b[redo] != 0).sum(1)
            new_size = next_size(self.policy, support, c.violators[redo], size[redo], self.largest)
            for rows, new_W, new_b, new_g in select(c, grad, W, valid, b, new_size, redo):
                state.put(cols[rows], new_W, new_b, new_g)
        return redo

    def solve(self) -> None:
        """The subproblem of every pending output, grouped by working-set size."""
        problem, state, pending = self.problem, self.state, self.pending
        M = problem.n_obs
        sizes = state.size[pending]
        for k in sizes.unique().tolist():
            bucket = pending[sizes == k]
            columns = _solved_on_columns(problem, state.W[bucket, :k])
            step = self.budget.solve_batch(k, columns is not None)
            for start in range(0, bucket.numel(), step):
                rows = bucket[start : start + step]
                W, b = state.W[rows, :k], state.b[rows, :k]
                # The subproblem M F(b) in the sum scale
                w = M * self.lam[rows].to(self.omega_w.dtype).unsqueeze(1) * self.omega_w[W]
                iterations = max(1, self.max_iter - int(self.n_iter[rows].min()))
                # an absolute gap scales with F, a relative one not
                scale = M if self.stop == "gap" else 1
                tol = scale * self.inner_tol[rows]
                options: InnerOptions = {"stop": self.stop, "max_iter": iterations}
                if columns is not None:
                    y = columns.target_rows(rows).to_dense()
                    y_mean = columns.ybar[rows] if columns.ybar is not None else None
                    b_new, iters, ok = column_descent(
                        columns.Xst, columns.mu, y, y_mean, W, b, w, tol, **options
                    )
                else:  # on the Gram blocks
                    Q = problem.gram(W).double()
                    q = state.g[rows, :k] + bmv(Q, b.double())  # X~_W^T y_c
                    problems = Subproblems(Q, q, problem.yty[rows], w)
                    b_new, iters, ok = inner_solver(Q.device)(problems, b, tol, **options)
                state.b[rows, :k] = b_new
                self.n_iter[rows] += iters
                self.inner_converged[rows] = ok


def _solved_on_columns(problem: LassoProblem, W: Tensor) -> SparseProblem | None:
    """`problem` where its working sets W (B, K) are solved on their columns, else None."""
    return problem if isinstance(problem, SparseProblem) and problem.columns_pay(W) else None


def certificate_batch(problem: LassoProblem, memory: int) -> int:
    """Outputs per certificate batch of `problem` with empty working sets within `memory` bytes
    (the engine's first pass: `lam_max` reads the same gradients)."""
    device = problem.yty.device
    state = _State(problem.n_outputs, problem.dtype, device)
    return Budget(problem, memory, state, device).certificate_batch()
