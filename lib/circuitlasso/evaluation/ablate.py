"""Faithfulness and completeness of SAE-feature circuits (paper App. C.5, Fig. 4).

The metric is ``m = p(acceptable) - p(unacceptable) = 2 * sigmoid(a^T zbar_L + b) - 1``, the
learned classifier ``A_{L,y} = a`` (:class:`circuitlasso.circuits.features.LabelFit`) reading
``zbar_L: (D,)``, the last-layer SAE features of the model's own forward pass averaged over the
prompt's real tokens (BOS, EOS and padding left out, as :func:`circuitlasso.collect.
collect_sae_features` does); reported as the mean over a batch of prompts. Given the prompts'
labels ``y`` (1 = acceptable), the metric is signed, ``(2y - 1) * m = p(correct) - p(wrong)``:
on a mix of both classes the unsigned mean mostly measures the share of each class, the signed
one how well the model tells them apart (on a class-balanced set it is 0 for a constant output).

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

Attribution baseline (SHIFT-style, :func:`attribution_scores`): per layer, integrated gradients
of ``m`` from the mean-ablated to the clean features of that layer (the other layers computed by
the model), ``score = sum over tokens of (z - mean) * mean over steps of dm/dz``, averaged over
the prompts: ``{layer: (D,)}``, a first-order estimate of ``m(M) - m(M without the feature)``.

Edge ablation in the linear surrogate (:class:`Surrogate`): with the token-averaged features
``Z[l]: (M, D_l)`` and the fitted columns ``A_{p,l}[:, c]: (D_p,)`` of a circuit's child nodes
``c`` (``p`` the layer below ``l``), the surrogate is ``Z[l][:, c] = Z[p] A[:, c] + intercept_c +
r_c`` with ``r_c`` the unexplained residual. Zeroing edges gives ``A'`` and, with ``r_c`` held
fixed, ``z'_l[:, c] = Z[l][:, c] + z'_p A'[:, c] - Z[p] A[:, c]`` (the intercept cancels), layer
by layer upward; only fitted columns move, every other column keeps its observed value. The
readout is ``m-hat = 2 * sigmoid(a^T z'_L + b) - 1`` averaged over the prompts, and
:func:`edge_ablation_sweep` gives its faithfulness and completeness against the number of edges
kept, the edges being all nonzero coefficients of the fitted columns. The surrogate also ranks
nodes and edges by their effect on the readout's logit (:meth:`Surrogate.node_effects`): the
change a one-standard-deviation move of a feature makes, summed over its paths to the readout.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import Features, LabelFit, LayerPairFit
from circuitlasso.circuits.trace import LayerRegressions, feature_std, node_name
from circuitlasso.data.graph import Edge
from circuitlasso.data.models import check_sae_fits
from circuitlasso.evaluation.attribution import integrated_gradients
from circuitlasso.forward import (
    SAEMap,
    batches_by_length,
    mean_over_real,
    run_with_hooks,
    sae_layers,
    splice_hooks,
    stop_for_saes,
    to_dense,
)
from circuitlasso.timing import Stopwatch

FeatureSet = Mapping[int, Collection[int]]  # layer -> features
Node = tuple[int, int]  # (layer, feature)
T = TypeVar("T")


def _readout(label_fit: LabelFit, z: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """``(B,)`` metric ``2 * sigmoid(a^T zbar + b) - 1`` of features ``z: (B, P, D)``."""
    a = torch.as_tensor(label_fit.coef, dtype=torch.float64, device=z.device)
    return 2 * torch.sigmoid(mean_over_real(z, real) @ a + float(label_fit.intercept)) - 1


def _signs(labels: Sequence[int] | None, n: int) -> np.ndarray:
    """``(n,)`` sign of each prompt's metric: ``2y - 1``, or 1 without labels."""
    if labels is None:
        return np.ones(n)
    y = np.asarray(labels)
    if y.shape != (n,) or not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be {n} values in {{0, 1}}, one per prompt")
    return 2.0 * y - 1.0


