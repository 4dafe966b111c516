"""The solvers' keyword options and their defaults, in one place.

Every solver takes its options as keywords (`lasso(X, Y, lam, tol=1e-8)`); the keywords each
accepts are a `TypedDict` below (what a type checker sees), their defaults the fields of
`SolverOptions`, and each family of solvers starts from its own `SolverOptions` value (`LASSO`,
`LOGISTIC`, ...), which differ only where the families do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypedDict

import torch

from circuitlasso.solve.memory import DEFAULT_MEMORY_GIB

StopRule = Literal["gap", "objective"]


@dataclass(frozen=True)
class SolverOptions:
    """fit_intercept: center the columns and fit unpenalized intercepts; normalize: penalize
    coefficients of unit-norm columns (App. B.1; False: the plain Lasso); tol: duality gap
    relative to the objective of the intercept-only model (stop="gap") or relative objective
    decrease (stop="objective"); max_iter: inner iterations at most (coordinate-descent epochs,
    FISTA steps or proximal Newton steps); check_every: FISTA iterations between gap checks;
    dtype: precision of X as read and of the coefficients returned; device: where to solve
    (None: the CPU); memory_gib: the solve's memory budget in GiB; progress: a progress bar."""

    fit_intercept: bool = False
    normalize: bool = True
    tol: float = 1e-6
    stop: StopRule = "gap"
    max_iter: int = 20_000
    check_every: int = 10
    dtype: torch.dtype = torch.float32
    device: torch.device | str | None = None
    memory_gib: float = DEFAULT_MEMORY_GIB
    progress: bool = False

    def checked(self) -> SolverOptions:
        """Itself, or a ValueError naming the first of tol, stop, max_iter out of its range."""
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")
        if self.stop not in ("gap", "objective"):
            raise ValueError(f"stop must be 'gap' or 'objective', got {self.stop!r}")
        if self.max_iter < 1:
            raise ValueError(f"max_iter must be >= 1, got {self.max_iter}")
        return self


LASSO = SolverOptions()
"""`lasso`, `lasso_path`, `block_lasso`: no intercept (components and features are regressed as
they are), float32 coefficients."""
LOGISTIC = SolverOptions(fit_intercept=True)
"""`logistic_lasso`, `multinomial_lasso`: an intercept (class frequencies are rarely even)."""
LAM_MAX = SolverOptions(dtype=torch.float64)
"""`lam_max`: the penalty scale is read in float64, so that a ratio of it means one sparsity."""
LOGISTIC_LAM_MAX = replace(LAM_MAX, fit_intercept=True)
"""`logistic_lam_max`: as `LAM_MAX`, with the logistic solvers' intercept."""
INNER = SolverOptions(max_iter=10_000)
"""`coordinate_descent`, `fista` on their own (the working sets pass what is left of max_iter)."""


class _Scale(TypedDict, total=False):
    fit_intercept: bool
    normalize: bool
    dtype: torch.dtype
    device: torch.device | str | None


class LamMaxOptions(_Scale, total=False):
    """Keywords of `lam_max`."""

    memory_gib: float


class LogisticLamMaxOptions(_Scale, total=False):
    """Keywords of `logistic_lam_max`."""


class _Iterations(TypedDict, total=False):
    tol: float
    max_iter: int


class LogisticOptions(_Scale, _Iterations, total=False):
    """Keywords of `logistic_lasso` and `multinomial_lasso`."""

    check_every: int


class LassoOptions(_Scale, _Iterations, total=False):
    """Keywords of `lasso`, `lasso_path` and `block_lasso`."""

    stop: StopRule
    memory_gib: float
    progress: bool


class InnerOptions(TypedDict, total=False):
    """Keywords of the inner solvers `coordinate_descent` and `fista`."""

    stop: StopRule
    max_iter: int
    check_every: int


def settle(defaults: SolverOptions, accepted: type, options: Mapping[str, Any]) -> SolverOptions:
    """`defaults` with the keywords `options` a solver was called with, each one of the keys of
    its `accepted` TypedDict (TypeError otherwise, as for any unexpected keyword)."""
    keys = accepted.__required_keys__ | accepted.__optional_keys__  # type: ignore[attr-defined]
    unexpected = sorted(set(options) - keys)
    if unexpected:
        raise TypeError(f"unexpected keyword argument {unexpected[0]!r}")
    return replace(defaults, **options)
