"""Bias in Bios debiasing against independent references, on the committed toy model and SAEs.

References: the unhooked model's cached activations averaged by hand, the collector's
token-averaged SAE features with the SAE's decoder, the exact linearity of the probe in the
features of its own layer, a forward pass with a whole layer zeroed (IG completeness), small
frames whose accuracies are known, the toy world's planted word categories, a synthetic feature
matrix with a planted gender feature whose test rows come in gender-swapped twins (so a classifier
blind to that feature has gender accuracy exactly 50), the fit with that column deleted, and
every removal method's classifier rebuilt by hand from the collected features and pooled
activations. On the whole toy splits, the mechanism toy Bias in Bios is built to show: ORIGINAL's
worst group far below ORACLE's, and CircuitLasso's worst group raised by removing the features
the rule flags, scored against the toy world's ground truth.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso import cache
from circuitlasso.circuits.features import LabelFit, fit_label, label_lam_max
from circuitlasso.collect import collect_sae_features
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.evaluation.ablate import rank_features
from circuitlasso.evaluation.debias import (
    TOY_CONCEPTS,
    Comparison,
    ComparisonOptions,
    accuracies,
    compare,
    compare_methods,
    describe,
    fit_probe,
    gender_swap,
    ig_scores,
    load_splits,
    pooled_activations,
    precision_recall,
    rule_vs_toy_truth,
    swap_effects,
    targets,
    toy_name_coverage,
    toy_truth,
    zero_columns,
)
from circuitlasso.evaluation.debias.compare import PROBE_TOL

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


def test_fit_probe_at_a_small_tolerance_reaches_the_optimum() -> None:
    """The l2-logistic objective (scikit-learn's: unpenalized intercept) minimized by scipy on a
    nearly rank-3 design with large values, where scikit-learn's default tolerance stops short
    (measured: coefficients 1e-2 off, against 7e-6 at PROBE_TOL)."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    base = rng.normal(size=(300, 3))
    X = base @ rng.normal(size=(3, 40)) * 5 + 0.05 * rng.normal(size=(300, 40))
    y = (base[:, 0] + 0.3 * rng.normal(size=300) > 0).astype(int)
    sign = 2 * y - 1

    def objective(v: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = v[:-1], v[-1]
        margin = sign * (X @ w + b)
        slope = -sign / (1 + np.exp(margin))
        return 0.5 * w @ w + np.logaddexp(0, -margin).sum(), np.append(w + X.T @ slope, slope.sum())

    reference = minimize(objective, np.zeros(41), jac=True, method="L-BFGS-B",
                         options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 100_000})  # fmt: skip
    assert reference.success
    converged, default = fit_probe(X, y, tol=PROBE_TOL), fit_probe(X, y)
    np.testing.assert_allclose(converged.coef, reference.x[:-1], atol=1e-4)
    assert converged.intercept == pytest.approx(reference.x[-1], abs=1e-4)
    assert np.abs(default.coef - reference.x[:-1]).max() > 1e-3  # not vacuous


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


GENDER, PROFESSION = 3, 5  # the planted columns of the synthetic features


def planted_features(rng, professor: np.ndarray, male: np.ndarray) -> np.ndarray:
    """``(M, 8)`` sparse nonnegative features: column GENDER fires on 90% of the men and 10% of
    the women, column PROFESSION on 80% of the professors and 20% of the nurses, the rest noise."""
    n = len(professor)
    Z = rng.exponential(1.0, (n, 8)) * (rng.random((n, 8)) < 0.5)
    Z[:, GENDER] = (rng.random(n) < np.where(male, 0.9, 0.1)) * (1 + rng.exponential(1.0, n))
    Z[:, PROFESSION] = (rng.random(n) < np.where(professor, 0.8, 0.2)) * (
        1 + rng.exponential(1.0, n)
    )
    return Z


def test_zeroing_a_planted_gender_feature_removes_the_gender_leak() -> None:
    rng = np.random.default_rng(0)
    # ambiguous training set: the professors are the men, so gender predicts the profession
    professor = np.repeat([True, False], 100)
    Z = planted_features(rng, professor, male=professor)
    y = professor.astype(int)
    # balanced test set in twins: 100 rows, each once as a man and once as a woman, equal in
    # every column but GENDER
    twin = planted_features(rng, np.tile([True, False], 50), male=np.zeros(100, dtype=bool))
    Z_test = np.vstack([twin, twin])
    male = np.repeat([True, False], 100)
    Z_test[:, GENDER] = (rng.random(200) < np.where(male, 0.9, 0.1)) * (
        1 + rng.exponential(1.0, 200)
    )
    test = pd.DataFrame({"profession": np.where(np.tile([True, False], 100), *PROFESSIONS),
                         "gender": np.where(male, "male", "female")})  # fmt: skip

    def fit_at(features: sp.csr_matrix) -> LabelFit:  # the penalty lam = 1e-3
        return fit_label(features, y, 1e-3 / label_lam_max(features, y), layer=LAST)

    fit = fit_at(sp.csr_matrix(Z))
    assert fit.coef[GENDER] > 1.0  # the classifier leans on gender (measured 1.56)
    before = accuracies((fit.predict_proba(Z_test) > 0.5).astype(int), test, PROFESSIONS)
    # measured: profession 64, gender 72 (the output follows gender), worst group 30
    assert before["gender"] > 65.0

    zeroed_test = zero_columns(sp.csr_matrix(Z_test), [GENDER])
    by_hand = Z_test.copy()
    by_hand[:, GENDER] = 0.0
    np.testing.assert_array_equal(zeroed_test.toarray(), by_hand)
    # CircuitLasso: the same classifier on the zeroed features is the classifier restricted to
    # the other columns, blind to the gender column
    others = [c for c in range(8) if c != GENDER]
    restricted = 1 / (1 + np.exp(-(Z_test[:, others] @ fit.coef[others] + fit.intercept)))
    np.testing.assert_allclose(fit.predict_proba(zeroed_test), restricted, rtol=1e-12)
    after = accuracies((fit.predict_proba(zeroed_test) > 0.5).astype(int), test, PROFESSIONS)
    # twins now get one prediction, right for one of the two genders: exactly 50; the profession
    # column still carries some of the profession (measured accuracy 59)
    assert after["gender"] == 50.0
    assert after["profession"] > 55.0

    # CircuitLasso-retrain: the refit on zeroed features is the fit with that column deleted
    refit = fit_at(zero_columns(sp.csr_matrix(Z), [GENDER]))
    deleted = fit_at(sp.csr_matrix(Z[:, others]))
    assert refit.coef[GENDER] == 0.0
    # the same solver on the same data (measured difference 0)
    np.testing.assert_allclose(refit.coef[others], deleted.coef, atol=1e-9)
    assert refit.intercept == pytest.approx(deleted.intercept, abs=1e-9)
    retrained = (refit.predict_proba(zeroed_test) > 0.5).astype(int)
    np.testing.assert_array_equal(
        retrained, (deleted.predict_proba(Z_test[:, others]) > 0.5).astype(int)
    )
    retrain = accuracies(retrained, test, PROFESSIONS)
    # measured: profession 77, gender 50, worst group 76: the refit leans on the profession
    assert retrain["gender"] == 50.0
    assert retrain["profession"] > before["profession"] + 10


def test_bad_inputs_raise_errors_naming_the_problem(
    toy, splits, probe, tmp_path: Path, write_bias_in_bios
) -> None:
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
    with pytest.raises(ValueError, match=r"layer 3, which saes lacks \(layers \[0, 1\]\)"):
        compare_methods(model, {0: saes[0], 1: saes[1]}, LAST, splits, PROFESSIONS, TOY_CONCEPTS)
    # The hub loader's path, on a local copy in the hub's format with too few biographies.
    source = write_bias_in_bios(
        tmp_path, {(p, g): 3 for p in PROFESSIONS for g in ("male", "female")}
    )
    frames = load_splits("bias_in_bios", PROFESSIONS, source=source)
    assert {len(frame) for frame in frames.values()} == {6, 12}
    with pytest.raises(ValueError, match="has no biographies of the groups"):
        load_splits("bias_in_bios", PROFESSIONS, source=source, max_prompts=1)


@pytest.mark.slow  # attributions over the toy world's training bios
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


# each stage a power of two: every sum of stages is a different number
STAGES = {"pool": 1, "fit": 2, "cbp": 4, "pool balanced": 8, "oracle": 16, "ig": 32, "rank": 64,
          "edit": 128, "refit": 256, "l1": 512, "sparse probe": 1024, "zero": 2048}  # fmt: skip


@pytest.mark.slow  # trains every method's probes
def test_compare_methods_with_nothing_removed_keeps_the_original_classifiers(
    toy, splits, plant_seconds
):
    plant_seconds(compare, STAGES)
    model, saes = toy
    small = {name: frame.iloc[:120] for name, frame in splits.items()}
    options = ComparisonOptions(n_candidates=10, attribution_prompts=8, steps=2,
                                label_prompts=32, batch_size=32)  # fmt: skip
    result = compare_methods(model, saes, LAST, small, PROFESSIONS, TOY_CONCEPTS, options,
                             shift_gender=[], circuitlasso_gender=[])  # fmt: skip
    table = result.table
    assert list(table.index) == [
        "ORIGINAL", "CBP", "ORACLE", "LINEAR PROBING", "SHIFT", "SHIFT-retrain",
        "CircuitLasso-no-removal", "CircuitLasso", "CircuitLasso-retrain",
        "control: random features", "control: gender rule alone",
    ]  # fmt: skip
    assert list(table.columns) == ["profession", "gender", "worst_group", "features", "seconds"]
    for edited, original in (("SHIFT", "ORIGINAL"), ("SHIFT-retrain", "ORIGINAL"),
                             ("CircuitLasso", "CircuitLasso-no-removal"),
                             ("CircuitLasso-retrain", "CircuitLasso-no-removal"),
                             ("control: random features", "CircuitLasso-no-removal")):  # fmt: skip
        assert table.loc[edited, "features"] == 0
        pd.testing.assert_series_equal(
            table.loc[edited, ["profession", "gender", "worst_group"]],
            table.loc[original, ["profession", "gender", "worst_group"]],
            check_names=False,
        )
    # each method's seconds are the stages it needs, SHIFT's the ORIGINAL probe's and more
    seconds = table["seconds"]
    assert (seconds["ORIGINAL"], seconds["CBP"], seconds["ORACLE"]) == (1 + 2, 1 + 4, 8 + 16)
    assert seconds["SHIFT"] == seconds["ORIGINAL"] + 32 + 64  # IG and the ranking
    assert seconds["SHIFT-retrain"] == seconds["SHIFT"] + 128 + 256  # the edit and the refit
    collect = seconds["CircuitLasso-no-removal"] - 512  # the features' first collection
    assert seconds["LINEAR PROBING"] == pytest.approx(collect + 512 + 1024)
    assert seconds["CircuitLasso"] == pytest.approx(collect + 512 + 64)
    assert seconds["CircuitLasso-retrain"] == pytest.approx(seconds["CircuitLasso"] + 2048 + 256)
    assert seconds["control: random features"] == seconds["CircuitLasso"]  # other features
    assert seconds["control: gender rule alone"] == seconds["ORIGINAL"]  # the probe it edits
    assert len(result.candidates["SHIFT"]) == 10 and not result.candidates["SHIFT"]["removed"].any()
    assert table.loc["ORACLE", "worst_group"] > table.loc["ORIGINAL", "worst_group"]


@pytest.mark.slow  # trains every method's probes
def test_compare_methods_removes_the_chosen_features_as_by_hand(toy, splits, tmp_path: Path):
    model, saes = toy
    small = {name: frame.iloc[:120] for name, frame in splits.items()}
    texts = {name: frame["text"].tolist() for name, frame in small.items()}
    y = targets(small["ambiguous_train"], PROFESSIONS)
    test = small["balanced_test"]

    def collect(split: str) -> sp.csr_matrix:
        return collect_sae_features(model, {LAST: saes[LAST]}, texts[split], batch_size=32,
                                    cache_dir=tmp_path / split, progress=False)[LAST]  # fmt: skip

    # SHIFT removes the four probe-layer features whose mean differs most between the men and
    # the women of the balanced training set; by hand: the ORIGINAL probe, and a refit, on
    # activations with those features zeroed in the forward pass
    balanced = collect("balanced_train").toarray()
    male = (small["balanced_train"]["gender"] == "male").to_numpy()
    gap = np.abs(balanced[male].mean(0) - balanced[~male].mean(0))
    gendered = [(LAST, int(f)) for f in np.argsort(-gap, kind="stable")[:4]]

    def pool(split: str, zeroed=()) -> np.ndarray:
        return pooled_activations(model, HOOK, texts[split], saes=saes, zeroed=zeroed,
                                  batch_size=32)  # fmt: skip

    X, X_test = pool("ambiguous_train"), pool("balanced_test")
    original = fit_probe(X, y, tol=PROBE_TOL)
    X_test_edited = pool("balanced_test", gendered)
    by_hand = {
        "ORIGINAL": original.predict(X_test),
        "SHIFT": original.predict(X_test_edited),
        "SHIFT-retrain": fit_probe(pool("ambiguous_train", gendered), y, tol=PROBE_TOL).predict(
            X_test_edited
        ),
    }
    # CircuitLasso removes six features of A_{s,y}'s support (lam_ratio 0.09, compare_methods'
    # default): those of the largest gap between the genders above; by hand: the columns set to
    # 0 by assignment, and the fit repeated without them at the same penalty lam
    Z, Z_test = collect("ambiguous_train"), collect("balanced_test")
    fit = fit_label(Z, y, 0.09, layer=LAST)
    support = np.flatnonzero(fit.coef)
    top = [int(f) for f in support[np.argsort(-gap[support], kind="stable")[:6]]]

    def without(features: sp.csr_matrix) -> np.ndarray:
        dense = features.toarray()
        dense[:, top] = 0.0
        return dense

    zeroed = sp.csr_matrix(without(Z))
    refit = fit_label(zeroed, y, fit.lam / label_lam_max(zeroed, y), layer=LAST)
    assert (refit.coef[top] == 0).all() and np.count_nonzero(refit.coef) > 0
    by_hand["CircuitLasso"] = (fit.predict_proba(without(Z_test)) > 0.5).astype(int)
    by_hand["CircuitLasso-retrain"] = (refit.predict_proba(without(Z_test)) > 0.5).astype(int)
    by_hand["CircuitLasso-no-removal"] = (fit.predict_proba(Z_test) > 0.5).astype(int)

    options = ComparisonOptions(n_candidates=10, attribution_prompts=8, steps=2,
                                label_prompts=32, batch_size=32)  # fmt: skip
    result = compare_methods(model, saes, LAST, small, PROFESSIONS, TOY_CONCEPTS, options,
                             shift_gender=[list(node) for node in gendered],
                             circuitlasso_gender=[[LAST, f] for f in top])  # fmt: skip
    table = result.table
    drawn = result.removed.pop("control: random features")
    flagged = result.removed.pop("control: gender rule alone")
    assert result.removed == {"SHIFT": gendered, "CircuitLasso": [(LAST, f) for f in top]}
    # the controls: as many features as CircuitLasso removes, drawn from its ten candidates and
    # zeroed in its classifier; and every feature of the layer whose gender swap moves it at
    # least the rule's threshold, zeroed in the model for the ORIGINAL probe to read
    candidates = result.candidates["CircuitLasso"]["feature"].tolist()
    assert len(drawn) == len(set(drawn)) == 6 and {f for _, f in drawn} <= set(candidates)
    assert drawn != [(LAST, f) for f in top]
    dense = Z_test.toarray()
    dense[:, [f for _, f in drawn]] = 0.0
    by_hand["control: random features"] = (fit.predict_proba(dense) > 0.5).astype(int)
    every = [(LAST, f) for f in range(saes[LAST].cfg.d_sae)]
    effects = swap_effects(model, saes, every, texts["ambiguous_train"][:32], batch_size=32)
    assert flagged == [node for node, e in zip(every, effects, strict=True) if e >= 0.25]
    assert 0 < len(flagged) < len(every)
    by_hand["control: gender rule alone"] = original.predict(pool("balanced_test", flagged))
    expected = {name: accuracies(predictions, test, PROFESSIONS)
                for name, predictions in by_hand.items()}  # fmt: skip
    for name, row in expected.items():
        assert table.loc[name, list(row)].to_dict() == row, name
    assert table.loc[["SHIFT", "SHIFT-retrain"], "features"].tolist() == [4, 4]
    assert table.loc[["CircuitLasso", "CircuitLasso-retrain"], "features"].tolist() == [6, 6]
    assert table.loc["CircuitLasso-no-removal", "features"] == 0
    unedited = expected["CircuitLasso-no-removal"]
    # not vacuous (measured on these 120 biographies): the ORIGINAL probe follows gender (gender
    # accuracy 92.5), SHIFT's edit changes 6 of its predictions and the retrain 6; the
    # classifier A_{s,y} follows gender too (100), without the six features at chance (50.8),
    # and the refit draws in other gendered features and follows gender again (100)
    assert expected["ORIGINAL"]["gender"] > 85
    assert np.sum(by_hand["SHIFT"] != by_hand["ORIGINAL"]) >= 3
    assert np.sum(by_hand["SHIFT-retrain"] != by_hand["ORIGINAL"]) >= 3
    assert unedited["gender"] > 95 and expected["CircuitLasso"]["gender"] < unedited["gender"] - 30
    assert expected["CircuitLasso-retrain"]["gender"] > expected["CircuitLasso"]["gender"] + 30


@pytest.mark.slow  # trains every method's probes
def test_on_the_toy_world_removing_the_rules_gender_features_is_what_debiases(toy, splits):
    """Toy Bias in Bios tests the mechanism, on the whole splits at compare_methods' defaults
    (lam_ratio 0.09, the top 100 candidates, the rule on 200 prompts at 0.25). Gender is the
    easier signal of the ambiguous training set, so the ORIGINAL probe fails on the worst group
    and the l1 classifier A_{s,y} follows gender in part; the rule flags gender features (checked
    against the toy world's ground truth by top prompts); zeroing them raises the worst group."""
    model, saes = toy
    texts = {name: frame["text"].tolist() for name, frame in splits.items()}
    y = targets(splits["ambiguous_train"], PROFESSIONS)
    test = splits["balanced_test"]

    X_test = pooled_activations(model, HOOK, texts["balanced_test"])
    original = fit_probe(
        pooled_activations(model, HOOK, texts["ambiguous_train"]), y, tol=PROBE_TOL
    )
    y_balanced = targets(splits["balanced_train"], PROFESSIONS)
    X_balanced = pooled_activations(model, HOOK, texts["balanced_train"])
    oracle = fit_probe(X_balanced, y_balanced, tol=PROBE_TOL)
    worst = {name: accuracies(probe.predict(X_test), test, PROFESSIONS)["worst_group"]
             for name, probe in (("ORIGINAL", original), ("ORACLE", oracle))}  # fmt: skip
    assert worst["ORACLE"] - worst["ORIGINAL"] > 40  # measured 100 against 30.4

    def features(split: str) -> sp.csr_matrix:
        return collect_sae_features(model, {LAST: saes[LAST]}, texts[split], progress=False)[LAST]

    Z, Z_test = features("ambiguous_train"), features("balanced_test")
    fit = fit_label(Z, y, 0.09, layer=LAST)
    coef = {LAST: fit.coef}
    candidates = describe(model, saes, rank_features(coef)[:100], coef,
                          texts["ambiguous_train"][:200], threshold=0.25)  # fmt: skip
    flagged = candidates.loc[candidates["gendered"], "feature"].tolist()
    male = (splits["balanced_train"]["gender"] == "male").to_numpy()
    truth = toy_truth(candidates, {LAST: features("balanced_train")}, male)["by_prompts"]
    # measured: 20 candidates, 7 truly gendered, 7 flagged, all of them truly gendered
    assert 0 < truth.sum() < len(candidates)  # gender and profession features both
    found = precision_recall(candidates["gendered"], truth)
    assert found["precision"] == 1.0 and found["recall"] >= 0.7

    def scores(Z_seen: sp.csr_matrix) -> dict[str, float]:
        return accuracies((fit.predict_proba(Z_seen) > 0.5).astype(int), test, PROFESSIONS)

    before, after = scores(Z_test), scores(zero_columns(Z_test, flagged))
    # measured: no removal 53.5 / 96.5 / 1.6 (profession / gender / worst group), removal
    # 94.2 / 49.2 / 86.8
    assert before["gender"] > 60 and before["worst_group"] < worst["ORACLE"] - 30
    assert after["worst_group"] - before["worst_group"] > 30
    assert abs(after["gender"] - 50) < 3 and after["profession"] > before["profession"]


def test_rule_vs_toy_truth_is_the_sections_former_inline_computation(toy, splits) -> None:
    """The section's former notebook code is the reference: features of every SAE on balanced
    biographies, the two ground truths of each method's candidates, precision and recall."""
    model, saes = toy
    balanced = splits["balanced_train"].iloc[:200]

    def candidates(nodes, tokens, flags) -> pd.DataFrame:
        return pd.DataFrame({"layer": [s for s, _ in nodes], "feature": [f for _, f in nodes],
                             "tokens": tokens, "gendered": flags})  # fmt: skip

    # a name feature, a full-stop feature, a profession feature and a preposition feature; two
    # full-stop features and a profession feature (the committed toy run)
    shift = candidates([(0, 669), (3, 950), (0, 817), (1, 1606)],
                       [Counter({"jane": 4, "olivia": 3}), Counter({".": 20}),
                        Counter({"teaches": 10, "was": 7}), Counter({"with": 17, "in": 3})],
                       [True, True, False, True])  # fmt: skip
    lasso = candidates([(3, 1406), (3, 840), (3, 263)],
                       [Counter({".": 20}), Counter({".": 20}), Counter({"a": 14, "teaches": 6})],
                       [True, False, False])  # fmt: skip
    comparison = Comparison(pd.DataFrame(), {"SHIFT": shift, "CircuitLasso": lasso}, {})
    found = rule_vs_toy_truth(model, saes, comparison, {"balanced_train": balanced}, batch_size=32)

    Z_balanced = collect_sae_features(model, saes, balanced["text"].tolist(), batch_size=32,
                                      progress=False)  # fmt: skip
    male = (balanced["gender"] == "male").to_numpy()
    truth_rows = []
    for method, rows in comparison.candidates.items():
        truth = toy_truth(rows, Z_balanced, male)
        for name, column in truth.items():
            truth_rows.append({"method": method, "ground truth": name,
                               "truly gendered": int(column.sum()),
                               "flagged": int(rows["gendered"].sum()),
                               **precision_recall(rows["gendered"], column)})  # fmt: skip
    coverage = "{} of {}".format(*toy_name_coverage())  # the swap list's share of the names
    pd.testing.assert_frame_equal(
        found, pd.DataFrame(truth_rows).assign(**{"names swapped": coverage})
    )
    # not vacuous: the name feature is gendered by its tokens, a full-stop one by its prompts
    assert found["truly gendered"].tolist()[:2] == [1, 2] and found["recall"].iloc[1] == 1.0