def _check(model: HookedTransformer, saes: SAEMap, label_fit: LabelFit | None) -> dict[int, SAE]:
    """``saes`` keyed by layer (:func:`~circuitlasso.forward.sae_layers`), each checked to fit
    ``model``, with the readout's layer among them."""
    if not saes:
        raise ValueError("saes is empty: need at least one {layer: SAE}")
    saes = sae_layers(saes)
    for sae in saes.values():
        check_sae_fits(model, sae)
    if label_fit is not None and label_fit.layer not in saes:
        raise ValueError(f"the label fit reads layer {label_fit.layer}, not among {sorted(saes)}")
    return saes


def feature_means(
    model: HookedTransformer,
    saes: SAEMap,
    prompts: Sequence[str],
    *,
    batch_size: int = 32,
) -> dict[int, torch.Tensor]:
    """``{layer: (D,)}`` mean of each SAE feature over all real tokens of ``prompts``, float32."""
    saes = _check(model, saes, None)
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
    label_fit: LabelFit,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    signs: np.ndarray,
    masks: Mapping[int, torch.Tensor],
    means: Mapping[int, torch.Tensor] | None,
) -> float:
    if masks and means is None:
        raise ValueError("ablating features needs means (see feature_means)")
    total, n = 0.0, 0
    for tokens, real in batches:
        record: dict[int, torch.Tensor] = {}
        with torch.inference_mode():
            hooks = splice_hooks(saes, real, masks, means, record)
            run_with_hooks(model, tokens, hooks, stop_at_layer=stop_for_saes(saes))
        sign = torch.as_tensor(signs[n : n + len(tokens)])
        total += float((sign * _readout(label_fit, record[label_fit.layer], real).cpu()).sum())
        n += len(tokens)
    return total / n


def metric_with_ablation(
    model: HookedTransformer,
    saes: SAEMap,
    label_fit: LabelFit,
    prompts: Sequence[str],
    circuit: Circuit | FeatureSet | None = None,
    *,
    labels: Sequence[int] | None = None,
    ablate_inside: bool = False,
    means: Mapping[int, torch.Tensor] | None = None,
    batch_size: int = 32,
) -> float:
    """Mean metric ``m`` over ``prompts`` of the spliced model with mean ablation (signed by
    ``labels: (n,)`` in {0, 1} if given, see the module docstring).

    ``circuit=None``: nothing ablated, ``m(M)``. Otherwise every spliced layer's features
    outside ``circuit`` are ablated (``m(C)``; a layer missing from ``circuit`` loses all its
    features, so ``{}`` gives ``m(empty)``), or with ``ablate_inside`` those inside (``m(M \\ C)``).
    """
    saes = _check(model, saes, label_fit)
    masks = _ablation_masks(saes, circuit, ablate_inside)
    batches, order = batches_by_length(model, prompts, batch_size)  # the mean is order-free
    signs = _signs(labels, len(order))[order]
    return _metric(model, saes, label_fit, batches, signs, masks, means)


def rank_features(scores: Mapping[int, np.ndarray]) -> list[Node]:
    """``(layer, feature)`` with nonzero ``scores[layer][feature]``, largest ``|score|`` first."""
    nodes = [(layer, int(f)) for layer, s in scores.items() for f in np.flatnonzero(s)]
    values = np.array([abs(scores[layer][f]) for layer, f in nodes])
    return [nodes[i] for i in np.argsort(-values, kind="stable")]


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


def _ratio(value: float, empty: float, full: float) -> float:
    return (value - empty) / (full - empty)


