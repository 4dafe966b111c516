"""Proximal Newton on a logistic problem restricted to a working set (`solve.logistic`).

A sweep takes one step per column c of the coefficients (one for the binary loss), each from the
probabilities the previous step left (Gauss-Seidel over the classes, as glmnet's multinomial
fit): the step minimizes the quadratic model of the loss in (a_c, b_c), exact for that block,
plus the l1 penalty (a Lasso on the ``|W| x |W|`` Hessian, the intercept eliminated by weighted
centering), followed by a backtracking line search. The Lasso is solved by coordinate descent on
the Hessian on the CPU, as glmnet solves it, and by FISTA elsewhere
(`solve.coordinate.inner_solver`): FISTA's steps crawl on the ill-conditioned Hessians of many
correlated features at a small lam.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from circuitlasso.solve.coordinate import inner_solver
from circuitlasso.solve.fista import Subproblems
from circuitlasso.solve.logistic_design import Restricted
from circuitlasso.solve.logistic_losses import Loss, certificate

QP_MAX_ITER = 3000
"""Iterations (coordinate-descent epochs, or FISTA steps) allowed for the quadratic model of one
Newton step. The solver stops at the model's tolerance, so the cap binds only on an
ill-conditioned Hessian (hundreds of features at a small lam): with FISTA, the toy CoLA readout
at lam 1e-5, 605 features, needs over 1,000 steps; with 300 its steps fell short and the solve
stalled at a relative gap of 1e-3."""
STALL_STEPS = 5
STALL_FACTOR = 0.9
"""A restricted solve stops (not converged) when STALL_STEPS sweeps per column of A (binary:
this many Newton steps; K classes: K times as many sweeps) did not lower its smallest gap so far
by the factor STALL_FACTOR (rounding keeps it from going lower). Slow but steady linear
convergence (nearly separable classes) goes on, up to max_iter."""
QP_GAP_SHARE = 0.25
"""A step's quadratic model is solved to QP_GAP_SHARE of the current gap over the number of
columns: a sweep of such steps then closes a good part of the gap, not less."""
MIN_CURVATURES = (1e-9, 1e-5)
"""Floors of the Newton weights p (1 - p), tried in turn: glmnet's (its vmin, for probabilities
clipped at its pmin of 1e-9), then that of its older releases (pmin 1e-5). The model is exact
where the weights clear the floor; a floor far above the weights of the rows the model already
saturates (p near 0 or 1) overstates their curvature, so that on nearly separable classes each
step falls short and the gap closes linearly (the toy CoLA readout at lam ratio 0.01: 40 sweeps
of 1,148 features with 1e-5, for 80 s, against 25 s with 1e-9). But a feature active only on
such rows has a near-zero curvature, and a model minimized exactly in it (coordinate descent)
can step so far along it that no halving of the line search decreases the objective (a feature
active on one CoLA sentence of the toy world: relative gap 0.29); that step is taken again
with the higher floor, which keeps it short (any positive definite model gives a descent
direction, so the steps still converge)."""
ARMIJO = 0.01
"""A step is kept once the objective drops by ARMIJO of the decrease its model predicted."""
LINE_SEARCH_HALVINGS = 40
"""Halvings of a step at most before it counts as unable to decrease the objective."""


@dataclass
class Point:
    """Coefficients a (K, B) on a working set of K features, intercepts b (B,) and
    eta0 = X~_W a (M, B), float64 (B = 1 for the binary loss, the number of classes else)."""

    a: Tensor
    b: Tensor
    eta0: Tensor


def prox_newton(
    design: Restricted,
    loss: Loss,
    point: Point,
    weight: Tensor,
    tol: float,
    max_iter: int,
    check_every: int,
    fit_intercept: bool,
) -> tuple[int, bool]:
    """Proximal Newton sweeps on the restricted problem until its gap <= tol; updates `point`.

    A sweep takes one step per column c of a (one for the binary loss), each from the
    probabilities the previous one left (as glmnet's multinomial fit does). Each step minimizes
    the quadratic model of the loss in (a_c, b_c), whose Hessian is exact for that block: with
    weights w = p_c (1 - p_c) / M it is a Lasso in Gram form,
    H = X_c^T diag(w) X_c (X_c centered with the weights w, which eliminates the intercept),
    q = H a_c - (g_a - g_b m), with a working response z with A^T z = q for
    A = diag(sqrt(w)) X_c (H = A^T A), which gives the model its own duality gap (solved to
    QP_GAP_SHARE of the current gap over the number of columns). The step to its minimizer is
    then shortened until the objective decreases by ARMIJO of the model's predicted decrease.
    Returns (sweeps, stalled) (see STALL_FACTOR).
    """
    M, B = loss.labels.shape

    def scores_of(theta: Tensor) -> Tensor:
        return design.t_times(theta) / (M * weight.unsqueeze(1))

    floors = list(MIN_CURVATURES)  # the first is in use; the next ones after a stall
    best: list[float] = []  # smallest gap so far, after each sweep on this floor
    for sweep in range(max_iter):
        cert = certificate(point.a, point.eta0, point.b, loss, weight, scores_of, fit_intercept)
        point.b = cert.b
        gap = cert.gap
        if gap <= tol:
            return sweep, False
        best.append(min(gap, best[-1]) if best else gap)
        window = STALL_STEPS * B
        stalled = len(best) > window and best[-1] > STALL_FACTOR * best[-1 - window]
        for c in range(B):
            if stalled:
                break
            stalled = not _column_step(design, loss, point, weight, c, QP_GAP_SHARE * gap / B,
                                       check_every, fit_intercept, floors[0])  # fmt: skip
        if stalled:
            floors.pop(0)
            if not floors:
                return sweep, True
            best = []
            continue
        if B > 1:
            _center_rows(design, point)
    return max_iter, False


def _center_rows(design: Restricted, point: Point) -> None:
    """Shift every row of a (K, B) by the m nearest 0 in its median interval (between its two
    middle entries; m = 0 where 0 lies in it): the softmax sees only differences within a row of
    eta, so the loss stays, and the row's penalty ``sum_c |a_kc - m|`` is smallest there. Steps on
    one column at a time cannot make this move (it changes every column at once): without it,
    rows drift toward their medians over thousands of sweeps."""
    ordered = point.a.sort(1).values
    B = ordered.shape[1]
    low, high = ordered[:, (B - 1) // 2], ordered[:, B // 2]
    shift = torch.where(low > 0, low, torch.where(high < 0, high, torch.zeros_like(low)))
    if not bool((shift != 0).any()):
        return
    point.a = point.a - shift.unsqueeze(1)
    point.eta0 = point.eta0 - design.times(shift.unsqueeze(1))


def _column_step(
    design: Restricted,
    loss: Loss,
    point: Point,
    weight: Tensor,
    c: int,
    tol: float,
    check_every: int,
    fit_intercept: bool,
    floor: float,
) -> bool:
    """One proximal Newton step in column c of a and b (see `prox_newton`), its Newton weights
    at least ``floor`` (see MIN_CURVATURES); False when it cannot decrease the objective."""
    M = loss.labels.shape[0]
    eta = point.eta0 + point.b
    prob = loss.probabilities(eta)[:, c]
    r = prob - loss.labels[:, c]
    a, eta0 = point.a[:, c], point.eta0[:, c]
    grad = design.t_times(r.unsqueeze(1))[:, 0] / M
    w = (prob * (1 - prob)).clamp_min(floor) / M
    root = w.sqrt()
    H = design.weighted_gram(w)
    z = root * eta0 - r / (M * root)
    g, g_b, S, m = grad, 0.0, 1.0, torch.zeros_like(grad)
    if fit_intercept:
        g_b, S = float(r.mean()), float(w.sum())
        m = design.t_times(w.unsqueeze(1))[:, 0] / S
        H = H - S * torch.outer(m, m)
        g = grad - g_b * m
        z = z - root * float(root @ z) / S
    problem = Subproblems(
        H.unsqueeze(0), (H @ a - g).unsqueeze(0), (z @ z).reshape(1), weight.unsqueeze(0)
    )
    tol_t = torch.tensor([tol], dtype=torch.float64, device=w.device)
    solve = inner_solver(w.device)
    u, _, _ = solve(problem, a.unsqueeze(0), tol_t, max_iter=QP_MAX_ITER, check_every=check_every)
    d = u[0] - a
    d_b = -g_b / S - float(m @ d)
    decrease = float(grad @ d) + g_b * d_b + float((weight * (u[0].abs() - a.abs())).sum())
    if not decrease < 0:
        return False
    before = loss.value(eta) + float((weight.unsqueeze(1) * point.a.abs()).sum())
    Xd, t = design.times(d.unsqueeze(1))[:, 0], 1.0
    column = torch.zeros(point.b.numel(), dtype=torch.float64, device=w.device)
    column[c] = 1.0
    for _ in range(LINE_SEARCH_HALVINGS):
        a_t, eta0_t, b_t = point.a.clone(), point.eta0.clone(), point.b + t * d_b * column
        a_t[:, c] = a + t * d
        eta0_t[:, c] = eta0 + t * Xd
        value = loss.value(eta0_t + b_t) + float((weight.unsqueeze(1) * a_t.abs()).sum())
        if value <= before + ARMIJO * t * decrease:
            break
        t /= 2
    else:
        return False
    point.a, point.eta0, point.b = a_t, eta0_t, b_t
    return True
