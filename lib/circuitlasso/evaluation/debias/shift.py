"""SHIFT's attribution (Marks et al.): integrated gradients of a probe's signed logit through the
SAE features of each layer up to the probe's hook.

The metric of a prompt with label ``y`` is ``m = (2y - 1) * (w . xbar + b)``, the probe's logit
signed so that it grows when the probe is right; ``xbar`` is the activation at the probe's hook
averaged over the prompt's real tokens. For SAE layer ``l`` the features at real tokens follow
``alpha * z`` (zero ablation at ``alpha = 0``, the clean features at ``alpha = 1``) while the SAE
error term stays at its clean value and the layers above run unchanged; a feature's score is
``z * dm/dz`` averaged over ``steps`` midpoints ``alpha``, summed over tokens and averaged over
prompts. By completeness the scores of one layer sum to about ``m(clean) - m(layer zeroed)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.collect.forward import prompt_batches, stop_at_layer, to_dense
from circuitlasso.data.models import check_sae_fits
from circuitlasso.evaluation.debias.probes import Probe, check_hook, mean_over_real


def _depth(hook: str) -> float:
    """How many blocks the model runs to reach ``hook`` (infinite past the last block)."""
    stop = stop_at_layer([hook])
    return math.inf if stop is None else stop


def _ig_layer(
    model: HookedTransformer,
    sae: SAE,
    hook: str,
    probe: Probe,
    tokens: torch.Tensor,
    real: torch.Tensor,
    sign: torch.Tensor,
    steps: int,
) -> torch.Tensor:
    """``(D,)`` sum over the batch's prompts and real tokens of one SAE's IG scores."""
    device = sae.W_enc.device
    w = torch.as_tensor(probe.coef, dtype=torch.float64, device=device)
    mask = real.to(device)[:, :, None]
    sae_hook = str(sae.cfg.metadata.hook_name)
    stop = stop_at_layer([hook, sae_hook])
    scores = torch.zeros(sae.cfg.d_sae, dtype=torch.float64)
    for step in range(steps):
        alpha = (step + 0.5) / steps  # midpoint rule on [0, 1]
        state: dict[str, torch.Tensor] = {}

        def patch(x: torch.Tensor, hook: Any, alpha: float = alpha, state=state) -> torch.Tensor:
            z = to_dense(sae.encode(x)).detach()
            path = torch.where(mask, alpha * z, z).requires_grad_(True)
            state["clean"], state["path"] = z, path
            return sae.decode(path) + (x - sae.decode(z)).detach()

        def read(x: torch.Tensor, hook: Any, state=state) -> None:
            state["read"] = x

        with torch.enable_grad():
            model.run_with_hooks(
                tokens.to(model.cfg.device),
                stop_at_layer=stop,
                fwd_hooks=[(sae_hook, patch), (hook, read)],
            )
            logits = mean_over_real(state["read"], real) @ w + probe.intercept
            (grad,) = torch.autograd.grad((sign.to(device) * logits).sum(), state["path"])
        scores += (state["clean"] * mask * grad).sum((0, 1)).double().cpu()
    return scores / steps


def ig_scores(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    probe: Probe,
    hook: str,
    prompts: Sequence[str],
    y: np.ndarray,
    *,
    steps: int = 10,
    batch_size: int = 32,
) -> dict[int, np.ndarray]:
    """``{layer: (D,)}`` IG scores of every SAE feature for the probe reading ``hook``, averaged
    over ``prompts`` with labels ``y: (M,)`` (0/1)."""
    check_hook(model, hook)
    if not saes:
        raise ValueError("saes is empty: need at least one {layer: SAE}")
    for sae in saes.values():
        check_sae_fits(model, sae)
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if len(y) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(y)} labels")
    late = [s for s, sae in saes.items() if _depth(str(sae.cfg.metadata.hook_name)) > _depth(hook)]
    if late:
        raise ValueError(f"the SAEs of layers {late} read past the probe's hook {hook!r}")
    signs = torch.as_tensor(2 * np.asarray(y) - 1, dtype=torch.float64)
    totals = {layer: torch.zeros(sae.cfg.d_sae, dtype=torch.float64) for layer, sae in saes.items()}
    first = 0
    for tokens, real in prompt_batches(model, prompts, batch_size):
        sign = signs[first : first + len(tokens)]
        for layer, sae in saes.items():
            totals[layer] += _ig_layer(model, sae, hook, probe, tokens, real, sign, steps)
        first += len(tokens)
    return {layer: (total / len(prompts)).numpy() for layer, total in totals.items()}
