"""Feature labels on a tiny random GPT-2 against a direct per-prompt reference.

The reference runs each prompt on its own (no padding, no batching, the whole model) with
``run_with_cache`` and reads ``sae.encode`` of the hooked activations at the tokens after BOS.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
from sae_lens import SAE, StandardSAE, StandardSAEConfig, TopKSAE, TopKSAEConfig
from sae_lens.saes.sae import SAEMetadata
from transformer_lens import HookedTransformer

from circuitlasso.circuits.interpret import (
    activation_table,
    features_token_values,
    features_top_tokens,
    layers_token_values,
    nodes_top_activations,
    nodes_top_tokens,
    perturb,
    single_token_replacements,
    token_values,
    top_activations,
    top_tokens,
)
from circuitlasso.data import models

GPT2_BOS = 50256
D_MODEL = 32
D_SAE = 48
PROMPTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog, twice.",
    "He said that himself was hungry.",
    "Why?",
    "Colorless green ideas sleep furiously in the night",
    "a b c d e f g h i j k l m n o p q",
    "It rains.",
    "the cat and the dog and the bird saw the cat",
]
PERTURBED = "He said that himself was hungry."
POSITION = 3  # " himself"
REPLACEMENTS = [" herself", " it", " John"]


@pytest.fixture(scope="module")
def model(gpt2_tokenizer_dir: Path) -> HookedTransformer:
    tokenizer = models.gpt2_tokenizer(gpt2_tokenizer_dir)
    return models.tiny_gpt2(
        n_layers=2, d_model=D_MODEL, n_heads=2, n_ctx=32, tokenizer=tokenizer
    ).eval()


def standard_sae(hook: str, seed: int = 0) -> StandardSAE:
    """A random ReLU SAE whose negative encoder bias leaves many features at zero."""
    torch.manual_seed(seed)
    cfg = StandardSAEConfig(d_in=D_MODEL, d_sae=D_SAE, metadata=SAEMetadata(hook_name=hook))
    sae = StandardSAE(cfg)
    with torch.no_grad():
        sae.W_enc.normal_(0, 1 / D_MODEL**0.5)
        sae.b_enc.normal_(-0.5, 0.3)
    return sae.eval()


def topk_sae(hook: str, seed: int = 1) -> TopKSAE:
    torch.manual_seed(seed)
    cfg = TopKSAEConfig(d_in=D_MODEL, d_sae=D_SAE, k=5, metadata=SAEMetadata(hook_name=hook))
    return TopKSAE(cfg).eval()


@pytest.fixture(scope="module")
def sae() -> SAE:
    return standard_sae("blocks.1.hook_resid_post")


def reference(model: HookedTransformer, sae: SAE, ids: torch.Tensor) -> np.ndarray:
    """``(T - 1, D_SAE)``: the SAE features of one prompt's tokens after BOS."""
    hook = sae.cfg.metadata.hook_name
    with torch.no_grad():
        _, cache = model.run_with_cache(ids[None], names_filter=hook)
        return sae.encode(cache[hook])[0, 1:].numpy()


def words(model: HookedTransformer, prompt: str) -> list[str]:
    """The prompt's tokens after BOS, stripped of spaces."""
    return [str(w).strip() for w in model.to_str_tokens(prompt)][1:]


@pytest.fixture(scope="module")
def per_token(model: HookedTransformer, sae: SAE) -> list[np.ndarray]:
    return [reference(model, sae, model.to_tokens(p)[0]) for p in PROMPTS]


@pytest.fixture(scope="module")
def feature(per_token: list[np.ndarray]) -> int:
    """The feature with the most positive activations among those active on some prompts but
    not on all of them."""
    prompts_active = np.array([(v > 0).any(0) for v in per_token]).sum(0)
    activations = sum((v > 0).sum(0) for v in per_token)
    candidates = np.flatnonzero((prompts_active >= 3) & (prompts_active < len(PROMPTS)))
    assert len(candidates)
    return int(candidates[np.argmax(activations[candidates])])


@pytest.fixture(scope="module")
def Z(per_token: list[np.ndarray]) -> sp.csr_matrix:
    """Token-averaged features, one row per prompt."""
    return sp.csr_matrix(np.array([v.mean(0) for v in per_token]))


