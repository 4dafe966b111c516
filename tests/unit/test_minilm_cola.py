"""The encoder fine-tuned on CoLA: its split, what it trains, its determinism, and its weights
in the HookedEncoder against the HF model carrying the same weights."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import accuracy_score, matthews_corrcoef

from circuitlasso.data import minilm_cola as mc
from circuitlasso.data.artifacts import manifest_mismatches
from circuitlasso.data.cola import load_cola
from circuitlasso.data.minilm import (
    LAYER_HOOK,
    N_LAYERS,
    load_minilm,
    max_abs_diff_vs_hf,
    minilm_hf,
    minilm_tokenizer,
)
from circuitlasso.presentation.cli import main


@pytest.fixture(scope="module")
def small_cola(shared_data: Path) -> dict[str, pd.DataFrame]:
    """64 training and 24 dev sentences of CoLA, short ones, both labels."""
    train = load_cola("train", mirror=shared_data)
    short = train[train.sentence.str.len() < 40]
    dev = load_cola("dev", mirror=shared_data)
    return {"train": short.iloc[:64].reset_index(drop=True), "dev": dev.iloc[:24]}


def test_the_validation_share_is_seeded_and_disjoint() -> None:
    fit, valid = mc.validation_split(100, 0.1, seed=3)
    assert len(valid) == 10 and set(fit).isdisjoint(valid) and len(fit) + len(valid) == 100
    again, _ = mc.validation_split(100, 0.1, seed=3)
    other, _ = mc.validation_split(100, 0.1, seed=4)
    assert np.array_equal(fit, again) and not np.array_equal(fit, other)
    with pytest.raises(ValueError, match="validation_share"):
        mc.validation_split(100, 1.0, seed=0)


def test_only_the_top_blocks_and_the_head_train() -> None:
    classifier = mc.AcceptabilityClassifier(minilm_hf(), minilm_tokenizer())
    names = mc._trainable(classifier, 2)
    assert any(n.startswith("head.") for n in names)
    blocks = {n.split(".")[3] for n in names if n.startswith("encoder.encoder.layer.")}
    assert blocks == {"4", "5"}
    frozen = [n for n, p in classifier.named_parameters() if not p.requires_grad]
    assert any("embeddings" in n for n in frozen) and len(frozen) + len(names) == len(
        list(classifier.parameters())
    )
    with pytest.raises(ValueError, match="trained_layers"):
        mc._trainable(classifier, 7)


@pytest.mark.slow  # fine-tunes the real encoder
def test_a_run_is_deterministic_and_seeded(monkeypatch, small_cola) -> None:
    monkeypatch.setattr(mc, "load_cola", lambda split: small_cola[split])
    cfg = mc.FinetuneConfig(
        learning_rate=1e-3, epochs=1, batch_size=16, trained_layers=1, lora_rank=0
    )
    predicted: list[tuple[list[str], np.ndarray]] = []  # each call's sentences and decisions
    predict = mc.predict

    def kept(classifier, tokenizer, sentences: list[str]) -> np.ndarray:
        predicted.append((sentences, predict(classifier, tokenizer, sentences)))
        return predicted[-1][1]

    monkeypatch.setattr(mc, "predict", kept)
    first, report = mc.finetune(cfg, progress=False)
    dev_sentences, on_dev = predicted[-1]  # after training, on CoLA dev
    second, _ = mc.finetune(cfg, progress=False)
    assert set(first) == set(second) and all(torch.equal(first[k], second[k]) for k in first)
    assert {k for k in first if not k.startswith("head.")} <= set(minilm_hf().state_dict())
    before = minilm_hf().state_dict()
    assert any(not torch.equal(first[k], before[k]) for k in first if k in before)
    other, _ = mc.finetune(mc.FinetuneConfig(**{**cfg.__dict__, "seed": 1}), progress=False)
    assert any(not torch.equal(first[k], other[k]) for k in first)
    assert report["train_sentences"] + report["validation_sentences"] == 64
    # the report's dev scores are the trained classifier's decisions on dev, scored here
    dev = small_cola["dev"]
    assert dev_sentences == list(dev.sentence)
    assert report["dev_accuracy"] == accuracy_score(dev.label, on_dev)
    assert report["dev_mcc"] == pytest.approx(matthews_corrcoef(dev.label, on_dev), abs=1e-12)


@pytest.mark.slow  # fine-tunes the real encoder
def test_a_low_rank_run_stores_factors_that_read_back_as_the_model_it_trained(
    monkeypatch, small_cola
) -> None:
    """LoRA on the top two blocks: the build stores only their factors and the head, and the
    weights read from them (the update added to the sentence model's) give the trained
    classifier's logits."""
    monkeypatch.setattr(mc, "load_cola", lambda split: small_cola[split])
    cfg = mc.FinetuneConfig(
        lora_rank=4, learning_rate=1e-2, epochs=1, batch_size=16, trained_layers=2
    )
    stored, _ = mc.finetune(cfg, progress=False)
    factors = [n for n in stored if not n.startswith("head.")]
    assert len(factors) == 2 * 6 * 2  # 2 blocks, 6 linear maps, factors A and B
    assert all(n.endswith(("lora_A.weight", "lora_B.weight")) for n in factors)
    assert {n.split(".")[2] for n in factors} == {"4", "5"}
    with mc._deterministic():
        *_, (_, trained, names, _) = mc._epochs(cfg, cfg.learning_rate, 1, progress=False)
    assert {n for n in names if "lora_" in n} and all("lora_" in n or ".head." in n for n in names)
    weights = mc._readable_weights(stored, cfg)
    before = minilm_hf().state_dict()
    changed = [n for n in weights if n in before and not torch.equal(weights[n], before[n])]
    assert changed and {n.split(".")[2] for n in changed} == {"4", "5"}
    blocks = {n: w for n, w in weights.items() if not n.startswith("head.")}
    tokenizer = minilm_tokenizer()
    merged = mc.AcceptabilityClassifier(minilm_hf(weights=blocks), tokenizer)
    merged.head.load_state_dict({"weight": weights["head.weight"], "bias": weights["head.bias"]})
    ids, attention = mc._batches(tokenizer, list(small_cola["dev"].sentence), 24)[0]
    trained.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            merged(ids, attention), trained(ids, attention), atol=1e-5, rtol=0
        )
    below = {"encoder.layer.3.attention.self.query.lora_A.weight": stored[factors[0]]}
    with pytest.raises(ValueError, match="LoRA factors do not match"):
        mc._readable_weights(below, cfg)


