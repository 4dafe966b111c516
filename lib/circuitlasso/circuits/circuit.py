"""The one circuit type, and how to score recovered circuits.

A :class:`Circuit` is a ``networkx.DiGraph`` over named nodes whose edges run parent -> child (the
child reads what the parent writes). Component circuits name nodes as InterpBench/EAP-IG do:
``input``, ``a{layer}.h{head}``, ``m{layer}``, ``output``. Feature circuits, as traced by
:func:`circuitlasso.circuits.trace.trace_circuit`, name them ``z{layer}.{feature}`` and carry the
attributes ``layer`` and ``feature`` (and scores, coefficients and labels). Views:
:meth:`Circuit.features_by_layer` for ablation, the graph itself for networkx, and node-link JSON.

Methods produce *edge scores* (one float per candidate edge); a component circuit is the set of
edges whose score passes a threshold, pruned to edges that lie on a path into ``output`` (what
cannot reach the output is not part of the circuit for the output's behaviour).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import networkx as nx
import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from circuitlasso.cache import atomic_path
from circuitlasso.data.graph import OUTPUT, Edge

EdgeScores = dict[Edge, float]


class Circuit(nx.DiGraph):
    """A directed graph over named nodes, built from ``edges`` (parent, child) pairs, or the
    edges of another graph, and grown with the ``networkx`` API. Two circuits are equal when
    they have the same nodes and edges (attributes are not compared)."""

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by structure

    def __init__(self, edges: Iterable[Edge] | nx.DiGraph = (), **attr) -> None:
        super().__init__(**attr)
        for edge in edges.edges if isinstance(edges, nx.DiGraph) else edges:
            if len(edge) != 2 or not all(isinstance(n, str) for n in edge) or edge[0] == edge[1]:
                raise ValueError(
                    f"an edge must be a pair of two different node names, got {edge!r}"
                )
            self.add_edge(edge[0], edge[1])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, nx.DiGraph):
            return NotImplemented
        return set(self.nodes) == set(other.nodes) and set(self.edges) == set(other.edges)

    def is_acyclic(self) -> bool:
        """True when the edges contain no directed cycle."""
        return nx.is_directed_acyclic_graph(self)

    def features_by_layer(self) -> dict[int, list[int]]:
        """``{layer: [feature, ...]}`` of the nodes with ``layer`` and ``feature`` attributes
        (the ablation view, see :func:`circuitlasso.evaluation.ablate.metric_with_ablation`)."""
        by_layer: dict[int, list[int]] = {}
        for _, data in self.nodes(data=True):
            if "layer" in data and "feature" in data:
                by_layer.setdefault(int(data["layer"]), []).append(int(data["feature"]))
        return {layer: sorted(features) for layer, features in sorted(by_layer.items())}

    def to_json(self, path: str | Path | None = None) -> str:
        """The circuit as node-link JSON with every attribute (written atomically to ``path``
        if given, see :func:`circuitlasso.cache.atomic_path`)."""
        text = json.dumps(nx.node_link_data(self, edges="edges"), indent=1, sort_keys=True)
        if path is not None:
            with atomic_path(path) as tmp:
                tmp.write_text(text)
        return text

    @classmethod
    def from_json(cls, text: str) -> Circuit:
        """Inverse of :meth:`to_json`."""
        data = json.loads(text)
        if not isinstance(data, dict) or "edges" not in data or "nodes" not in data:
            raise ValueError("circuit JSON needs 'nodes' and 'edges' lists (node-link format)")
        circuit = cls()
        circuit.update(nx.node_link_graph(data, directed=True, edges="edges"))
        return circuit

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path``, atomically."""
        self.to_json(path)

    @classmethod
    def load(cls, path: str | Path) -> Circuit:
        return cls.from_json(Path(path).read_text())


def edge_shd(predicted: Circuit, true: Circuit) -> int:
    """Structural Hamming distance on edges: edges in exactly one of the two circuits."""
    return len(predicted.edges ^ true.edges)


def node_shd(predicted: Circuit, true: Circuit) -> int:
    """Structural Hamming distance on nodes: nodes in exactly one of the two circuits."""
    return len(predicted.nodes ^ true.nodes)


def prune_to_output(circuit: Circuit, sink: str = OUTPUT) -> Circuit:
    """Keep only edges on some directed path into ``sink`` (edges whose child reaches it)."""
    parents: dict[str, set[str]] = {}
    for parent, child in circuit.edges:
        parents.setdefault(child, set()).add(parent)
    ancestors, frontier = {sink}, [sink]
    while frontier:
        for parent in parents.get(frontier.pop(), ()):
            if parent not in ancestors:
                ancestors.add(parent)
                frontier.append(parent)
    return Circuit(e for e in circuit.edges if e[1] in ancestors)


