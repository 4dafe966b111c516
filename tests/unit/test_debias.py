"""Bias in Bios debiasing against independent references, on the committed toy model and SAEs.

References: the unhooked model's cached activations averaged by hand, the collector's
token-averaged SAE features with the SAE's decoder, the exact linearity of the probe in the
features of its own layer, a forward pass with a whole layer zeroed (IG completeness), small
frames whose accuracies are known, and the toy world's planted word categories.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso import cache
from circuitlasso.ablate import rank_features
from circuitlasso.collect import collect_sae_features
from circuitlasso.datasets.bias_in_bios import write_bias_in_bios_fixture
from circuitlasso.debias import (
    TOY_CONCEPTS,
    accuracies,
    compare_methods,
    describe,
    fit_probe,
    gender_swap,
    ig_scores,
    load_splits,
    pooled_activations,
    precision_recall,
    targets,
    toy_truth,
    zero_columns,
)
from circuitlasso.models import load_model, load_saes

torch.set_num_threads(1)

LAST = 3
HOOK = f"blocks.{LAST}.hook_resid_post"
PROFESSIONS = ("professor", "nurse")


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def toy() -> tuple[HookedTransformer, dict[int, SAE]]:
    model = load_model("toy")
    return model, load_saes("toy", range(LAST + 1), model=model)


@pytest.fixture(scope="module")
def splits() -> dict[str, pd.DataFrame]:
    return load_splits("toy_bias_in_bios", PROFESSIONS)


@pytest.fixture(scope="module")
def bios(splits) -> tuple[list[str], np.ndarray]:
    """400 ambiguous training biographies and their labels (1 = professor)."""
    frame = splits["ambiguous_train"].iloc[:400]
    return frame["text"].tolist(), targets(frame, PROFESSIONS)


@pytest.fixture(scope="module")
def probe(toy, bios):
    model, _ = toy
    texts, y = bios
    return fit_probe(pooled_activations(model, HOOK, texts), y)


def hand_pooled(model: HookedTransformer, prompts: list[str]) -> np.ndarray:
    """Mean of the cached activation at HOOK over each prompt's tokens after BOS, one at a time."""
    rows = []
    for prompt in prompts:
        _, cached = model.run_with_cache(prompt, names_filter=HOOK)
        rows.append(cached[HOOK][0, 1:].double().mean(0).numpy())
    return np.stack(rows)


def test_pooled_activations_are_the_models_and_feed_the_original_probe_unchanged(toy, bios, probe):
    model, saes = toy
    texts = bios[0][:6]
    reference = hand_pooled(model, texts)
    plain = pooled_activations(model, HOOK, texts, batch_size=4)
    np.testing.assert_allclose(plain, reference, rtol=1e-5, atol=1e-5)
    # Spliced SAEs with a feature that never fires on these prompts zeroed: nothing changes.
    Z = collect_sae_features(model, {1: saes[1]}, texts, progress=False)[1]
    silent = int(np.flatnonzero(np.asarray(Z.sum(0)).ravel() == 0)[0])
    edited = pooled_activations(model, HOOK, texts, saes=saes, zeroed=[(1, silent)], batch_size=4)
    np.testing.assert_allclose(edited, reference, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(probe.predict(edited), probe.predict(reference))


def test_zeroing_a_probe_layer_feature_removes_exactly_its_decoder_contribution(toy, bios):
    model, saes = toy
    texts = bios[0][:6]
    Z = collect_sae_features(model, {LAST: saes[LAST]}, texts, progress=False)[LAST]
    feature = int(np.argmax(np.asarray((Z > 0).sum(0)).ravel()))  # the most often active one
    clean = pooled_activations(model, HOOK, texts)
    zeroed = pooled_activations(model, HOOK, texts, saes=saes, zeroed=[(LAST, feature)])
    decoder = saes[LAST].W_dec[feature].detach().double().numpy()
    expected = Z[:, feature].toarray() * decoder  # (M, 1) token-averaged value times (d,)
    np.testing.assert_allclose(clean - zeroed, expected, atol=2e-5)
    assert np.abs(expected).max() > 1e-2


def test_ig_scores_of_the_probe_layer_are_exactly_its_linear_effect(toy, bios, probe):
    model, saes = toy
    texts, y = bios[0][:8], bios[1][:8]
    scores = ig_scores(model, {LAST: saes[LAST]}, probe, HOOK, texts, y, steps=1)[LAST]
    Z = collect_sae_features(model, {LAST: saes[LAST]}, texts, progress=False)[LAST].toarray()
    direction = saes[LAST].W_dec.detach().double().numpy() @ probe.coef  # (D,)
    expected = ((2 * y - 1)[:, None] * Z).mean(0) * direction
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-6)