def test_the_cli_sweeps_the_runs_it_is_given(monkeypatch, capsys) -> None:
    seen = []

    def fake_sweep(cfg, rates, epochs):
        seen.append((cfg, list(rates), epochs))
        return pd.DataFrame({"learning_rate": list(rates)})

    monkeypatch.setattr(mc, "sweep", fake_sweep)
    monkeypatch.setattr(mc, "finetune_report", lambda: {"dev_accuracy": 0.7})
    monkeypatch.setattr(mc, "finetune_dir", lambda: Path("built"))
    args = ["--trained-layers", "2", "--lora-rank", "0", "--learning-rates", "5e-4,1e-3"]
    assert main(["real", "finetune", "--sweep", *args, "--epochs", "3"]) == 0
    assert main(["real", "finetune", "--sweep"]) == 0
    assert seen == [
        (mc.FinetuneConfig(trained_layers=2, lora_rank=0), [5e-4, 1e-3], 3),
        (mc.FinetuneConfig(), list(mc.SWEEP_LEARNING_RATES), mc.SWEEP_EPOCHS),
    ]
    printed = capsys.readouterr().out
    assert "trained_layers 2, lora_rank 0" in printed and "trained_layers 6, lora_rank 8" in printed


@pytest.mark.slow  # loads the real models
def test_fine_tuned_weights_convert_like_the_sentence_models(monkeypatch, small_cola) -> None:
    """The HookedEncoder carrying changed top-block weights against the HF model carrying the
    same ones, every layer within 1e-4; and its decisions are the HF classifier's."""
    generator = torch.Generator().manual_seed(0)
    state = minilm_hf().state_dict()
    weights = {
        name: value + 0.05 * torch.randn(value.shape, generator=generator)
        for name, value in state.items()
        if name.startswith("encoder.layer.5.")
    }
    sentences = list(small_cola["dev"].sentence)
    model = load_minilm(weights=weights, name=mc.NAME)
    assert model.cfg.model_name == mc.NAME
    assert max_abs_diff_vs_hf(model, sentences, weights=weights) < 1e-4
    assert max_abs_diff_vs_hf(model, sentences) > 1e-2  # the sentence model's states differ
    head = {"head.weight": torch.randn(2, 384, generator=generator), "head.bias": torch.zeros(2)}
    monkeypatch.setattr(mc, "finetuned_weights", lambda cfg=None: {**weights, **head})
    classifier = mc.AcceptabilityClassifier(minilm_hf(weights=weights), minilm_tokenizer())
    classifier.head.load_state_dict({"weight": head["head.weight"], "bias": head["head.bias"]})
    expected = mc.predict(classifier, minilm_tokenizer(), sentences)
    assert np.array_equal(mc.decisions(model, sentences), expected)
    assert len(set(expected)) == 2
    with pytest.raises(ValueError, match="does not have"):
        minilm_hf(weights={"encoder.layer.9.output.dense.weight": torch.zeros(1)})


