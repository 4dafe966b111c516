"""Integrated gradients through SAE features: the path integral (:func:`integrated_gradients`)
behind the attribution baseline (:func:`attribution_scores`) and SHIFT's scores
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

Attribution baseline (SHIFT-style, :func:`attribution_scores`): per layer, integrated gradients
of the faithfulness metric ``m`` (:mod:`circuitlasso.evaluation.metrics`: the label readout, or a
decoder's judgement of minimal pairs, each prompt weighted as the metric weights it) from the
mean-ablated to the clean features of that layer (the other layers computed by the model),
``score = sum over tokens of (z - mean) * mean over steps of dm/dz``, averaged over the prompts:
``{layer: (D,)}``, a first-order estimate of ``m(M) - m(M without the feature)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.circuits.features import LabelFit
from circuitlasso.data.models import check_sae_fits
from circuitlasso.evaluation.ablate import Node, rank_features
from circuitlasso.evaluation.metrics import Metric, as_metric, check_saes
from circuitlasso.forward import (
    Hook,
    SAEMap,
    batches_by_length,
    residual_gradient,
    run_with_hooks,
    splice_hooks,
    stop_at_layer,
    stop_for_saes,
    to_dense,
)
from circuitlasso.timing import Stopwatch

DIRECT = "direct effect"  # ForwardScores' ranking by each feature's direct effect on the metric
DEVIATION = "deviation (control)"  # ForwardScores' ranking by distance from the ablation mean
LOGITS = "logits"
"""A name ``reads`` may hold beside hook names: the model's output logits ``(B, P, V)``, the whole
model run to its end."""
TOKENS = "tokens"
"""The key of the batch's token ids ``(B, P)`` in what a :data:`PathMetric` sees."""

PathMetric = Callable[[int, torch.Tensor, Mapping[str, torch.Tensor], torch.Tensor], torch.Tensor]
"""``metric(layer, z, seen, real) -> (B,)``: the metric of each prompt of a batch, given the
patched layer, its features on the path ``z: (B, P, D)``, the activations ``seen`` at the hooks
the metric reads (the logits under :data:`LOGITS` where it reads them, the token ids under
:data:`TOKENS`) and the batch's real-token mask ``real: (B, P)``."""


def _layer_scores(
    model: HookedTransformer,
    layer: int,
    sae: SAE,
    metric: PathMetric,
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
    stop = None if LOGITS in reads else stop_at_layer([sae_hook, *reads])
    scores = torch.zeros(sae.cfg.d_sae, dtype=torch.float64)
    clean: dict[str, torch.Tensor] = {}  # z and the error term: every step reads the same x
    for step in range(steps):
        alpha = (step + 0.5) / steps  # midpoint rule on [0, 1]
        state: dict[str, torch.Tensor] = {}
        seen: dict[str, torch.Tensor] = {}

        def patch(x: torch.Tensor, hook: Any, alpha: float = alpha, state=state) -> torch.Tensor:
            if not clean:
                z = to_dense(sae.encode(x)).detach()
                clean["z"], clean["error"] = z, (x - sae.decode(z)).detach()
            z = clean["z"]
            path = torch.where(mask, base + alpha * (z - base), z).requires_grad_(True)
            state["clean"], state["path"] = z, path
            return sae.decode(path) + clean["error"]

        def read(x: torch.Tensor, hook: Any, seen=seen) -> None:
            seen[hook.name] = x

        hooks: list[Hook] = [(sae_hook, patch)]
        hooks += [(name, read) for name in reads if name != LOGITS]
        with torch.enable_grad():
            logits = run_with_hooks(model, tokens, hooks, stop_at_layer=stop)
            if LOGITS in reads:
                assert logits is not None
                seen[LOGITS] = logits
            seen[TOKENS] = tokens
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
    metric: PathMetric,
    *,
    reads: Sequence[str] = (),
    baselines: Mapping[int, torch.Tensor] | None = None,
    signs: np.ndarray | None = None,
    steps: int = 10,
    batch_size: int = 32,
) -> dict[int, np.ndarray]:
    """``{layer: (D,)}`` integrated-gradient scores of every SAE feature (module docstring),
    averaged over ``prompts``.

    ``metric`` (see :data:`PathMetric`) reads the activations at the hooks ``reads`` (and the
    logits, where they hold :data:`LOGITS`); ``baselines``: ``{layer: (D,)}`` (default zero,
    SHIFT's zero ablation); ``signs: (n,)`` weights each prompt's metric (default 1); ``steps``
    midpoints per path.
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


# --- Attribution baseline -----------------------------------------------------------------------


@dataclass(frozen=True)
class Attribution:
    """Node scores ``{layer: (D,)}`` of :func:`attribution_scores` and the seconds they took."""

    scores: dict[int, np.ndarray]
    seconds: float


def attribution_scores(
    model: HookedTransformer,
    saes: SAEMap,
    metric: Metric | LabelFit,
    prompts: Sequence[str],
    means: Mapping[int, torch.Tensor],
    *,
    labels: Sequence[int] | None = None,
    steps: int = 10,
    batch_size: int = 32,
) -> Attribution:
    """Attribution patching with integrated gradients (``steps`` midpoints) through the SAE
    features of each layer: ``{layer: (D,)}`` scores averaged over ``prompts``, and the runtime.

    For layer ``l`` the features at real tokens follow ``mean + alpha * (z - mean)``, the SAE
    error term stays at its clean value and the layers above run unchanged; the score of a
    feature is ``(z - mean) * dm/dz`` averaged over ``alpha``, summed over tokens; ``metric`` is
    a :class:`~circuitlasso.evaluation.metrics.Metric` or the label fit of a
    :class:`~circuitlasso.evaluation.metrics.Readout`, each prompt weighted as it weights
    ``labels: (n,)`` in {0, 1} (the readout: signed by them if given). The path integral is
    :func:`integrated_gradients` from the baseline ``means``.
    """
    metric = as_metric(metric)
    saes = check_saes(model, saes, metric)
    clock = Stopwatch()
    if metric.layer is None:  # the logits: the whole model runs
        reads = [LOGITS]

        def value(
            layer: int, z: torch.Tensor, seen: Mapping[str, torch.Tensor], real: torch.Tensor
        ) -> torch.Tensor:
            return metric(seen[LOGITS], seen[TOKENS], real)

    else:
        read_layer = metric.layer
        reader = saes[read_layer]
        reads = [str(reader.cfg.metadata.hook_name)]

        def value(
            layer: int, z: torch.Tensor, seen: Mapping[str, torch.Tensor], real: torch.Tensor
        ) -> torch.Tensor:
            """The metric of ``read_layer``'s features: ``z`` itself, or encoded where read."""
            features = z if layer == read_layer else to_dense(reader.encode(seen[reads[0]]))
            return metric(features, seen[TOKENS], real)

    weights = metric.weights(labels, len(prompts))
    scores = integrated_gradients(model, saes, prompts, value, reads=reads, baselines=means,
                                  signs=weights, steps=steps, batch_size=batch_size)  # fmt: skip
    return Attribution(scores, clock.lap("attribution"))


