"""The SAEs of SmolLM2-135M-Instruct's residual stream, shipped with the package."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from circuitlasso.data import sae_training, smollm2_saes
from circuitlasso.data.artifacts import MANIFEST_FILE, manifest_mismatches
from circuitlasso.data.cola import load_cola
from circuitlasso.data.models import DECODER_NAME, check_sae_fits, load_saes
from circuitlasso.data.smollm2_saes import (
    BUILD_COMMAND,
    LAYER_HOOK,
    SAE_CONFIG,
    SAE_LAYERS,
    build_smollm2_saes,
    layer_quality,
    load_smollm2_saes,
    ship_smollm2_saes,
    shipped_saes_dir,
    smollm2_saes_report,
    token_activations,
)
from circuitlasso.forward import prompt_batches, special_token_ids
from circuitlasso.presentation.cli import build_parser

EV_BAR, DEAD_BAR = 0.8, 0.1
# The explained variance of a shipped layer measured again here, on the first 40 dev sentences
# (about 380 tokens), against the report's over all 527 (4,945 tokens): the subset's own share
# of variance, not rounding (another CPU moves it by about 1e-6), sets the tolerance.
SUBSET_SENTENCES, SUBSET_TOLERANCE = 40, 0.03


@pytest.fixture(scope="module")
def model(smollm2_model):
    return smollm2_model


def test_the_shipped_saes_meet_the_bars_on_every_layer(shared_data: Path) -> None:
    report = smollm2_saes_report()
    assert report["weights"] == "float16"
    assert [int(layer) for layer in report["layers"]] == list(SAE_LAYERS)
    for layer, quality in report["layers"].items():
        assert quality["explained_variance"] >= EV_BAR, layer
        assert quality["first_token_norm_ratio"] < 2, layer  # no attention sink among them
        assert quality["dead_fraction"] <= DEAD_BAR, layer
        assert quality["l0"] == pytest.approx(report["config"]["k"], abs=1e-6)
    assert report["sae_explained_variance_min"] >= EV_BAR
    assert report["sae_dead_fraction_max"] <= DEAD_BAR
    assert report["config"] == asdict(SAE_CONFIG)
    assert report["dev_sentences"] == len(load_cola("dev", mirror=shared_data))
    assert report["train_sentences"] == len(load_cola("train", mirror=shared_data))


def test_the_shipped_saes_load_in_float32_and_their_files_match_the_manifest() -> None:
    root = shipped_saes_dir()
    assert manifest_mismatches(root) == []
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    assert manifest["command"] == BUILD_COMMAND
    build_parser().parse_args(BUILD_COMMAND.split()[1:])  # the command exists
    saes = load_smollm2_saes()
    assert list(saes) == list(SAE_LAYERS)
    for layer, sae in saes.items():
        assert sae.cfg.metadata.hook_name == LAYER_HOOK.format(layer=layer)
        assert (sae.cfg.d_in, sae.cfg.d_sae) == (576, SAE_CONFIG.width)
        assert sae.W_dec.dtype == torch.float32
        stored = load_file(
            sae_training.layer_sae_dir(root, LAYER_HOOK, layer) / "sae_weights.safetensors"
        )
        assert {t.dtype for t in stored.values()} == {torch.float16}
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert total <= 24e6


def test_a_layer_without_an_sae_is_refused_naming_those_with_one() -> None:
    with pytest.raises(ValueError, match=r"layers \[5\].*\[4, 9, 14, 19, 24, 29\]"):
        load_smollm2_saes([29, 5])
    with pytest.raises(ValueError, match=r"layers \[5\]"):
        load_saes(DECODER_NAME, ["blocks.5.hook_resid_post"])
    with pytest.raises(ValueError, match="resid_post"):
        load_saes(DECODER_NAME, ["blocks.29.hook_mlp_out"])


def test_load_saes_keys_them_as_asked() -> None:
    saes = load_saes(DECODER_NAME, ["blocks.29.hook_resid_post", 4])
    assert list(saes) == ["blocks.29.hook_resid_post", 4]
    assert saes[4].cfg.metadata.hook_name == "blocks.4.hook_resid_post"
    assert torch.equal(saes["blocks.29.hook_resid_post"].W_dec, load_smollm2_saes([29])[29].W_dec)


@pytest.mark.slow
def test_they_were_trained_on_the_tokens_the_collector_encodes(model, shared_data: Path) -> None:
    """The shipped report's tokens are the model's as it loads now: the same BOS setting and ids
    left out, so the same positions are encoded at collection as were trained on."""
    report = smollm2_saes_report()
    assert report["prepend_bos"] == bool(model.cfg.default_prepend_bos)
    assert report["excluded_token_ids"] == special_token_ids(model)
    sentences = list(load_cola("dev", mirror=shared_data).sentence)
    real = sum(int(r.sum()) for _, r in prompt_batches(model, sentences, 64))
    assert report["dev_tokens"] == real
    for layer in (4, 29):
        check_sae_fits(model, load_smollm2_saes([layer])[layer])


@pytest.mark.slow
def test_a_shipped_layer_reconstructs_dev_tokens_as_reported(model, shared_data: Path) -> None:
    sentences = list(load_cola("dev", mirror=shared_data).sentence[:SUBSET_SENTENCES])
    acts, first = token_activations(model, sentences, [29])
    assert 300 <= len(first) <= 500 and int(first.sum()) == SUBSET_SENTENCES
    measured = layer_quality(load_smollm2_saes([29])[29], acts[29], first)
    reported = smollm2_saes_report()["layers"]["29"]
    assert measured["explained_variance"] == pytest.approx(
        reported["explained_variance"], abs=SUBSET_TOLERANCE
    )


@pytest.mark.slow
def test_a_quick_build_is_seeded_and_ships_in_float16(
    model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> None:
    """Two builds of one layer on 200 training sentences for 4,096 tokens in one round give the
    same weights; the shipped copy holds them rounded to float16, its quality measured again."""
    cola = {split: load_cola(split, mirror=shared_data).iloc[:200] for split in ("train", "dev")}
    monkeypatch.setattr(smollm2_saes, "load_cola", lambda split: cola[split])
    train = sae_training.train_layer_sae
    trained: list[int] = []

    def quick_train(acts, layer, cfg, hook_name):
        trained.append(layer)
        return train(acts, layer, replace(cfg, training_tokens=4096, rounds=1), hook_name)

    monkeypatch.setattr(sae_training, "train_layer_sae", quick_train)
    first = build_smollm2_saes(tmp_path / "a", model=model, layers=[4], progress=False)
    again = build_smollm2_saes(tmp_path / "b", model=model, layers=[4], progress=False)
    assert trained == [4, 4]
    a, b = load_smollm2_saes(path=first)[4], load_smollm2_saes(path=again)[4]
    assert torch.equal(a.W_dec, b.W_dec) and torch.equal(a.W_enc, b.W_enc)
    assert torch.equal(a.b_enc, b.b_enc) and torch.equal(a.b_dec, b.b_dec)
    assert manifest_mismatches(first) == []
    with pytest.raises(ValueError, match=r"layers \[9\].*\[4\]"):
        load_smollm2_saes([9], path=first)
    shipped = ship_smollm2_saes(first, tmp_path / "shipped", model=model)
    assert manifest_mismatches(shipped) == []
    read = load_smollm2_saes(path=shipped)[4]
    assert torch.equal(read.W_dec, a.W_dec.half().float())
    built, rounded = smollm2_saes_report(first), smollm2_saes_report(shipped)
    assert rounded["weights"] == "float16" and rounded["dev_tokens"] == built["dev_tokens"]
    for key in ("explained_variance", "first_token_norm_ratio"):
        assert rounded["layers"]["4"][key] == pytest.approx(built["layers"]["4"][key], abs=1e-3)
