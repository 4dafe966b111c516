"""Fixtures shared by the unit and browser tests."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from circuitlasso import cache
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import LabelFit, fit_label
from circuitlasso.circuits.study import FeatureStudy
from circuitlasso.circuits.trace import LayerRegressions, trace_circuit


@dataclass
class ToyCircuit:
    """A traced and interpreted circuit of the toy world (layers 1 to 3, 300 sentences)."""

    study: FeatureStudy
    label_fit: LabelFit
    regressions: LayerRegressions
    circuit: Circuit


@pytest.fixture(scope="session")
def toy_circuit(tmp_path_factory: pytest.TempPathFactory) -> ToyCircuit:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        study = FeatureStudy.load("toy", [1, 2, 3], "resid_post", "toy_cola", max_prompts=300,
                                  label_prompts=20, seed=1, batch_size=100)  # fmt: skip
    label_fit = fit_label(study.Z[study.last], study.y, 0.05, layer=study.last, min_prompts=5)
    regressions = LayerRegressions(study.Z, 0.1, min_prompts=5)
    circuit = trace_circuit(label_fit, regressions, roots=4, k=2, standardized=True)
    study.interpret_circuit(circuit)
    return ToyCircuit(study, label_fit, regressions, circuit)
