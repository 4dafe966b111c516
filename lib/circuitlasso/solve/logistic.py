"""l1-penalized logistic regression: binary (paper Eq. 5 with a class target) and multinomial.

::

    binary:       min_{a, b}  1/M sum_i [log(1 + exp(eta_i)) - y_i eta_i] + lam sum_k omega_k |a_k|,
                  eta = X a + b,  y in {0, 1};
    multinomial:  min_{A, b}  1/M sum_i [log sum_c exp(eta_ic) - eta_{i, y_i}]
                              + lam sum_{k, c} omega_k |A_kc|,   eta = X A + 1 b^T,  A (p, K),

y in {0, ..., K-1}. The multinomial penalty is on every entry of A (scikit-learn's multinomial
penalty="l1"); with K = 2 it is the binary problem at the same lam (a = A[:, 1] - A[:, 0]).
The loss sees only differences between a row's entries, so the penalty puts each row's median
at 0: for odd K the solution is as unique as the binary one, for even K a row may shift within
its middle interval at no cost.

Columns are scaled to unit (centered) norm as for `lasso`. The solver uses working sets, as
`lasso` does. Starting from the features with the largest KKT scores
``max_c |x~_k^T theta_c| / (M lam omega_k)`` at the intercept-only model, it solves the problem
restricted to a set W of features (all K coefficients of each), on X~[:, W] (dense unless ``M |W|``
is large), by proximal Newton sweeps. A sweep takes one step per column c of A (one for the
binary loss), each from the probabilities the previous step left (Gauss-Seidel over the classes,
as glmnet's multinomial fit): the step minimizes the quadratic model of the loss in
(A[:, c], b_c), whose Hessian X~_W^T diag(p_c (1 - p_c)) X~_W / M is exact for that block, plus
the l1 penalty (a Lasso on the ``|W| x |W|`` Hessian, solved by coordinate descent on the CPU as
glmnet solves it, by FISTA elsewhere: `solve.coordinate.inner_solver`; the intercept
eliminated by weighted centering), and is followed by a backtracking line search. For the binary
loss this is proximal Newton; for K classes the sweeps converge linearly: with nearly separable
classes at small lam they can need many sweeps, and a stalled solve stops with a
ConvergenceWarning that reports its certified gap. Then one full gradient gives the duality gap
of the whole problem (`solve.logistic_losses`). If it is above the tolerance, W grows to the
support plus the worst KKT violators and the restricted problem is solved again, warm-started,
by the working-set engine (`solve.workset`) under `LOGISTIC_POLICY`: sets double (size
``max(16, 2 |support|, |support| + violators)``, at most doubling, never shrinking), and each is
solved to a gap of a tenth of the full one. The design is `solve.logistic_design`, the proximal
Newton sweeps `solve.newton`.

"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from typing_extensions import Unpack

from circuitlasso.solve._inputs import Matrix, as_matrix, check_rows
from circuitlasso.solve.lasso import ConvergenceWarning
from circuitlasso.solve.logistic_design import Design, Restricted, column_norms
from circuitlasso.solve.logistic_losses import Binary, Certificate, Loss, Multinomial, certificate
from circuitlasso.solve.newton import Point, prox_newton
from circuitlasso.solve.options import (
    LOGISTIC,
    LOGISTIC_LAM_MAX,
    LogisticLamMaxOptions,
    LogisticOptions,
    SolverOptions,
    settle,
)
from circuitlasso.solve.workset import (
    INNER_FLOOR,
    LOGISTIC_POLICY,
    inner_tolerance,
    next_size,
    outside_violators,
    run_rounds,
)


@dataclass(frozen=True)
class LogisticResult:
    """coef: (p,) (binary) or (p, K) (multinomial) in the user's units; intercept: 0-d (binary)
    or (K,) summing to 0 (multinomial); classes: (K,) the label values, in the order of coef's
    columns (binary: the second is class 1); gap, objective: 0-d float64 tensors.

    gap is the certified duality gap of the mean-scaled objective on the full problem at the
    returned (coef, intercept) (coef as returned, rounded to dtype; X rounded to dtype defines
    the problem); objective is that point's objective; converged means
    gap <= tol * (objective of the intercept-only model). n_iter counts the proximal Newton
    steps over all working sets.
    """

    coef: Tensor
    intercept: Tensor
    classes: Tensor
    gap: Tensor
    objective: Tensor
    n_iter: int
    converged: bool
    lam: float


def _setup(
    X: Matrix,
    y: Matrix,
    make_loss: Callable[[Tensor], Loss],
    settings: SolverOptions,
) -> tuple[Design, Loss, Tensor, Tensor]:
    """The scaled design, the loss with its labels, the column norms (p,) and the penalty
    factors omega (p,) (inf for columns of zero norm, which never enter)."""
    dtype, device = settings.dtype, torch.device(settings.device or "cpu")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    x, _ = as_matrix(X, "X", dtype, device)
    target, _ = as_matrix(y, "y", torch.float64, device, allow_1d=True)
    check_rows(x.shape[0], target, "y")
    if target.shape[1] != 1:
        raise ValueError(f"y must be 1-D (one label per row), got shape {tuple(target.shape)}")
    loss = make_loss(target.to_dense()[:, 0] if target.layout != torch.strided else target[:, 0])
    norms = column_norms(x, settings.fit_intercept)
    scaled = torch.ones_like(norms) if settings.normalize else 1 / norms
    omega = torch.where(norms > 0, scaled, torch.inf)
    return Design(x, norms), loss, norms, omega


def logistic_lam_max(X: Matrix, y: Matrix, **options: Unpack[LogisticLamMaxOptions]) -> float:
    """Smallest lam for which A = 0 solves the binary (two classes in y) or multinomial (more)
    problem: ``max_{k, c} |x~_k^T theta_c| / (M omega_k)`` at the intercept-only model (theta = the
    one-hot labels minus the class frequencies; minus 1/K without intercept). For two classes
    the binary and the multinomial problem have the same lam_max. 0.0 when no column of X has
    spread (every lam > 0 gives the intercept-only model). options: any keywords of
    `LogisticLamMaxOptions`, the others at `options.LOGISTIC_LAM_MAX`."""
    settings = settle(LOGISTIC_LAM_MAX, LogisticLamMaxOptions, options)
    design, loss, _, omega = _setup(X, y, Multinomial, settings)
    b0, _ = loss.null(settings.fit_intercept)
    theta = loss.labels - loss.probabilities(torch.zeros_like(loss.labels) + b0.to(omega.device))
    scores = design.exact_t_times(theta).abs().amax(1) / (design.n_obs * omega)
    return float(scores.max())


def logistic_lasso(
    X: Matrix, y: Matrix, lam: float, **options: Unpack[LogisticOptions]
) -> LogisticResult:
    """Binary l1 logistic regression with mean cross-entropy and an unpenalized intercept.

    X: (M, p) dense or sparse; y: (M,) with two distinct values (the larger is class 1);
    lam > 0. Equals scikit-learn's LogisticRegression(penalty="l1", C=1/(lam*M)) when
    normalize=False (and fit_intercept=False, or its intercept left unpenalized).
    max_iter bounds the proximal Newton steps; check_every is the number of inner iterations
    between gap checks on each Newton step's quadratic model. X is rounded to dtype (float32 or
    float64), the dtype of coef; dense X stays in it for the products of the working-set loop,
    while sparse X, the restricted problems and the certificate that decides convergence use
    float64. Columns of X without spread (constant with an intercept, all zero without) get
    coefficient 0; the scale of a column with spread must lie within SCALE_RANGE[dtype]
    (ValueError otherwise). options: any keywords of `LogisticOptions`, the others at
    `options.LOGISTIC` (see `options.SolverOptions`).
    """
    return _solve(X, y, Binary, lam, settle(LOGISTIC, LogisticOptions, options))


def multinomial_lasso(
    X: Matrix, y: Matrix, lam: float, **options: Unpack[LogisticOptions]
) -> LogisticResult:
    """Multinomial (softmax) l1 logistic regression with mean cross-entropy and unpenalized
    intercepts: coef (p, K), one column per class of y.

    y: (M,) with K >= 2 distinct numbers (columns in sorted order). Equals scikit-learn's
    LogisticRegression(penalty="l1", C=1/(lam*M), solver="saga") for K >= 3 when normalize=False.
    The sweeps converge linearly, so rounding keeps the certified gap above about 1e-9 (relative):
    tol below that ends in a ConvergenceWarning. Other arguments as in `logistic_lasso`.
    """
    return _solve(X, y, Multinomial, lam, settle(LOGISTIC, LogisticOptions, options))


def _solve(
    X: Matrix, y: Matrix, make_loss: Callable[[Tensor], Loss], lam: float, settings: SolverOptions
) -> LogisticResult:
    """The working-set rounds of the module docstring, for either loss."""
    if not (lam > 0 and math.isfinite(lam)):
        raise ValueError(f"lam must be > 0 and finite, got {lam}")
    tol, max_iter, dtype = settings.tol, settings.max_iter, settings.dtype
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    design, loss, norms, omega = _setup(X, y, make_loss, settings)
    p, B, device = norms.numel(), loss.labels.shape[1], norms.device
    b0, null_objective = loss.null(settings.fit_intercept)
    rounds = _LogisticRounds(
        design, loss, norms, lam * omega, b0.to(device), settings, tol * null_objective
    )
    run_rounds(rounds, LOGISTIC_POLICY)
    if not rounds.exact and rounds.reason != "converged":
        rounds.cert, rounds.coef_w = rounds.certify_point(exact=True)
    cert = rounds.cert
    converged = cert.gap <= rounds.tol
    if not converged:
        why = {
            "max_iter": f"max_iter={max_iter} proximal Newton steps were used up",
            "stalled": "the restricted solve stalled",
            "at_floor": "rounding keeps the gap of the restricted solution above tol",
            "max_rounds": f"{LOGISTIC_POLICY.max_rounds} working-set rounds were used up",
        }[rounds.reason]
        warnings.warn(
            f"{loss.name} did not reach tol={tol} ({why}; certified relative gap "
            f"{cert.gap / null_objective:.2g})",
            ConvergenceWarning,
            stacklevel=3,
        )
    coef = torch.zeros(p, B, dtype=dtype, device=device)
    coef[rounds.W] = rounds.coef_w
    intercept = cert.b
    return LogisticResult(
        coef[:, 0] if isinstance(loss, Binary) else coef,
        (intercept[0] if isinstance(loss, Binary) else intercept).cpu(),
        loss.classes.cpu(),
        torch.tensor(cert.gap, dtype=torch.float64),
        torch.tensor(cert.primal, dtype=torch.float64),
        rounds.n_iter,
        converged,
        float(lam),
    )


class _LogisticRounds:
    """One logistic problem on the working-set engine (`workset.Rounds`): the full certificate,
    the growth of its working set W (sorted) and proximal Newton sweeps on it. Why it stops is
    `reason`; the last certificate `cert` is of the coefficients `coef_w` ``(|W|, B)`` returned."""

    def __init__(
        self,
        design: Design,
        loss: Loss,
        norms: Tensor,
        weight: Tensor,
        b0: Tensor,
        settings: SolverOptions,
        tol: float,
    ) -> None:
        """tol: the absolute gap to reach (settings.tol x the intercept-only objective)."""
        self.design, self.loss, self.norms, self.weight = design, loss, norms, weight
        self.fit_intercept, self.dtype, self.tol = settings.fit_intercept, settings.dtype, tol
        self.max_iter, self.check_every = settings.max_iter, settings.check_every
        device = norms.device
        self.usable = norms > 0
        self.W = torch.zeros(0, dtype=torch.int64, device=device)
        B = loss.labels.shape[1]
        a0 = torch.zeros(0, B, dtype=torch.float64, device=device)
        self.point = Point(a0, b0, torch.zeros_like(loss.labels))
        self.restricted = design.columns(self.W)
        self.exact = design.exact  # whether the rounds' gaps use float64 products
        self.n_iter, self.at_floor, self.stalled, self.reason = 0, False, False, "max_rounds"
        self.inner_tol = 0.0

    def certify_point(self, exact: bool) -> tuple[Certificate, Tensor]:
        """`full_certificate` at the current point (exact: with float64 products)."""
        return full_certificate(
            self.design,
            self.restricted,
            self.W,
            self.point,
            self.loss,
            self.norms,
            self.weight,
            self.dtype,
            self.fit_intercept,
            exact,
        )

    def certify(self, last: bool) -> bool:
        self.cert, self.coef_w = self.certify_point(self.exact)
        if self.cert.gap <= self.tol and not self.exact:  # confirm with float64 products
            self.cert, self.coef_w = self.certify_point(True)
            self.exact = self.cert.gap > self.tol  # float32 products were too optimistic
        if self.cert.gap <= self.tol:
            self.reason = "converged"
            return False
        if self.n_iter >= self.max_iter or self.stalled:
            self.reason = "max_iter" if self.n_iter >= self.max_iter else "stalled"
            return False
        if last:
            return False
        new_W, self.point = grow(self.W, self.point, self.cert.scores, self.usable)
        same = torch.equal(new_W, self.W)
        if same and self.at_floor:  # solved to the floor on this very set: only rounding keeps
            self.reason = "at_floor"  # the full gap above tol
            return False
        if not same:
            self.W, self.restricted = new_W, self.design.columns(new_W)
        floor = INNER_FLOOR * self.tol
        gap = torch.tensor(self.cert.gap, dtype=torch.float64)
        tol = torch.tensor(self.tol, dtype=torch.float64)
        self.inner_tol = floor if same else float(inner_tolerance(LOGISTIC_POLICY, gap, tol))
        self.at_floor = self.inner_tol == floor
        return True

    def solve(self) -> None:
        steps, self.stalled = prox_newton(
            self.restricted,
            self.loss,
            self.point,
            self.weight[self.W],
            self.inner_tol,
            self.max_iter - self.n_iter,
            self.check_every,
            self.fit_intercept,
        )
        self.n_iter += steps


def full_certificate(
    design: Design,
    restricted: Restricted,
    W: Tensor,
    point: Point,
    loss: Loss,
    norms: Tensor,
    weight: Tensor,
    dtype: torch.dtype,
    fit_intercept: bool,
    exact: bool,
) -> tuple[Certificate, Tensor]:
    """The full certificate at the point as returned: its coefficients on W ``(|W|,)`` rounded to
    dtype in the user's units (returned, ``(|W|, B)``), eta recomputed from them, and their best
    intercept; its dual point from the unrounded iterate. exact: float64 products."""
    coef_w = (point.a * design.inverse[W].unsqueeze(1)).to(dtype)
    a = coef_w.double() * norms[W].unsqueeze(1)
    product = design.exact_t_times if exact else design.t_times

    def scores_of(theta: Tensor) -> Tensor:
        return product(theta) / (design.n_obs * weight.unsqueeze(1))

    cert = certificate(a, restricted.times(a), point.b, loss, weight[W], scores_of,
                       fit_intercept, point.eta0)  # fmt: skip
    return cert, coef_w


def grow(W: Tensor, point: Point, scores: Tensor, usable: Tensor) -> tuple[Tensor, Point]:
    """The next working set (sorted) and the point's coefficients on it: the support, then the
    usable features with the largest KKT scores (p,), sized by `workset.next_size`."""
    score = torch.where(usable, scores, -torch.inf)
    support = W[(point.a != 0).any(1)]
    inside = torch.ones(1, W.numel(), dtype=torch.bool, device=W.device)
    violators = outside_violators(score.unsqueeze(0), W.unsqueeze(0), inside)
    n_support = torch.tensor([support.numel()], device=W.device)
    previous = torch.tensor([W.numel()], device=W.device)
    size = next_size(LOGISTIC_POLICY, n_support, violators, previous, int(usable.sum()))
    score[support] = torch.inf
    new_W = score.topk(int(size[0])).indices.sort().values
    a = torch.zeros(scores.numel(), point.a.shape[1], dtype=torch.float64, device=scores.device)
    a[W] = point.a
    return new_W, Point(a[new_W], point.b, point.eta0)
