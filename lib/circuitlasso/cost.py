"""The cost of CircuitLasso on neurons: measured (Proposition 1) and compared with EAP-IG (Prop. 2).

Proposition 1 bounds the certified block-upper-triangular solve by O(M L(L-1) d^2 / sqrt(eps)) for
M observations of L locations of width d. :func:`time_block_lasso` measures our solver on planted
problems of that shape and :func:`loglog_slopes` fits the exponents. Proposition 2 compares that
bound with the extra forward and backward passes of EAP-IG; :func:`proposition2` evaluates its
two sufficient conditions and the ratio of the two cost expressions for real model shapes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from circuitlasso.solve import block_lasso, lam_max, upper_triangular_parents


@dataclass(frozen=True)
class TransformerShape:
    """Shape of a decoder-only transformer: S blocks, width d, h heads, MLP expansion f."""

    name: str
    blocks: int
    d_model: int
    heads: int
    mlp_factor: float


# From each model's published config (config.json on the Hugging Face hub).
MODEL_SHAPES = {
    "gpt2": TransformerShape("gpt2", blocks=12, d_model=768, heads=12, mlp_factor=4.0),
    "pythia-70m-deduped": TransformerShape(
        "pythia-70m-deduped", blocks=6, d_model=512, heads=8, mlp_factor=4.0
    ),
    "gemma-2-2b": TransformerShape("gemma-2-2b", blocks=26, d_model=2304, heads=8, mlp_factor=4.0),
    "gemma-2-9b": TransformerShape("gemma-2-9b", blocks=42, d_model=3584, heads=16, mlp_factor=4.0),
}


def planted_block_sem(
    n_obs: int, n_blocks: int, width: int, *, density: float = 0.05, seed: int = 0
) -> torch.Tensor:
    """Activations X (n_obs, n_blocks * width) of a planted block-triangular linear SEM.

    Block l is a sparse linear function of blocks < l (edge probability ``density``) plus
    unit noise, standardized column by column.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks: list[torch.Tensor] = []
    for _ in range(n_blocks):
        z = torch.randn(n_obs, width, generator=gen, dtype=torch.float64)
        if blocks:
            parents = torch.cat(blocks, dim=1)
            weights = torch.randn(parents.shape[1], width, generator=gen, dtype=torch.float64)
            mask = torch.rand(weights.shape, generator=gen) < density
            z = z + parents @ (weights * mask)
        blocks.append((z - z.mean(0)) / z.std(0))
    return torch.cat(blocks, dim=1).float()


def time_block_lasso(
    configs: Iterable[tuple[int, int, int]],
    *,
    lam_ratio: float = 0.1,
    tol: float = 1e-6,
    repeats: int = 3,
    seed: int = 0,
) -> pd.DataFrame:
    """Median wall time of the certified block-upper-triangular solve for each (M, L, d).

    Returns one row per config: ``M, L, d, seconds, iterations`` (mean FISTA iterations per
    output), ``bound`` (M L(L-1) d^2 / 2, Proposition 1 without the 1/sqrt(eps) factor) and
    ``max_gap`` (the largest duality gap returned).
    """
    rows = []
    for n_obs, n_blocks, width in configs:
        x = planted_block_sem(n_obs, n_blocks, width, seed=seed)
        parents = upper_triangular_parents(n_blocks)
        lam = lam_ratio * float(lam_max(x[:, :width], x[:, width:]).max())
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = block_lasso(x, [width] * n_blocks, parents, lam, tol=tol)
            times.append(time.perf_counter() - start)
        solved = result.n_iter[width:].double()
        rows.append(
            {
                "M": n_obs,
                "L": n_blocks,
                "d": width,
                "seconds": float(np.median(times)),
                "iterations": float(solved.mean()),
                "bound": n_obs * n_blocks * (n_blocks - 1) * width**2 / 2,
                "max_gap": float(result.gap.max()),
            }
        )
    return pd.DataFrame(rows)


def rows_varying(timings: pd.DataFrame, column: str, varied: Sequence[str]) -> pd.DataFrame:
    """Rows of ``timings`` where every varied size but ``column`` sits at its most common value,
    sorted by ``column``."""
    held = timings
    for other in varied:
        if other != column:
            held = held[held[other] == timings[other].mode().iloc[0]]
    return held.sort_values(column)


def loglog_slopes(timings: pd.DataFrame, varied: Sequence[str] = ("M", "L", "d")) -> pd.DataFrame:
    """Least-squares slope of log(seconds) against log(x) for each varied column x.

    Only rows where the other columns sit at their most common value enter a fit, so each slope
    is measured with the other sizes held fixed. Proposition 1 predicts M: 1, d: 2 and, for L,
    the slope of L(L-1), which the table reports next to it.
    """
    out = []
    for column in varied:
        held = rows_varying(timings, column, varied)
        if held[column].nunique() < 2:
            raise ValueError(f"timings vary '{column}' over fewer than 2 values with others fixed")
        x = np.log(held[column].to_numpy(float))
        slope = float(np.polyfit(x, np.log(held["seconds"].to_numpy(float)), 1)[0])
        predicted = float(np.polyfit(x, np.log(held["bound"].to_numpy(float)), 1)[0])
        out.append({"size": column, "measured_slope": slope, "proposition_1_slope": predicted})
    return pd.DataFrame(out)


def proposition2(
    shape: TransformerShape, n_locations: int, n_tokens: int, eps: float = 1e-6
) -> dict[str, object]:
    """Proposition 2 for one model, number of locations L and sequence length n_token.

    Returns the regime (``n_token < d`` is taken as condition (1)'s ``n_token << d``), the
    threshold on n_token that regime requires, whether it holds, and ``cost_ratio``: EAP-IG's
    extra cost over CircuitLasso's bound (> 1 means CircuitLasso is cheaper by the bounds).
    """
    S, d, f, L = shape.blocks, shape.d_model, shape.mlp_factor, n_locations
    root_eps = math.sqrt(eps)
    eap_ig = 12 * S * n_tokens * d**2 * (2 + f) + 12 * S * n_tokens**2 * d + L * d
    lasso_cost = L * (L - 1) * d**2 / (2 * root_eps)
    if n_tokens < d:
        regime, threshold = "(1) n_token < d", L * (L - 1) / (24 * S * (2 + f) * root_eps)
    else:
        regime, threshold = "(2) n_token >= d", math.sqrt(L * (L - 1) * d / (24 * S * root_eps))
    return {
        "model": shape.name,
        "L": L,
        "n_token": n_tokens,
        "regime": regime,
        "n_token_threshold": threshold,
        "condition_holds": n_tokens > threshold,
        "cost_ratio": eap_ig / lasso_cost,
    }


def proposition2_table(
    models: Iterable[str], locations_per_block: Iterable[int], n_tokens: Iterable[int], eps: float
) -> pd.DataFrame:
    """:func:`proposition2` over models x (locations per block x S) x sequence lengths."""
    rows = []
    for name in models:
        if name not in MODEL_SHAPES:
            raise ValueError(f"unknown model '{name}'; valid: {', '.join(MODEL_SHAPES)}")
        shape = MODEL_SHAPES[name]
        for per_block in locations_per_block:
            for n in n_tokens:
                rows.append(proposition2(shape, per_block * shape.blocks, n, eps))
    return pd.DataFrame(rows)
