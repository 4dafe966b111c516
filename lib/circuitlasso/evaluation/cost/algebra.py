"""Proposition 2's algebra: the operation counts of CircuitLasso's solve (Proposition 1) and of
EAP-ig beyond the shared forward pass, the regime a model shape falls in, the n_token threshold
of its condition, and the ratio of the two counts; the shapes of the paper's models.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd

from circuitlasso.data.random_models import ModelShape

GPT2_SMALL = ModelShape(
    "GPT-2 small",
    S=12,
    d=768,
    h=12,
    f=4.0,
    source="Radford et al. 2019; gpt2 config: n_layer=12, n_embd=768, n_head=12, n_inner=4*768",
)
PYTHIA_70M = ModelShape(
    "Pythia-70M",
    S=6,
    d=512,
    h=8,
    f=4.0,
    source="Biderman et al. 2023, Table 1; pythia-70m(-deduped) config: num_hidden_layers=6, "
    "hidden_size=512, num_attention_heads=8, intermediate_size=2048",
)
GEMMA_2_2B = ModelShape(
    "Gemma-2-2B",
    S=26,
    d=2304,
    h=8,
    f=4.0,
    source="Gemma Team 2024, Table 1; gemma-2-2b config: num_hidden_layers=26, hidden_size=2304, "
    "num_attention_heads=8, intermediate_size=9216",
)
MODEL_SHAPES: dict[str, ModelShape] = {
    "gpt2": GPT2_SMALL,
    "pythia-70m": PYTHIA_70M,
    "pythia-70m-deduped": PYTHIA_70M,
    "gemma-2-2b": GEMMA_2_2B,
}


def proposition1_count(n_obs: int, n_locations: int, d: int, eps: float) -> float:
    """Proposition 1's operation count of the solve, ``M L (L-1) d^2 / (2 sqrt(eps))``: the
    multiply-adds of one product of the data with the coefficients per FISTA iteration, for
    the ``1/sqrt(eps)`` iterations of its rate."""
    return n_obs * n_locations * (n_locations - 1) * d**2 / (2 * math.sqrt(eps))


def eap_ig_additional_count(shape: ModelShape, n_locations: int, n_tokens: int) -> float:
    """Proposition 2's count of EAP-ig's cost beyond the shared forward pass, per observation:
    ``12 S n d^2 (2+f) + 12 S n^2 d + L d``."""
    S, d, n = shape.S, shape.d, n_tokens
    return 12 * S * n * d**2 * (2 + shape.f) + 12 * S * n**2 * d + n_locations * d


def proposition2(
    shape: ModelShape, n_locations: int, n_tokens: int, eps: float
) -> dict[str, object]:
    """Proposition 2 for L = n_locations locations and prompts of n_tokens tokens.

    regime "(1)" when n_token < d (the paper's n_token << d), condition
    n_token > L(L-1) / (24 S (2+f) sqrt(eps)); regime "(2)" otherwise, condition
    n_token > sqrt(L(L-1) d / (24 S sqrt(eps))). cost_ratio: EAP-ig's additional cost
    12 S n d^2 (2+f) + 12 S n^2 d + L d over CircuitLasso's L(L-1) d^2 / (2 sqrt(eps)).
    """
    if n_locations < 1 or n_tokens < 1 or not 0 < eps < 1:
        raise ValueError(
            "need n_locations >= 1, n_tokens >= 1 and 0 < eps < 1, "
            f"got {n_locations}, {n_tokens}, {eps}"
        )
    S, d, f, L, n = shape.S, shape.d, shape.f, n_locations, n_tokens
    root_eps = math.sqrt(eps)
    if n < d:
        regime, threshold = "(1) n_token < d", L * (L - 1) / (24 * S * (2 + f) * root_eps)
    else:
        regime, threshold = "(2) n_token >= d", math.sqrt(L * (L - 1) * d / (24 * S * root_eps))
    eap = eap_ig_additional_count(shape, L, n)
    ours = proposition1_count(1, L, d, eps)
    return {
        "model": shape.name,
        "S": S,
        "d": d,
        "h": shape.h,
        "f": f,
        "L": L,
        "n_token": n,
        "eps": eps,
        "regime": regime,
        "n_token_threshold": threshold,
        "condition_holds": n > threshold,
        "cost_ratio": eap / ours if ours > 0 else math.inf,
    }


def proposition2_table(
    models: Sequence[str], locations_per_block: Iterable[int], n_tokens: Iterable[int], eps: float
) -> pd.DataFrame:
    """`proposition2` for every model name x (L = locations_per_block x S) x n_token."""
    unknown = [m for m in models if m not in MODEL_SHAPES]
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r}; valid: {', '.join(MODEL_SHAPES)}")
    per_block, tokens = list(locations_per_block), list(n_tokens)
    rows = [
        proposition2(MODEL_SHAPES[m], k * MODEL_SHAPES[m].S, n, eps)
        for m in models
        for k in per_block
        for n in tokens
    ]
    return pd.DataFrame(rows)


REGIME_COLUMNS = ["model", "L", "n_token", "regime", "n_token_threshold", "condition_holds",
                  "cost_ratio"]  # fmt: skip


def regime_table(regimes: pd.DataFrame) -> pd.DataFrame:
    """A :func:`proposition2_table` as the section shows it: :data:`REGIME_COLUMNS` (model, L,
    n_token, regime, its n_token threshold, whether the condition holds, the cost ratio), numbers
    to 3 decimals."""
    return regimes[REGIME_COLUMNS].round(3)
