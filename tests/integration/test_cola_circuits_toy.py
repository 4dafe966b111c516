"""The SAE-feature circuit of the committed toy world, checked against the generator's ground
truth: traced from the features that predict acceptability, it must reach, within the last two
layers, features whose top tokens are the words that carry the planted violations whose features
are among the readout's roots (agreement, punctuation); reflexive binding and word order, whose
first features rank 7th and 13th, are not reached at these settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from circuitlasso.circuits.features import fit_label, label_lam_max
from circuitlasso.circuits.interpret import top_tokens
from circuitlasso.circuits.trace import LayerRegressions, trace_circuit
from circuitlasso.collect import collect_sae_features
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.data.toyworld.datasets import dominant_category, load_toy_cola
from circuitlasso.data.toyworld.grammar import VIOLATION_CATEGORIES

MIN_PROMPTS = 10


@pytest.mark.slow
def test_toy_circuit_reaches_the_planted_violation_categories(tmp_path: Path) -> None:
    model = load_model("toy")
    layers = list(range(model.cfg.n_layers))
    saes = load_saes("toy", layers, model=model)
    train = load_toy_cola("train")
    prompts = train["sentence"].tolist()
    Z = collect_sae_features(model, saes, prompts, cache_dir=tmp_path, progress=False)
    last = layers[-1]
    y = train["label"]
    ratio = 1e-5 / label_lam_max(Z[last], y, min_prompts=MIN_PROMPTS)  # the section's lam
    label_fit = fit_label(Z[last], y, ratio, layer=last, min_prompts=MIN_PROMPTS)
    regressions = LayerRegressions(Z, lam_ratio=0.1, min_prompts=MIN_PROMPTS)
    circuit = trace_circuit(label_fit, regressions, roots=5, k=2, standardized=True)

    reached = set()
    for _, data in circuit.nodes(data=True):
        if data["layer"] >= last - 1:
            tokens = top_tokens(model, saes[data["layer"]], data["feature"], prompts,
                                Z[data["layer"]])  # fmt: skip
            reached.add(dominant_category(tokens))
    # Reflexive binding and word order are not reached at these settings (see the CoLA circuits
    # section).
    expected = {VIOLATION_CATEGORIES[v] for v in ("agreement", "punctuation")}
    assert expected <= reached, f"reached {reached}"
