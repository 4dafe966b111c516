"""The CoLA readout every real model's report shares (``evaluation.real_model.cola_readout``),
on the toy world: fitted on every layer it is given, headlined on the one asked for."""

from __future__ import annotations

import pandas as pd
import pytest

import circuitlasso as cl
from circuitlasso.evaluation import real_model


@pytest.fixture
def toy_cola(monkeypatch: pytest.MonkeyPatch) -> dict[str, pd.DataFrame]:
    """The readout reads CoLA's train and dev splits: here 300 and 100 toy-cola sentences."""
    splits = {
        "train": cl.load_dataset("toy_cola", split="train").iloc[:300],
        "dev": cl.load_dataset("toy_cola", split="test").iloc[:100],
    }
    monkeypatch.setattr(real_model, "load_cola", lambda split: splits[split])
    return splits


def test_the_readout_is_fitted_on_every_layer_and_headlined_on_the_one_asked_for(
    toy_cola: dict[str, pd.DataFrame],
) -> None:
    model = cl.load_model("toy")
    saes = cl.load_saes("toy", [1, 2], model=model)
    report = real_model.cola_readout(model, saes, layer=1, lam_ratios=(0.1, 0.5), progress=False)
    assert set(report["readout_by_layer"]) == {1, 2} and report["readout_layer"] == 1
    for key, value in report["readout_by_layer"][1].items():
        assert report[key] == value
    # each layer's readout is the one fitted on that layer alone
    alone = real_model.cola_readout(model, {2: saes[2]}, lam_ratios=(0.1, 0.5), progress=False)
    assert alone["readout_layer"] == 2
    assert alone["readout_by_layer"][2] == report["readout_by_layer"][2]
    labels = toy_cola["dev"].label
    assert report["readout_majority_baseline"] == max(labels.mean(), 1 - labels.mean())
    with pytest.raises(ValueError, match=r"no SAE on layer 0 .*\[1, 2\]"):
        real_model.cola_readout(model, saes, layer=0, progress=False)
