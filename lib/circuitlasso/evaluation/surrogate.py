"""Edge ablation in the linear surrogate of a traced circuit (paper App. C.5, Fig. 4), which
only a regression circuit allows. Its metric is always the label readout of
:mod:`circuitlasso.evaluation.metrics` (signed by the labels where given): the surrogate is
linear in the token-averaged features and has no logits, so it cannot give a decoder's
log-probabilities.

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
change a one-standard-deviation move of a feature makes, summed over its paths to the readout
through the absolute coefficients. :meth:`Surrogate.total_effects` is the signed effect of a unit
change of a feature on the readout's logit, summed over the same paths: the surrogate's stand-in
for the gradient that integrated gradients takes in the model.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import Features, LabelFit, LayerPairFit
from circuitlasso.circuits.trace import LayerRegressions, feature_std, node_name
from circuitlasso.data.graph import Edge
from circuitlasso.evaluation.ablate import Node, ablation_ratio
from circuitlasso.evaluation.metrics import Readout, label_signs


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
    :meth:`LayerRegressions.parents` returns); ``readout`` (a binary label fit or its
    :class:`~circuitlasso.evaluation.metrics.Readout`) reads the last layer of ``Z``;
    ``labels: (M,)`` in {0, 1}, if given, sign the metric.
    """

    def __init__(
        self,
        Z: Mapping[int, Features],
        columns: Mapping[int, Mapping[int, LayerPairFit]],
        readout: LabelFit | Readout,
        labels: Sequence[int] | None = None,
    ) -> None:
        readout = readout if isinstance(readout, Readout) else Readout.of(readout)
        if readout.layer != max(Z):
            raise ValueError(f"the label fit reads layer {readout.layer}, last is {max(Z)}")
        self.Z = {layer: sp.csr_matrix(z) for layer, z in Z.items()}
        self.readout = readout
        self._std = {layer: feature_std(z) for layer, z in self.Z.items()}
        n = self.Z[readout.layer].shape[0]
        self.signs = label_signs(labels, n)
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
        readout: LabelFit | Readout,
        labels: Sequence[int] | None = None,
    ) -> Surrogate:
        """The surrogate of a traced circuit: the columns of its nodes that have parents."""
        children: dict[int, list[int]] = {}
        for name, data in graph.nodes(data=True):
            if graph.in_degree(name):
                children.setdefault(int(data["layer"]), []).append(int(data["feature"]))
        columns = {layer: regressions.parents(layer, f) for layer, f in children.items()}
        return cls(regressions.Z, columns, readout, labels)

    def edges(self) -> list[Edge]:
        """Every edge of the surrogate: the nonzero coefficients of the fitted columns."""
        return list(self._index)

    def _per_unit(self, top: np.ndarray, absolute: bool) -> dict[int, np.ndarray]:
        """``{layer: (D_layer,)}`` effect on the read ``top: (D_L,)`` of the last layer of a unit
        change of each feature, summed over its paths through the fitted columns: ``top`` on the
        last layer, ``u_p = sum over fitted children c of A[p, c] * u_c`` below (``|top|`` and
        ``|A|`` if ``absolute``); a layer no path reaches is left out."""
        layer = self.readout.layer
        units = {layer: np.abs(top) if absolute else np.asarray(top, dtype=np.float64)}
        while layer in self.layers:
            columns = self.layers[layer]
            coef = abs(columns.coef) if absolute else columns.coef
            units[columns.parent] = coef @ units[layer][columns.children]
            layer = columns.parent
        return units

    def node_effects(self) -> dict[Node, float]:
        """Effect on the readout's logit of a one-standard-deviation change of each node, through
        the surrogate: ``|a_f| * std(z_f)`` for the last layer's features, and for a parent
        ``p`` of fitted children ``c`` the sum over ``c`` of
        ``effect(c) * |A[p, c]| * std(z_p) / std(z_c)``, i.e. ``std(z_p)`` times the per-unit
        effect of :meth:`_per_unit` with absolute coefficients; nodes of no effect left out."""
        return {
            (layer, int(f)): float(units[f] * self._std[layer][f])
            for layer, units in self._per_unit(self.readout.coef, absolute=True).items()
            for f in np.flatnonzero(units)
        }

    def total_effects(self) -> dict[int, np.ndarray]:
        """``{layer: (D_layer,)}`` signed effect ``T_f`` of a unit change of each feature on the
        readout's logit through the surrogate: ``a`` on the last layer, the signed
        ``A_{l-1,l}`` below, summed over paths (zero for a feature on none)."""
        return self._per_unit(self.readout.coef, absolute=False)

    def rank_nodes(self) -> list[Node]:
        """Nodes by :meth:`node_effects`, largest first."""
        effects = self.node_effects()
        return sorted(effects, key=lambda node: -effects[node])

    def rank_edges(self) -> list[Edge]:
        """Edges by their share of the child's effect, ``effect(c) * |A[p, c]| * std(z_p) /
        std(z_c)`` (see :meth:`node_effects`), largest first."""
        units = self._per_unit(self.readout.coef, absolute=True)
        values = []  # in the order of self.edges(): layer by layer, then by position in coef
        for layer in sorted(self.layers):
            columns = self.layers[layer]
            unit = units.get(layer, np.zeros(self.Z[layer].shape[1]))  # no path: no effect
            per_unit = np.repeat(unit[columns.children], np.diff(columns.coef.indptr))
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
        fit, layer = self.readout, self.readout.layer
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
        rows.append({"n": n, "faithfulness": ablation_ratio(m_kept, empty, full),
                     "completeness": ablation_ratio(m_removed, empty, full), "m_circuit": m_kept,
                     "m_complement": m_removed, "m_full": full, "m_empty": empty})  # fmt: skip
    return pd.DataFrame(rows)
