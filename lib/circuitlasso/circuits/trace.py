"""Importance scores and backward tracing of SAE-feature circuits (paper Sec. 4.2.1, App. B.3).

A circuit starts from root features of the last layer, ranked by the dataset-level importance
``|A_{L,y}|`` (or ``|A_{L,y}| * std(z_L)``, standardized) or, for one prompt, by
``s = |A_{L,y}| * |z_L|``. Each node's parents in the layer below come from its column of the
layer-pair coefficients ``A_{l-1,l}``, ranked by ``|A_{l-1,l}[:, k]|`` (dataset level; times
``std(z_{l-1})`` standardized) or ``|A_{l-1,l}[:, k]| * |z_{l-1}|`` (one prompt), and kept by one
of two rules: the ``k`` largest, or the fewest whose scores reach a share ``mass`` of the
column's total. Only the columns a trace visits are ever fit (:class:`LayerRegressions`).

The result is a :class:`~circuitlasso.circuits.circuit.Circuit` whose nodes are named
``z{layer}.{feature}`` (attributes ``layer``, ``feature``, ``importance``: the root score, or for
a parent the sum of the scores of its edges) and whose edges run parent -> child (attributes
``coef`` and ``score``).
:func:`interpret_circuit` adds each node's ``top_tokens`` and each edge's ``type``;
:func:`node_table` and :func:`edge_table` list them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch

from circuitlasso.cache import cache_key, digest_arrays, load_or_compute_chunks
from circuitlasso.circuits import defaults
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import (
    Features,
    LabelFit,
    LayerPairFit,
    Penalty,
    fit_layer_pair,
)
from circuitlasso.executor import Executor, get_executor
from circuitlasso.solve.memory import DEFAULT_MEMORY_GIB


def node_name(layer: int, feature: int) -> str:
    """``z{layer}.{feature}``, the paper's ``z_{layer,feature}``."""
    return f"z{layer}.{feature}"