def test_ig_scores_of_a_lower_layer_sum_to_the_effect_of_zeroing_it(toy, bios, probe):
    model, saes = toy
    texts, y = bios[0][:8], bios[1][:8]
    sign = 2 * y - 1
    scores = ig_scores(model, {1: saes[1]}, probe, HOOK, texts, y, steps=32)[1]
    every = [(1, f) for f in range(saes[1].cfg.d_sae)]
    clean = sign * probe.logits(pooled_activations(model, HOOK, texts))
    zeroed = sign * probe.logits(pooled_activations(model, HOOK, texts, saes=saes, zeroed=every))
    difference = float(np.mean(clean - zeroed))
    assert abs(difference) > 1.0
    assert float(scores.sum()) == pytest.approx(difference, rel=0.02)


def test_accuracies_of_known_classifiers() -> None:
    frame = pd.DataFrame(
        {
            "profession": ["professor", "professor", "nurse", "nurse"] * 2,
            "gender": ["male", "female", "male", "female"] * 2,
        }
    )
    truth = targets(frame, PROFESSIONS)
    assert accuracies(truth, frame, PROFESSIONS) == {
        "profession": 100.0, "gender": 50.0, "worst_group": 100.0,
    }  # fmt: skip
    by_gender = (frame["gender"] == "male").to_numpy().astype(int)
    assert accuracies(by_gender, frame, PROFESSIONS) == {
        "profession": 50.0, "gender": 100.0, "worst_group": 0.0,
    }  # fmt: skip
    assert accuracies(1 - by_gender, frame, PROFESSIONS)["gender"] == 0.0
    with pytest.raises(ValueError, match="predictions have shape"):
        accuracies(truth[:3], frame, PROFESSIONS)


def test_gender_swap_keeps_case_and_words_that_only_contain_gendered_ones() -> None:
    assert gender_swap("He said his wife trusts her with Mary.") == (
        "She said her husband trusts him with James."
    )
    assert gender_swap("Her patients; HE") == "His patients; SHE"
    assert gender_swap("the hero Sherlock, theme") == "the hero Sherlock, theme"


def test_precision_recall_and_zeroed_columns() -> None:
    flagged, truth = [True, True, False, False], [True, False, True, False]
    assert precision_recall(flagged, truth) == {"precision": 0.5, "recall": 0.5}
    nothing = precision_recall([False, False], [True, False])
    assert np.isnan(nothing["precision"]) and nothing["recall"] == 0.0
    Z = zero_columns(sp.csr_matrix(np.arange(6.0).reshape(2, 3)), [1])
    np.testing.assert_array_equal(Z.toarray(), [[0, 0, 2], [3, 0, 5]])


