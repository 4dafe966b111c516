"""The working-set engine every solver here runs: rounds of a certificate on the full problem and
a solve restricted to small working sets of features.

Each round certifies every output still pending on the whole problem (its duality gap, and the
KKT scores of all features); outputs within tolerance are done. The others get a new working
set: their current support plus the features outside it with the largest KKT scores, of the size
`next_size` gives, and their restricted problems are solved again, warm-started, to the inner
tolerance `inner_tolerance`. A loss plugs in as `Rounds` (its certificate pass and its restricted
solve): the squared loss of `lasso`, `lasso_path` and `block_lasso` (`solve.lasso_sets`) and the
logistic losses of `logistic_lasso` and `multinomial_lasso` (`solve.logistic`). The two differ in
how fast their sets grow and how exactly their restricted problems are solved, which each states
as its `WorkingSetPolicy` (`LASSO_POLICY`, `LOGISTIC_POLICY`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

INNER_FLOOR = 0.5
"""Restricted problems are solved to at least INNER_FLOOR x tol: the full gap, which adds the
features outside the set to it, can then still meet tol."""


@dataclass(frozen=True)
class WorkingSetPolicy:
    """How working sets start and grow, how many rounds run, how exactly each set is solved.

    start: size of a first set (and the smallest); growth_step: a set grows to at least
    ``|support| + |support| // growth_step`` (1 doubles it, 4 is 5/4) and to
    ``|support| + violators``,
    at most doubling; first_set_share, first_set_max: a first set takes up to 1/first_set_share
    of the KKT violators at 0, at most first_set_max (0: first sets are `start`); set_step:
    sizes are rounded up to a power of two up to set_step, then to a multiple of it (None: not
    rounded); inner_fraction: restricted problems are solved to a gap of
    max(inner_fraction x certified gap, INNER_FLOOR x tol); max_rounds: certificate passes at most.
    """

    start: int
    growth_step: int
    first_set_share: int
    first_set_max: int
    set_step: int | None
    inner_fraction: float
    max_rounds: int = 200


LASSO_POLICY = WorkingSetPolicy(
    start=16, growth_step=4, first_set_share=8, first_set_max=64, set_step=64, inner_fraction=1e-3
)
"""The squared loss (celer's rule with 5/4 in place of 2): its Gram blocks, and the inner
solvers' work on them, grow with the square of the size, while a subproblem solved 1000 times
closer than its certificate is cheap next to one more certificate pass over all p features. A
first set takes up to an eighth of the violators at b = 0 (at most 64): where many features
correlate with a target its support is large, and each doubling from 16 would cost a pass.
Sizes are rounded so that outputs share buckets of equal size (one batched solve each)."""

LOGISTIC_POLICY = WorkingSetPolicy(
    start=16, growth_step=1, first_set_share=1, first_set_max=0, set_step=None, inner_fraction=0.1
)
"""The logistic losses (celer's rule): one problem at a time, whose proximal Newton sweeps cost
about as much as a certificate, so sets double and restricted problems are solved to a tenth of
the certified gap."""


class Rounds(Protocol):
    """One loss's side of the engine, for all its outputs at once."""

    def certify(self, last: bool) -> bool:
        """Certify every pending output on the full problem; outputs within tolerance (every
        output, in the `last` round) are done, the others get their next working sets. True
        while any output is pending."""
        ...

    def solve(self) -> None:
        """Solve the restricted problem of every pending output on its working set."""
        ...


def run_rounds(rounds: Rounds, policy: WorkingSetPolicy) -> None:
    """Alternate certificates and restricted solves until no output is pending (at most
    policy.max_rounds certificates: the last one is always of the coefficients returned)."""
    for round_ in range(policy.max_rounds):
        if not rounds.certify(last=round_ == policy.max_rounds - 1):
            return
        rounds.solve()


def outside_violators(score: Tensor, W: Tensor, valid: Tensor) -> Tensor:
    """(B,) features outside each working set W (B, K) (`valid` (B, K) marks the slots in use)
    that violate the KKT conditions: KKT score (B, p) above 1."""
    inside = ((score.gather(1, W) > 1) & valid).sum(1)
    return (score > 1).sum(1) - inside


def next_size(
    policy: WorkingSetPolicy, support: Tensor, violators: Tensor, previous: Tensor, largest: int
) -> Tensor:
    """(B,) working-set sizes from the support sizes, outside violators and previous sizes (B,):
    ``max(start, |support| + |support| // growth_step, |support| + violators)``, at most doubling (a
    first set: see `WorkingSetPolicy`), rounded up (set_step), never shrinking (so a set can grow
    to the full problem) and at most `largest` (the features, or what the memory budget allows).
    """
    target = torch.maximum(support + support // policy.growth_step, support + violators)
    first = (violators // policy.first_set_share).clamp_max(policy.first_set_max)
    cap = torch.where(previous > 0, 2 * previous, first).clamp_min(policy.start)
    target = torch.minimum(target.clamp_min(policy.start), cap)
    if policy.set_step is not None:
        target = _round_size(target, policy.set_step)
    return torch.maximum(target, previous).clamp_max(largest)


def _round_size(k: Tensor, step: int) -> Tensor:
    """k rounded up to a power of two up to `step`, else to a multiple of `step`."""
    k = k.clamp_min(1)
    pow2 = torch.pow(2, torch.ceil(torch.log2(k.double()))).long()
    return torch.where(pow2 > step, (k + step - 1) // step * step, pow2)


def inner_tolerance(policy: WorkingSetPolicy, gap: Tensor, tol: Tensor) -> Tensor:
    """Gap (B,) to solve restricted problems to: max(inner_fraction x gap, INNER_FLOOR x tol)."""
    return torch.maximum(policy.inner_fraction * gap, INNER_FLOOR * tol)