class LayerRegressions:
    """Layer-pair Lasso fits on demand: ``parents(l, features)`` fits the columns of
    ``A_{l-1,l}`` for the child ``features`` of layer ``l`` not fit before, and keeps them.
    Each column's penalty is ``lam_ratio`` of its own ``lam_max`` or the one absolute ``lam``
    (:class:`~circuitlasso.circuits.features.Penalty`). ``device``, ``memory_gib``,
    ``progress``: where the solver runs, its memory budget and
    whether it shows progress bars (see :func:`fit_layer_pair`).

    Whole layer pairs (:meth:`fit_pairs`, :meth:`fit_all`) run as chunks of ``chunk_size``
    child columns, one task each on ``executor`` (``"serial"``, ``"ray"`` or an
    :class:`~circuitlasso.executor.Executor` such as a configured
    :class:`~circuitlasso.executor.RayExecutor`), every chunk saved under ``cache_dir``
    (default: :func:`circuitlasso.cache.cache_root`) as it finishes: a rerun, or a run after an
    interruption, fits only the chunks not saved yet. Each child column is its own Lasso, so the
    chunking does not change the result; each task builds its own Gram of the parents, so larger
    chunks cost less in all, smaller ones spread over more workers.
    """

    def __init__(
        self,
        Z: dict[int, Features],
        lam_ratio: float | None = None,
        min_prompts: int = defaults.MIN_PROMPTS,
        tol: float = defaults.PAIR_TOL,
        device: torch.device | str | None = None,
        memory_gib: float = DEFAULT_MEMORY_GIB,
        progress: bool = False,
        *,
        lam: float | None = None,
        executor: str | Executor | None = None,
        chunk_size: int = 8192,
        cache_dir: str | Path | None = None,
    ) -> None:
        if not Z:
            raise ValueError("need the features of at least one layer, got none")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        self.penalty = Penalty.of(lam_ratio, lam, defaults.LAM_RATIO)
        self.Z, self.min_prompts, self.tol = Z, min_prompts, tol
        self.device, self.memory_gib, self.progress = device, memory_gib, progress
        self.executor, self.chunk_size, self.cache_dir = (
            get_executor(executor),
            chunk_size,
            cache_dir,
        )
        self._settings = _PairSettings(self.penalty, min_prompts, tol, device, memory_gib, progress)
        self.layers = sorted(Z)
        self._fits: dict[int, dict[int, LayerPairFit]] = {layer: {} for layer in self.layers}

    def parent_layer(self, layer: int) -> int:
        """The layer just below ``layer`` among the collected ones."""
        index = self.layers.index(layer)
        if index == 0:
            raise ValueError(f"layer {layer} is the first collected layer: it has no parents")
        return self.layers[index - 1]

    def parents(self, layer: int, features: Sequence[int]) -> dict[int, LayerPairFit]:
        """Per child feature of ``layer``, the fit holding its column of ``A_{l-1,l}``."""
        known = self._fits[layer]
        new = sorted({int(f) for f in features} - set(known))
        if new:
            fit = self._settings.fit(self.Z, self.parent_layer(layer), layer, new)
            known.update({feature: fit for feature in new})
        return {int(f): known[int(f)] for f in features}

    def fit_pairs(self, layers: Sequence[int] | None = None) -> None:
        """Fit every column of ``A_{l-1,l}`` for each child layer of ``layers`` (default: every
        layer but the first), as cached chunks on the executor (see the class)."""
        layers = self.layers[1:] if layers is None else [int(layer) for layer in layers]
        jobs = [
            (layer, start)
            for layer in layers
            for start in range(0, self.Z[layer].shape[1], self.chunk_size)
        ]
        needed = sorted({*layers, *(self.parent_layer(layer) for layer in layers)})
        key = cache_key(
            what="layer_pair_chunks",
            version=LAYER_PAIR_CACHE_VERSION,
            features=[[layer, _features_digest(self.Z[layer])] for layer in needed],
            jobs=[list(job) for job in jobs],
            chunk_size=self.chunk_size,
            lam_ratio=self.penalty.ratio,
            lam=self.penalty.lam,
            min_prompts=self.min_prompts,
            tol=self.tol,
        )
        task = _PairChunk(
            self._settings, {layer: self.Z[layer] for layer in needed},
            {layer: self.parent_layer(layer) for layer in layers}, jobs, self.chunk_size,
        )  # fmt: skip
        chunks = load_or_compute_chunks(
            key, len(jobs), task, root=self.cache_dir, desc="layer-pair chunks",
            progress=self.progress, executor=self.executor,
        )  # fmt: skip
        for (layer, _), chunk in zip(jobs, chunks, strict=True):
            fit = LayerPairFit.from_tensors(chunk)
            self._fits[layer].update({int(feature): fit for feature in fit.children})

    def fit_pair(self, layer: int) -> None:
        """Fit every column of ``A_{l-1,l}`` for the child ``layer`` (Eq. 4 for one pair)."""
        self.fit_pairs([layer])

    def fit_all(self) -> None:
        """Fit every column of every layer pair: the full ``A_{l-1,l}`` of the paper (Eq. 4)."""
        self.fit_pairs()

    def coef(self, layer: int) -> sp.csc_matrix:
        """``A_{l-1,l}: (D_parent, D_child)`` for the child ``layer``, every column fit (call
        :meth:`fit_pair` first)."""
        fits = self._fits[layer]
        missing = self.Z[layer].shape[1] - len(fits)
        if missing:
            raise ValueError(f"{missing} columns of layer {layer} are not fit yet: call fit_pair")
        return sp.hstack([fits[f].column(f) for f in range(len(fits))], format="csc")


LAYER_PAIR_CACHE_VERSION = 1
"""Part of the layer-pair chunks' cache key: bump it when what a chunk holds changes."""


@dataclass(frozen=True)
class _PairSettings:
    """How a layer pair's columns are fit (see :func:`fit_layer_pair`)."""

    penalty: Penalty
    min_prompts: int
    tol: float
    device: torch.device | str | None
    memory_gib: float
    progress: bool

    def fit(
        self, Z: Mapping[int, Features], parent: int, child: int, children: Sequence[int]
    ) -> LayerPairFit:
        return fit_layer_pair(
            Z[parent], Z[child], self.penalty.ratio, lam=self.penalty.lam, parent=parent,
            child=child, children=children,
            min_prompts=self.min_prompts, tol=self.tol, device=self.device,
            memory_gib=self.memory_gib, progress=self.progress,
        )  # fmt: skip