def circuit_at_threshold(scores: Mapping[Edge, float], threshold: float) -> Circuit:
    """Edges scoring strictly above ``threshold``, pruned to paths into ``output``."""
    return prune_to_output(Circuit(e for e, s in scores.items() if s > threshold))


def gap_threshold(scores: Mapping[Edge, float], floor: float = 1e-3) -> float:
    """Ground-truth-free threshold: the widest gap between consecutive log-scores.

    Scores below ``floor * max`` count as zero. Among the rest, sorted decreasingly, the threshold
    is placed at the geometric middle of the largest ratio between neighbours; the smallest kept
    score's gap to the floor also counts, so a set of uniformly large scores keeps everything.
    Returns ``inf`` (empty circuit) when every score is zero.
    """
    values = np.asarray(list(scores.values()), dtype=float)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("gap_threshold needs a non-empty set of finite scores")
    top = values.max()
    if top <= 0:
        return math.inf
    cutoff = floor * top
    kept = np.sort(values[values >= cutoff])[::-1]
    logs = np.log(np.append(kept, cutoff))
    gaps = logs[:-1] - logs[1:]
    i = int(np.argmax(gaps))
    return float(np.exp((logs[i] + logs[i + 1]) / 2))


def threshold_sweep(scores: Mapping[Edge, float]) -> list[float]:
    """All thresholds that give distinct circuits: just below each distinct score, plus +inf."""
    distinct = sorted(set(scores.values()), reverse=True)
    below = [np.nextafter(s, -np.inf) for s in distinct]
    return [math.inf, *below]


SCORE_TIE_RTOL = 1e-6
"""Scores closer than this times the largest score are ties for the ranking metrics: a solver
stopped at its tolerance, or weight split between interchangeable columns, orders them by
rounding alone (another machine orders them otherwise)."""


def tie_scores(scores: Mapping[Edge, float], rtol: float = SCORE_TIE_RTOL) -> dict[Edge, float]:
    """``scores`` with each run of neighbours (sorted) closer than ``rtol * max`` set to the
    run's largest score, so that rankings do not depend on digits below that."""
    order = sorted(scores, key=lambda e: -scores[e])
    if not order:
        return {}
    step = rtol * max(abs(scores[order[0]]), 1e-300)
    out, level, previous = {}, scores[order[0]], scores[order[0]]
    for edge in order:
        if previous - scores[edge] > step:
            level = scores[edge]
        out[edge] = level
        previous = scores[edge]
    return out


def best_threshold_shd(scores: Mapping[Edge, float], true: Circuit) -> tuple[int, float]:
    """Smallest edge SHD over the threshold sweep (an upper bound on any rule) and its threshold;
    scores within ``SCORE_TIE_RTOL`` of each other are ties (:func:`tie_scores`)."""
    scores = tie_scores(scores)
    best = (edge_shd(Circuit(()), true), math.inf)
    for threshold in threshold_sweep(scores):
        shd = edge_shd(circuit_at_threshold(scores, threshold), true)
        if shd < best[0]:
            best = (shd, threshold)
    return best


def edge_auroc(scores: Mapping[Edge, float], true: Circuit) -> float:
    """Area under the ROC curve of ranking candidate edges by score against the true edges.

    Every true edge must be a candidate (else the names do not match: ValueError). NaN when the
    candidates are all true or all false. Scores within ``SCORE_TIE_RTOL`` of each other are
    ties (:func:`tie_scores`), each counted half.
    """
    missing = true.edges - scores.keys()
    if missing:
        raise ValueError(f"true edges missing from the scored candidates: {sorted(missing)[:5]}")
    labels = np.array([e in true.edges for e in scores])
    if labels.all() or not labels.any():
        return math.nan
    tied = tie_scores(scores)
    return float(roc_auc_score(labels, np.array([tied[e] for e in scores], dtype=float)))


def block_norm_scores(
    coefficients: Mapping[tuple[int, int], torch.Tensor],
    names: list[str],
    child_widths: Mapping[int, int],
) -> EdgeScores:
    """Edge scores from coefficient blocks: ``(parent_block, child_block) -> A: (p_i, q_j)``.

    The score of edge ``names[i] -> names[j]`` is the root mean square over the child's columns
    of its block's column norms, ``||A||_F / sqrt(child_widths[j])``, with ``child_widths[j]``
    the child's non-constant (standardized) columns. On standardized data a squared column norm
    measures the variance of one child column the parent accounts for, so an edge into a
    one-column child (a logit difference) and one into a d_model-wide child compare on one
    scale; a plain Frobenius norm grows with the child's width.
    """
    scores: EdgeScores = {}
    for (i, j), block in coefficients.items():
        if not (0 <= i < len(names) and 0 <= j < len(names)):
            raise ValueError(f"block index ({i}, {j}) out of range for {len(names)} names")
        width = max(int(child_widths[j]), 1)
        scores[(names[i], names[j])] = float(torch.linalg.norm(block.double())) / width**0.5
    return scores
