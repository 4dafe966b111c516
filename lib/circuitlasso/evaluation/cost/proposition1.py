"""Proposition 1 measured: certified block Lasso solves of planted block-triangular problems.

`time_block_lasso` solves planted block upper-triangular problems (Eq. 3) over a grid of
(M, L, d) and records the wall time, the inner iterations (coordinate-descent epochs on the CPU,
FISTA steps on a GPU) and the time per iteration, next to Proposition 1's bound
M L(L-1) d^2 / 2. The solver precomputes the Gram of the predictors once (one O(M N^2) product);
after that an iteration no longer touches the M observations, so the measured slope in M
(`scaling.loglog_slopes`) is the share of the cost that still scales with the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd
import torch

from circuitlasso.evaluation.cost.scaling import loglog_slopes, vary_one_at_a_time
from circuitlasso.solve import block_lasso, lam_max, upper_triangular_parents
from circuitlasso.timing import Stopwatch


def planted_block_sem(
    M: int, n_blocks: int, width: int, *, density: float = 0.1, noise: float = 0.5, seed: int = 0
) -> torch.Tensor:
    """(M, n_blocks * width) float32 activations of a planted block-triangular linear SEM.

    Block 0 is standard normal; block j is X_<j A_j + noise * N(0, 1) with A_j of the given
    density and weights +-U(0.5, 1); every block is then standardized (mean 0, std 1).
    """
    if min(M, n_blocks, width) < 1 or not 0 < density <= 1:
        raise ValueError(
            "need M, n_blocks, width >= 1 and 0 < density <= 1, "
            f"got {M}, {n_blocks}, {width}, {density}"
        )
    generator = torch.Generator().manual_seed(seed)
    x = torch.empty(M, n_blocks * width, dtype=torch.float64)
    for j in range(n_blocks):
        block = torch.randn(M, width, generator=generator, dtype=torch.float64)
        if j > 0:
            shape = (j * width, width)
            mask = torch.rand(shape, generator=generator, dtype=torch.float64) < density
            weight = 0.5 + 0.5 * torch.rand(shape, generator=generator, dtype=torch.float64)
            sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
            block = x[:, : j * width] @ (mask * weight * sign) + noise * block
        x[:, j * width : (j + 1) * width] = (block - block.mean(0)) / block.std(0)
    return x.float()


def time_block_lasso(
    configs: Iterable[tuple[int, int, int]],
    *,
    lam_ratio: float = 0.1,
    tol: float = 1e-6,
    repeats: int = 3,
    density: float = 0.1,
    seed: int = 0,
) -> pd.DataFrame:
    """Best-of-`repeats` certified `block_lasso` solves, one row per (M, L, d) in `configs`.

    Columns: M, L, d, seconds, iterations (most inner iterations of any output),
    seconds_per_iteration, max_gap (largest duality gap / (||y||^2 / M)) and bound
    (M L (L-1) d^2 / 2, Proposition 1 without its 1/sqrt(eps) factor). Each child column gets
    lam = lam_ratio x its lam_max on its parent blocks.
    """
    rows = []
    for M, L, d in configs:
        x = planted_block_sem(M, L, d, density=density, seed=seed)
        lams = torch.zeros(L * d, dtype=torch.float64)
        for j in range(1, L):
            lams[j * d : (j + 1) * d] = lam_ratio * lam_max(
                x[:, : j * d], x[:, j * d : (j + 1) * d]
            )
        parents = upper_triangular_parents(L)
        clock = Stopwatch()
        for repeat in range(max(1, repeats)):
            with clock.timed(f"solve {repeat}"):
                result = block_lasso(x, [d] * L, parents, lams, tol=tol)
        best = min(clock.laps.values())
        scale = (x.double() ** 2).sum(0) / M
        iterations = int(result.n_iter.max())
        rows.append(
            {
                "M": M,
                "L": L,
                "d": d,
                "seconds": best,
                "iterations": iterations,
                "seconds_per_iteration": best / max(iterations, 1),
                "max_gap": float((result.gap[d:] / scale[d:]).max()),
                "bound": M * L * (L - 1) * d**2 / 2,
            }
        )
    return pd.DataFrame(rows)


def time_and_slopes(
    base: Sequence[int],
    grids: Sequence[Sequence[int]],
    *,
    lam_ratio: float = 0.1,
    tol: float = 1e-6,
    repeats: int = 3,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Proposition 1 measured around ``base`` (M, L, d): :func:`time_block_lasso` on every
    configuration that varies one size over its grid in ``grids`` (``vary_one_at_a_time``), and
    the log-log slopes of its seconds along each size (``loglog_slopes``: columns ``size``,
    ``measured_slope``, ``proposition_1_slope``)."""
    configs = [(M, L, d) for M, L, d in vary_one_at_a_time(base, grids)]
    timings = time_block_lasso(configs, lam_ratio=lam_ratio, tol=tol, repeats=repeats, seed=seed)
    return timings, loglog_slopes(timings)