@dataclass(frozen=True)
class _PairChunk:
    """Task ``i`` of :meth:`LayerRegressions.fit_pairs`: with ``jobs[i] = (layer, start)``, the
    child columns ``start .. start + chunk_size`` of ``layer`` on ``parents[layer]``. It holds only
    the feature matrices the jobs read: they are what travels to the workers."""

    settings: _PairSettings
    Z: dict[int, Features]
    parents: dict[int, int]
    jobs: list[tuple[int, int]]
    chunk_size: int

    def __call__(self, i: int) -> dict[str, torch.Tensor]:
        layer, start = self.jobs[i]
        children = range(start, min(self.Z[layer].shape[1], start + self.chunk_size))
        return self.settings.fit(self.Z, self.parents[layer], layer, children).to_tensors()


def _features_digest(Z: Features) -> str:
    Z = sp.csr_matrix(Z)
    return digest_arrays(Z.indptr, Z.indices, Z.data, np.asarray(Z.shape))


def label_importance(fit: LabelFit, z: np.ndarray | None = None) -> np.ndarray:
    """``(D,)`` importance of the last layer's features: ``|A_{L,y}|`` (summed over the classes
    of a multi-class readout), or that times ``|z|`` with ``z: (D,)`` one prompt's token-averaged
    features (or their standard deviations)."""
    score = np.abs(fit.coef).reshape(len(fit.coef), -1).sum(1)
    return score if z is None else score * np.abs(np.asarray(z).ravel())


def prompt_importance(
    label_fit: LabelFit, circuit: Circuit, Z: Mapping[int, Features], rows: Sequence[int]
) -> list[dict[str, float]]:
    """Per prompt row of ``Z`` (``{layer: (M, D)}``), each node's importance on that prompt
    (zeros left out): ``|A_{L,y}| * |z_L|`` for a node of the readout layer, else the sum over
    its edges of ``|coef| * |z|``."""
    rows = list(rows)
    nodes = list(circuit.nodes(data=True))
    scores = np.zeros((len(rows), len(nodes)))
    readout = label_importance(label_fit)
    for j, (node, data) in enumerate(nodes):
        z = np.abs(np.asarray(Z[data["layer"]][rows][:, [data["feature"]]].toarray()).ravel())
        if data["layer"] == label_fit.layer:
            scores[:, j] = readout[data["feature"]] * z
        else:
            weight = sum(abs(coef) for _, _, coef in circuit.out_edges(node, data="coef"))
            scores[:, j] = weight * z
    return [
        {node: float(v) for (node, _), v in zip(nodes, row, strict=True) if v > 0} for row in scores
    ]


def select(scores: np.ndarray, k: int | None = None, mass: float | None = None) -> np.ndarray:
    """Indices of the positive ``scores`` kept by one rule, largest first: the ``k`` largest, or
    the fewest whose sum reaches ``mass`` (in (0, 1]) of the total."""
    if (k is None) == (mass is None):
        raise ValueError("give exactly one of k (top-k rule) and mass (coefficient-mass rule)")
    order = np.argsort(-scores, kind="stable")
    order = order[scores[order] > 0]
    if k is not None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return order[:k]
    assert mass is not None
    if not 0 < mass <= 1:
        raise ValueError(f"mass must be in (0, 1], got {mass}")
    if len(order) == 0:
        return order
    cumulative = np.cumsum(scores[order]) / scores[order].sum()
    return order[: int(np.searchsorted(cumulative, mass - 1e-12)) + 1]


