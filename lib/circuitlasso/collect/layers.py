"""``LayerFeatures``: the features of several layers for the same prompts, one row per prompt.

A read-only mapping ``layer -> (M, D_layer)`` (what :func:`~circuitlasso.collect.
collect_sae_features` returns) that scikit-learn can also split by prompts: ``Z.rows(rows)`` (and
``Z[rows]`` with a numpy array or slice, as scikit-learn spells it) is the same layers restricted
to those prompts, and ``Z.shape`` is
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
    (sparse CSR or dense), ``Z.rows(rows)`` (or ``Z[rows]`` with an integer or boolean numpy
    array or a slice) the rows ``rows`` of every layer. ``compute_seconds``: what computing them
    took on a first run, where known (:func:`~circuitlasso.collect.collect_sae_features` sets
    it, cached or not; rows taken from them do not have it). ``pooled``: ``{layer: (M, d_in)}``
    token-averaged activations some layers' SAEs read, where collected (rows follow the
    features')."""

    def __init__(
        self,
        layers: Mapping[int, Any],
        *,
        compute_seconds: float | None = None,
        pooled: Mapping[int, np.ndarray] | None = None,
    ) -> None:
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
        self.pooled = {int(layer): np.asarray(x) for layer, x in (pooled or {}).items()}
        wrong = {
            layer: x.shape
            for layer, x in self.pooled.items()
            if x.ndim != 2 or x.shape[0] != self.shape[0] or layer not in self._layers
        }
        if wrong:
            raise ValueError(f"pooled activations need one row per prompt of a layer: {wrong}")

    def __getitem__(self, key: Any) -> Any:
        """``Z[layer]`` one layer's matrix; ``Z[rows]`` with a numpy array or slice of rows, as
        scikit-learn splits it (:meth:`rows` is the spelling for everyone else); a list is
        refused, since ``Z[[3]]`` would read as a layer."""
        if isinstance(key, numbers.Integral):
            if int(key) not in self._layers:
                raise KeyError(f"no layer {key}; layers: {list(self._layers)}")
            return self._layers[int(key)]
        if isinstance(key, tuple) and len(key) == 2 and key[1] is Ellipsis:
            key = key[0]  # rows as scikit-learn indexes them, X[rows, ...]
        if isinstance(key, (slice, np.ndarray)):
            return self.rows(key)
        if isinstance(key, list):
            raise TypeError(
                f"Z[{key!r}]: a list of rows reads like a layer; use Z.rows({key!r}) for those "
                "prompts, or Z[layer] for one layer"
            )
        raise KeyError(key)

    def rows(self, rows: Any) -> LayerFeatures:
        """The same layers restricted to the prompts ``rows`` (integer indices, a boolean mask or
        a slice), in that order."""
        return LayerFeatures(
            {layer: _rows(z, rows) for layer, z in self._layers.items()},
            pooled={layer: x[rows] for layer, x in self.pooled.items()},
        )

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
