"""Mean-pooled activations and the linear probes read from them (ORIGINAL, ORACLE, CBP, SHIFT).

A prompt's pooled activation is the mean of the residual stream at one hook over its real tokens
(BOS, EOS and padding left out, as :func:`circuitlasso.collect.collect_sae_features` averages SAE
features). :func:`pooled_activations` can zero SAE features on the way (SHIFT's edit): the SAEs
of the edited layers are spliced into the forward pass with their error term kept
(:func:`circuitlasso.forward.splice_hooks`), so with nothing zeroed the activations are
the model's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sae_lens import SAE
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits
from transformer_lens import HookedTransformer

from circuitlasso.data.models import check_sae_fits
from circuitlasso.forward import (
    Model,
    batches_by_length,
    mean_over_real,
    run_with_hooks,
    splice_hooks,
    stop_at_layer,
)

Node = tuple[int, int]  # (layer, SAE feature)


def check_hook(model: Model, hook: str) -> None:
    """Raise ``ValueError`` unless ``hook`` is a hook of ``model``."""
    if hook not in model.hook_dict:
        raise ValueError(
            f"{hook!r} is not a hook of model {model.cfg.model_name!r} "
            f"({model.cfg.n_layers} layers)"
        )


def zero_masks(saes: Mapping[int, SAE], nodes: Collection[Node]) -> dict[int, torch.Tensor]:
    """``{layer: (D,) bool}`` marking ``nodes``, for the layers that have any."""
    masks: dict[int, torch.Tensor] = {}
    for layer, feature in nodes:
        if layer not in saes:
            raise ValueError(f"node {(layer, feature)}: no SAE at layer {layer}; {sorted(saes)}")
        d_sae = saes[layer].cfg.d_sae
        if not 0 <= feature < d_sae:
            raise ValueError(f"node {(layer, feature)}: feature out of range 0..{d_sae - 1}")
        masks.setdefault(layer, torch.zeros(d_sae, dtype=torch.bool))[feature] = True
    return masks


def pooled_activations(
    model: Model,
    hook: str,
    prompts: Sequence[str],
    *,
    saes: Mapping[int, SAE] | None = None,
    zeroed: Collection[Node] = (),
    batch_size: int = 64,
) -> np.ndarray:
    """``(M, d_model)`` float64 mean of the activation at ``hook`` over each prompt's real tokens,
    with the SAE features ``zeroed`` (``(layer, feature)`` of ``saes``) set to 0 at every real
    token of the spliced forward pass."""
    check_hook(model, hook)
    masks = zero_masks(saes or {}, zeroed)
    spliced = {layer: saes[layer] for layer in masks} if saes else {}
    for sae in spliced.values():
        check_sae_fits(model, sae)
    zeros = {layer: torch.zeros(len(mask)) for layer, mask in masks.items()}
    stop = stop_at_layer([hook, *(str(s.cfg.metadata.hook_name) for s in spliced.values())])
    pooled = []
    batches, order = batches_by_length(model, prompts, batch_size)
    for tokens, real in batches:
        seen: dict[str, torch.Tensor] = {}

        def read(x: torch.Tensor, hook: Any, seen: dict = seen) -> None:
            seen["x"] = x

        hooks = [*splice_hooks(spliced, real, masks, zeros), (hook, read)]
        with torch.inference_mode():
            run_with_hooks(model, tokens, hooks, stop_at_layer=stop)
        pooled.append(mean_over_real(seen["x"], real).cpu().numpy())
    return np.concatenate(pooled)[np.argsort(order)]


@dataclass(frozen=True)
class Probe:
    """Logistic probe ``p(y = 1 | x) = sigmoid(x @ coef + intercept)``; ``coef: (d,)``."""

    coef: np.ndarray
    intercept: float

    def logits(self, X: np.ndarray) -> np.ndarray:
        """``(M,)`` logits of ``X: (M, d)``."""
        return np.asarray(X @ self.coef).ravel() + self.intercept

    def predict(self, X: np.ndarray) -> np.ndarray:
        """``(M,)`` int predicted class of ``X: (M, d)``."""
        return (self.logits(X) > 0).astype(int)


def fit_probe(X: Any, y: np.ndarray, *, C: float = 1.0, tol: float = 1e-4) -> Probe:
    """l2-penalized logistic regression (scikit-learn, inverse penalty ``C``, stopping tolerance
    ``tol``) of ``y: (M,)`` on ``X: (M, d)``, dense or sparse. A probe keeps every direction of a
    dense activation; the l1 readout of :func:`circuitlasso.circuits.features.fit_label` is a
    different fit, a sparse choice of SAE features. scikit-learn's default ``tol`` (1e-4) can stop
    well short of the optimum, where the path, and so the rounding, decides the probe; a small
    one (1e-8) fits it to convergence."""
    if X.shape[0] != len(y):
        raise ValueError(f"X has {X.shape[0]} rows but there are {len(y)} labels")
    # one BLAS thread: on these small products, BLAS threads next to torch's OpenMP threads
    # make the fit 30 times slower, not faster
    with threadpool_limits(1):
        model = LogisticRegression(C=C, tol=tol, max_iter=10_000).fit(X, y)
    return Probe(model.coef_[0].astype(np.float64), float(model.intercept_[0]))


def concept_directions(
    model: HookedTransformer,
    hook: str,
    concepts: Mapping[str, Sequence[str]],
    center: np.ndarray,
    *,
    batch_size: int = 64,
) -> np.ndarray:
    """``(k, d)`` direction of each concept: the mean pooled activation of its short texts minus
    ``center: (d,)``, the mean pooled activation of the training prompts."""
    empty = [name for name, texts in concepts.items() if not texts]
    if not concepts or empty:
        raise ValueError(f"every concept needs at least one text; empty: {empty or 'all'}")
    return np.stack(
        [
            pooled_activations(model, hook, list(texts), batch_size=batch_size).mean(0) - center
            for texts in concepts.values()
        ]
    )


def concept_scores(X: np.ndarray, directions: np.ndarray, center: np.ndarray) -> np.ndarray:
    """``(M, k)`` cosine similarity of each centered pooled activation ``X - center`` with each
    concept direction."""
    centered = X - center
    norms = np.linalg.norm(centered, axis=1, keepdims=True) * np.linalg.norm(directions, axis=1)
    return (centered @ directions.T) / np.maximum(norms, 1e-12)


@dataclass(frozen=True)
class ConceptBottleneck:
    """CBP (Yan et al.): a probe over the concept scores of pooled activations;
    ``directions: (k, d)``, ``center: (d,)``."""

    directions: np.ndarray
    center: np.ndarray
    probe: Probe

    def predict(self, X: np.ndarray) -> np.ndarray:
        """``(M,)`` int predicted class of pooled activations ``X: (M, d)``."""
        return self.probe.predict(concept_scores(X, self.directions, self.center))


def fit_concept_bottleneck(
    model: HookedTransformer,
    hook: str,
    X: np.ndarray,
    y: np.ndarray,
    concepts: Mapping[str, Sequence[str]],
    *,
    C: float = 1.0,
    tol: float = 1e-4,
    batch_size: int = 64,
) -> ConceptBottleneck:
    """CBP trained on pooled activations ``X: (M, d)`` (at ``hook``) with labels ``y: (M,)``,
    one bottleneck unit per concept (name -> short texts); ``C`` and ``tol`` as for
    :func:`fit_probe`."""
    center = X.mean(0)
    directions = concept_directions(model, hook, concepts, center, batch_size=batch_size)
    probe = fit_probe(concept_scores(X, directions, center), y, C=C, tol=tol)
    return ConceptBottleneck(directions, center, probe)