def trace_circuit(
    label_fit: LabelFit,
    regressions: LayerRegressions,
    *,
    roots: int | Sequence[int] = defaults.ROOTS,
    k: int | None = defaults.K,
    mass: float | None = None,
    depth: int | None = None,
    prompt: int | None = None,
    standardized: bool = defaults.STANDARDIZED,
) -> Circuit:
    """Trace backward from the last layer's root features.

    ``roots``: how many of the most important features (an int) or which features (a list).
    ``k`` / ``mass``: the parent rule (set ``k=None`` to use ``mass``). ``depth``: how many layers
    to go down (default: to the first collected layer). ``prompt``: row of ``Z`` whose activations
    weight every score (per-prompt circuit); None for the dataset-level circuit.
    ``standardized``: weight dataset-level scores by each feature's standard deviation over the
    prompts, ``|A| * std(z)``, the change a typical variation of the feature makes (the paper
    ranks by ``|A|`` alone, which favours rarely active features with small activations); a
    per-prompt circuit is weighted by that prompt's activations instead. Defaults:
    :mod:`circuitlasso.circuits.defaults`.
    """
    last = regressions.layers[-1]
    if label_fit.layer != last:
        raise ValueError(f"the label fit reads layer {label_fit.layer}, the last layer is {last}")

    def z(layer: int) -> np.ndarray | None:
        if prompt is not None:
            return _row(regressions.Z[layer], prompt)
        return feature_std(regressions.Z[layer]) if standardized else None

    importance = label_importance(label_fit, z(last))
    if isinstance(roots, int):
        chosen = select(importance, k=roots)
    else:
        chosen = np.asarray(roots, dtype=int)
    graph = Circuit()
    for feature in chosen:
        graph.add_node(node_name(last, int(feature)), layer=last, feature=int(feature),
                       importance=float(importance[feature]))  # fmt: skip
    frontier, layer = [int(f) for f in chosen], last
    steps = len(regressions.layers) - 1 if depth is None else depth
    for _ in range(steps):
        if not frontier or layer == regressions.layers[0]:
            break
        below = regressions.parent_layer(layer)
        weight = z(below)
        next_frontier: set[int] = set()
        for child, fit in regressions.parents(layer, frontier).items():
            coef = fit.column(child).toarray().ravel()
            scores = np.abs(coef) if weight is None else np.abs(coef) * np.abs(weight)
            for parent in select(scores, k=k, mass=mass):
                name = node_name(below, int(parent))
                if name not in graph:
                    graph.add_node(name, layer=below, feature=int(parent), importance=0.0)
                graph.nodes[name]["importance"] += float(scores[parent])
                graph.add_edge(name, node_name(layer, child), coef=float(coef[parent]),
                               score=float(scores[parent]))  # fmt: skip
                next_frontier.add(int(parent))
        frontier, layer = sorted(next_frontier), below
    return graph


def feature_std(Z: Features) -> np.ndarray:
    """``(D,)`` standard deviation of each feature of ``Z: (M, D)`` over the prompts."""
    mean = np.asarray(Z.mean(0)).ravel()
    return np.sqrt(np.maximum(np.asarray(Z.multiply(Z).mean(0)).ravel() - mean**2, 0.0))


def _row(Z: Features, prompt: int) -> np.ndarray:
    if not 0 <= prompt < Z.shape[0]:
        raise ValueError(f"prompt {prompt} out of range: there are {Z.shape[0]} prompts")
    return np.asarray(Z[prompt].toarray()).ravel()


def classify_edge(parent_tokens: Collection[str], child_tokens: Collection[str],
                  overlap: float = 0.5) -> str:  # fmt: skip
    """The edge type of Sec. 4.2.1 from the parent's and child's top-token sets.

    With ``shared`` their intersection: ``persistence`` if ``shared`` holds at least ``overlap``
    of each set (the concept carries over); ``merging`` if it holds ``overlap`` of the parent's
    tokens only (the child adds concepts from elsewhere); ``dropping`` if it holds ``overlap`` of
    the child's tokens only (the child keeps part of the parent's concept); else ``other``.
    """
    parent, child = set(parent_tokens), set(child_tokens)
    if not parent or not child:
        return "other"
    shared = len(parent & child)
    keeps_parent, explains_child = shared >= overlap * len(parent), shared >= overlap * len(child)
    if keeps_parent and explains_child:
        return "persistence"
    if keeps_parent:
        return "merging"
    return "dropping" if explains_child else "other"


