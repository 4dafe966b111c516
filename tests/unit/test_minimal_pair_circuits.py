"""Minimal pairs through a traced circuit (`evaluation.minimal_pairs`), on the toy world: the
change is the per-prompt circuit's, recomputed by hand from the features and the readout."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from circuitlasso.collect import collect_sae_features
from circuitlasso.data.minimal_pairs import MinimalPair
from circuitlasso.evaluation.minimal_pairs import pair_table, phenomenon_summary


def toy_pairs(study, n: int = 4) -> list[MinimalPair]:
    """Pairs of toy sentences one word apart: a training sentence and the same sentence with
    its second word replaced by another sentence's second word."""
    pairs = []
    for i, sentence in enumerate(study.prompts[: 3 * n]):
        words, other = sentence.split(), study.prompts[-1 - i].split()
        if words[1].isalpha() and other[1].isalpha() and words[1] != other[1] and len(pairs) < n:
            twin = " ".join([words[0], other[1], *words[2:]])
            pairs.append(MinimalPair("subject_verb_agreement", sentence, twin))
    assert len(pairs) == n
    return pairs


def test_the_change_is_the_per_prompt_circuits(toy_circuit) -> None:
    study, lasso, circuit = toy_circuit.study, toy_circuit.lasso, toy_circuit.circuit
    pairs = toy_pairs(study)

    def tokens(layer: int, feature: int) -> Counter[str]:
        return Counter({changed_word: 3, "other": 1})

    sentences = [s for pair in pairs for s in (pair.good, pair.bad)]
    Z = collect_sae_features(study.model, study.saes, sentences, cache=False, progress=False)
    readout = lasso.readout_importance(standardized=False)
    by_hand: list[dict[str, float]] = []
    for i in range(len(pairs)):
        change = {}
        for node, data in circuit.nodes(data=True):
            rows = Z[data["layer"]][[2 * i, 2 * i + 1]]
            z = np.abs(rows[:, [data["feature"]]].toarray().ravel())
            if data["layer"] == lasso.readout_layer_:
                weight = readout[data["feature"]]
            else:
                weight = sum(abs(c) for _, _, c in circuit.out_edges(node, data="coef"))
            change[node] = weight * (z[0] - z[1])
        by_hand.append(change)
    # not vacuous: a pair whose words change a feature of the circuit (the first such pair)
    i = next(i for i, change in enumerate(by_hand) if any(change.values()))
    changed_word = pairs[i].changed[0]
    table = pair_table(lasso, circuit, study.model, study.saes, pairs, tokens)
    assert list(table["good"]) == [p.good for p in pairs]
    decisions = table[["decision_good", "decision_bad"]].to_numpy().ravel()
    assert list(decisions) == list(lasso.predict(Z))
    top = max(by_hand[i], key=lambda node: abs(by_hand[i][node]))
    assert table.loc[i, "top_feature"] == top
    assert table.loc[i, "change"] == pytest.approx(by_hand[i][top])
    assert bool(table.loc[i, "located"]) and table.loc[i, "top_tokens"] == f"{changed_word} other"


def test_decisions_and_the_summary(toy_circuit) -> None:
    study, lasso, circuit = toy_circuit.study, toy_circuit.lasso, toy_circuit.circuit
    pairs = toy_pairs(study)

    def always_right(sentences: list[str]) -> np.ndarray:
        return np.tile([1, 0], len(sentences) // 2)

    table = pair_table(lasso, circuit, study.model, study.saes, pairs,
                       lambda layer, feature: Counter({"nothing": 1}), always_right)  # fmt: skip
    assert table["both_right"].all() and not table["located"].any()
    summary = phenomenon_summary(table)
    assert summary.loc["all", "pairs"] == len(pairs)
    assert summary.loc["subject_verb_agreement", "both_right"] == 1.0
    assert summary.loc["all", "located"] == 0.0
