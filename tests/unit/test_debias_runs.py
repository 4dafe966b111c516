"""The Bias in Bios section's models: the paper profile's three runs requested offline up to the
download boundary (the hub loaders of TransformerLens and sae-lens replaced by recorders), the
SAEs checked against sae-lens's own directory, and compare_models' dispatch to each model."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from sae_lens import StandardSAE, StandardSAEConfig
from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory
from sae_lens.saes.sae import SAEMetadata

from circuitlasso.data import models
from circuitlasso.evaluation import debias
from circuitlasso.evaluation.debias import runs

ROOT = Path(__file__).resolve().parents[2]
PAPER = yaml.safe_load((ROOT / "notebooks" / "params" / "paper.yaml").read_text())["bias_in_bios"]
# The paper's Table 1 models with the SAE releases it names (Marks et al.'s for Pythia-70M,
# Gemma Scope for Gemma-2), as sae-lens ids, and the layer each run probes.
EXPECTED = {
    "pythia-70m-deduped": ("pythia-70m-deduped-res-sm", "blocks.{layer}.hook_resid_post", 4),
    "gemma-2-2b": ("gemma-scope-2b-pt-res-canonical", "layer_{layer}/width_16k/canonical", 22),
    "gemma-2-9b": ("gemma-scope-9b-pt-res-canonical", "layer_{layer}/width_16k/canonical", 36),
}


def test_the_paper_profile_runs_the_three_models_of_the_papers_tables() -> None:
    assert PAPER["runs"] == {name: layer for name, (_, _, layer) in EXPECTED.items()}
    assert PAPER["dataset"] == "bias_in_bios" and PAPER["device"] == "cuda"


@pytest.mark.parametrize("name", list(EXPECTED))
def test_load_run_requests_the_model_and_the_sae_of_every_layer_up_to_the_probe(
    name: str, monkeypatch: pytest.MonkeyPatch, gpt2_tokenizer_dir: Path
) -> None:
    release, template, layer = EXPECTED[name]
    directory = get_pretrained_saes_directory()
    tiny = models.tiny_gpt2(n_layers=layer + 1, d_model=16, n_heads=2,
                            tokenizer=models.gpt2_tokenizer(gpt2_tokenizer_dir))  # fmt: skip
    requested: dict[str, list] = {"models": [], "saes": []}

    def model_from_hub(model_name: str, **kwargs) -> object:
        requested["models"].append(model_name)
        return tiny

    def sae_from_hub(sae_release: str, sae_id: str, device: str = "cpu") -> StandardSAE:
        requested["saes"].append((sae_release, sae_id))
        # the layer the release's SAE reads, from sae-lens's directory (its Neuronpedia id,
        # e.g. "gemma-2-2b/22-gemmascope-res-16k"), stands in for the downloaded config
        page = directory[sae_release].neuronpedia_id[sae_id]
        read = int(re.fullmatch(r"[\w.-]+/(\d+)-[\w-]*res[\w-]*", page)[1])
        torch.manual_seed(read)
        cfg = StandardSAEConfig(
            d_in=16, d_sae=32, metadata=SAEMetadata(hook_name=f"blocks.{read}.hook_resid_post")
        )
        return StandardSAE(cfg)

    monkeypatch.setattr(models.HookedTransformer, "from_pretrained", staticmethod(model_from_hub))
    monkeypatch.setattr(models.SAE, "from_pretrained", staticmethod(sae_from_hub))
    model, saes = debias.load_run(name, layer)

    assert requested["models"] == [name] and model is tiny
    assert requested["saes"] == [(release, template.format(layer=s)) for s in range(layer + 1)]
    assert directory[release].model == name
    # the probes read the SAE of the last layer's hook; SHIFT reads every layer's residual stream
    assert list(saes) == list(range(layer + 1))
    assert {s: sae.cfg.metadata.hook_name for s, sae in saes.items()} == {
        s: f"blocks.{s}.hook_resid_post" for s in range(layer + 1)
    }


def test_load_run_rejects_a_layer_the_model_lacks() -> None:
    with pytest.raises(ValueError, match="toy has layers 0..3; cannot probe layer 4"):
        debias.load_run("toy", 4)
    with pytest.raises(ValueError, match="layer must be >= 0, got -1"):
        debias.load_run("toy", -1)


def test_load_run_of_the_decoder_reads_its_shipped_saes_up_to_the_probe(
    monkeypatch: pytest.MonkeyPatch, gpt2_tokenizer_dir: Path
) -> None:
    # SmolLM2's SAEs read blocks 4, 9, 14, 19, 24 and 29 only: SHIFT gets those up to the probe
    tiny = models.tiny_gpt2(n_layers=30, d_model=16, n_heads=2,
                            tokenizer=models.gpt2_tokenizer(gpt2_tokenizer_dir))  # fmt: skip
    requested: list[list[int]] = []

    def shipped(name: str, layers, hook: str, **kwargs) -> dict[int, str]:
        requested.append(list(layers))
        return {layer: f"sae {layer}" for layer in layers}

    monkeypatch.setattr(runs, "load_model", lambda name, device: tiny)
    monkeypatch.setattr(runs, "load_saes", shipped)
    model, saes = debias.load_run("smollm2-135m", 19)
    assert model is tiny and requested == [[4, 9, 14, 19]] and list(saes) == [4, 9, 14, 19]
    with pytest.raises(ValueError, match=r"layers \[4, 9, 14, 19, 24, 29\]; the probes read "
                                         r"layer 10, which has none"):  # fmt: skip
        debias.load_run("smollm2-135m", 10)


def test_compare_models_runs_each_model_at_its_layer_with_its_own_manual_features(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple] = []
    loaded = {"toy": ("toy model", {0: "sae"}), "gemma-2-2b": ("gemma model", {0: "sae"})}

    def fake_load_run(name: str, layer: int, *, device: str) -> tuple:
        calls.append(("load", name, layer, device))
        return loaded[name]

    def fake_compare(model, saes, layer, splits, professions, concepts, options, **kwargs):
        calls.append(("compare", model, layer, options, kwargs))
        return debias.Comparison(pd.DataFrame({"model": [model]}), {}, {})

    def fake_truth(model, saes, comparison, splits, *, batch_size):
        calls.append(("truth", model, batch_size))
        return pd.DataFrame({"model": [model]})

    monkeypatch.setattr(runs, "load_run", fake_load_run)
    monkeypatch.setattr(runs, "compare_methods", fake_compare)
    monkeypatch.setattr(runs, "rule_vs_toy_truth", fake_truth)
    options = debias.ComparisonOptions(lam_ratio=0.5, batch_size=8)
    comparisons, truths = debias.compare_models(
        {"gemma-2-2b": 22, "toy": 3}, {}, ("professor", "nurse"), {}, options, device="cuda",
        circuitlasso_gender={"toy": [[3, 7]]})  # fmt: skip

    assert list(comparisons) == ["gemma-2-2b", "toy"] and list(truths) == ["toy"]
    assert comparisons["toy"].table["model"].tolist() == ["toy model"]
    assert calls == [
        ("load", "gemma-2-2b", 22, "cuda"),
        ("compare", "gemma model", 22, options, {"shift_gender": None,
                                                 "circuitlasso_gender": None}),
        ("load", "toy", 3, "cuda"),
        ("compare", "toy model", 3, options, {"shift_gender": None,
                                              "circuitlasso_gender": [[3, 7]]}),
        ("truth", "toy model", 8),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="runs names no model"):
        debias.compare_models({}, {}, ("professor", "nurse"), {})


def test_candidate_counts_give_each_model_and_method_its_searched_and_removed_features() -> None:
    found = debias.Comparison(
        pd.DataFrame(),
        {"SHIFT": [(1, 2), (1, 3), (2, 5)], "CircuitLasso": [(3, 4)]},
        {"SHIFT": [(1, 3)], "CircuitLasso": []},
    )
    counts = debias.candidate_counts({"toy": found, "other": found})
    assert counts.loc[("toy", "SHIFT")].tolist() == [3, 1]
    assert counts.loc[("other", "CircuitLasso")].tolist() == [1, 0]
    assert list(counts.columns) == ["candidates", "removed"] and len(counts) == 4