# ---------------------------------------------------------------- token_values


@pytest.mark.parametrize("which", ["standard", "topk"])
def test_token_values_match_each_prompt_run_alone(model: HookedTransformer, which: str) -> None:
    sae = (
        standard_sae("blocks.1.hook_resid_post")
        if which == "standard"
        else topk_sae("blocks.0.hook_resid_mid")
    )
    tokens = [model.to_tokens(p)[0] for p in PROMPTS]
    assert len({len(t) for t in tokens}) > 3  # the batch needs padding
    expected = [reference(model, sae, ids) for ids in tokens]
    for feature in range(0, D_SAE, 5):
        got = token_values(model, sae, feature, tokens)
        assert len(got) == len(PROMPTS)
        for values, ref, ids in zip(got, expected, tokens, strict=True):
            assert values.shape == (len(ids) - 1,)
            np.testing.assert_allclose(values, ref[:, feature], rtol=1e-5, atol=1e-6)
    assert any((ref > 0).any() for ref in expected)


def test_token_values_of_a_bos_only_prompt_is_empty(model, sae) -> None:
    values = token_values(model, sae, 0, [torch.tensor([GPT2_BOS]), model.to_tokens("Why?")[0]])
    assert values[0].shape == (0,) and values[1].shape == (2,)
    assert token_values(model, sae, 0, []) == []


