"""Labels and tables of a traced circuit, on a five-node circuit whose edge types, labels and
row order are worked out by hand."""

from __future__ import annotations

from collections import Counter

import pytest

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.trace import (
    edge_table,
    interpret_circuit,
    node_captions,
    node_table,
    root_features,
)

# (layer, feature) -> top-token counts; sets of keys decide the edge types (overlap 0.5)
TOKENS = {
    (2, 7): Counter({"a": 5, "b": 3, "c": 2, "d": 1, "e": 1, "f": 1}),
    (2, 4): Counter({"b": 2, "a": 2, "x": 1}),
    (1, 3): Counter({"a": 4, "b": 4}),
    (1, 9): Counter({"q": 1}),
    (0, 5): Counter({"a": 3, "b": 1, "c": 1, "d": 1, "e": 1}),
}


def circuit() -> Circuit:
    graph = Circuit()
    for layer, feature, importance in [
        (2, 7, 3.0),
        (2, 4, 5.0),
        (1, 3, 1.23456),  # ties with z1.9 once rounded to 3 decimals; below it before
        (1, 9, 1.2349),
        (0, 5, 0.5),
    ]:
        graph.add_node(f"z{layer}.{feature}", layer=layer, feature=feature, importance=importance)
    for parent, child, coef in [
        ("z1.3", "z2.7", 0.51234),
        ("z1.9", "z2.7", -0.2),
        ("z1.3", "z2.4", 1.0),
        ("z0.5", "z1.3", 2.0),
    ]:
        graph.add_edge(parent, child, coef=coef, score=abs(coef))
    return graph


def test_interpret_circuit_types_edges_and_keeps_five_top_tokens_per_node():
    graph = circuit()
    calls = []

    def top_tokens(layer: int, feature: int) -> Counter[str]:
        calls.append((layer, feature))
        return TOKENS[layer, feature]

    tokens = interpret_circuit(graph, top_tokens)
    assert sorted(calls) == sorted(TOKENS)
    assert tokens == {f"z{layer}.{feature}": c for (layer, feature), c in TOKENS.items()}
    # {a,b} -> {a..f}: keeps the parent's, explains 2 of 6 of the child's: merging
    # {q} -> {a..f}: nothing shared; {a,b} -> {b,a,x}: both ways; {a..e} -> {a,b}: child only
    assert {(p, c): t for p, c, t in graph.edges(data="type")} == {
        ("z1.3", "z2.7"): "merging",
        ("z1.9", "z2.7"): "other",
        ("z1.3", "z2.4"): "persistence",
        ("z0.5", "z1.3"): "dropping",
    }
    assert graph.nodes["z2.7"]["top_tokens"] == {"a": 5, "b": 3, "c": 2, "d": 1, "e": 1}
    assert list(graph.nodes["z2.4"]["top_tokens"]) == ["b", "a", "x"]  # ties in first-seen order
    assert node_captions(graph) == {
        "z2.7": "a, b, c",
        "z2.4": "b, a, x",
        "z1.3": "a, b",
        "z1.9": "q",
        "z0.5": "a, b, c",
    }
    assert node_captions(graph, n=1)["z2.7"] == "a"


def test_node_table_orders_by_layer_then_unrounded_importance():
    graph = circuit()
    before = node_table(graph)
    assert before["top tokens"].tolist() == [""] * 5
    interpret_circuit(graph, lambda layer, feature: TOKENS[layer, feature])
    table = node_table(graph)
    assert table["node"].tolist() == ["z2.4", "z2.7", "z1.9", "z1.3", "z0.5"]
    assert table["layer"].tolist() == [2, 2, 1, 1, 0]
    assert table["importance"].tolist() == [5.0, 3.0, 1.235, 1.235, 0.5]
    assert table.loc[0, "top tokens"] == "b x2, a x2, x x1"
    assert table.loc[4, "top tokens"] == "a x3, b x1, c x1, d x1, e x1"


def test_edge_table_lists_edges_with_rounded_coefficients_and_types():
    graph = circuit()
    assert edge_table(graph)["type"].isna().all()
    interpret_circuit(graph, lambda layer, feature: TOKENS[layer, feature])
    table = edge_table(graph)
    assert table.to_dict("records") == [  # networkx order: by parent, parents as added
        {"parent": "z1.3", "child": "z2.7", "coef": 0.512, "type": "merging"},
        {"parent": "z1.3", "child": "z2.4", "coef": 1.0, "type": "persistence"},
        {"parent": "z1.9", "child": "z2.7", "coef": -0.2, "type": "other"},
        {"parent": "z0.5", "child": "z1.3", "coef": 2.0, "type": "dropping"},
    ]


def test_root_features_are_the_last_layer_by_decreasing_importance():
    graph = circuit()
    assert root_features(graph) == [4, 7]
    graph.nodes["z2.7"]["importance"] = 6.0
    assert root_features(graph) == [7, 4]
    with pytest.raises(ValueError, match="no nodes"):
        root_features(Circuit())
