"""The real pretrained encoder (all-MiniLM-L6-v2) as a HookedEncoder, against the HF model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from sklearn.metrics import r2_score

from circuitlasso.cache import sha256_of
from circuitlasso.data.artifacts import manifest_mismatches
from circuitlasso.data.cola import load_cola
from circuitlasso.data.minilm import (
    LAYER_HOOK,
    N_LAYERS,
    SHA256,
    load_minilm,
    minilm_files,
    minilm_hf,
)
from circuitlasso.data.minilm_saes import (
    default_saes_dir,
    load_minilm_saes,
    minilm_saes_report,
    ship_minilm_saes,
    token_activations,
)
from circuitlasso.data.models import check_sae_fits
from circuitlasso.data.sae_training import (
    SAEConfig,
    layer_sae_dir,
    sae_quality,
    saes_report,
    train_layer_sae,
)
from circuitlasso.forward import (
    prompt_batches,
    real_token_mask,
    run_with_hooks,
    single_token_id,
    token_strings,
)


@pytest.fixture(scope="module")
def model():
    return load_minilm()


@pytest.fixture(scope="module")
def sentences(shared_data: Path) -> list[str]:
    train = load_cola("train", mirror=shared_data)
    # short and long ones in each batch, so that every batch is padded
    return [*train.sentence[:24], *train.sentence.sort_values(key=lambda s: -s.str.len())[:8]]


def _hooked_states(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    saved: dict[str, torch.Tensor] = {}
    hooks = [(LAYER_HOOK.format(layer=layer), lambda x, hook: saved.update({hook.name: x}))
             for layer in range(N_LAYERS)]  # fmt: skip
    run_with_hooks(model, tokens, hooks, stop_at_layer=N_LAYERS)
    return [saved[LAYER_HOOK.format(layer=layer)] for layer in range(N_LAYERS)]


def test_weights_are_verified_by_sha256() -> None:
    files = minilm_files()
    for name, sha in SHA256.items():
        assert sha256_of(files[name]) == sha


def test_a_mirror_with_other_bytes_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CIRCUITLASSO_CACHE", str(tmp_path / "cache"))
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "config.json").write_text('{"hidden_size": 384}')
    with pytest.raises(ValueError, match="config.json has sha256"):
        minilm_files(mirror=tmp_path / "mirror")


@torch.no_grad()
def test_hidden_states_equal_the_hf_model_in_padded_batches(model, sentences) -> None:
    hf = minilm_hf()
    worst = 0.0
    for tokens, _ in prompt_batches(model, sentences, batch_size=16):
        attend = tokens != model.tokenizer.pad_token_id
        assert not bool(attend.all())  # the batch is padded
        reference = hf(input_ids=tokens, attention_mask=attend.long(), output_hidden_states=True)
        for layer, state in enumerate(_hooked_states(model, tokens)):
            diff = (state - reference.hidden_states[layer + 1])[attend].abs().max()
            worst = max(worst, float(diff))
    assert worst < 1e-4


@torch.no_grad()
def test_padding_does_not_change_a_prompts_states(model, sentences) -> None:
    """The attention mask is honoured: a prompt in a padded batch reads as it does alone."""
    (tokens, real), *_ = prompt_batches(model, sentences[:16] + sentences[-1:], batch_size=17)
    batched = _hooked_states(model, tokens)
    alone_tokens, _ = prompt_batches(model, sentences[:1], batch_size=1)[0]
    alone = _hooked_states(model, alone_tokens)
    n = alone_tokens.shape[1]
    assert tokens.shape[1] > n
    for layer in range(N_LAYERS):
        torch.testing.assert_close(batched[layer][0, :n], alone[layer][0], atol=1e-5, rtol=0)


def test_special_tokens_are_not_real_and_wordpieces_read_as_words(model) -> None:
    (tokens, real), *_ = prompt_batches(model, ["He washed himself.", "Go."], batch_size=2)
    words = token_strings(model, tokens[0])
    assert words[0] == "[CLS]" and "[SEP]" in words
    assert real.sum(1).tolist() == [int(real_token_mask(model, t).sum()) for t in tokens]
    assert [w for w, r in zip(words, real[0].tolist(), strict=True) if r][0] == "he"
    assert not bool(real[1, 3:].any())  # [SEP] and padding
    for word in ("self", "-s", "."):
        assert token_strings(model, torch.tensor([single_token_id(model, word)])) == [word]
    with pytest.raises(ValueError, match="not a single token"):
        single_token_id(model, "selfishness itself")


@pytest.mark.slow  # trains SAEs on the real encoder
def test_sae_training_is_seeded_and_scored_as_r2(model, shared_data: Path) -> None:
    sentences = list(load_cola("train", mirror=shared_data).sentence[:400])
    acts = token_activations(model, sentences)[2]
    assert acts.shape == (sum(int(r.sum()) for _, r in prompt_batches(model, sentences, 64)), 384)
    cfg = SAEConfig(width=256, k=16, training_tokens=40_960, rounds=2)
    sae = train_layer_sae(acts, 2, cfg, LAYER_HOOK.format(layer=2))
    again = train_layer_sae(acts, 2, cfg, LAYER_HOOK.format(layer=2))
    assert torch.equal(sae.W_dec, again.W_dec) and torch.equal(sae.W_enc, again.W_enc)
    check_sae_fits(model, sae)  # reads LAYER_HOOK of layer 2
    quality = sae_quality(sae, acts)
    with torch.no_grad():
        recon = sae.decode(sae.encode(acts))
    r2 = r2_score(acts.numpy(), recon.numpy(), multioutput="variance_weighted")
    assert quality["explained_variance"] == pytest.approx(r2, abs=1e-4)
    assert quality["explained_variance"] > 0.5 and quality["l0"] == pytest.approx(16)


@pytest.mark.slow  # trains SAEs on the real encoder
def test_the_saes_are_built_once_on_first_use_and_ship_in_float16(
    quick_minilm_builds, tmp_path
) -> None:
    """One build of every layer under the cache, made by the first call that asks for any
    layer and read by the later ones; its float16 copy holds the build's weights rounded, its
    quality measured again, and ships again to the same bytes."""
    first = load_minilm_saes([3, 5])
    assert quick_minilm_builds == list(range(N_LAYERS))
    root = default_saes_dir()
    assert manifest_mismatches(root) == []
    again = load_minilm_saes([4, 5])
    assert quick_minilm_builds == list(range(N_LAYERS))  # read, not trained again
    assert torch.equal(again[5].W_dec, first[5].W_dec)
    assert again[4].cfg.metadata.hook_name == LAYER_HOOK.format(layer=4)
    shipped = ship_minilm_saes(root, tmp_path / "shipped", layers=[0, 3])
    assert manifest_mismatches(shipped) == []
    report = saes_report(shipped)
    assert report["weights"] == "float16" and set(report["layers"]) == {"0", "3"}
    stored = load_file(layer_sae_dir(shipped, LAYER_HOOK, 3) / "sae_weights.safetensors")
    assert {t.dtype for t in stored.values()} == {torch.float16}
    read = load_minilm_saes([3], path=shipped)[3]
    assert read.W_dec.dtype == torch.float32
    assert torch.equal(read.W_dec, first[3].W_dec.half().float())
    reshipped = ship_minilm_saes(shipped, tmp_path / "again")
    name = "sae_weights.safetensors"
    assert (layer_sae_dir(reshipped, LAYER_HOOK, 3) / name).read_bytes() == (
        layer_sae_dir(shipped, LAYER_HOOK, 3) / name
    ).read_bytes()
    for layer, quality in saes_report(reshipped)["layers"].items():
        assert quality["explained_variance"] == pytest.approx(
            report["layers"][layer]["explained_variance"], abs=1e-4
        )
    with pytest.raises(ValueError, match=r"no SAE for layers \[5\]"):
        ship_minilm_saes(shipped, tmp_path / "more", layers=[3, 5])
    report = minilm_saes_report()
    assert list(report["layers"]) == [str(layer) for layer in range(N_LAYERS)]
    assert report["layers"]["5"] == saes_report(root)["layers"]["5"]
    worst = min(q["explained_variance"] for q in report["layers"].values())
    assert report["sae_explained_variance_min"] == worst
