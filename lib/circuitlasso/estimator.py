"""``CircuitLasso``: the feature-circuit pipeline as one scikit-learn style estimator.

``fit`` takes the token-averaged SAE features of every layer (:func:`collect_sae_features`) and
the prompts' targets (binary, multi-class or real-valued); it fits the label regression
``A_{L,y}`` on the last layer, then traces backward through layer-pair regressions fitted only
for the features the trace visits.
``interpret`` names each node by its top tokens and types each edge, and returns the circuit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.circuits import interpret
from circuitlasso.circuits import trace as tr
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import Features, LabelFit, fit_label
from circuitlasso.executor import Executor


class CircuitLasso:
    """A feature circuit learned by sparse regression.

    Both penalties are ratios of their regression's ``lam_max`` (see :mod:`circuitlasso.solve`):
    ``label_lam_ratio`` for the label regression, ``lam_ratio`` for each layer-pair regression.
    ``kind``: the target's kind, ``"binary"``, ``"multiclass"`` or ``"regression"`` (None: read
    from ``y``, see :func:`circuitlasso.data.targets.make_target`). ``roots``: how many
    last-layer features the trace starts from; ``k``: parents kept per node. ``min_prompts``:
    features active on fewer prompts are not used as predictors. ``standardized``: rank by
    ``|A| * std(z)`` (True) or by ``|A|`` as in the paper. ``layer_pairs``: ``"traced"`` fits
    the layer-pair regressions only for the features the trace visits, ``"all"`` fits every
    column of every layer pair first (as the paper does; the circuit is the same, the fits are
    then all in ``regressions_``). ``device``: where the solvers run. ``executor``: where the
    layer pairs of ``layer_pairs="all"`` run, as cached chunks (``"serial"``, ``"ray"`` or a
    configured :class:`~circuitlasso.executor.RayExecutor`; see
    :class:`~circuitlasso.circuits.trace.LayerRegressions`).

    Fitted attributes: ``label_fit_`` (the readout, a
    :class:`~circuitlasso.circuits.features.LabelFit`), ``coef_`` (its ``(D,)`` coefficients, or
    ``(D, K)`` for a multi-class target), ``intercept_`` (a float, or ``(K,)``), ``classes_``
    (``(K,)`` class labels; classification only), ``lam_`` (the label penalty ``lam`` it came to),
    ``regressions_`` (the layer-pair fits made so far), ``circuit_`` (a
    :class:`~circuitlasso.circuits.circuit.Circuit` with nodes ``z{layer}.{feature}`` and edges
    parent -> child carrying ``coef``).
    """

    def __init__(
        self,
        label_lam_ratio: float = 0.01,
        *,
        lam_ratio: float = 0.1,
        kind: str | None = None,
        roots: int = 5,
        k: int = 2,
        min_prompts: int = 10,
        standardized: bool = True,
        layer_pairs: str = "traced",
        device: torch.device | str | None = None,
        executor: str | Executor | None = None,
    ) -> None:
        self.label_lam_ratio, self.lam_ratio, self.kind = label_lam_ratio, lam_ratio, kind
        self.roots, self.k, self.min_prompts = roots, k, min_prompts
        self.standardized, self.layer_pairs, self.device = standardized, layer_pairs, device
        self.executor = executor

    def fit(self, Z: Mapping[int, Features], y: Sequence | np.ndarray) -> CircuitLasso:
        """Fit the readout on the last layer of ``Z`` (layer -> ``(M, D)`` features) against
        ``y: (M,)``, then trace the circuit down to the first layer."""
        if len(Z) < 2:
            raise ValueError(f"need the features of at least 2 layers, got layers {sorted(Z)}")
        if self.layer_pairs not in ("traced", "all"):
            raise ValueError(f"layer_pairs is 'traced' or 'all', got {self.layer_pairs!r}")
        last = max(Z)
        self.label_fit_ = fit_label(Z[last], y, self.label_lam_ratio, layer=last, kind=self.kind,
                                    min_prompts=self.min_prompts, device=self.device)  # fmt: skip
        self.regressions_ = tr.LayerRegressions(
            dict(Z), self.lam_ratio, min_prompts=self.min_prompts, device=self.device,
            executor=self.executor,
        )  # fmt: skip
        if self.layer_pairs == "all":
            self.regressions_.fit_all()
        self.circuit_ = tr.trace_circuit(self.label_fit_, self.regressions_, roots=self.roots,
                                         k=self.k, standardized=self.standardized)  # fmt: skip
        return self

    @property
    def coef_(self) -> np.ndarray:
        """``(D,)`` coefficients of the readout ``A_{L,y}``, ``(D, K)`` for a multi-class target."""
        return self._fitted().coef

    @property
    def intercept_(self) -> float | np.ndarray:
        """The readout's intercept: a float, or ``(K,)`` for a multi-class target."""
        return self._fitted().intercept

    @property
    def classes_(self) -> np.ndarray:
        """``(K,)`` class labels, in the order of ``predict_proba``'s columns."""
        fit = self._fitted()
        if fit.kind == "regression":
            raise AttributeError("a CircuitLasso fit on a regression target has no classes_")
        return fit.classes

    @property
    def lam_(self) -> float:
        """The label penalty ``lam = label_lam_ratio * lam_max`` on the mean scale."""
        return self._fitted().lam

    def predict(self, Z: Mapping[int, Features]) -> np.ndarray:
        """``(M,)`` predicted class labels (classification) or values (regression) from the
        features ``Z`` (layer -> ``(M, D)``, as for ``fit``; the readout's layer is read)."""
        fit = self._fitted()
        return fit.predict(Z[fit.layer])

    def predict_proba(self, Z: Mapping[int, Features]) -> np.ndarray:
        """``(M, K)`` probability of each class of ``classes_`` (``K = 2`` for a binary target)
        from the features ``Z`` (as for ``predict``); classification only."""
        fit = self._fitted()
        if fit.kind == "regression":
            raise AttributeError("a CircuitLasso fit on a regression target has no predict_proba")
        proba = fit.predict_proba(Z[fit.layer])
        return np.column_stack([1 - proba, proba]) if fit.kind == "binary" else proba

    def interpret(
        self,
        model: HookedTransformer,
        saes: Mapping[int, SAE],
        prompts: Sequence[str],
        *,
        n_prompts: int = 50,
    ) -> Circuit:
        """Give every node its ``top_tokens`` (token -> count among its largest activations over
        its ``n_prompts`` top prompts) and every edge its ``type`` (persistence, merging,
        dropping, other); ``prompts`` are the ones ``fit`` was given, in order."""
        self._fitted()
        Z = self.regressions_.Z
        tr.interpret_circuit(
            self.circuit_,
            lambda layer, feature: interpret.top_tokens(
                model, saes[layer], feature, prompts, Z[layer], n_prompts=n_prompts
            ),
        )
        return self.circuit_

    def _fitted(self) -> LabelFit:
        if not hasattr(self, "label_fit_"):
            raise RuntimeError("this CircuitLasso is not fitted yet: call fit(Z, y) first")
        return self.label_fit_