def test_a_model_without_bos_keeps_its_first_token(
    model: HookedTransformer, sae: SAE, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a BOS the first token is a real one: its value is reported and perturbed."""
    monkeypatch.setattr(model.cfg, "default_prepend_bos", False)
    tokens = [model.to_tokens(p)[0] for p in PROMPTS]
    assert all(int(t[0]) != GPT2_BOS for t in tokens)
    hook = sae.cfg.metadata.hook_name
    for ids, values in zip(tokens, token_values(model, sae, 0, tokens), strict=True):
        with torch.no_grad():
            _, cache = model.run_with_cache(ids[None], names_filter=hook)
            expected = sae.encode(cache[hook])[0, :, 0].numpy()  # every position
        np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)
    table = perturb(model, sae, 0, PERTURBED, 0, [" She"])
    assert table["prompt"].tolist() == [
        "[He] said that himself was hungry .",
        "[She] said that himself was hungry .",
    ]
    with torch.no_grad():
        _, cache = model.run_with_cache(model.to_tokens(" She said"), names_filter=hook)
        expected = float(sae.encode(cache[hook])[0, 0, 0])
    assert table["value"][1] == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("feature", [-1, D_SAE])
def test_token_values_rejects_unknown_feature(model, sae, feature: int) -> None:
    with pytest.raises(
        ValueError, match=f"feature {feature} out of range: the SAE on .* has 48 features"
    ):
        token_values(model, sae, feature, [model.to_tokens("Hello")[0]])


# ---------------------------------------------------------------- activation_table


def check_row(row: pd.Series, prompt: str, values: np.ndarray, model) -> None:
    """The table row of ``prompt`` whose per-token values are ``values`` (reference)."""
    toks = words(model, prompt)
    top = int(np.argmax(values))
    assert values[top] > 0
    assert row["per_token"] == tuple(np.round(values, 3).tolist())
    assert row["top_token"] == toks[top]
    assert row["prompt"].count("[") == 1 and row["prompt"].count("]") == 1
    start = row["prompt"].index("[")
    assert row["prompt"][start + 1 : row["prompt"].index("]")] == toks[top]
    assert row["prompt"].replace("[", "").replace("]", "") == " ".join(toks)
    assert len(row["prompt"][:start].split()) == top  # the bracket sits on token `top`


def test_top_prompts_orders_by_the_column_of_z(model, sae, per_token, feature, Z) -> None:
    column = Z[:, feature].toarray().ravel()
    assert 0 < np.count_nonzero(column) < len(PROMPTS)
    table = activation_table(top_activations(model, sae, feature, PROMPTS, Z, n=3))
    assert list(table.columns) == ["prompt", "value", "per_token", "top_token"]
    expected = sorted(np.flatnonzero(column), key=lambda i: -column[i])[:3]
    assert len(table) == 3
    for (_, row), i in zip(table.iterrows(), expected, strict=True):
        assert row["value"] == pytest.approx(column[i], rel=1e-6)
        check_row(row, PROMPTS[i], per_token[i][:, feature], model)

    everything = activation_table(top_activations(model, sae, feature, PROMPTS, Z, n=100))
    assert len(everything) == np.count_nonzero(column)  # prompts with value 0 are left out
    assert (np.diff(everything["value"].to_numpy()) <= 0).all()


def test_top_prompts_follows_z_not_the_activations(model, sae, per_token, feature) -> None:
    # any column works: here a made-up ranking of three prompts
    dense = np.zeros((len(PROMPTS), D_SAE))
    active = [i for i, v in enumerate(per_token) if (v[:, feature] > 0).any()]
    chosen = active[:3][::-1]
    dense[chosen, feature] = [3.0, 2.0, 1.0]
    tops = top_activations(model, sae, feature, PROMPTS, sp.csr_matrix(dense), n=8)
    table = activation_table(tops)
    assert table["value"].tolist() == [3.0, 2.0, 1.0]
    for (_, row), i in zip(table.iterrows(), chosen, strict=True):
        check_row(row, PROMPTS[i], per_token[i][:, feature], model)


def test_top_prompts_of_an_inactive_feature_is_empty(model, sae, feature) -> None:
    Z = sp.csr_matrix((len(PROMPTS), D_SAE))
    table = activation_table(top_activations(model, sae, feature, PROMPTS, Z))
    assert table.empty and list(table.columns) == ["prompt", "value", "per_token", "top_token"]


def test_top_prompts_rejects_mismatched_rows(model, sae, Z) -> None:
    with pytest.raises(ValueError, match="Z has 8 rows but there are 7 prompts"):
        top_activations(model, sae, 0, PROMPTS[:-1], Z)


# ---------------------------------------------------------------- top_tokens


def top_tokens_reference(
    model, per_token, feature: int, column: np.ndarray, n_prompts: int, n_activations: int
) -> Counter[str]:
    ranked = sorted(np.flatnonzero(column > 0), key=lambda i: -column[i])[:n_prompts]
    pairs = [
        (value, word)
        for i in ranked
        for value, word in zip(per_token[i][:, feature], words(model, PROMPTS[i]), strict=True)
    ]
    best = sorted(pairs, key=lambda pair: -pair[0])[:n_activations]
    return Counter(word for value, word in best if value > 0)


@pytest.mark.parametrize(("n_prompts", "n_activations"), [(2, 3), (3, 6), (50, 20), (50, 1000)])
def test_top_tokens_counts_the_largest_activations(
    model, sae, per_token, feature, Z, n_prompts: int, n_activations: int
) -> None:
    column = Z[:, feature].toarray().ravel()
    got = top_tokens(
        model, sae, feature, PROMPTS, Z, n_prompts=n_prompts, n_activations=n_activations
    )
    expected = top_tokens_reference(model, per_token, feature, column, n_prompts, n_activations)
    assert got == expected
    assert sum(got.values()) == min(
        n_activations,
        sum(
            int((per_token[i][:, feature] > 0).sum())
            for i in sorted(np.flatnonzero(column), key=lambda i: -column[i])[:n_prompts]
        ),
    )


def test_features_top_tokens_are_each_features_own(model, sae, per_token, Z) -> None:
    # one model run over the union of the features' top prompts, in batches shortest first
    features = list(range(0, D_SAE, 3))
    got = features_top_tokens(model, sae, features, PROMPTS, Z, n_prompts=3, n_activations=4)
    assert list(got) == features
    for feature in features:
        column = Z[:, feature].toarray().ravel()
        assert got[feature] == top_tokens_reference(model, per_token, feature, column, 3, 4)
    assert sum(bool(c) for c in got.values()) > 3
    nodes = nodes_top_tokens(model, {1: sae}, [(1, f) for f in features], PROMPTS, {1: Z},
                             n_prompts=3, n_activations=4)  # fmt: skip
    assert nodes == {(1, f): got[f] for f in features}


def test_nodes_top_tokens_of_two_layers_are_each_layers_own(model, sae, Z) -> None:
    # one model run reads both layers: each layer's counts are those of that layer alone
    sae0 = standard_sae("blocks.0.hook_resid_post", seed=3)
    per_token0 = [reference(model, sae0, model.to_tokens(p)[0]) for p in PROMPTS]
    Z0 = sp.csr_matrix(np.array([v.mean(0) for v in per_token0]))
    features = {0: [1, 4, 9], 1: list(range(0, D_SAE, 5))}
    nodes = [(layer, f) for layer, chosen in features.items() for f in chosen]
    got = nodes_top_tokens(model, {0: sae0, 1: sae}, nodes, PROMPTS, {0: Z0, 1: Z},
                           n_prompts=3, n_activations=4, verify=True)  # fmt: skip
    for layer, layer_sae, layer_Z in ((0, sae0, Z0), (1, sae, Z)):
        alone = features_top_tokens(model, layer_sae, features[layer], PROMPTS, layer_Z,
                                    n_prompts=3, n_activations=4)  # fmt: skip
        assert {f: got[(layer, f)] for f in features[layer]} == alone
    assert sum(bool(got[(0, f)]) for f in features[0]) >= 1
    activations = nodes_top_activations(model, {0: sae0, 1: sae}, nodes, PROMPTS, {0: Z0, 1: Z},
                                        n=3, verify=True)  # fmt: skip
    for layer, layer_sae, layer_Z in ((0, sae0, Z0), (1, sae, Z)):
        for f in features[layer]:
            alone = top_activations(model, layer_sae, f, PROMPTS, layer_Z, n=3)
            both = activations[(layer, f)]
            assert [(a.row, a.tokens, a.mean) for a in both] == [
                (a.row, a.tokens, a.mean) for a in alone
            ]
            for a, b in zip(alone, both, strict=True):
                np.testing.assert_allclose(b.values, a.values, rtol=1e-5, atol=1e-6)
    tokens = [model.to_tokens(p)[0] for p in PROMPTS]
    values = layers_token_values(model, {0: sae0, 1: sae}, features, tokens, batch_size=2)
    for i, ref in enumerate(per_token0):
        np.testing.assert_allclose(values[0][i], ref[:, features[0]], rtol=1e-5, atol=1e-6)


def test_features_token_values_in_small_batches_match_each_prompt_alone(model, sae) -> None:
    tokens = [model.to_tokens(p)[0] for p in PROMPTS]
    expected = [reference(model, sae, ids) for ids in tokens]
    features = [0, 7, 3]
    got = features_token_values(model, sae, features, tokens, batch_size=2)
    for values, ref in zip(got, expected, strict=True):
        np.testing.assert_allclose(values, ref[:, features], rtol=1e-5, atol=1e-6)


def test_top_tokens_counts_repeated_tokens(model, sae, per_token) -> None:
    # a feature firing on " the" in the last prompt (four times) but nowhere else
    i = len(PROMPTS) - 1
    toks = words(model, PROMPTS[i])
    the = [j for j, w in enumerate(toks) if w == "the"]
    assert len(the) == 4
    fires = np.flatnonzero((per_token[i][the] > 0).all(0))
    assert len(fires), "the seeded SAE has no feature firing on every 'the'"
    feature = int(fires[0])
    dense = np.zeros((len(PROMPTS), D_SAE))
    dense[i, feature] = 1.0
    got = top_tokens(model, sae, feature, PROMPTS, sp.csr_matrix(dense), n_activations=1000)
    assert got["the"] == 4
    assert got == Counter(w for w, v in zip(toks, per_token[i][:, feature], strict=True) if v > 0)


def test_top_tokens_of_an_inactive_feature_is_empty(model, sae) -> None:
    assert top_tokens(model, sae, 0, PROMPTS, sp.csr_matrix((len(PROMPTS), D_SAE))) == Counter()


# ---------------------------------------------------------------- perturb


def variant_ids(model: HookedTransformer, replacement: str | None) -> torch.Tensor:
    ids = model.to_tokens(PERTURBED)[0].clone()
    if replacement is not None:
        new = model.tokenizer.encode(replacement, add_special_tokens=False)
        assert len(new) == 1
        ids[POSITION + 1] = new[0]
    return ids


@pytest.fixture(scope="module")
def variants(model, sae) -> list[np.ndarray]:
    """Reference features of the original prompt and of each replacement."""
    return [reference(model, sae, variant_ids(model, r)) for r in [None, *REPLACEMENTS]]


def test_perturb_reports_the_change_at_the_position(model, sae, variants) -> None:
    assert words(model, PERTURBED)[POSITION] == "himself"
    changes = np.abs(np.array([v[POSITION] - variants[0][POSITION] for v in variants[1:]]))
    # of the features active at the position, the one the replacements move most
    feature = int(np.argmax(changes.max(0) * (variants[0][POSITION] > 0)))
    assert variants[0][POSITION, feature] > 0 and changes[:, feature].min() > 0
    table = perturb(model, sae, feature, PERTURBED, POSITION, REPLACEMENTS)
    assert list(table.columns) == ["prompt", "value", "change", "per_token"]
    assert len(table) == 1 + len(REPLACEMENTS)
    original = variants[0][POSITION, feature]
    for (_, row), replacement, values in zip(
        table.iterrows(), [None, *REPLACEMENTS], variants, strict=True
    ):
        toks = words(model, PERTURBED)
        if replacement is not None:
            toks[POSITION] = replacement.strip()
        toks[POSITION] = f"[{toks[POSITION]}]"
        assert row["prompt"] == " ".join(toks)
        assert row["value"] == pytest.approx(values[POSITION, feature], rel=1e-5, abs=1e-6)
        assert row["change"] == pytest.approx(
            values[POSITION, feature] - original, rel=1e-5, abs=1e-6
        )
        assert row["per_token"] == tuple(np.round(values[:, feature], 3).tolist())
        # a causal model: the tokens before the position do not see the replacement
        assert row["per_token"][:POSITION] == table["per_token"][0][:POSITION]
    assert table["change"][0] == 0.0
    assert table["prompt"][0] == "He said that [himself] was hungry ."


def test_perturb_without_replacements_is_the_original_alone(model, sae, variants) -> None:
    table = perturb(model, sae, 0, PERTURBED, 0, [])
    assert len(table) == 1 and table["change"][0] == 0.0
    assert table["value"][0] == pytest.approx(variants[0][0, 0], rel=1e-5, abs=1e-6)
    assert table["prompt"][0].startswith("[He] said")


def test_perturb_rejects_a_multi_token_replacement(model, sae) -> None:
    assert len(model.tokenizer.encode(" elephantine", add_special_tokens=False)) > 1
    with pytest.raises(ValueError, match="' elephantine' is not a single token"):
        perturb(model, sae, 0, PERTURBED, POSITION, [" herself", " elephantine"])


def test_a_word_replacing_a_token_after_a_space_follows_a_space_too(model, sae) -> None:
    # top tokens are shown stripped ("herself"); GPT-2 reads " herself" as one token, "herself"
    # as two, and the token it replaces (" himself") follows a space
    assert len(model.tokenizer.encode("herself", add_special_tokens=False)) > 1
    stripped = perturb(model, sae, 0, PERTURBED, POSITION, ["herself"])
    spaced = perturb(model, sae, 0, PERTURBED, POSITION, [" herself"])
    pd.testing.assert_frame_equal(stripped, spaced)
    words = ["herself", "elephantine", "<|endoftext|>", "Mary"]
    assert single_token_replacements(model, PERTURBED, POSITION, words) == ["herself", "Mary"]


def test_perturb_rejects_a_special_token_as_replacement(model, sae) -> None:
    with pytest.raises(ValueError, match=re.escape("'<|endoftext|>' is a BOS, EOS or PAD token")):
        perturb(model, sae, 0, PERTURBED, POSITION, [" herself", "<|endoftext|>"])


@pytest.mark.parametrize("position", [-1, 7, 20])
def test_perturb_rejects_a_position_out_of_range(model, sae, position: int) -> None:
    with pytest.raises(ValueError, match=f"position {position} out of range: the prompt has 7"):
        perturb(model, sae, 0, PERTURBED, position, [" herself"])