@pytest.mark.slow  # loads the real models
def test_the_shipped_build_is_read_by_default(small_cola) -> None:
    """The package ships the default build: the LoRA factors of every block, the head and the
    SAEs of every layer match their manifests and are what runs read; the fine-tuned
    HookedEncoder equals the HF model carrying the same weights."""
    shipped = mc.shipped_finetune_dir()
    assert mc.finetune_dir() == shipped / "model"
    assert mc.finetuned_saes_dir() == shipped / "saes"
    assert manifest_mismatches(shipped / "model") == []
    assert manifest_mismatches(shipped / "saes") == []
    report = mc.finetune_report()
    assert report["weights"] == "float16" and report["config"] == asdict(mc.FinetuneConfig())
    sae_report = mc.finetuned_saes_report()
    assert list(sae_report["layers"]) == [str(layer) for layer in range(N_LAYERS)]
    assert sae_report["sae_explained_variance_min"] >= 0.8
    assert sae_report["sae_dead_fraction_max"] <= 0.1
    saes = mc.load_finetuned_saes([0, 5])
    assert saes[0].cfg.metadata.hook_name == LAYER_HOOK.format(layer=0)
    assert saes[5].cfg.metadata.hook_name == LAYER_HOOK.format(layer=5)
    weights = mc.encoder_weights()
    assert {name.split(".")[2] for name in weights} == {str(layer) for layer in range(N_LAYERS)}
    model = mc.load_finetuned()
    sentences = list(small_cola["dev"].sentence)
    assert max_abs_diff_vs_hf(model, sentences, weights=weights) < 1e-4


@pytest.mark.slow  # loads the real models
@pytest.mark.parametrize("name", ["all-minilm-l6-v2", mc.NAME])
def test_the_real_report_runs_on_both_models(
    monkeypatch, small_cola, quick_minilm_builds, name
) -> None:
    """The report of either model on a few sentences: its headline numbers, and the parity
    with the HF model carrying the same weights (the sentence model's top layers' SAEs built
    quickly, :func:`quick_minilm_builds`)."""
    from circuitlasso.evaluation import real_model

    monkeypatch.setattr(real_model, "load_cola", lambda split: small_cola[split])
    report = real_model.real_model_report(name, lam_ratios=(0.1, 0.5), progress=False)
    headline = real_model.FINETUNED_HEADLINE if name == mc.NAME else real_model.HEADLINE
    assert set(headline) <= set(report)
    assert report["hidden_state_max_abs_diff_vs_hf"] < 1e-4
    assert "readout on layer 5 " in real_model.format_real_model_report(report)
