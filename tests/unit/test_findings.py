"""The paper's qualitative findings looked for in a hand-made interpreted circuit."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from sklearn.base import clone

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.data.concepts import ENGLISH_CONCEPTS, dominant_concept
from circuitlasso.evaluation.findings import concept_table, edge_type_table, readout_baselines

TOKENS = {
    "z3.1": {"himself": 6, "itself": 4},  # a root
    "z3.2": {".": 9, "the": 1},  # a root
    "z2.5": {"himself": 10},
    "z2.6": {"he": 5, "him": 5},
    "z1.7": {"myself": 3, "yourself": 3, "the": 4},  # 60 %: reflexives
    "z1.8": {"is": 2, "the": 3},  # 40 %: none
}
EDGES = [
    ("z2.5", "z3.1", 0.8, "persistence"),
    ("z2.6", "z3.1", -0.3, "other"),
    ("z1.7", "z2.5", 0.5, "dropping"),
    ("z1.8", "z2.6", 0.2, "other"),
    ("z2.6", "z3.2", 0.1, "merging"),
]


@pytest.fixture
def circuit() -> Circuit:
    graph = Circuit()
    for i, (node, tokens) in enumerate(TOKENS.items()):
        layer, feature = (int(x) for x in node[1:].split("."))
        graph.add_node(node, layer=layer, feature=feature, importance=1.0 / (i + 1),
                       top_tokens=tokens)  # fmt: skip
    for parent, child, coef, kind in EDGES:
        graph.add_edge(parent, child, coef=coef, type=kind)
    return graph


def test_a_concept_needs_half_of_the_top_tokens() -> None:
    assert dominant_concept(Counter({"Himself": 2, "the": 2}), ENGLISH_CONCEPTS) == "reflexives"
    assert dominant_concept(Counter({"is": 2, "the": 3}), ENGLISH_CONCEPTS) is None
    assert dominant_concept(Counter({"is": 2, "the": 3}), ENGLISH_CONCEPTS, 0.4) == (
        "agreement_verbs"
    )
    assert dominant_concept(Counter(), ENGLISH_CONCEPTS) is None


def test_concepts_are_found_with_their_roots_and_chains(circuit: Circuit) -> None:
    table = concept_table(circuit)
    assert table.loc["reflexives", "nodes"] == "z3.1, z2.5, z1.7"
    assert table.loc["reflexives", "roots"] == 1
    assert table.loc["reflexives", "layers"] == "3, 2, 1"
    assert table.loc["reflexives", "longest chain"] == 3
    assert table.loc["final_punctuation", "nodes"] == "z3.2"
    assert table.loc["final_punctuation", "longest chain"] == 1
    assert table.loc["hunger_thirst", "nodes"] == ""
    assert table.loc["hunger_thirst", "longest chain"] == 0
    assert table.loc["agreement_verbs", "roots"] == 0
    assert "-self" in table.loc["reflexives", "in the paper"]


def test_a_chain_must_follow_edges(circuit: Circuit) -> None:
    circuit.remove_edge("z2.5", "z3.1")
    assert concept_table(circuit).loc["reflexives", "longest chain"] == 2


def test_edge_types_are_counted_with_their_strongest_edge(circuit: Circuit) -> None:
    table = edge_type_table(circuit)
    assert table["edges"].to_dict() == {"persistence": 1, "merging": 1, "dropping": 1, "other": 2}
    assert table.loc["other", "strongest"] == "z2.6 -> z3.1"
    assert table.loc["other", "parent"] == "he, him"
    assert table.loc["persistence", "child"] == "himself, itself"


def test_an_uninterpreted_circuit_is_refused(circuit: Circuit) -> None:
    del circuit.nodes["z2.6"]["top_tokens"]
    for table in (concept_table, edge_type_table):
        with pytest.raises(ValueError, match="node z2.6 has no top_tokens"):
            table(circuit)
    circuit.nodes["z2.6"]["top_tokens"] = TOKENS["z2.6"]
    del circuit.edges["z2.6", "z3.2"]["type"]
    for table in (concept_table, edge_type_table):
        with pytest.raises(ValueError, match="edge z2.6 -> z3.2 has no type"):
            table(circuit)


def test_readout_baselines_on_the_toy_world(toy_circuit) -> None:
    study, lasso = toy_circuit.study, toy_circuit.lasso
    table = readout_baselines(study, lasso)
    majority = int(study.y.mean() >= 0.5)
    assert table.loc["majority class", "test"] == pytest.approx(np.mean(study.y_test == majority))
    sparse = table.index[1]
    assert sparse == f"sparse readout A_L,y ({np.count_nonzero(lasso.coef_)} SAE features)"
    found = lasso.predict(study.Z_test[study.last])
    assert table.loc[sparse, "test"] == pytest.approx(np.mean(found == study.y_test))
    dense = table.index[2]
    assert dense == "dense probe (128 dimensions of blocks.3.hook_resid_post)"
    # the toy model carries acceptability linearly: its probe beats the majority class
    assert table.loc[dense, "test"] > table.loc["majority class", "test"] + 0.1
    regression = clone(lasso).set_params(kind="regression").fit(study.Z, study.y.astype(float))
    with pytest.raises(ValueError, match="binary readout, not a regression one"):
        readout_baselines(study, regression)