def node_ablation_sweep(
    model: HookedTransformer,
    saes: SAEMap,
    label_fit: LabelFit,
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
    ``sizes`` (metric signed by ``labels`` if given); columns ``n, faithfulness, completeness,
    m_circuit, m_complement, m_full, m_empty``. ``ends``: ``(m(M), m(empty))`` when already
    measured on the same prompts, labels and means (several rankings share them). A circuit of
    every feature is ``m(M)`` and its complement ``m(empty)`` without running the model."""
    saes = _check(model, saes, label_fit)
    batches, order = batches_by_length(model, prompts, batch_size)  # the mean is order-free
    signs = _signs(labels, len(order))[order]

    def m(circuit: FeatureSet | None, inside: bool = False) -> float:
        masks = _ablation_masks(saes, circuit, inside)
        if ends is not None and not any(bool(mask.any()) for mask in masks.values()):
            return ends[0]
        if ends is not None and masks and all(bool(mask.all()) for mask in masks.values()):
            return ends[1]
        return _metric(model, saes, label_fit, batches, signs, masks, means)

    if ends is None:
        ends = (m(None), m({}))
    full, empty = ends
    rows = []
    for n in sizes:
        circuit = _feature_set(ranking[:n])
        kept, removed = m(circuit), m(circuit, inside=True)
        rows.append({"n": n, "faithfulness": _ratio(kept, empty, full),
                     "completeness": _ratio(removed, empty, full), "m_circuit": kept,
                     "m_complement": removed, "m_full": full, "m_empty": empty})  # fmt: skip
    return pd.DataFrame(rows)


# --- Attribution baseline -----------------------------------------------------------------------


@dataclass(frozen=True)
class Attribution:
    """Node scores ``{layer: (D,)}`` of :func:`attribution_scores` and the seconds they took."""

    scores: dict[int, np.ndarray]
    seconds: float


def attribution_scores(
    model: HookedTransformer,
    saes: SAEMap,
    label_fit: LabelFit,
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
    feature is ``(z - mean) * dm/dz`` averaged over ``alpha``, summed over tokens; ``m`` is
    signed by ``labels: (n,)`` in {0, 1} if given. The path integral is
    :func:`circuitlasso.evaluation.attribution.integrated_gradients` from the baseline ``means``.
    """
    saes = _check(model, saes, label_fit)
    clock = Stopwatch()
    reader = saes[label_fit.layer]
    read = str(reader.cfg.metadata.hook_name)

    def metric(
        layer: int, z: torch.Tensor, seen: Mapping[str, torch.Tensor], real: torch.Tensor
    ) -> torch.Tensor:
        """The readout of the last layer's features: ``z`` itself, or encoded where it is read."""
        features = z if layer == label_fit.layer else to_dense(reader.encode(seen[read]))
        return _readout(label_fit, features, real)

    signs = _signs(labels, len(prompts))
    scores = integrated_gradients(model, saes, prompts, metric, reads=[read], baselines=means,
                                  signs=signs, steps=steps, batch_size=batch_size)  # fmt: skip
    return Attribution(scores, clock.lap("attribution"))


# --- Edge ablation in the linear surrogate ------------------------------------------------------


@dataclass(frozen=True)
class _Columns:
    """Fitted columns of one child layer: ``children: (k,)``, ``coef: (D_parent, k)`` CSC."""

    parent: int
    children: np.ndarray
    coef: sp.csc_matrix


class Surrogate:
    """The linear surrogate of a circuit: token-averaged ``Z`` and the fitted columns of the
    layer-pair regressions for the circuit's child nodes (see the module docstring).

    ``columns[child_layer][child_feature]`` is the fit holding that column (as
    :meth:`LayerRegressions.parents` returns); ``label_fit`` reads the last layer of ``Z``;
    ``labels: (M,)`` in {0, 1}, if given, sign the metric.
    """

    def __init__(
        self,
        Z: Mapping[int, Features],
        columns: Mapping[int, Mapping[int, LayerPairFit]],
        label_fit: LabelFit,
        labels: Sequence[int] | None = None,
    ) -> None:
        if label_fit.layer != max(Z):
            raise ValueError(f"the label fit reads layer {label_fit.layer}, last is {max(Z)}")
        self.Z = {layer: sp.csr_matrix(z) for layer, z in Z.items()}
        self.label_fit = label_fit
        self._std = {layer: feature_std(z) for layer, z in self.Z.items()}
        n = self.Z[label_fit.layer].shape[0]
        self.signs = _signs(labels, n)
        self.layers: dict[int, _Columns] = {}
        self._index: dict[Edge, tuple[int, int]] = {}  # edge -> (child layer, position in data)
        for layer in sorted(columns):
            fits = columns[layer]
            children = np.array(sorted(fits), dtype=int)
            if not len(children):
                continue
            parents = {fit.parent for fit in fits.values()}
            if len(parents) != 1 or any(fit.child != layer for fit in fits.values()):
                raise ValueError(f"columns of layer {layer} mix layer pairs: parents {parents}")
            coef = sp.hstack([fits[c].column(c) for c in children], format="csc")
            coef.eliminate_zeros()
            coef.sort_indices()
            parent = parents.pop()
            self.layers[layer] = _Columns(parent, children, coef)
            for j, child in enumerate(children):
                for pos in range(coef.indptr[j], coef.indptr[j + 1]):
                    edge = (node_name(parent, int(coef.indices[pos])), node_name(layer, int(child)))
                    self._index[edge] = (layer, pos)

    @classmethod
    def from_circuit(
        cls,
        graph: Circuit,
        regressions: LayerRegressions,
        label_fit: LabelFit,
        labels: Sequence[int] | None = None,
    ) -> Surrogate:
        """The surrogate of a traced circuit: the columns of its nodes that have parents."""
        children: dict[int, list[int]] = {}
        for name, data in graph.nodes(data=True):
            if graph.in_degree(name):
                children.setdefault(int(data["layer"]), []).append(int(data["feature"]))
        columns = {layer: regressions.parents(layer, f) for layer, f in children.items()}
        return cls(regressions.Z, columns, label_fit, labels)

    def edges(self) -> list[Edge]:
        """Every edge of the surrogate: the nonzero coefficients of the fitted columns."""
        return list(self._index)

    def _per_unit(self, effects: Mapping[Node, float], layer: int) -> np.ndarray:
        """``(k,)`` effect per unit of each fitted child of ``layer``: effect / std."""
        children = self.layers[layer].children
        std = self._std[layer][children]
        effect = np.array([effects.get((layer, int(c)), 0.0) for c in children])
        return np.divide(effect, std, out=np.zeros_like(effect), where=std > 0)

    def node_effects(self) -> dict[Node, float]:
        """Effect on the readout's logit of a one-standard-deviation change of each node, through
        the surrogate: ``|a_f| * std(z_f)`` for the last layer's features, and for a parent
        ``p`` of fitted children ``c`` the sum over ``c`` of
        ``effect(c) * |A[p, c]| * std(z_p) / std(z_c)``."""
        fit = self.label_fit
        effects = {(fit.layer, int(f)): float(abs(fit.coef[f]) * self._std[fit.layer][f])
                   for f in np.flatnonzero(fit.coef)}  # fmt: skip
        for layer in sorted(self.layers, reverse=True):
            columns = self.layers[layer]
            through = abs(columns.coef) @ self._per_unit(effects, layer)
            through *= self._std[columns.parent]
            for parent in np.flatnonzero(through):
                node = (columns.parent, int(parent))
                effects[node] = effects.get(node, 0.0) + float(through[parent])
        return effects

    def rank_nodes(self) -> list[Node]:
        """Nodes by :meth:`node_effects`, largest first."""
        effects = self.node_effects()
        return sorted(effects, key=lambda node: -effects[node])

    def rank_edges(self) -> list[Edge]:
        """Edges by their share of the child's effect, ``effect(c) * |A[p, c]| * std(z_p) /
        std(z_c)`` (see :meth:`node_effects`), largest first."""
        effects = self.node_effects()
        values = []  # in the order of self.edges(): layer by layer, then by position in coef
        for layer in sorted(self.layers):
            columns = self.layers[layer]
            per_unit = np.repeat(self._per_unit(effects, layer), np.diff(columns.coef.indptr))
            parent_std = self._std[columns.parent][columns.coef.indices]
            values.append(per_unit * np.abs(columns.coef.data) * parent_std)
        if not values:
            return []
        order = np.argsort(-np.concatenate(values), kind="stable")
        edges = self.edges()
        return [edges[i] for i in order]

    def _kept(self, zeroed: Collection[Edge]) -> dict[int, sp.csc_matrix]:
        """``{layer: (parent D, k)}`` coefficients of each layer's fitted columns with the
        ``zeroed`` edges' set to 0."""
        unknown = [e for e in zeroed if e not in self._index]
        if unknown:
            raise ValueError(f"edges not in the surrogate: {unknown[:5]}")
        positions: dict[int, list[int]] = {}
        for edge in zeroed:
            layer, pos = self._index[edge]
            positions.setdefault(layer, []).append(pos)
        kept = {}
        for layer, columns in self.layers.items():
            kept[layer] = columns.coef.copy()
            kept[layer].data[positions.get(layer, [])] = 0.0
        return kept

    def propagate(self, zeroed: Collection[Edge] = ()) -> dict[int, np.ndarray]:
        """``{layer: (M, k)}`` surrogate values of each layer's fitted columns (``children``
        order) with the ``zeroed`` edges' coefficients set to 0 and residuals held fixed."""
        kept_by_layer = self._kept(zeroed)
        deltas: dict[int, np.ndarray] = {}  # layer -> (M, k) change of its fitted columns
        values = {}
        for layer, columns in self.layers.items():
            kept = kept_by_layer[layer]
            delta = np.asarray((self.Z[columns.parent] @ (kept - columns.coef)).todense())
            if columns.parent in deltas:
                below = self.layers[columns.parent].children
                delta += deltas[columns.parent] @ kept[below]  # dense @ sparse: O(M * nnz)
            deltas[layer] = delta
            values[layer] = self.Z[layer][:, columns.children].toarray() + delta
        return values

    def metric(self, zeroed: Collection[Edge] = ()) -> float:
        """Mean ``m-hat = 2 * sigmoid(a^T z'_L + b) - 1`` over the prompts (signed).

        The change of the logits is :meth:`propagate`'s change of the last layer's columns
        times ``a``, taken down the chain of layers as vectors: with ``u`` the weights of a
        layer's columns in the logit (``a`` on the last layer), the layer adds
        ``Z_parent (kept - coef) u`` and hands ``kept[parent's columns] u`` to its parent, so
        no ``(M, k)`` matrix is formed."""
        fit, layer = self.label_fit, self.label_fit.layer
        logits = self.Z[layer] @ fit.coef + fit.intercept
        kept = self._kept(zeroed)
        if layer in self.layers:
            u = fit.coef[self.layers[layer].children]
            while layer in self.layers:
                columns = self.layers[layer]
                logits = logits + self.Z[columns.parent] @ ((kept[layer] - columns.coef) @ u)
                if columns.parent in self.layers:
                    u = kept[layer][self.layers[columns.parent].children] @ u
                layer = columns.parent
        return float(np.mean(self.signs * (2 / (1 + np.exp(-logits)) - 1)))


def edge_ablation_sweep(
    surrogate: Surrogate, ranking: Sequence[Edge], sizes: Sequence[int]
) -> pd.DataFrame:
    """Faithfulness (all edges but the top ``n`` of ``ranking`` zeroed) and completeness (the
    top ``n`` zeroed) of the surrogate for each ``n`` in ``sizes``; columns ``n, faithfulness,
    completeness, m_circuit, m_complement, m_full, m_empty``."""
    edges = surrogate.edges()
    full, empty = surrogate.metric(), surrogate.metric(edges)
    rows = []
    for n in sizes:
        kept = set(ranking[:n])
        m_kept = surrogate.metric([e for e in edges if e not in kept])
        m_removed = surrogate.metric(kept)
        rows.append({"n": n, "faithfulness": _ratio(m_kept, empty, full),
                     "completeness": _ratio(m_removed, empty, full), "m_circuit": m_kept,
                     "m_complement": m_removed, "m_full": full, "m_empty": empty})  # fmt: skip
    return pd.DataFrame(rows)
