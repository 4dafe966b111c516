"""CircuitLasso: circuit discovery by sparse regression.

The public entry points, importable from the package itself::

    import circuitlasso as cl
    model = cl.load_model("toy")
    saes = cl.load_saes("toy", range(model.cfg.n_layers), model=model)
    Z = cl.collect_sae_features(model, saes, prompts)
    circuit = cl.CircuitLasso(lam=1e-5).fit(Z, targets)

They load on first use, so ``import circuitlasso`` (and the ``circuitlasso`` command) stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "circuitlasso.models",
    "load_saes": "circuitlasso.models",
    "load_dataset": "circuitlasso.datasets",
    "collect_sae_features": "circuitlasso.collect",
    "CircuitLasso": "circuitlasso.estimator",
    "fit_label": "circuitlasso.feature_circuits",
    "fit_layer_pair": "circuitlasso.feature_circuits",
    "LayerRegressions": "circuitlasso.trace",
    "trace_circuit": "circuitlasso.trace",
    "from_json": "circuitlasso.trace",
    "lasso": "circuitlasso.solve",
    "logistic_lasso": "circuitlasso.solve",
}

__all__ = [
    "CircuitLasso",
    "LayerRegressions",
    "__version__",
    "collect_sae_features",
    "fit_label",
    "fit_layer_pair",
    "from_json",
    "lasso",
    "load_dataset",
    "load_model",
    "load_saes",
    "logistic_lasso",
    "trace_circuit",
]

if TYPE_CHECKING:
    from circuitlasso.collect import collect_sae_features
    from circuitlasso.datasets import load_dataset
    from circuitlasso.estimator import CircuitLasso
    from circuitlasso.feature_circuits import fit_label, fit_layer_pair
    from circuitlasso.models import load_model, load_saes
    from circuitlasso.solve import lasso, logistic_lasso
    from circuitlasso.trace import LayerRegressions, from_json, trace_circuit


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'circuitlasso' has no attribute '{name}'")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
