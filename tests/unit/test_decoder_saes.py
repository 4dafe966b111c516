"""The SAEs of the real decoders' residual streams (SmolLM2-135M-Instruct, Gemma-3-270M), shipped
with the package."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from circuitlasso.data import decoder_saes, sae_training
from circuitlasso.data.artifacts import MANIFEST_FILE, manifest_mismatches
from circuitlasso.data.cola import load_cola
from circuitlasso.data.decoder_saes import (
    LAYER_HOOK,
    DecoderSAEs,
    build_decoder_saes,
    decoder_saes_report,
    layer_quality,
    load_decoder_saes,
    ship_decoder_saes,
    shipped_saes_dir,
    token_activations,
)
from circuitlasso.data.gemma3_saes import GEMMA3_SAES
from circuitlasso.data.models import (
    DECODER_NAME,
    GEMMA3_NAME,
    check_sae_fits,
    decoder_sae_set,
    load_model,
    load_saes,
)
from circuitlasso.data.smollm2_saes import SAE_CONFIG, SAE_LAYERS, SMOLLM2_SAES
from circuitlasso.forward import prompt_batches, special_token_ids
from circuitlasso.presentation.cli import build_parser

EV_BAR, DEAD_BAR = 0.8, 0.1
# The explained variance of a shipped layer measured again here, on the first 40 dev sentences
# (about 380 tokens), against the report's over all 527 (4,945 tokens): the subset's own share
# of variance, not rounding (another CPU moves it by about 1e-6), sets the tolerance.
SUBSET_SENTENCES, SUBSET_TOLERANCE = 40, 0.03
SETS = [SMOLLM2_SAES, GEMMA3_SAES]
D_MODEL = {DECODER_NAME: 576, GEMMA3_NAME: 640}
SIZE_CAP = {DECODER_NAME: 24e6, GEMMA3_NAME: 13e6}  # bytes of the shipped folder


@pytest.fixture(scope="module")
def model(smollm2_model):
    return smollm2_model


@pytest.fixture(scope="module", params=SETS, ids=lambda saes: saes.model)
def decoder(request, smollm2_model):
    """Each real decoder with its SAE set."""
    saes = request.param
    model = smollm2_model if saes.model == DECODER_NAME else load_model(saes.model)
    return model, saes


@pytest.mark.parametrize("saes", SETS, ids=lambda saes: saes.model)
def test_the_shipped_saes_meet_the_bars_on_every_layer(
    saes: DecoderSAEs, shared_data: Path
) -> None:
    report = decoder_saes_report(saes)
    assert report["model"] == saes.model
    assert report["weights"] == "float16"
    assert [int(layer) for layer in report["layers"]] == list(saes.layers)
    for layer, quality in report["layers"].items():
        assert quality["explained_variance"] >= EV_BAR, layer
        assert quality["first_token_norm_ratio"] < 2, layer  # no attention sink among them
        assert quality["dead_fraction"] <= DEAD_BAR, layer
        assert quality["l0"] == pytest.approx(report["config"]["k"], abs=1e-6)
    assert report["sae_explained_variance_min"] >= EV_BAR
    assert report["sae_dead_fraction_max"] <= DEAD_BAR
    assert report["config"] == asdict(saes.config)
    assert report["dev_sentences"] == len(load_cola("dev", mirror=shared_data))
    assert report["train_sentences"] == len(load_cola("train", mirror=shared_data))


@pytest.mark.parametrize("sae_set", SETS, ids=lambda saes: saes.model)
def test_the_shipped_saes_load_in_float32_and_their_files_match_the_manifest(
    sae_set: DecoderSAEs,
) -> None:
    root = shipped_saes_dir(sae_set)
    assert manifest_mismatches(root) == []
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    assert manifest["command"] == sae_set.command
    args = build_parser().parse_args(sae_set.command.split()[1:])  # the command exists
    assert decoder_sae_set(args.model) is sae_set
    saes = load_decoder_saes(sae_set)
    assert list(saes) == list(sae_set.layers)
    for layer, sae in saes.items():
        assert sae.cfg.metadata.hook_name == LAYER_HOOK.format(layer=layer)
        assert (sae.cfg.d_in, sae.cfg.d_sae) == (D_MODEL[sae_set.model], sae_set.config.width)
        assert sae.W_dec.dtype == torch.float32
        stored = load_file(
            sae_training.layer_sae_dir(root, LAYER_HOOK, layer) / "sae_weights.safetensors"
        )
        assert {t.dtype for t in stored.values()} == {torch.float16}
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert total <= SIZE_CAP[sae_set.model]


def test_a_layer_without_an_sae_is_refused_naming_those_with_one() -> None:
    with pytest.raises(ValueError, match=r"layers \[5\].*\[4, 9, 14, 19, 24, 29\]"):
        load_decoder_saes(SMOLLM2_SAES, [29, 5])
    with pytest.raises(ValueError, match=r"layers \[5\]"):
        load_saes(DECODER_NAME, ["blocks.5.hook_resid_post"])
    with pytest.raises(ValueError, match="resid_post"):
        load_saes(DECODER_NAME, ["blocks.29.hook_mlp_out"])
    with pytest.raises(ValueError, match=r"gemma3-270m SAE for layers \[4\].*\[5, 11, 17\]"):
        load_saes(GEMMA3_NAME, [17, 4])


def test_load_saes_keys_them_as_asked() -> None:
    saes = load_saes(DECODER_NAME, ["blocks.29.hook_resid_post", 4])
    assert list(saes) == ["blocks.29.hook_resid_post", 4]
    assert saes[4].cfg.metadata.hook_name == "blocks.4.hook_resid_post"
    assert torch.equal(
        saes["blocks.29.hook_resid_post"].W_dec, load_decoder_saes(SMOLLM2_SAES, [29])[29].W_dec
    )


@pytest.mark.slow
def test_they_were_trained_on_the_tokens_the_collector_encodes(decoder, shared_data: Path) -> None:
    """The shipped report's tokens are the model's as it loads now: the same BOS setting and ids
    left out, so the same positions are encoded at collection as were trained on."""
    model, saes = decoder
    report = decoder_saes_report(saes)
    assert report["prepend_bos"] == bool(model.cfg.default_prepend_bos)
    assert report["excluded_token_ids"] == special_token_ids(model)
    sentences = list(load_cola("dev", mirror=shared_data).sentence)
    real = sum(int(r.sum()) for _, r in prompt_batches(model, sentences, 64))
    assert report["dev_tokens"] == real
    for layer in (saes.layers[0], saes.layers[-1]):
        check_sae_fits(model, load_decoder_saes(saes, [layer])[layer])


@pytest.mark.slow
def test_a_shipped_layer_reconstructs_dev_tokens_as_reported(decoder, shared_data: Path) -> None:
    model, saes = decoder
    last = saes.layers[-1]
    sentences = list(load_cola("dev", mirror=shared_data).sentence[:SUBSET_SENTENCES])
    acts, first = token_activations(model, sentences, [last])
    assert 300 <= len(first) <= 500 and int(first.sum()) == SUBSET_SENTENCES
    measured = layer_quality(load_decoder_saes(saes, [last])[last], acts[last], first)
    reported = decoder_saes_report(saes)["layers"][str(last)]
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
    monkeypatch.setattr(decoder_saes, "load_cola", lambda split: cola[split])
    train = sae_training.train_layer_sae
    trained: list[int] = []

    def quick_train(acts, layer, cfg, hook_name):
        trained.append(layer)
        return train(acts, layer, replace(cfg, training_tokens=4096, rounds=1), hook_name)

    monkeypatch.setattr(sae_training, "train_layer_sae", quick_train)
    first = build_decoder_saes(
        SMOLLM2_SAES, tmp_path / "a", model=model, layers=[4], progress=False
    )
    again = build_decoder_saes(
        SMOLLM2_SAES, tmp_path / "b", model=model, layers=[4], progress=False
    )
    assert trained == [4, 4]
    a, b = (
        load_decoder_saes(SMOLLM2_SAES, path=first)[4],
        load_decoder_saes(SMOLLM2_SAES, path=again)[4],
    )
    assert torch.equal(a.W_dec, b.W_dec) and torch.equal(a.W_enc, b.W_enc)
    assert torch.equal(a.b_enc, b.b_enc) and torch.equal(a.b_dec, b.b_dec)
    assert manifest_mismatches(first) == []
    with pytest.raises(ValueError, match=r"layers \[9\].*\[4\]"):
        load_decoder_saes(SMOLLM2_SAES, [9], path=first)
    shipped = ship_decoder_saes(SMOLLM2_SAES, first, tmp_path / "shipped", model=model)
    assert manifest_mismatches(shipped) == []
    read = load_decoder_saes(SMOLLM2_SAES, path=shipped)[4]
    assert torch.equal(read.W_dec, a.W_dec.half().float())
    built, rounded = (
        decoder_saes_report(SMOLLM2_SAES, first),
        decoder_saes_report(SMOLLM2_SAES, shipped),
    )
    assert rounded["weights"] == "float16" and rounded["dev_tokens"] == built["dev_tokens"]
    for key in ("explained_variance", "first_token_norm_ratio"):
        assert rounded["layers"]["4"][key] == pytest.approx(built["layers"]["4"][key], abs=1e-3)


def test_each_real_decoder_names_its_sae_set() -> None:
    assert decoder_sae_set(DECODER_NAME) is SMOLLM2_SAES
    assert decoder_sae_set(GEMMA3_NAME) is GEMMA3_SAES
    assert SMOLLM2_SAES.layers == SAE_LAYERS and SMOLLM2_SAES.config == SAE_CONFIG
    with pytest.raises(ValueError, match=r"'gpt2'.*smollm2-135m"):
        decoder_sae_set("gpt2")
