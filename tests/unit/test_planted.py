"""A traced circuit checked against the toy world's planted categories, on hand-made features
whose top tokens are given: categories and violations by hand, the ranking comparison on a
planted two-layer chain, and the per-violation diagnosis worked out by hand (and, standardized,
against a direct computation)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import LabelFit
from circuitlasso.circuits.trace import feature_std, label_importance
from circuitlasso.data.toyworld.datasets import dominant_category
from circuitlasso.data.toyworld.grammar import VIOLATION_CATEGORIES
from circuitlasso.evaluation import planted
from circuitlasso.study import FeatureStudy

REFLEXIVE = Counter({"himself": 3, "herself": 2})  # reflexives (also male_pronouns, 3 of 5)
PERIOD = Counter({".": 5})  # final_punctuation
DETERMINER = Counter({"the": 2, "cat": 2})  # determiners: exactly half
NOTHING = Counter({"cat": 3, "the": 1})  # no category holds half
AGREEMENT = Counter({"is": 1})  # agreement_verbs


class Stub(FeatureStudy):
    """A study whose features' top tokens are given by a table."""

    def __init__(self, tokens, Z=None, Z_test=None, test=None):
        frame = pd.DataFrame({"sentence": [], "label": []})
        super().__init__("stub", "resid_post", None, {}, frame, frame if test is None else test)
        self.Z, self.Z_test, self.table = Z or {}, Z_test or {}, tokens

    def top_tokens(self, layer, feature):
        return self.table[int(layer), int(feature)]


def small_circuit() -> Circuit:
    graph = Circuit()
    for layer, feature in [(1, 0), (1, 1), (0, 2), (0, 3)]:
        graph.add_node(f"z{layer}.{feature}", layer=layer, feature=feature, importance=1.0)
    graph.add_edge("z0.2", "z1.0", coef=1.0)
    graph.add_edge("z0.3", "z1.1", coef=1.0)
    return graph


def test_categories_by_layer_and_violations_reached():
    study = Stub({(1, 0): REFLEXIVE, (1, 1): PERIOD, (0, 2): DETERMINER, (0, 3): NOTHING})
    table = planted.categories_by_layer(study, small_circuit())
    assert table.index.name == "layer" and table.index.tolist() == [1, 0]
    assert table["planted categories reached"].tolist() == ["final_punctuation, reflexives",
                                                            "determiners"]  # fmt: skip
    reached = planted.violations_reached(study, small_circuit())
    assert reached.name == "violation categories in the circuit"
    assert reached.to_dict() == {
        "reflexive": True,
        "agreement": False,
        "punctuation": True,
        "word_order": True,
    }


def test_only_sentences_that_name_their_violation_carry_planted_truth():
    plain = Stub({})
    planted_test = pd.DataFrame({"sentence": ["a"], "label": [0], "violation": ["reflexive"]})
    assert not planted.has_planted_truth(plain)
    assert planted.has_planted_truth(Stub({}, test=planted_test))


def chain() -> tuple[dict[int, sp.csr_matrix], LabelFit]:
    """Layer 1: feature 1 = 2 z0.2 (large spread), feature 0 = 0.05 z0.3 (small spread), the
    rest noise; the readout weighs feature 0 by 2 and feature 1 by 1, so |A| alone ranks
    feature 0 first and |A| * std(z) feature 1."""
    rng = np.random.default_rng(0)
    M, D = 300, 6

    def noise():
        return np.where(rng.random((M, D)) < 0.3, rng.exponential(1.0, (M, D)), 0.0)

    Z0, Z1 = noise(), noise()
    Z1[:, 1] = 2 * Z0[:, 2] + 0.01 * rng.random(M) * (Z0[:, 2] > 0)
    Z1[:, 0] = 0.05 * Z0[:, 3] + 0.0005 * rng.random(M) * (Z0[:, 3] > 0)
    coef = np.array([2.0, 1.0, 0, 0, 0, 0])
    return {0: sp.csr_matrix(Z0), 1: sp.csr_matrix(Z1)}, LabelFit(1, coef, 0.0, 1e-3, True)


