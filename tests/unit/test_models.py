"""Tests for circuitlasso.data.models.

Hub loaders run their real code path against a local Hugging Face hub cache in offline mode,
filled with tiny random-weight files in the hub's formats.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from sae_lens import SAE, StandardSAE, StandardSAEConfig
from sae_lens.saes.sae import SAEMetadata
from transformer_lens import HookedTransformer
from transformers import GPT2Config, GPT2LMHeadModel

from circuitlasso import cache
from circuitlasso.collect import collect_sae_features
from circuitlasso.data import models
from circuitlasso.evaluation.ablate import feature_means
from circuitlasso.forward import sae_layers, splice_hooks

NOTES_SENTENCE = "He said that himself was hungry."
NOTES_IDS = [1544, 531, 326, 2241, 373, 14720, 13]  # GPT-2 ids from the toolchain notes
GPT2_BOS = 50256
GPT2_SAE_REPO = "jbloom/GPT2-Small-OAI-v5-32k-resid-post-SAEs"


@pytest.fixture(scope="module")
def tokenizer(gpt2_tokenizer_dir: Path):
    return models.gpt2_tokenizer(gpt2_tokenizer_dir)


@pytest.fixture(scope="module")
def tiny(tokenizer) -> HookedTransformer:
    return models.tiny_gpt2(tokenizer=tokenizer)


def hub_snapshot(hub: Path, repo: str) -> Path:
    """Create the hub-cache snapshot folder of ``repo`` (revision ``main``) and return it."""
    repo_dir = hub / f"models--{repo.replace('/', '--')}"
    commit = "0" * 40
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True)
    return snapshot


def tiny_sae(d_in: int, hook_name: str, seed: int = 0) -> StandardSAE:
    torch.manual_seed(seed)
    cfg = StandardSAEConfig(d_in=d_in, d_sae=4 * d_in, metadata=SAEMetadata(hook_name=hook_name))
    return StandardSAE(cfg)


def test_gpt2_tokenizer_matches_reference_ids(tokenizer) -> None:
    assert tokenizer.encode(NOTES_SENTENCE, add_special_tokens=False) == NOTES_IDS
    assert tokenizer.encode(NOTES_SENTENCE) == [GPT2_BOS, *NOTES_IDS]
    assert len(tokenizer) == 50257
    text = " Crème brûlée,  naïve\tcafé!\n"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_gpt2_tokenizer_fetches_through_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpt2_tokenizer_dir: Path
) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(cache.MIRROR_ENV, str(gpt2_tokenizer_dir))
    tokenizer = models.gpt2_tokenizer()
    assert tokenizer.encode(NOTES_SENTENCE, add_special_tokens=False) == NOTES_IDS
    cached = sorted(p.name for p in (tmp_path / "files").rglob("*") if p.is_file())
    assert cached == ["merges.txt", "vocab.json"]


def test_gpt2_tokenizer_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vocab.json"):
        models.gpt2_tokenizer(tmp_path)


def test_tiny_gpt2_runs_with_cache(tiny: HookedTransformer) -> None:
    tokens = tiny.to_tokens([NOTES_SENTENCE, "Hi"])
    assert tokens[0].tolist() == [GPT2_BOS, *NOTES_IDS]
    logits, activations = tiny.run_with_cache(tokens)
    assert logits.shape == (2, len(NOTES_IDS) + 1, 50257)
    assert activations["blocks.1.hook_resid_post"].shape == (2, len(NOTES_IDS) + 1, 64)
    assert torch.isfinite(logits).all()


def test_tiny_gpt2_is_seeded(tokenizer, tiny: HookedTransformer) -> None:
    torch.testing.assert_close(models.tiny_gpt2(tokenizer=tokenizer).W_E, tiny.W_E)
    assert not torch.equal(models.tiny_gpt2(tokenizer=tokenizer, seed=1).W_E, tiny.W_E)


def test_load_model_gpt2_from_hub_cache_matches_transformers(offline_hub: Path) -> None:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=32, n_ctx=32)
    reference = GPT2LMHeadModel(config).eval()
    reference.save_pretrained(hub_snapshot(offline_hub, "gpt2"))

    model = models.load_model("gpt2")

    tokens = model.to_tokens(NOTES_SENTENCE)
    assert tokens[0].tolist() == [GPT2_BOS, *NOTES_IDS]
    with torch.no_grad():
        expected = reference(tokens).logits.log_softmax(-1)
        actual = model(tokens).log_softmax(-1)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_load_model_offline_and_missing_says_what_and_where(offline_hub: Path) -> None:
    with pytest.raises(cache.ResourceUnavailableError) as info:
        models.load_model("pythia-70m-deduped")
    message = str(info.value)
    assert "hf download EleutherAI/pythia-70m-deduped" in message
    assert str(offline_hub / "models--EleutherAI--pythia-70m-deduped") in message


def test_load_model_unknown_name() -> None:
    with pytest.raises(ValueError, match="'gpt3'.*gpt2, pythia-70m-deduped.*toy"):
        models.load_model("gpt3")


def test_sae_release_ids_exist_in_sae_lens() -> None:
    assert models.sae_release("gpt2", 8) == (
        "gpt2-small-resid-post-v5-32k",
        "blocks.8.hook_resid_post",
    )
    assert models.sae_release("pythia-70m-deduped", 0, "resid_pre") == (
        "pythia-70m-deduped-res-sm",
        "blocks.0.hook_resid_pre",
    )
    assert models.sae_release("gemma-2-2b", 22) == (
        "gemma-scope-2b-pt-res-canonical",
        "layer_22/width_16k/canonical",
    )
    assert models.sae_release("gemma-2-9b", 20, width="131k", l0=114) == (
        "gemma-scope-9b-pt-res",
        "layer_20/width_131k/average_l0_114",
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("gpt3", 0), {}, "no SAEs for model 'gpt3'"),
        (("gpt2", 0, "resid_pre"), {}, "valid hooks: resid_post, resid_mid"),
        (("gpt2", 0), {"width": "16k"}, "Gemma Scope SAEs only"),
        (("gpt2", 12), {}, "no SAE 'blocks.12.hook_resid_post'.*blocks.11.hook_resid_post"),
        (("gemma-2-2b", 22), {"l0": 73}, "close matches: .*average_l0_72"),
    ],
)
def test_sae_release_rejects_unknown(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        models.sae_release(*args, **kwargs)


def test_load_saes_from_hub_cache(offline_hub: Path, tiny: HookedTransformer) -> None:
    saved = tiny_sae(tiny.cfg.d_model, "blocks.1.hook_resid_post")
    saved.save_model(hub_snapshot(offline_hub, GPT2_SAE_REPO) / "v5_32k_layer_1.pt")

    saes = models.load_saes("gpt2", [1], model=tiny)

    assert list(saes) == [1]
    assert isinstance(saes[1], SAE)
    torch.testing.assert_close(saes[1].W_enc, saved.W_enc)
    _, activations = tiny.run_with_cache(tiny.to_tokens(NOTES_SENTENCE))
    features = saes[1].encode(activations["blocks.1.hook_resid_post"])
    assert features.shape == (1, len(NOTES_IDS) + 1, 4 * tiny.cfg.d_model)


def test_load_saes_offline_and_missing_says_what_and_where(offline_hub: Path) -> None:
    with pytest.raises(cache.ResourceUnavailableError) as info:
        models.load_saes("gpt2", [3])
    message = str(info.value)
    assert f"hf download {GPT2_SAE_REPO} --include 'v5_32k_layer_3.pt/*'" in message
    assert str(offline_hub / f"models--{GPT2_SAE_REPO.replace('/', '--')}") in message


def test_check_sae_fits_rejects_unknown_hook(tiny: HookedTransformer) -> None:
    sae = tiny_sae(tiny.cfg.d_model, "blocks.1.hook_resid_pst")
    with pytest.raises(ValueError, match="'blocks.1.hook_resid_pst'.*blocks.1.hook_resid_post"):
        models.check_sae_fits(tiny, sae)


def test_check_sae_fits_rejects_d_in_mismatch(tiny: HookedTransformer) -> None:
    sae = tiny_sae(2 * tiny.cfg.d_model, "blocks.1.hook_resid_post")
    with pytest.raises(ValueError, match="d_in=128 .*d_model=64"):
        models.check_sae_fits(tiny, sae)


def test_toy_names_dispatch_to_the_toy_world(
    tiny: HookedTransformer, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, object]] = []
    sae = tiny_sae(tiny.cfg.d_model, "blocks.0.hook_resid_post")

    def load_toy_model(path: object = None) -> HookedTransformer:
        calls.append(("model", path))
        return tiny.train()

    def load_toy_saes(layers: object = None, path: object = None) -> dict[int, SAE]:
        calls.append(("saes", layers))
        return {0: sae}

    # a stand-in module: the dispatch is tested apart from the committed artifacts
    toyworld = types.ModuleType("circuitlasso.data.toyworld")
    toyworld.load_toy_model = load_toy_model  # type: ignore[attr-defined]
    toyworld.load_toy_saes = load_toy_saes  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "circuitlasso.data.toyworld", toyworld)

    model = models.load_model("toy")
    assert model is tiny and not model.training
    assert models.load_saes("toy", [0], model=model) == {0: sae}
    assert calls == [("model", None), ("saes", [0])]
    # addressed by hook name, keyed as asked; the int is its shorthand
    hook = "blocks.0.hook_resid_post"
    assert models.load_saes("toy", [hook]) == {hook: sae}
    assert calls[-1] == ("saes", [0])
    with pytest.raises(ValueError, match="resid_post"):
        models.load_saes("toy", [0], hook="mlp_out")
    with pytest.raises(ValueError, match="resid_post"):
        models.load_saes("toy", ["blocks.0.hook_mlp_out"])
    with pytest.raises(ValueError, match="'resid_post' is not the hook name of a block's SAE"):
        models.load_saes("toy", ["resid_post"])


def test_sae_layers_keys_each_sae_by_the_layer_of_its_hook(tiny: HookedTransformer) -> None:
    d = tiny.cfg.d_model
    block0, block1 = tiny_sae(d, "blocks.0.hook_resid_post"), tiny_sae(d, "blocks.1.hook_mlp_out")
    assert sae_layers({0: block0, 1: block1}) == {0: block0, 1: block1}
    assert sae_layers({np.int64(1): block1}) == {1: block1}  # a numpy integer is a layer too
    by_hook = {"blocks.1.hook_mlp_out": block1, "blocks.0.hook_resid_post": block0}
    assert sae_layers(by_hook) == {1: block1, 0: block0}
    assert sae_layers({"blocks.0.hook_resid_post": block0, 1: block1}) == {0: block0, 1: block1}
    # a hook outside the blocks has no layer: an int key places it
    embed, pos = tiny_sae(d, "hook_embed"), tiny_sae(d, "hook_pos_embed")
    assert sae_layers({0: embed, 7: pos}) == {0: embed, 7: pos}
    with pytest.raises(ValueError, match="hook 'hook_embed' is outside the blocks"):
        sae_layers({"hook_embed": embed})
    with pytest.raises(
        ValueError, match=r"layer key 0 reads hook 'blocks\.1\.hook_mlp_out', a hook of layer 1"
    ):
        sae_layers({0: block1, 1: block0})  # swapped
    with pytest.raises(ValueError, match=r"layer key 10 reads hook 'blocks\.1\.hook_mlp_out'"):
        sae_layers({10: block1})  # blocks.1 is no prefix match of key 10
    with pytest.raises(
        ValueError, match=r"hook key 'blocks\.0\.hook_mlp_out' reads hook 'blocks\.0\.hook_resid"
    ):
        sae_layers({"blocks.0.hook_mlp_out": block0})
    with pytest.raises(ValueError, match="SAE key 2.5 .* is neither a hook name nor a layer"):
        sae_layers({2.5: block0})  # type: ignore[dict-item]
    pre0 = tiny_sae(d, "blocks.0.hook_resid_pre")
    with pytest.raises(ValueError, match="two SAEs of layer 0"):
        sae_layers({"blocks.0.hook_resid_pre": pre0, "blocks.0.hook_resid_post": block0})
    with pytest.raises(ValueError, match="two SAEs of layer 0"):
        sae_layers({0: block0, "blocks.0.hook_resid_pre": pre0})


def test_saes_keyed_by_hook_name_give_the_features_of_int_keys(
    tiny: HookedTransformer, tmp_path: Path
) -> None:
    d = tiny.cfg.d_model
    saes = {0: tiny_sae(d, "blocks.0.hook_resid_post"), 1: tiny_sae(d, "blocks.1.hook_resid_post")}
    by_hook = {str(sae.cfg.metadata.hook_name): sae for sae in saes.values()}
    prompts = ["Hello there", "The cat sat on the mat."]
    by_layer = collect_sae_features(tiny, saes, prompts, cache=False)
    Z = collect_sae_features(tiny, by_hook, prompts, cache=False)
    assert sorted(Z) == [0, 1]
    for layer in saes:
        assert (Z[layer] != by_layer[layer]).nnz == 0


def test_an_sae_under_the_wrong_key_is_refused_where_saes_are_used(
    tiny: HookedTransformer, tmp_path: Path
) -> None:
    misplaced = {1: tiny_sae(tiny.cfg.d_model, "blocks.0.hook_resid_post")}
    match = r"layer key 1 reads hook 'blocks\.0\.hook_resid_post'"
    with pytest.raises(ValueError, match=match):
        collect_sae_features(tiny, misplaced, ["Hello there"], cache_dir=tmp_path)
    with pytest.raises(ValueError, match=match):
        splice_hooks(misplaced, torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=match):
        feature_means(tiny, misplaced, ["Hello there"])  # type: ignore[arg-type]
    assert not list(tmp_path.rglob("*.pt"))
