"""``LayerFeatures``: the features of several layers for the same prompts, one row per prompt.

A read-only mapping ``layer -> (M, D_layer)`` (what :func:`~circuitlasso.collect.
collect_sae_features` returns) that scikit-learn can also split by prompts: ``Z[rows]`` with an
array or slice of row indices is the same layers restricted to those prompts, and ``Z.shape`` is
``(M, total width)``, so ``GridSearchCV`` and ``cross_val_score`` cross-validate a
:class:`~circuitlasso.estimator.CircuitLasso` on it as on any matrix.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp


class LayerFeatures(Mapping):
    """``{layer: (M, D_layer)}`` features of the same M prompts; ``Z[layer]`` one layer's matrix
    (sparse CSR or dense), ``Z[rows]`` (an integer or boolean array, a list or a slice) the rows
    ``rows`` of every layer. ``compute_seconds``: what computing them took on a first run, where
    known (:func:`~circuitlasso.collect.collect_sae_features` sets it, cached or not; rows taken
    from them do not have it)."""

    def __init__(self, layers: Mapping[int, Any], *, compute_seconds: float | None = None) -> None:
        self.compute_seconds = compute_seconds
        if not layers:
            raise ValueError("LayerFeatures needs the features of at least one layer")
        self._layers: dict[int, Any] = {}
        for layer, z in sorted(layers.items()):
            if not isinstance(layer, numbers.Integral):
                raise ValueError(f"layers are keyed by int layer, got key {layer!r}")
            if len(np.shape(z)) != 2:
                raise ValueError(f"layer {layer}'s features must be (M, D), got {np.shape(z)}")
            self._layers[int(layer)] = z
        rows = {layer: np.shape(z)[0] for layer, z in self._layers.items()}
        if len(set(rows.values())) != 1:
            raise ValueError(f"every layer needs one row per prompt, got rows {rows}")

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, numbers.Integral):
            return self._layers[int(key)]
        if isinstance(key, tuple) and len(key) == 2 and key[1] is Ellipsis:
            key = key[0]  # rows as scikit-learn indexes them, X[rows, ...]
        if isinstance(key, slice) or isinstance(key, (list, np.ndarray)):
            return LayerFeatures({layer: _rows(z, key) for layer, z in self._layers.items()})
        raise KeyError(key)

    def __iter__(self) -> Iterator[int]:
        return iter(self._layers)

    def __len__(self) -> int:
        return len(self._layers)

    @property
    def shape(self) -> tuple[int, int]:
        """``(M, sum of the layers' widths)``: M prompts (what scikit-learn counts as samples)."""
        widths = [np.shape(z)[1] for z in self._layers.values()]
        return (np.shape(next(iter(self._layers.values())))[0], int(sum(widths)))

    def __repr__(self) -> str:
        widths = {layer: np.shape(z)[1] for layer, z in self._layers.items()}
        return f"LayerFeatures({self.shape[0]} prompts, widths by layer {widths})"


def _rows(z: Any, rows: Any) -> Any:
    """Rows ``rows`` of a dense or sparse (M, D) matrix, keeping its kind."""
    if sp.issparse(z):
        return sp.csr_matrix(z)[rows]
    return np.asarray(z)[rows]
