"""CircuitLasso: circuit discovery by sparse regression.

The public entry points, importable from the package itself::

    import circuitlasso as cl
    model = cl.load_model("toy")
    saes = cl.load_saes("toy", range(model.cfg.n_layers), model=model)
    Z = cl.collect_sae_features(model, saes, prompts)
    circuit = cl.CircuitLasso(label_lam_ratio=0.01).fit(Z, targets)

They load on first use, so ``import circuitlasso`` (and the ``circuitlasso`` command) stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "circuitlasso.data.models",
    "load_saes": "circuitlasso.data.models",
    "load_dataset": "circuitlasso.data",
    "collect_sae_features": "circuitlasso.collect",
    "CircuitLasso": "circuitlasso.estimator",
    "fit_label": "circuitlasso.circuits.features",
    "fit_layer_pair": "circuitlasso.circuits.features",
    "LayerRegressions": "circuitlasso.circuits.trace",
    "trace_circuit": "circuitlasso.circuits.trace",
    "from_json": "circuitlasso.circuits.trace",
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
    from circuitlasso.circuits.features import fit_label, fit_layer_pair
    from circuitlasso.circuits.trace import LayerRegressions, from_json, trace_circuit
    from circuitlasso.collect import collect_sae_features
    from circuitlasso.data import load_dataset
    from circuitlasso.data.models import load_model, load_saes
    from circuitlasso.estimator import CircuitLasso
    from circuitlasso.solve import lasso, logistic_lasso


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'circuitlasso' has no attribute '{name}'")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
