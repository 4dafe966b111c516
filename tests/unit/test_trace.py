"""Backward tracing of SAE-feature circuits on a planted chain, the parent rules, edge types and
the JSON round trip.

The planted chain has three layers of sparse nonnegative features (400 prompts, 30 features):
``z1.3 = 2 z0.5``, ``z2.7 = z1.3 + 0.5 z1.9`` and ``z2.11 = 0.5 z1.3``, each plus a little noise
where active, and the label ``y = z2.7 > median``; every other feature is independent noise.
Tracing from one root with one parent per node must follow ``z2.7 <- z1.3 <- z0.5``, with
coefficients near the planted ones.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import LabelFit, LayerPairFit, fit_label, fit_layer_pair
from circuitlasso.circuits.trace import (
    LayerRegressions,
    classify_edge,
    classify_edges,
    label_importance,
    node_name,
    select,
    trace_circuit,
)

M, D = 400, 30
LAM_RATIO = 0.05


def noise(rng: np.random.Generator, density: float = 0.3) -> np.ndarray:
    return np.where(rng.random((M, D)) < density, rng.exponential(1.0, (M, D)), 0.0)


def sparse_column(rng: np.random.Generator, density: float) -> np.ndarray:
    return np.where(rng.random(M) < density, rng.exponential(1.0, M), 0.0)


@pytest.fixture(scope="module")
def chain() -> tuple[dict[int, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(0)
    Z0 = noise(rng)
    Z0[:, 5] = sparse_column(rng, 0.6)
    Z1 = noise(rng)
    Z1[:, 3] = np.where(Z0[:, 5] > 0, 2 * Z0[:, 5] + 0.05 * rng.random(M), 0.0)
    Z1[:, 9] = sparse_column(rng, 0.5)
    Z2 = noise(rng)
    planted = Z1[:, 3] + 0.5 * Z1[:, 9]
    Z2[:, 7] = np.where(planted > 0, planted + 0.05 * rng.random(M), 0.0)
    Z2[:, 11] = np.where(Z1[:, 3] > 0, 0.5 * Z1[:, 3] + 0.05 * rng.random(M), 0.0)
    y = (Z2[:, 7] > np.median(Z2[:, 7])).astype(int)
    return {0: Z0, 1: Z1, 2: Z2}, y


@pytest.fixture(scope="module")
def label_fit(chain) -> LabelFit:
    Z, y = chain
    return fit_label(sp.csr_matrix(Z[2]), y, 0.3, layer=2)


def regressions(chain) -> LayerRegressions:
    Z, _ = chain
    return LayerRegressions({layer: sp.csr_matrix(z) for layer, z in Z.items()}, LAM_RATIO)


def full_fit(Z: dict[int, np.ndarray], layer: int) -> LayerPairFit:
    """All columns of ``A_{layer-1,layer}`` in one fit."""
    Zp, Zc = sp.csr_matrix(Z[layer - 1]), sp.csr_matrix(Z[layer])
    return fit_layer_pair(Zp, Zc, LAM_RATIO, parent=layer - 1, child=layer)


def edge_data(graph: Circuit) -> dict[tuple[str, str], dict]:
    return {(u, v): dict(data) for u, v, data in graph.edges(data=True)}


# ---------------------------------------------------------------- the planted chain


def test_label_fit_reads_only_the_planted_feature(label_fit: LabelFit) -> None:
    np.testing.assert_array_equal(np.flatnonzero(label_fit.coef), [7])
    assert label_fit.coef[7] > 0
    np.testing.assert_array_equal(label_importance(label_fit), np.abs(label_fit.coef))


def test_trace_recovers_the_planted_chain(chain, label_fit: LabelFit) -> None:
    graph = trace_circuit(label_fit, regressions(chain), roots=1, k=1, standardized=False)
    assert set(graph.nodes) == {"z2.7", "z1.3", "z0.5"}
    assert set(graph.edges) == {("z1.3", "z2.7"), ("z0.5", "z1.3")}
    for name, layer, feature in [("z2.7", 2, 7), ("z1.3", 1, 3), ("z0.5", 0, 5)]:
        assert graph.nodes[name]["layer"] == layer and graph.nodes[name]["feature"] == feature
    edges = edge_data(graph)
    # the Lasso shrinks the planted 1 and 2 a little (lam_ratio = 0.05)
    assert edges["z1.3", "z2.7"]["coef"] == pytest.approx(0.93, abs=0.08)
    assert edges["z0.5", "z1.3"]["coef"] == pytest.approx(1.91, abs=0.11)
    for data in edges.values():
        assert data["score"] == pytest.approx(abs(data["coef"]))
    assert graph.nodes["z2.7"]["importance"] == pytest.approx(abs(label_fit.coef[7]))
    assert graph.nodes["z1.3"]["importance"] == pytest.approx(edges["z1.3", "z2.7"]["score"])
    assert graph.nodes["z0.5"]["importance"] == pytest.approx(edges["z0.5", "z1.3"]["score"])


def test_trace_edges_hold_the_layer_pair_coefficients(chain, label_fit: LabelFit) -> None:
    Z, _ = chain
    graph = trace_circuit(label_fit, regressions(chain), roots=[7], k=2, standardized=False)
    full = {layer: full_fit(Z, layer) for layer in (1, 2)}
    assert {u for u, v in graph.in_edges("z2.7")} == {"z1.3", "z1.9"}  # the two planted parents
    for u, v, data in graph.edges(data=True):
        pu, pv = graph.nodes[u], graph.nodes[v]
        assert pu["layer"] == pv["layer"] - 1
        expected = full[pv["layer"]].coef[pu["feature"], pv["feature"]]
        assert data["coef"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
        # the parents kept are the two largest |coef| of the child's column
        column = np.abs(full[pv["layer"]].coef[:, pv["feature"]].toarray().ravel())
        assert abs(expected) >= np.sort(column)[-2] * (1 - 1e-4)
    for name in graph.nodes:
        if graph.nodes[name]["layer"] < 2:
            total = sum(d["score"] for _, _, d in graph.out_edges(name, data=True))
            assert graph.nodes[name]["importance"] == pytest.approx(total)


def test_trace_with_two_roots_and_two_parents_sums_parent_scores(chain, label_fit) -> None:
    graph = trace_circuit(label_fit, regressions(chain), roots=[7, 0], k=2)
    assert {"z2.7", "z2.0"} <= set(graph.nodes)
    assert graph.nodes["z2.0"]["importance"] == 0.0  # label coefficient 0, given as a root
    for name, data in graph.nodes(data=True):
        out = [d["score"] for _, _, d in graph.out_edges(name, data=True)]
        if data["layer"] < 2:
            assert out and data["importance"] == pytest.approx(sum(out))
        for _, _, d in graph.in_edges(name, data=True):
            assert d["score"] > 0
        assert len(graph.in_edges(name)) <= 2


def test_parent_shared_by_two_children_sums_their_scores(chain, label_fit) -> None:
    # z2.11 = 0.5 z1.3 (plus noise): z1.3 is the top parent of both roots
    graph = trace_circuit(label_fit, regressions(chain), roots=[7, 11], k=1, depth=1)
    assert set(graph.edges) == {("z1.3", "z2.7"), ("z1.3", "z2.11")}
    edges = edge_data(graph)
    assert 0.4 < edges["z1.3", "z2.11"]["coef"] <= 0.51
    expected = edges["z1.3", "z2.7"]["score"] + edges["z1.3", "z2.11"]["score"]
    assert graph.nodes["z1.3"]["importance"] == pytest.approx(expected)
    assert graph.nodes["z2.11"]["importance"] == 0.0  # a given root the label does not read


def test_mass_rule_keeps_the_fewest_parents_reaching_the_share(chain, label_fit) -> None:
    graph = trace_circuit(
        label_fit, regressions(chain), roots=1, k=None, mass=0.6, standardized=False
    )
    assert {u for u, _ in graph.in_edges("z2.7")} == {"z1.3"}  # |coef| 0.95 of about 1.36 in all
    graph = trace_circuit(
        label_fit, regressions(chain), roots=1, k=None, mass=0.8, standardized=False
    )
    assert {u for u, _ in graph.in_edges("z2.7")} == {"z1.3", "z1.9"}


@pytest.mark.parametrize(
    ("depth", "nodes"),
    [(0, {"z2.7"}), (1, {"z2.7", "z1.3"}), (2, {"z2.7", "z1.3", "z0.5"}), (9, None)],
)
def test_depth_limits_the_layers_traced(chain, label_fit, depth: int, nodes) -> None:
    graph = trace_circuit(label_fit, regressions(chain), roots=1, k=1, depth=depth)
    assert set(graph.nodes) == (nodes or {"z2.7", "z1.3", "z0.5"})


def test_per_prompt_trace_weights_scores_by_activations(chain, label_fit: LabelFit) -> None:
    Z, _ = chain
    # a prompt where z1.3 is off and z1.9 is on: the prompt's parent of z2.7 is z1.9
    candidates = np.flatnonzero((Z[1][:, 3] == 0) & (Z[1][:, 9] > 0) & (Z[2][:, 7] > 0))
    prompt = int(candidates[0])
    reg = regressions(chain)
    graph = trace_circuit(label_fit, reg, roots=1, k=1, prompt=prompt)
    assert graph.nodes["z2.7"]["importance"] == pytest.approx(
        abs(label_fit.coef[7]) * Z[2][prompt, 7]
    )
    assert {u for u, _ in graph.in_edges("z2.7")} == {"z1.9"}
    dataset = trace_circuit(label_fit, reg, roots=1, k=1)
    assert {u for u, _ in dataset.in_edges("z2.7")} == {"z1.3"}
    for u, v, data in graph.edges(data=True):
        pu, pv = graph.nodes[u], graph.nodes[v]
        coef = reg.parents(pv["layer"], [pv["feature"]])[pv["feature"]].column(pv["feature"])
        assert data["coef"] == pytest.approx(coef[pu["feature"], 0])
        activation = Z[pu["layer"]][prompt, pu["feature"]]
        assert activation > 0
        assert data["score"] == pytest.approx(abs(data["coef"]) * activation)

    # a prompt where the only root is off gives an empty circuit
    off = int(np.flatnonzero(Z[2][:, 7] == 0)[0])
    assert trace_circuit(label_fit, reg, roots=1, k=1, prompt=off).number_of_nodes() == 0
    with pytest.raises(ValueError, match="prompt 400 out of range: there are 400 prompts"):
        trace_circuit(label_fit, reg, roots=1, k=1, prompt=M)


def test_label_importance_per_prompt() -> None:
    fit = LabelFit(0, np.array([0.5, -2.0, 0.0, 1.0]), intercept=0.0, lam=0.1, converged=True)
    np.testing.assert_allclose(label_importance(fit), [0.5, 2.0, 0.0, 1.0])
    z = np.array([2.0, 0.0, 3.0, -1.5])
    np.testing.assert_allclose(label_importance(fit, z), [1.0, 0.0, 0.0, 1.5])


def test_label_fit_on_another_layer_is_rejected(chain, label_fit: LabelFit) -> None:
    wrong = LabelFit(1, label_fit.coef, label_fit.intercept, label_fit.lam, True)
    with pytest.raises(ValueError, match="the label fit reads layer 1, the last layer is 2"):
        trace_circuit(wrong, regressions(chain))


# ---------------------------------------------------------------- LayerRegressions


def test_layer_regressions_fit_columns_lazily_and_keep_them(chain) -> None:
    Z, _ = chain
    reg = regressions(chain)
    first = reg.parents(2, [7, 3])
    assert set(first) == {7, 3} and first[7] is first[3]
    np.testing.assert_array_equal(first[7].children, [3, 7])
    again = reg.parents(2, [3, 12])
    assert again[3] is first[3]  # kept, not refit
    np.testing.assert_array_equal(again[12].children, [12])  # only the new column is fit
    full = full_fit(Z, 2)
    for feature, fit in {**first, **again}.items():
        assert (fit.parent, fit.child) == (1, 2)
        expected = full.coef[:, feature].toarray().ravel()
        np.testing.assert_allclose(
            fit.column(feature).toarray().ravel(), expected, atol=1e-6 * np.abs(expected).max()
        )


def test_layer_regressions_layer_order() -> None:
    Z = {8: sp.csr_matrix((5, 3)), 0: sp.csr_matrix((5, 3)), 4: sp.csr_matrix((5, 3))}
    reg = LayerRegressions(Z, 0.1)
    assert reg.layers == [0, 4, 8]
    assert reg.parent_layer(8) == 4 and reg.parent_layer(4) == 0
    with pytest.raises(ValueError, match="layer 0 is the first collected layer"):
        reg.parent_layer(0)
    with pytest.raises(ValueError, match="need the features of at least one layer"):
        LayerRegressions({}, 0.1)


# ---------------------------------------------------------------- select


def select_reference(scores: np.ndarray, k: int | None, mass: float | None) -> list[int]:
    ranked = sorted((i for i in range(len(scores)) if scores[i] > 0), key=lambda i: -scores[i])
    if k is not None:
        return ranked[:k]
    total, kept, acc = sum(scores[i] for i in ranked), [], 0.0
    for i in ranked:
        if acc >= mass * total * (1 - 1e-9):
            break
        kept.append(i)
        acc += scores[i]
    return kept


SCORES = np.array([0.1, 0.5, 0.0, 0.3, 0.1])


@pytest.mark.parametrize(
    ("k", "mass", "expected"),
    [
        (1, None, [1]),
        (2, None, [1, 3]),
        (4, None, [1, 3, 0, 4]),  # ties keep index order
        (10, None, [1, 3, 0, 4]),  # zero scores are never kept
        (None, 0.5, [1]),
        (None, 0.51, [1, 3]),
        (None, 0.8, [1, 3]),  # reached exactly
        (None, 0.85, [1, 3, 0]),
        (None, 1.0, [1, 3, 0, 4]),
    ],
)
def test_select_rules(k, mass, expected: list[int]) -> None:
    got = select(SCORES, k=k, mass=mass)
    assert got.tolist() == expected
    assert expected == select_reference(SCORES, k, mass)


def test_select_mass_reached_up_to_rounding() -> None:
    # the top score holds exactly 7/11 of the total, which floating point puts a hair below
    scores = np.array([0.1, 0.3, 0.7])
    assert (np.cumsum([0.7, 0.3, 0.1]) / scores.sum())[0] < 7 / 11
    assert select(scores, mass=7 / 11).tolist() == [2]
    assert select(scores, mass=7 / 11 + 1e-6).tolist() == [2, 1]


def test_select_breaks_ties_by_index() -> None:
    rng = np.random.default_rng(0)
    scores = np.repeat([1.0, 2.0, 3.0], 20)[rng.permutation(60)]
    expected = [i for value in (3.0, 2.0, 1.0) for i in np.flatnonzero(scores == value)]
    assert select(scores, k=60).tolist() == expected
    assert select(scores, k=25).tolist() == expected[:25]
    assert select(scores, mass=0.5).tolist() == expected[:20]


def test_select_on_random_scores_matches_the_reference() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        scores = np.where(rng.random(15) < 0.6, rng.exponential(1.0, 15), 0.0)
        for k in (1, 3, 20):
            assert select(scores, k=k).tolist() == select_reference(scores, k, None)
        for mass in (0.1, 0.5, 0.9, 1.0):
            assert select(scores, mass=mass).tolist() == select_reference(scores, None, mass)


def test_select_all_zero_scores_keeps_nothing() -> None:
    assert select(np.zeros(4), k=2).tolist() == []
    assert select(np.zeros(4), mass=0.5).tolist() == []


@pytest.mark.parametrize(
    ("k", "mass", "message"),
    [
        (None, None, "give exactly one of k"),
        (2, 0.5, "give exactly one of k"),
        (0, None, "k must be >= 1, got 0"),
        (None, 0.0, r"mass must be in \(0, 1\], got 0.0"),
        (None, 1.5, r"mass must be in \(0, 1\], got 1.5"),
    ],
)
def test_select_rejects_bad_rules(k, mass, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        select(SCORES, k=k, mass=mass)


# ---------------------------------------------------------------- edge types


@pytest.mark.parametrize(
    ("parent", "child", "expected"),
    [
        ({"self", "himself", "itself"}, {"self", "himself", "itself", "myself"}, "persistence"),
        ({"hungry", "thirsty"}, {"hungry", "thirsty", "tired", "weary", "sleepy"}, "merging"),
        ({"himself", "herself", "itself", "myself", "yourself"}, {"himself"}, "dropping"),
        ({"ate", "eat"}, {"hungry", "thirsty"}, "other"),
        ({"a", "b", "c", "d"}, {"a", "b", "x", "y"}, "persistence"),  # exactly half each way
        (set(), {"a"}, "other"),
        ({"a"}, [], "other"),
    ],
)
def test_classify_edge(parent, child, expected: str) -> None:
    assert classify_edge(parent, child) == expected


def test_classify_edge_overlap_threshold() -> None:
    parent, child = {"a", "b", "c", "d"}, {"a", "b", "c", "x", "y", "z"}  # shares 3/4 and 3/6
    assert classify_edge(parent, child, overlap=0.5) == "persistence"
    assert classify_edge(parent, child, overlap=0.75) == "merging"
    assert classify_edge(child, parent, overlap=0.75) == "dropping"
    assert classify_edge(parent, child, overlap=0.9) == "other"


def test_classify_edges_sets_the_type_of_every_edge() -> None:
    graph = Circuit()
    graph.add_edge("z0.1", "z1.2", coef=1.0, score=1.0)
    graph.add_edge("z0.3", "z1.2", coef=0.5, score=0.5)
    graph.add_edge("z1.2", "z2.4", coef=-1.0, score=1.0)
    tokens = {
        "z0.1": Counter({"self": 5, "himself": 2}),
        "z0.3": ["dog", "cat"],
        "z1.2": {"self", "himself", "ate", "food", "meal"},
        "z2.4": {"himself"},
    }
    classify_edges(graph, tokens)
    assert graph.edges["z0.1", "z1.2"]["type"] == "merging"
    assert graph.edges["z0.3", "z1.2"]["type"] == "other"
    assert graph.edges["z1.2", "z2.4"]["type"] == "dropping"
    assert graph.edges["z0.1", "z1.2"]["coef"] == 1.0  # other attributes untouched


# ---------------------------------------------------------------- JSON


def test_json_round_trip(chain, label_fit: LabelFit, tmp_path: Path) -> None:
    graph = trace_circuit(label_fit, regressions(chain), roots=[7, 0], k=2)
    classify_edges(graph, {name: {name} for name in graph.nodes})
    path = tmp_path / "sub" / "circuit.json"
    path.parent.mkdir()
    text = graph.to_json(path)
    assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == ["circuit.json"]  # no temporary left
    data = json.loads(text)
    assert data["directed"] is True
    back = Circuit.load(path)
    assert isinstance(back, Circuit) and isinstance(back, nx.DiGraph)
    assert dict(back.nodes(data=True)) == dict(graph.nodes(data=True))
    assert edge_data(back) == edge_data(graph)
    assert set(back.edges) == set(graph.edges)  # parent -> child kept
    assert back.to_json() == text
    assert Circuit.from_json(Circuit().to_json()).number_of_nodes() == 0


def test_node_name() -> None:
    assert node_name(12, 20726) == "z12.20726"
