"""Circuits as edge sets over named components, and how to score recovered circuits.

Node names follow InterpBench/EAP-IG: ``input``, ``a{layer}.h{head}``, ``m{layer}``, ``output``.
An edge ``(parent, child)`` says the child reads what the parent writes. Methods produce *edge
scores* (one float per candidate edge); a circuit is the set of edges whose score passes a
threshold, pruned to edges that lie on a path into ``output`` (what cannot reach the output is not
part of the circuit for the output's behaviour).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from circuitlasso.cache import atomic_path
from circuitlasso.data.graph import OUTPUT, Edge

EdgeScores = dict[Edge, float]


@dataclass(frozen=True)
class Circuit:
    """A directed graph given by its edges; its nodes are the endpoints of the edges."""

    edges: frozenset[Edge]

    def __init__(self, edges: Iterable[Edge]) -> None:
        checked = set()
        for edge in edges:
            if len(edge) != 2 or not all(isinstance(n, str) for n in edge) or edge[0] == edge[1]:
                raise ValueError(
                    f"an edge must be a pair of two different node names, got {edge!r}"
                )
            checked.add((edge[0], edge[1]))
        object.__setattr__(self, "edges", frozenset(checked))

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(n for edge in self.edges for n in edge)

    def __len__(self) -> int:
        return len(self.edges)

    def __iter__(self) -> Iterator[Edge]:
        return iter(sorted(self.edges))

    def is_acyclic(self) -> bool:
        """True when the edges contain no directed cycle."""
        children: dict[str, list[str]] = {}
        indegree = {n: 0 for n in self.nodes}
        for parent, child in self.edges:
            children.setdefault(parent, []).append(child)
            indegree[child] += 1
        ready = [n for n, d in indegree.items() if d == 0]
        seen = 0
        while ready:
            node = ready.pop()
            seen += 1
            for child in children.get(node, []):
                indegree[child] -= 1
                if indegree[child] == 0:
                    ready.append(child)
        return seen == len(indegree)

    def to_dict(self) -> dict[str, list]:
        return {"nodes": sorted(self.nodes), "edges": [list(e) for e in sorted(self.edges)]}

    @classmethod
    def from_dict(cls, data: Mapping) -> Circuit:
        if "edges" not in data:
            raise ValueError("circuit JSON needs an 'edges' list")
        return cls(tuple(edge) for edge in data["edges"])

    def save(self, path: str | Path) -> None:
        """Write the circuit as JSON, atomically (:func:`circuitlasso.cache.atomic_path`)."""
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Circuit:
        with open(path) as f:
            return cls.from_dict(json.load(f))


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


def best_threshold_shd(scores: Mapping[Edge, float], true: Circuit) -> tuple[int, float]:
    """Smallest edge SHD over the threshold sweep (an upper bound on any rule) and its threshold."""
    best = (edge_shd(Circuit(()), true), math.inf)
    for threshold in threshold_sweep(scores):
        shd = edge_shd(circuit_at_threshold(scores, threshold), true)
        if shd < best[0]:
            best = (shd, threshold)
    return best


def edge_auroc(scores: Mapping[Edge, float], true: Circuit) -> float:
    """Area under the ROC curve of ranking candidate edges by score against the true edges.

    Every true edge must be a candidate (else the names do not match: ValueError). NaN when the
    candidates are all true or all false.
    """
    missing = true.edges - scores.keys()
    if missing:
        raise ValueError(f"true edges missing from the scored candidates: {sorted(missing)[:5]}")
    labels = np.array([e in true.edges for e in scores])
    if labels.all() or not labels.any():
        return math.nan
    return float(roc_auc_score(labels, np.array(list(scores.values()), dtype=float)))


def block_norm_scores(
    coefficients: Mapping[tuple[int, int], torch.Tensor], names: list[str]
) -> EdgeScores:
    """Edge scores from coefficient blocks: ``(parent_block, child_block) -> A: (p_i, p_j)``.

    The score of edge ``names[i] -> names[j]`` is the Frobenius norm of its block.
    """
    scores: EdgeScores = {}
    for (i, j), block in coefficients.items():
        if not (0 <= i < len(names) and 0 <= j < len(names)):
            raise ValueError(f"block index ({i}, {j}) out of range for {len(names)} names")
        scores[(names[i], names[j])] = float(torch.linalg.norm(block.double()))
    return scores
