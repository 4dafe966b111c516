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

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.evaluation.attribution import integrated_gradients
from circuitlasso.evaluation.debias.probes import Probe, check_hook
from circuitlasso.forward import mean_over_real, stop_at_layer


def _depth(hook: str) -> float:
    """How many blocks the model runs to reach ``hook`` (infinite past the last block)."""
    stop = stop_at_layer([hook])
    return math.inf if stop is None else stop


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
    over ``prompts`` with labels ``y: (M,)`` (0/1): :func:`circuitlasso.evaluation.attribution.
    integrated_gradients` from the zero baseline."""
    check_hook(model, hook)
    if len(y) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(y)} labels")
    late = [s for s, sae in saes.items() if _depth(str(sae.cfg.metadata.hook_name)) > _depth(hook)]
    if late:
        raise ValueError(f"the SAEs of layers {late} read past the probe's hook {hook!r}")
    w = torch.as_tensor(probe.coef, dtype=torch.float64)

    def logit(
        layer: int, z: torch.Tensor, seen: Mapping[str, torch.Tensor], real: torch.Tensor
    ) -> torch.Tensor:
        """The probe's logit of the activations at ``hook`` averaged over the real tokens."""
        x = seen[hook]
        return mean_over_real(x, real) @ w.to(x.device) + probe.intercept

    signs = 2 * np.asarray(y, dtype=np.float64) - 1
    return integrated_gradients(model, saes, prompts, logit, reads=[hook], signs=signs,
                                steps=steps, batch_size=batch_size)  # fmt: skip
