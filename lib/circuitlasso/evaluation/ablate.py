"""Faithfulness and completeness of SAE-feature circuits by node ablation (paper App. C.5,
Fig. 4): the metric ``m`` (:mod:`circuitlasso.evaluation.metrics`: the label readout, or a
decoder's judgement of minimal pairs) of the model with SAEs spliced in, some of their features
mean-ablated, and its sweep over the top nodes of a ranking. The linear surrogate's edge ablation
is :mod:`circuitlasso.evaluation.surrogate`; the attribution baseline's ranking is
:func:`circuitlasso.evaluation.attribution.attribution_scores`.

Node ablation in the real model (the protocol of Marks et al., "Sparse feature circuits"): every
layer's SAE is spliced into the forward pass at its hook. An activation ``x: (B, P, d_model)``
becomes ``decode(z') + (x - decode(z))`` with ``z = encode(x): (B, P, D)`` and ``z'`` equal to
``z`` except that ablated features take their mean over a reference set of prompts
(:func:`feature_means`, ``{layer: (D,)}``) at every real token. The error term is the one of the
activation arriving at the hook, so with nothing ablated the spliced model is the model. A
circuit ``C`` is a :class:`~circuitlasso.circuits.circuit.Circuit` (read through its
:meth:`~circuitlasso.circuits.circuit.Circuit.features_by_layer` view) or ``{layer: features}``;
``m(C)`` mean-ablates every feature of the spliced layers outside ``C``, ``m(M \\ C)`` the
features inside it, ``m(empty)`` all of them and ``m(M)`` none, and

    faithfulness  F(C) = (m(C) - m(empty)) / (m(M) - m(empty)),
    completeness       = (m(M \\ C) - m(empty)) / (m(M) - m(empty)).

:func:`node_ablation_sweep` evaluates both for the top-``n`` nodes of a ranking.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import TypeVar

import numpy as np
import pandas as pd
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import LabelFit
from circuitlasso.evaluation.metrics import Metric, as_metric, check_saes
from circuitlasso.forward import (
    SAEMap,
    batches_by_length,
    run_with_hooks,
    splice_hooks,
    stop_for_saes,
)

FeatureSet = Mapping[int, Collection[int]]  # layer -> features
Node = tuple[int, int]  # (layer, feature)
T = TypeVar("T")


def feature_means(
    model: HookedTransformer,
    saes: SAEMap,
    prompts: Sequence[str],
    *,
    batch_size: int = 32,
) -> dict[int, torch.Tensor]:
    """``{layer: (D,)}`` mean of each SAE feature over all real tokens of ``prompts``, float32."""
    saes = check_saes(model, saes, None)
    sums = {layer: torch.zeros(sae.cfg.d_sae, dtype=torch.float64) for layer, sae in saes.items()}
    count = 0
    for tokens, real in batches_by_length(model, prompts, batch_size)[0]:
        record: dict[int, torch.Tensor] = {}
        with torch.inference_mode():
            hooks = splice_hooks(saes, real, record=record)
            run_with_hooks(model, tokens, hooks, stop_at_layer=stop_for_saes(saes))
        for layer, z in record.items():
            sums[layer] += z[real.to(z.device)].double().sum(0).cpu()
        count += int(real.sum())
    return {layer: (s / count).float() for layer, s in sums.items()}


def _ablation_masks(
    saes: Mapping[int, SAE], circuit: Circuit | FeatureSet | None, ablate_inside: bool
) -> dict[int, torch.Tensor]:
    """``{layer: (D,) bool}`` features to ablate: inside or outside ``circuit`` (None: none)."""
    if circuit is None:
        return {}
    if isinstance(circuit, Circuit):
        circuit = circuit.features_by_layer()
    unknown = sorted(set(circuit) - set(saes))
    if unknown:
        raise ValueError(f"circuit layers {unknown} have no SAE; layers: {sorted(saes)}")
    masks = {}
    for layer, sae in saes.items():
        inside = torch.zeros(sae.cfg.d_sae, dtype=torch.bool)
        inside[list(circuit.get(layer, ()))] = True
        masks[layer] = inside if ablate_inside else ~inside
    return masks


def _metric(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    metric: Metric,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    weights: np.ndarray,
    masks: Mapping[int, torch.Tensor],
    means: Mapping[int, torch.Tensor] | None,
) -> float:
    """The ``weights``-weighted mean of ``metric`` over the ``batches``' prompts, the model run
    as far as the last SAE (a metric of features) or to its logits (``metric.layer`` None)."""
    if masks and means is None:
        raise ValueError("ablating features needs means (see feature_means)")
    stop = None if metric.layer is None else stop_for_saes(saes)
    total, n = 0.0, 0
    for tokens, real in batches:
        record: dict[int, torch.Tensor] = {}
        with torch.inference_mode():
            hooks = splice_hooks(saes, real, masks, means, record)
            logits = run_with_hooks(model, tokens, hooks, stop_at_layer=stop)
            read = logits if metric.layer is None else record[metric.layer]
            assert read is not None
            values = metric(read, tokens, real).cpu()
        weight = torch.as_tensor(weights[n : n + len(tokens)])
        total += float((weight * values).sum())
        n += len(tokens)
    return total / n


def metric_with_ablation(
    model: HookedTransformer,
    saes: SAEMap,
    metric: Metric | LabelFit,
    prompts: Sequence[str],
    circuit: Circuit | FeatureSet | None = None,
    *,
    labels: Sequence[int] | None = None,
    ablate_inside: bool = False,
    means: Mapping[int, torch.Tensor] | None = None,
    batch_size: int = 32,
) -> float:
    """Mean metric ``m`` over ``prompts`` of the spliced model with mean ablation (see the
    module docstring): ``metric`` a :class:`~circuitlasso.evaluation.metrics.Metric` or the
    label fit of a :class:`~circuitlasso.evaluation.metrics.Readout`, each prompt weighted as
    the metric weights ``labels: (n,)`` in {0, 1} (the readout: signed by them if given; the
    minimal-pair metric: 1 for a good sentence, 0 for a bad one).

    ``circuit=None``: nothing ablated, ``m(M)``. Otherwise every spliced layer's features
    outside ``circuit`` are ablated (``m(C)``; a layer missing from ``circuit`` loses all its
    features, so ``{}`` gives ``m(empty)``), or with ``ablate_inside`` those inside (``m(M \\ C)``).
    """
    metric = as_metric(metric)
    saes = check_saes(model, saes, metric)
    masks = _ablation_masks(saes, circuit, ablate_inside)
    batches, order = batches_by_length(model, prompts, batch_size)  # the mean is order-free
    weights = metric.weights(labels, len(order))[order]
    return _metric(model, saes, metric, batches, weights, masks, means)


def rank_features(scores: Mapping[int, np.ndarray], *, signed: bool = False) -> list[Node]:
    """``(layer, feature)`` with nonzero ``scores[layer][feature]``, largest ``|score|`` first, or
    with ``signed`` largest score first (negative scores last)."""
    nodes = [(layer, int(f)) for layer, s in scores.items() for f in np.flatnonzero(s)]
    values = np.array([scores[layer][f] for layer, f in nodes])
    return [nodes[i] for i in np.argsort(-(values if signed else np.abs(values)), kind="stable")]


def random_ranking(items: Sequence[T], seed: int) -> list[T]:
    """``items`` in a seeded random order, the baseline ranking of a sweep.

    Each item's place comes from a hash of the item and ``seed`` alone, so removing or adding a
    few items (a solver keeping a marginal edge on one machine and not on another) leaves the
    order of all the others unchanged, where a permutation of the list would reshuffle it.
    """

    def key(item: T) -> bytes:
        return hashlib.blake2b(f"{seed}:{item!r}".encode(), digest_size=8).digest()

    return sorted(items, key=key)


def _feature_set(nodes: Sequence[Node]) -> dict[int, set[int]]:
    circuit: dict[int, set[int]] = {}
    for layer, feature in nodes:
        circuit.setdefault(layer, set()).add(feature)
    return circuit


def ablation_ratio(value: float, empty: float, full: float) -> float:
    """``(value - empty) / (full - empty)``: faithfulness of ``value = m(C)``, completeness of
    ``value = m(M \\ C)``."""
    return (value - empty) / (full - empty)


def node_ablation_sweep(
    model: HookedTransformer,
    saes: SAEMap,
    metric: Metric | LabelFit,
    prompts: Sequence[str],
    ranking: Sequence[Node],
    sizes: Sequence[int],
    means: Mapping[int, torch.Tensor],
    *,
    labels: Sequence[int] | None = None,
    batch_size: int = 32,
    ends: tuple[float, float] | None = None,
) -> pd.DataFrame:
    """Faithfulness and completeness of the top-``n`` nodes of ``ranking`` for each ``n`` in
    ``sizes`` (``metric`` and ``labels`` as :func:`metric_with_ablation` takes them); columns
    ``n, faithfulness, completeness, m_circuit, m_complement, m_full, m_empty``. ``ends``:
    ``(m(M), m(empty))`` when already measured on the same prompts, labels and means (several
    rankings share them). A circuit of every feature is ``m(M)`` and its complement
    ``m(empty)`` without running the model."""
    metric = as_metric(metric)
    saes = check_saes(model, saes, metric)
    batches, order = batches_by_length(model, prompts, batch_size)  # the mean is order-free
    weights = metric.weights(labels, len(order))[order]

    def m(circuit: FeatureSet | None, inside: bool = False) -> float:
        masks = _ablation_masks(saes, circuit, inside)
        if ends is not None and not any(bool(mask.any()) for mask in masks.values()):
            return ends[0]
        if ends is not None and masks and all(bool(mask.all()) for mask in masks.values()):
            return ends[1]
        return _metric(model, saes, metric, batches, weights, masks, means)

    if ends is None:
        ends = (m(None), m({}))
    full, empty = ends
    rows = []
    for n in sizes:
        circuit = _feature_set(ranking[:n])
        kept, removed = m(circuit), m(circuit, inside=True)
        rows.append({"n": n, "faithfulness": ablation_ratio(kept, empty, full),
                     "completeness": ablation_ratio(removed, empty, full), "m_circuit": kept,
                     "m_complement": removed, "m_full": full, "m_empty": empty})  # fmt: skip
    return pd.DataFrame(rows)
