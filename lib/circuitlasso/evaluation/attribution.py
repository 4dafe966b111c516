"""Integrated gradients through SAE features: the path integral behind the attribution baseline
(:func:`circuitlasso.evaluation.ablate.attribution_scores`) and SHIFT's scores
(:func:`circuitlasso.evaluation.debias.shift.ig_scores`), which differ only in the metric and the
baseline.

For SAE layer ``l`` spliced at its hook, the features ``z: (B, P, D)`` at real tokens follow
``base + alpha * (z - base)`` from a baseline ``base: (D,)`` (``alpha = 0``) to the clean features
(``alpha = 1``); the SAE's error term stays at its clean value and the model above runs unchanged.
With ``m`` a per-prompt metric of that forward pass and ``s`` a per-prompt sign, a feature's score
is

    sum over prompts and real tokens of (z - base) * mean over alpha of d(s * m)/dz,

``alpha`` at the midpoints of ``steps`` equal intervals of [0, 1], divided by the number of
prompts: ``{layer: (D,)}``. By completeness the scores of one layer sum to about
``mean(s * (m(clean) - m(layer at base)))`` when ``m`` is continuous along the path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.data.models import check_sae_fits
from circuitlasso.forward import (
    Hook,
    batches_by_length,
    run_with_hooks,
    stop_at_layer,
    to_dense,
)

Metric = Callable[[int, torch.Tensor, Mapping[str, torch.Tensor], torch.Tensor], torch.Tensor]
"""``metric(layer, z, seen, real) -> (B,)``: the metric of each prompt of a batch, given the
patched layer, its features on the path ``z: (B, P, D)``, the activations ``seen`` at the hooks
the metric reads and the batch's real-token mask ``real: (B, P)``."""


def _layer_scores(
    model: HookedTransformer,
    layer: int,
    sae: SAE,
    metric: Metric,
    reads: Sequence[str],
    tokens: torch.Tensor,
    real: torch.Tensor,
    sign: torch.Tensor,
    base: torch.Tensor,
    steps: int,
) -> torch.Tensor:
    """``(D,)`` float64 sum over the batch's prompts and real tokens of one SAE's scores."""
    mask = real.to(base.device)[:, :, None]
    sign = sign.to(base.device)
    sae_hook = str(sae.cfg.metadata.hook_name)
    stop = stop_at_layer([sae_hook, *reads])
    scores = torch.zeros(sae.cfg.d_sae, dtype=torch.float64)
    for step in range(steps):
        alpha = (step + 0.5) / steps  # midpoint rule on [0, 1]
        state: dict[str, torch.Tensor] = {}
        seen: dict[str, torch.Tensor] = {}

        def patch(x: torch.Tensor, hook: Any, alpha: float = alpha, state=state) -> torch.Tensor:
            z = to_dense(sae.encode(x)).detach()
            path = torch.where(mask, base + alpha * (z - base), z).requires_grad_(True)
            state["clean"], state["path"] = z, path
            return sae.decode(path) + (x - sae.decode(z)).detach()

        def read(x: torch.Tensor, hook: Any, seen=seen) -> None:
            seen[hook.name] = x

        hooks: list[Hook] = [(sae_hook, patch), *((name, read) for name in reads)]
        with torch.enable_grad():
            run_with_hooks(model, tokens, hooks, stop_at_layer=stop)
            m = (sign * metric(layer, state["path"], seen, real)).sum()
            (grad,) = torch.autograd.grad(m, state["path"], allow_unused=True)
        if grad is None:  # the metric reads nothing the layer feeds
            return scores
        scores += ((state["clean"] - base) * mask * grad).sum((0, 1)).double().cpu()
    return scores / steps


def integrated_gradients(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    prompts: Sequence[str],
    metric: Metric,
    *,
    reads: Sequence[str] = (),
    baselines: Mapping[int, torch.Tensor] | None = None,
    signs: np.ndarray | None = None,
    steps: int = 10,
    batch_size: int = 32,
) -> dict[int, np.ndarray]:
    """``{layer: (D,)}`` integrated-gradient scores of every SAE feature (module docstring),
    averaged over ``prompts``.

    ``metric`` (see :data:`Metric`) reads the activations at the hooks ``reads``; ``baselines``:
    ``{layer: (D,)}`` (default zero, SHIFT's zero ablation); ``signs: (n,)`` weights each
    prompt's metric (default 1); ``steps`` midpoints per path.
    """
    if not saes:
        raise ValueError("saes is empty: need at least one {layer: SAE}")
    for sae in saes.values():
        check_sae_fits(model, sae)
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    missing = sorted(set(saes) - set(baselines)) if baselines is not None else []
    if missing:
        raise ValueError(f"baselines has no values for layers {missing}")
    batches, order = batches_by_length(model, prompts, batch_size)  # the mean is order-free
    weights = torch.ones(len(prompts), dtype=torch.float64)
    if signs is not None:
        if np.shape(signs) != (len(prompts),):
            raise ValueError(f"{len(prompts)} prompts but signs of shape {np.shape(signs)}")
        weights = torch.as_tensor(np.asarray(signs)[order], dtype=torch.float64)
    totals = {layer: torch.zeros(sae.cfg.d_sae, dtype=torch.float64) for layer, sae in saes.items()}
    first = 0
    for tokens, real in batches:
        sign = weights[first : first + len(tokens)]
        first += len(tokens)
        tokens_d = tokens.to(model.cfg.device)
        for layer, sae in saes.items():
            base = torch.zeros(sae.cfg.d_sae) if baselines is None else baselines[layer]
            totals[layer] += _layer_scores(model, layer, sae, metric, reads, tokens_d, real, sign,
                                           base.to(sae.W_enc), steps)  # fmt: skip
    return {layer: (total / len(prompts)).numpy() for layer, total in totals.items()}
