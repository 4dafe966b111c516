"""CircuitLasso: circuit discovery by sparse regression.

The public entry points, importable from the package itself::

    import circuitlasso as cl
    model = cl.load_model("toy")
    saes = cl.load_saes("toy", range(model.cfg.n_layers), model=model)
    Z = cl.collect_sae_features(model, saes, prompts)
    circuit = cl.CircuitLasso(label_lam_ratio=0.01).fit(Z, targets).trace()

They load on first use, so ``import circuitlasso`` (and the ``circuitlasso`` command) stays quick.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

from circuitlasso._lazy import lazy_names

__version__ = metadata.version("circuitlasso")  # pyproject.toml's, one place

_EXPORTS = {
    "load_model": "circuitlasso.data.models",
    "load_saes": "circuitlasso.data.models",
    "load_dataset": "circuitlasso.data",
    "make_target": "circuitlasso.data.targets",
    "collect_sae_features": "circuitlasso.collect",
    "LayerFeatures": "circuitlasso.collect",
    "lasso": "circuitlasso.solve",
    "logistic_lasso": "circuitlasso.solve",
    "fit_label": "circuitlasso.circuits.features",
    "label_lam_max": "circuitlasso.circuits.features",
    "fit_layer_pair": "circuitlasso.circuits.features",
    "LayerRegressions": "circuitlasso.circuits.trace",
    "trace_circuit": "circuitlasso.circuits.trace",
    "label_importance": "circuitlasso.circuits.trace",
    "Circuit": "circuitlasso.circuits.circuit",
    "component_circuit": "circuitlasso.circuits.components",
    "feature_means": "circuitlasso.evaluation.ablate",
    "metric_with_ablation": "circuitlasso.evaluation.ablate",
    "node_ablation_sweep": "circuitlasso.evaluation.ablate",
    "CircuitLasso": "circuitlasso.estimator",
    "penalty_table": "circuitlasso.estimator",
    "GridSearchCV": "sklearn.model_selection",
    "RayExecutor": "circuitlasso.executor",
}

__all__ = [
    "Circuit",
    "CircuitLasso",
    "GridSearchCV",
    "LayerFeatures",
    "LayerRegressions",
    "RayExecutor",
    "__version__",
    "collect_sae_features",
    "component_circuit",
    "feature_means",
    "fit_label",
    "fit_layer_pair",
    "label_importance",
    "label_lam_max",
    "lasso",
    "load_dataset",
    "load_model",
    "load_saes",
    "logistic_lasso",
    "make_target",
    "metric_with_ablation",
    "node_ablation_sweep",
    "penalty_table",
    "trace_circuit",
]

if TYPE_CHECKING:
    from circuitlasso.circuits.circuit import Circuit
    from circuitlasso.circuits.components import component_circuit
    from circuitlasso.circuits.features import fit_label, fit_layer_pair, label_lam_max
    from circuitlasso.circuits.trace import LayerRegressions, label_importance, trace_circuit
    from circuitlasso.collect import collect_sae_features
    from circuitlasso.data import load_dataset
    from circuitlasso.data.models import load_model, load_saes
    from circuitlasso.data.targets import make_target
    from circuitlasso.estimator import CircuitLasso, penalty_table
    from circuitlasso.evaluation.ablate import (
        feature_means,
        metric_with_ablation,
        node_ablation_sweep,
    )
    from circuitlasso.executor import RayExecutor
    from circuitlasso.solve import lasso, logistic_lasso


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, also=["__version__"])