@dataclass(frozen=True)
class ForwardScores:
    """Two rankings read from one forward pass over the evaluation sentences, with no fit and no
    backward pass through the model, and the ``seconds`` the pass took. ``{layer: (D,)}`` each:

    - ``deviation``: each feature's summed ``|z - mean|`` over the real tokens, blind to the
      metric (a control: how far mean ablation moves each feature at all);
    - ``direct`` (None where the metric reads features, not logits): each feature's first-order
      effect on the metric through the residual stream alone, ``sum over sentences and tokens of
      weight * (z - mean) * (W_dec[f] @ g)``, with ``g`` the metric's gradient with respect to
      the final residual stream (:func:`~circuitlasso.forward.residual_gradient`)."""

    deviation: dict[int, np.ndarray]
    direct: dict[int, np.ndarray] | None
    seconds: float

    def rankings(self) -> dict[str, list[Node]]:
        """:data:`DIRECT` by ``|score|`` (where computed), then :data:`DEVIATION`."""
        ranked = {} if self.direct is None else {DIRECT: rank_features(self.direct)}
        return {**ranked, DEVIATION: rank_features(self.deviation)}


def _batch_forward_scores(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    metric: Metric,
    means: Mapping[int, torch.Tensor],
    batch: tuple[torch.Tensor, torch.Tensor],
    weight: torch.Tensor,
) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor] | None]:
    """One batch's ``(deviation, direct)`` sums ``{layer: (D,)}`` (:class:`ForwardScores`)."""
    tokens, real = batch
    reads_logits = metric.layer is None
    record: dict[int, torch.Tensor] = {}
    scale: list[torch.Tensor] = []  # the final LayerNorm's, where the model has one

    def keep_scale(x: torch.Tensor, hook: Any) -> torch.Tensor:
        scale.append(x)
        return x

    hooks = splice_hooks(saes, real, record=record)
    if reads_logits and model.cfg.normalization_type is not None:
        hooks.append(("ln_final.hook_scale", keep_scale))
    with torch.inference_mode():
        stop = None if reads_logits else stop_for_saes(saes)
        logits = run_with_hooks(model, tokens, hooks, stop_at_layer=stop)
    gradient = None
    if reads_logits:
        assert logits is not None  # run to the logits
        weight = weight.to(logits.device)
        gradient = residual_gradient(
            model,
            logits,
            lambda x: (metric(x, tokens, real) * weight).sum(),
            scale[0] if scale else None,
        )
    deviation, direct = {}, {}
    for layer, sae in saes.items():
        z = record[layer].double()
        moved = (z - means[layer].double().to(z.device)) * real.to(z.device)[:, :, None]
        deviation[layer] = moved.abs().sum((0, 1)).cpu()
        if gradient is not None:
            read = gradient @ sae.W_dec.detach().double().T  # (B, P, D)
            direct[layer] = (moved * read).sum((0, 1)).cpu()
    return deviation, direct if reads_logits else None


def forward_scores(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    metric: Metric | LabelFit,
    prompts: Sequence[str],
    labels: Sequence[int] | None,
    means: Mapping[int, torch.Tensor],
    *,
    batch_size: int = 64,
) -> ForwardScores:
    """:class:`ForwardScores` of ``prompts`` against the ablation ``means`` ``{layer: (D,)}``,
    each prompt weighted as ``metric`` weights its label in ``labels: (n,)``; timed."""
    metric = as_metric(metric)
    saes = check_saes(model, saes, metric)
    clock = Stopwatch()
    batches, order = batches_by_length(model, prompts, batch_size)
    weights = torch.as_tensor(metric.weights(labels, len(order))[order])
    deviation = {
        layer: torch.zeros(sae.cfg.d_sae, dtype=torch.float64) for layer, sae in saes.items()
    }
    direct = {layer: torch.zeros_like(d) for layer, d in deviation.items()}
    start = 0
    for batch in batches:
        weight = weights[start : start + len(batch[0])]
        start += len(batch[0])
        moved, read = _batch_forward_scores(model, saes, metric, means, batch, weight)
        for layer in saes:
            deviation[layer] += moved[layer]
            if read is not None:
                direct[layer] += read[layer]
    clock.lap("forward pass")
    return ForwardScores(
        {layer: d.numpy() for layer, d in deviation.items()},
        {layer: d.numpy() for layer, d in direct.items()} if metric.layer is None else None,
        clock.total,
    )