def classify_edges(
    graph: Circuit, top_tokens: Mapping[str, Collection[str]], overlap: float = 0.5
) -> None:
    """Set every edge's ``type`` attribute by :func:`classify_edge` (``top_tokens`` by node)."""
    for parent, child, data in graph.edges(data=True):
        data["type"] = classify_edge(top_tokens[parent], top_tokens[child], overlap)


def interpret_circuit(
    graph: Circuit, top_tokens: Callable[[int, int], Counter[str]], overlap: float = 0.5
) -> dict[str, Counter[str]]:
    """Interpret every node by ``top_tokens(layer, feature)`` (token -> count among the feature's
    largest activations, :func:`circuitlasso.circuits.interpret.top_tokens`): set the node's
    ``top_tokens`` attribute to its 5 most common tokens and every edge's ``type``
    (:func:`classify_edges`). Returns the full counts by node name."""
    tokens = {
        node: top_tokens(data["layer"], data["feature"]) for node, data in graph.nodes(data=True)
    }
    classify_edges(graph, tokens, overlap)
    for node, counts in tokens.items():
        graph.nodes[node]["top_tokens"] = dict(counts.most_common(5))
    return tokens


def check_interpreted(graph: Circuit) -> None:
    """Raise ``ValueError`` naming the first node without ``top_tokens`` or edge without a
    ``type``: what :func:`interpret_circuit` sets and the circuit's readers need."""
    for node, data in graph.nodes(data=True):
        if "top_tokens" not in data:
            raise ValueError(
                f"node {node} has no top_tokens: interpret the circuit first "
                "(CircuitLasso.interpret)"
            )
    for parent, child, data in graph.edges(data=True):
        if "type" not in data:
            raise ValueError(
                f"edge {parent} -> {child} has no type: interpret the circuit first "
                "(CircuitLasso.interpret)"
            )


def node_captions(graph: Circuit, n: int = 3) -> dict[str, str]:
    """Per node, its ``n`` most common top tokens joined by commas: the caption a figure shows
    (after :func:`interpret_circuit`)."""
    return {
        node: ", ".join(list(data.get("top_tokens", {}))[:n])
        for node, data in graph.nodes(data=True)
    }


def root_features(graph: Circuit) -> list[int]:
    """The features of the circuit's last layer (its roots), by decreasing importance."""
    if graph.number_of_nodes() == 0:
        raise ValueError("the circuit has no nodes")
    last = max(layer for _, layer in graph.nodes(data="layer"))
    roots = [data for _, data in graph.nodes(data=True) if data["layer"] == last]
    return [data["feature"] for data in sorted(roots, key=lambda data: -data["importance"])]


def node_table(graph: Circuit) -> pd.DataFrame:
    """One row per node, from the last layer down and by decreasing importance within a layer:
    ``node``, ``layer``, ``importance`` (rounded to 3 decimals), ``top tokens`` (``word xcount``
    from the ``top_tokens`` attribute, empty before :func:`interpret_circuit`)."""
    rows = [
        {
            "node": node,
            "layer": data["layer"],
            "importance": data["importance"],
            "top tokens": ", ".join(f"{w} x{n}" for w, n in data.get("top_tokens", {}).items()),
        }
        for node, data in graph.nodes(data=True)
    ]
    table = pd.DataFrame(rows, columns=["node", "layer", "importance", "top tokens"])
    table = table.sort_values(["layer", "importance"], ascending=False, kind="stable")
    return table.round({"importance": 3}).reset_index(drop=True)


def edge_table(graph: Circuit) -> pd.DataFrame:
    """One row per edge: ``parent``, ``child``, ``coef`` (rounded to 3 decimals) and ``type``
    (None before :func:`interpret_circuit`)."""
    rows = [
        {"parent": parent, "child": child, "coef": round(data["coef"], 3), "type": data.get("type")}
        for parent, child, data in graph.edges(data=True)
    ]
    return pd.DataFrame(rows, columns=["parent", "child", "coef", "type"])