def test_bad_inputs_raise_errors_naming_the_problem(toy, splits, probe, tmp_path: Path) -> None:
    model, saes = toy
    with pytest.raises(ValueError, match="toy world has professions"):
        load_splits("toy_bias_in_bios", ("professor", "surgeon"))
    with pytest.raises(ValueError, match="unknown professions"):
        load_splits("bias_in_bios", ("professor", "astronaut"))
    with pytest.raises(ValueError, match="unknown data set"):
        load_splits("cola", PROFESSIONS)
    with pytest.raises(ValueError, match="split 'ambiguous_train' is empty"):
        load_splits("toy_bias_in_bios", PROFESSIONS, max_prompts=0)
    with pytest.raises(ValueError, match="is not a hook"):
        pooled_activations(model, "blocks.9.hook_resid_post", ["he teaches ."])
    with pytest.raises(ValueError, match="feature out of range"):
        pooled_activations(model, HOOK, ["he teaches ."], saes=saes, zeroed=[(1, 10**6)])
    with pytest.raises(ValueError, match="SAEs of layers \\[3\\] read past"):
        ig_scores(model, saes, probe, "blocks.2.hook_resid_post", ["he teaches ."], np.ones(1))
    with pytest.raises(ValueError, match="missing \\[2, 3\\]"):
        compare_methods(model, {0: saes[0], 1: saes[1]}, LAST, splits, PROFESSIONS, TOY_CONCEPTS)
    # The hub loader's path, on a local copy in the hub's format with too few biographies.
    source = write_bias_in_bios_fixture(
        tmp_path, {(p, g): 3 for p in PROFESSIONS for g in ("male", "female")}
    )
    frames = load_splits("bias_in_bios", PROFESSIONS, source=source)
    assert {len(frame) for frame in frames.values()} == {6, 12}
    with pytest.raises(ValueError, match="has no biographies of the groups"):
        load_splits("bias_in_bios", PROFESSIONS, source=source, max_prompts=1)


def test_the_automatic_rule_finds_the_toy_worlds_gender_features(toy, splits, bios, probe):
    """The rule's calls on SHIFT-style candidates against both ground truths. Measured: against
    the top prompts precision 1.0 and recall 0.9; against the top tokens recall 0.73, precision
    0.53 (its other calls are full-stop features that carry gender by context)."""
    model, saes = toy
    texts, y = bios
    scores = ig_scores(model, saes, probe, HOOK, texts[:32], y[:32], steps=4)
    candidates = describe(model, saes, rank_features(scores)[:60], scores, texts[:200],
                          threshold=0.25)  # fmt: skip
    balanced = splits["balanced_train"].iloc[:400]
    Z = collect_sae_features(model, saes, balanced["text"].tolist(), progress=False)
    truth = toy_truth(candidates, Z, (balanced["gender"] == "male").to_numpy())
    by_prompts = precision_recall(candidates["gendered"], truth["by_prompts"])
    by_tokens = precision_recall(candidates["gendered"], truth["by_tokens"])
    assert by_prompts["precision"] >= 0.9 and by_prompts["recall"] >= 0.8
    assert by_tokens["recall"] >= 0.7
    assert truth["by_tokens"].sum() >= 10  # the candidates hold many names and pronouns


def test_compare_methods_with_nothing_removed_keeps_the_original_classifiers(toy, splits):
    model, saes = toy
    small = {name: frame.iloc[:120] for name, frame in splits.items()}
    result = compare_methods(model, saes, LAST, small, PROFESSIONS, TOY_CONCEPTS, n_candidates=10,
                             attribution_prompts=8, steps=2, label_prompts=32, shift_gender=[],
                             circuitlasso_gender=[], batch_size=32)  # fmt: skip
    table = result.table
    assert list(table.index) == [
        "ORIGINAL", "CBP", "ORACLE", "LINEAR PROBING", "SHIFT", "SHIFT-retrain", "CircuitLasso",
        "CircuitLasso-retrain",
    ]  # fmt: skip
    assert list(table.columns) == ["profession", "gender", "worst_group", "features", "seconds"]
    for edited, original in (("SHIFT", "ORIGINAL"), ("SHIFT-retrain", "ORIGINAL"),
                             ("CircuitLasso-retrain", "CircuitLasso")):  # fmt: skip
        assert table.loc[edited, "features"] == 0
        pd.testing.assert_series_equal(
            table.loc[edited, ["profession", "gender", "worst_group"]],
            table.loc[original, ["profession", "gender", "worst_group"]],
            check_names=False,
        )
    assert table.loc["SHIFT", "seconds"] > table.loc["ORIGINAL", "seconds"]
    assert len(result.candidates["SHIFT"]) == 10 and not result.candidates["SHIFT"]["removed"].any()
    assert table.loc["ORACLE", "worst_group"] > table.loc["ORIGINAL", "worst_group"]