def test_ranking_comparison_checks_both_rankings_within_the_last_layers(hand_readout):
    Z, label_fit = chain()
    tokens = {(1, 0): DETERMINER, (1, 1): REFLEXIVE, (0, 2): AGREEMENT, (0, 3): PERIOD}
    tokens.update({(layer, f): NOTHING for layer in (0, 1) for f in range(6)
                   if (layer, f) not in tokens})  # fmt: skip
    study = Stub(tokens, Z)
    lasso = hand_readout(Z, label_fit, lam_ratio=0.05, roots=1, k=1)
    table = planted.ranking_comparison(study, lasso)
    assert table.index.name == "ranking"
    assert table.loc["|A| * std(z)"].to_dict() == {
        "reflexive": True, "agreement": True, "punctuation": False, "word_order": False
    }  # fmt: skip
    assert table.loc["|A| (paper)"].to_dict() == {
        "reflexive": False, "agreement": False, "punctuation": True, "word_order": True
    }  # fmt: skip
    assert planted.ranking_comparison(study, hand_readout(Z, label_fit, lam_ratio=0.05),
                                      roots=1, k=1).equals(table)  # fmt: skip
    last_only = planted.ranking_comparison(study, lasso, top_layers=1)
    assert last_only.loc["|A| * std(z)"].tolist() == [True, False, False, False]
    with pytest.raises(ValueError, match="top_layers"):
        planted.ranking_comparison(study, lasso, top_layers=0)


# test sentences: two acceptable, then one of each violation
KINDS = ["none", "none", "reflexive", "agreement", "punctuation", "word_order"]
Z_TEST = np.array(
    [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0], [0, 1, 1, 0]], float
)
LABEL_FIT = LabelFit(1, np.array([1.0, -2.0, 0.5, 0.0]), 0.0, 1e-3, True)
DIAGNOSIS_TOKENS = {(1, 0): REFLEXIVE, (1, 1): DETERMINER, (1, 2): PERIOD, (1, 3): AGREEMENT}


@pytest.fixture
def diagnosis_lasso(hand_readout):
    """A CircuitLasso fitted on the diagnosis study's training features, reading LABEL_FIT."""
    return hand_readout(diagnosis_study().Z, LABEL_FIT)


def diagnosis_study() -> Stub:
    test = pd.DataFrame({"sentence": KINDS, "label": [1, 1, 0, 0, 0, 0], "violation": KINDS})
    train = sp.csr_matrix(np.array([[1, 0, 2, 0], [0, 3, 0, 1], [2, 0, 0, 0], [0, 1, 8, 0]], float))
    return Stub(DIAGNOSIS_TOKENS, {1: train}, {1: sp.csr_matrix(Z_TEST)}, test)


def test_violation_diagnosis_by_hand(diagnosis_lasso):
    table = planted.violation_diagnosis(diagnosis_study(), diagnosis_lasso, standardized=False,
                                        shown=2)  # fmt: skip
    assert table.index.tolist() == list(VIOLATION_CATEGORIES)
    assert table["test sentences"].tolist() == [1, 1, 1, 1]
    # scores z . coef: reflexive -2 (rejected), agreement 1 (accepted: wrong), punctuation 0
    # (p = 0.5, not above: rejected), word order -1.5 (rejected)
    assert table["readout accuracy"].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert table["planted category"].tolist() == list(VIOLATION_CATEGORIES.values())
    # |A| = (1, 2, 0.5, 0): ranks f1 #1, f0 #2, f2 #3, f3 #4
    assert table["first rank of the category"].tolist() == [2, 4, 3, 1]
    # acceptable mean (0.5, 0, 0.5, 0); reflexive shift coef * ((0,1,0,0) - mean) =
    # (-0.5, -2, -0.25, 0); agreement coef * ((1,0,0,1) - mean) = (0.5, 0, -0.25, 0)
    rejecting = table["features rejecting these sentences"]
    assert rejecting["reflexive"] == "1 (#1): the, cat | 0 (#2): himself, herself"
    assert rejecting["agreement"] == "2 (#3): . | 1 (#1): the, cat"


def test_violation_diagnosis_standardized_ranks_by_std_weighted_importance(diagnosis_lasso):
    study = diagnosis_study()
    table = planted.violation_diagnosis(study, diagnosis_lasso, standardized=True)
    order = np.argsort(-label_importance(LABEL_FIT, feature_std(study.Z[1])), kind="stable")
    first = {
        v: next(
            r + 1 for r, f in enumerate(order) if dominant_category(DIAGNOSIS_TOKENS[1, f]) == c
        )
        for v, c in VIOLATION_CATEGORIES.items()
    }
    assert table["first rank of the category"].to_dict() == first
    assert first != {"reflexive": 2, "agreement": 4, "punctuation": 3, "word_order": 1}
    search_one = planted.violation_diagnosis(study, diagnosis_lasso, standardized=True, search=1)
    assert diagnosis_lasso.standardized  # None: as the estimator ranks
    assert planted.violation_diagnosis(study, diagnosis_lasso).equals(table)
    assert search_one["first rank of the category"].isna().sum() == 3


def test_violation_diagnosis_needs_violation_tags(diagnosis_lasso):
    study = diagnosis_study()
    study.test = study.test.drop(columns="violation")
    with pytest.raises(ValueError, match="no 'violation' column"):
        planted.violation_diagnosis(study, diagnosis_lasso)
