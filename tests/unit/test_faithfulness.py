"""The faithfulness experiment's choices and reports against independent references.

References: hand computations on small frames, a fake clock, the ablation, attribution and
surrogate functions (:mod:`circuitlasso.evaluation.ablate`, ``attribution``, ``surrogate``)
called one ranking at a time as the section used to call them, the label fit's own nonzero
coefficients (the roots of the trace), and a surrogate built by hand from two layer-pair fits.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
from sae_lens import SAE
from sklearn.linear_model import LogisticRegression
from transformer_lens import HookedTransformer

from circuitlasso import timing
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import LabelFit
from circuitlasso.collect import collect_sae_features
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.data.toyworld.datasets import load_toy_cola
from circuitlasso.evaluation import faithfulness as fa
from circuitlasso.evaluation.ablate import feature_means, node_ablation_sweep, rank_features
from circuitlasso.evaluation.attribution import (
    DEVIATION,
    DIRECT,
    ForwardScores,
    attribution_scores,
)
from circuitlasso.evaluation.metrics import MinimalPairMargin, Readout
from circuitlasso.evaluation.surrogate import Surrogate, edge_ablation_sweep

torch.set_num_threads(1)

LAST = 3


def readout(Z: sp.csr_matrix, y: np.ndarray, layer: int) -> LabelFit:
    """A sparse l1-logistic readout of ``Z`` by scikit-learn."""
    fit = LogisticRegression(C=0.5, l1_ratio=1.0, solver="liblinear").fit(Z, y)
    return LabelFit(layer, fit.coef_.ravel(), float(fit.intercept_[0]), 0.0, True)


@pytest.fixture(scope="module")
def toy() -> tuple[HookedTransformer, dict[int, SAE]]:
    model = load_model("toy")
    return model, load_saes("toy", range(LAST + 1), model=model)


@pytest.fixture(scope="module")
def sentences() -> fa.Sentences:
    train, test = load_toy_cola("train"), load_toy_cola("test")
    return fa.evaluation_sentences(train.iloc[:300], test, 3, 16, seed=0)


@pytest.fixture(scope="module")
def label_fit(toy, tmp_path_factory: pytest.TempPathFactory) -> LabelFit:
    model, saes = toy
    train = load_toy_cola("train").iloc[:300]
    Z = collect_sae_features(model, {LAST: saes[LAST]}, train["sentence"].tolist(),
                             cache_dir=tmp_path_factory.mktemp("z"), progress=False)  # fmt: skip
    return readout(Z[LAST], train["label"].to_numpy(), LAST)


# ---------------------------------------------------------------- sentences


def test_evaluation_sentences_are_a_seeded_class_balanced_sample() -> None:
    test = pd.DataFrame({"sentence": [f"s{i}" for i in range(20)], "label": [0, 1, 1, 1] * 5})
    train = pd.DataFrame({"sentence": [f"t{i}" for i in range(6)], "label": [0, 1] * 3})
    found = fa.evaluation_sentences(train, test, 4, 10, seed=3)
    # the section's former inline code
    chosen = pd.concat([test[test["label"] == y].sample(n=4, random_state=3) for y in (0, 1)])
    assert found.prompts == chosen["sentence"].tolist()
    assert found.labels == [0] * 4 + [1] * 4
    assert all(test.set_index("sentence").loc[found.prompts, "label"] == found.labels)
    assert found.reference == train["sentence"].sample(n=6, random_state=3).tolist()
    assert sorted(found.reference) == sorted(train["sentence"])  # all 6: fewer than asked
    assert str(found) == "8 evaluation sentences (4 per class), means over 6 training sentences"
    assert fa.evaluation_sentences(train, test, 4, 10, seed=4).prompts != found.prompts
    with pytest.raises(ValueError, match=r"fewer than 6 sentences of label\(s\) \[0\]"):
        fa.evaluation_sentences(train, test, 6, 10, seed=0)
    with pytest.raises(ValueError, match=r"the train frame lacks columns \['sentence'\]"):
        fa.evaluation_sentences(train.rename(columns={"sentence": "text"}), test, 1, 1, seed=0)


# ---------------------------------------------------------------- rankings


@pytest.fixture(scope="module")
def synthetic(planted_layers) -> tuple[dict[int, sp.csr_matrix], LabelFit, np.ndarray]:
    """The planted layers and a readout of the last one."""
    Z, y = planted_layers
    return Z, readout(Z[2], y, 2), y


def test_trace_surrogate_starts_from_every_feature_the_readout_uses(
    synthetic, hand_readout
) -> None:
    Z, label, y = synthetic
    used = {f"z2.{f}" for f in np.flatnonzero(label.coef)}
    assert len(used) > 1 and len(used) < 8  # a real choice among the 8 (measured: 5)
    traced = fa.trace_surrogate(hand_readout(Z, label, lam_ratio=0.1), y, k=2)
    assert used <= set(traced.circuit.nodes)  # roots=None: every used feature is a root
    assert traced.ranking == traced.surrogate.rank_nodes()
    effects = traced.surrogate.node_effects()
    assert [effects[n] for n in traced.ranking] == sorted(effects.values(), reverse=True)
    # the metric is signed by the labels: the surrogate's unablated metric is p(correct) - p(wrong)
    p = label.predict_proba(Z[2])
    assert traced.surrogate.metric() == pytest.approx(np.mean((2 * y - 1) * (2 * p - 1)), abs=1e-9)
    # one root, the feature of largest |A| * std(z): z2.3 (A = 1, std 2.4) before z2.2 (A = 5,
    # std 0.05), a large coefficient on a feature that barely varies
    std = Z[2].toarray().std(0)
    assert std[3] > 2 and std[2] < 0.1
    hand = LabelFit(2, np.array([0, 0, 5.0, 1.0, 0, 0, 0, 0]), 0.0, 1e-3, True)
    one = fa.trace_surrogate(hand_readout(Z, hand, lam_ratio=0.1), y, roots=1, k=2)
    assert [n for n, d in one.circuit.nodes(data=True) if d["layer"] == 2] == ["z2.3"]
    # the tables read by hand
    layers = pd.Series([layer for layer, _ in traced.ranking]).value_counts()
    assert traced.by_layer().loc["ranked features"].to_dict() == layers.to_dict()
    assert list(traced.by_layer().columns) == sorted(layers.index)
    assert str(traced) == (
        f"circuit: {traced.circuit.number_of_nodes()} nodes, {traced.circuit.number_of_edges()} "
        f"edges; surrogate: {len(traced.ranking)} ranked features, "
        f"{len(traced.surrogate.edges())} edges"
    )
    empty = LabelFit(2, np.zeros(8), 0.0, 1.0, True)
    with pytest.raises(ValueError, match="the label fit uses no feature"):
        fa.trace_surrogate(hand_readout(Z, empty, lam_ratio=0.1), y)
    # another top (a regression of the model's output): traced from its features, read by it
    output = LabelFit(2, np.array([0, 0, 0, 0, 0, 0.7, -0.4, 0]), 1.0, 1e-3, True,
                      kind="regression", classes=np.array([]))  # fmt: skip
    lasso = hand_readout(Z, label, lam_ratio=0.1)
    other = fa.trace_surrogate(lasso, y, k=2, readout=output)
    assert {n for n, d in other.circuit.nodes(data=True) if d["layer"] == 2} == {"z2.5", "z2.6"}
    np.testing.assert_array_equal(other.surrogate.readout.coef, output.coef)
    assert other.surrogate.readout.intercept == 1.0
    assert other.ranking == other.surrogate.rank_nodes()


def test_attribution_baseline_is_the_means_then_signed_integrated_gradients(
    toy, sentences, label_fit, plant_seconds
) -> None:
    model, saes = toy
    plant_seconds(fa, {"means": 2.0, "integrated gradients": 5.0})
    baseline = fa.attribution_baseline(model, saes, label_fit, sentences, steps=2, batch_size=4)
    means = feature_means(model, saes, sentences.reference, batch_size=4)
    scores = attribution_scores(model, saes, label_fit, sentences.prompts, means,
                                labels=sentences.labels, steps=2, batch_size=4).scores  # fmt: skip
    for layer in saes:
        torch.testing.assert_close(baseline.means[layer], means[layer])
        np.testing.assert_allclose(baseline.scores[layer], scores[layer], rtol=1e-6, atol=1e-9)
    assert baseline.means_seconds == 2.0 and baseline.seconds == 7.0  # the planted stages


def fake_saes(widths: dict[int, int]) -> dict:
    return {layer: SimpleNamespace(cfg=SimpleNamespace(d_sae=d)) for layer, d in widths.items()}


def ablated_read(Z, columns, top, layer, feature, mean) -> np.ndarray:
    """``(n,)`` linear read ``top`` of the last layer of the dense surrogate (residuals held
    fixed, the fitted columns recomputed layer by layer upward) with feature ``feature`` of
    ``layer`` set to ``mean`` on every prompt; ``layer=None``: nothing ablated."""
    dense = {layer: z.toarray() for layer, z in Z.items()}
    new = {layer: z.copy() for layer, z in dense.items()}
    for child in sorted(dense):
        if child in columns:
            (below,) = {fit.parent for fit in columns[child].values()}
            for c, fit in columns[child].items():
                coef = fit.column(c).toarray().ravel()
                new[child][:, c] += (new[below] - dense[below]) @ coef
        if child == layer:
            new[child][:, feature] = mean
    return new[max(dense)] @ top


def test_anchored_score_is_the_exact_effect_of_ablating_each_feature_in_a_linear_surrogate(
    hand_chain,
) -> None:
    Z, columns, label = hand_chain
    surrogate = Surrogate(Z, columns, label)
    rng = np.random.default_rng(3)
    evaluated = {layer: sp.csr_matrix(z.toarray()[:8] * rng.uniform(0.5, 2, (8, 4)))
                 for layer, z in Z.items()}  # fmt: skip
    means = {layer: torch.tensor(rng.uniform(0, 1.5, 4), dtype=torch.float32) for layer in Z}
    weights = np.array([1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0]) * rng.uniform(0.5, 1, 8)
    scores = fa.anchored_scores(surrogate, evaluated, means, weights)
    # by hand: the weighted mean change of the read when the feature is kept rather than ablated
    clean = ablated_read(evaluated, columns, label.coef, None, 0, 0.0)
    exact = {}
    for layer in Z:
        for f in range(4):
            ablated = ablated_read(evaluated, columns, label.coef, layer, f, float(means[layer][f]))
            exact[(layer, f)] = float(np.mean(weights * (clean - ablated)))
    found = {(layer, f): scores.get(layer, np.zeros(4))[f] for layer in Z for f in range(4)}
    assert found == pytest.approx(exact, rel=1e-9, abs=1e-12)
    assert exact[(0, 2)] == 0.0  # z0.2 feeds no fitted column: off the surrogate, no effect
    # every feature with an effect is ranked, largest first; the one that lowers the read last
    ranking = rank_features(scores, signed=True)
    nonzero = {node: v for node, v in exact.items() if v}
    assert ranking == sorted(nonzero, key=lambda node: -nonzero[node])
    last = ranking[-1]
    assert exact[last] < 0 and exact[last] == min(exact.values())
    assert rank_features(scores).index(last) < len(ranking) - 1  # by |score| it is not last
    # another linear top of the last layer (a regression of the model's output) takes the
    # same paths
    top = np.array([1.0, 0.5, -2.0, 0.0])
    other = fa.anchored_scores(Surrogate(Z, columns, Readout(2, top, 0.3)), evaluated, means,
                               weights)  # fmt: skip
    clean = ablated_read(evaluated, columns, top, None, 0, 0.0)
    for layer, f in exact:
        ablated = ablated_read(evaluated, columns, top, layer, f, float(means[layer][f]))
        assert other.get(layer, np.zeros(4))[f] == pytest.approx(
            np.mean(weights * (clean - ablated)), rel=1e-9, abs=1e-12
        )
    with pytest.raises(ValueError, match="layer 2 has 8 prompts, weights 3"):
        fa.anchored_scores(surrogate, evaluated, means, weights[:3])


def test_node_rankings_compare_the_surrogate_ig_and_every_feature_at_random() -> None:
    traced = fa.TracedSurrogate(Circuit(), None, [(1, 2), (0, 0)])  # type: ignore[arg-type]
    scores = {0: np.array([0.0, -3.0, 1.0]), 1: np.array([2.0, 0.0, -0.5, 0.0])}
    baseline = fa.Baseline({}, scores, 1.0)
    rankings = fa.node_rankings(traced, baseline, fake_saes({0: 3, 1: 4}), seed=0)
    assert list(rankings) == ["CircuitLasso", "IG attribution", "random"]
    assert rankings["CircuitLasso"] == [(1, 2), (0, 0)]
    assert rankings["IG attribution"] == [(0, 1), (1, 0), (0, 2), (1, 2)]  # by |score|, nonzero
    every = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)]
    assert sorted(rankings["random"]) == every
    assert (
        rankings["random"]
        != fa.node_rankings(traced, baseline, fake_saes({0: 3, 1: 4}), 1)["random"]
    )
    anchored = fa.Anchored({0: np.array([0.5, 0.0, -2.0]), 1: np.array([0.0, 1.5, 0.0, 0.1])}, 1.0)
    with_anchored = fa.node_rankings(traced, baseline, fake_saes({0: 3, 1: 4}), 0, anchored)
    assert list(with_anchored) == ["CircuitLasso", fa.ANCHORED, "IG attribution", "random"]
    assert with_anchored[fa.ANCHORED] == [(1, 1), (0, 0), (1, 3), (0, 2)]  # by score, signed
    assert {k: v for k, v in with_anchored.items() if k != fa.ANCHORED} == rankings


# ---------------------------------------------------------------- sweeps


def test_sweep_sizes_are_powers_of_two_or_the_given_ones_and_the_whole_ranking() -> None:
    assert fa.sweep_sizes(5) == [1, 2, 4, 5]
    assert fa.sweep_sizes(8) == [1, 2, 4, 8]
    assert fa.sweep_sizes(1) == [1]
    assert fa.sweep_sizes(4460) == [2**i for i in range(13)] + [4460]
    assert fa.sweep_sizes(5, [10, 3, 3, 0]) == [0, 3, 5]
    with pytest.raises(ValueError, match="the ranking has 0 items"):
        fa.sweep_sizes(0)


def test_node_sweep_stacks_each_rankings_ablation_sweep(toy, sentences, label_fit) -> None:
    model, saes = toy
    means = feature_means(model, saes, sentences.reference, batch_size=4)
    active = [(LAST, int(f)) for f in np.argsort(-np.abs(label_fit.coef))[:3]]
    rankings = {"top": active, "other": [(1, 5), (2, 7)]}
    found = fa.node_sweep(model, saes, label_fit, sentences, rankings, means, batch_size=4)
    # the section's former inline code, one ranking at a time
    for method, ranking, sizes in (
        ("top", active, [1, 2, 3]),
        ("other", rankings["other"], [1, 2]),
    ):
        expected = node_ablation_sweep(model, saes, label_fit, sentences.prompts, ranking, sizes,
                                       means, labels=sentences.labels, batch_size=4)  # fmt: skip
        got = found[found["method"] == method].drop(columns="method").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected, rtol=1e-6)
    assert list(found["method"]) == ["top"] * 3 + ["other"] * 2
    assert found["m_full"].iloc[0] > 0.1  # signed by the labels: the readout separates them


@pytest.fixture
def chain(hand_chain) -> Surrogate:
    """The surrogate of the hand-written three-layer chain."""
    return Surrogate(*hand_chain)


def test_edge_rankings_and_sweep_stack_each_rankings_sweep(chain) -> None:
    rankings = fa.edge_rankings(chain, seed=0)
    assert list(rankings) == ["CircuitLasso", "random"]
    assert rankings["CircuitLasso"] == chain.rank_edges()
    assert sorted(rankings["random"]) == sorted(chain.edges())  # 9 edges
    found = fa.edge_sweep(chain, rankings)
    for method, ranking in rankings.items():
        expected = edge_ablation_sweep(chain, ranking, [1, 2, 4, 8, 9])
        got = found[found["method"] == method].drop(columns="method").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected)
    chosen = fa.edge_sweep(chain, rankings, [3, 20])
    assert list(chosen["n"]) == [3, 9, 3, 9]


# ---------------------------------------------------------------- reports


def sweep(method: str, n: list[int], faithfulness: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"n": n, "faithfulness": faithfulness,
                         "completeness": [1 - f for f in faithfulness], "m_full": 0.6,
                         "m_empty": -0.1, "method": method})  # fmt: skip


def test_curve_table_pivots_rounds_and_has_no_signed_zeros() -> None:
    data = pd.concat([sweep("a", [1, 2], [-0.001, 0.876]), sweep("b", [2, 8], [0.5, 1.0])])
    table = fa.curve_table(data)
    assert table.loc[1, ("faithfulness", "a")] == 0.0
    assert not np.signbit(table.loc[1, ("faithfulness", "a")])
    assert table.loc[2, ("faithfulness", "a")] == 0.88
    assert table.loc[2, ("completeness", "b")] == 0.5
    assert np.isnan(table.loc[8, ("faithfulness", "a")])
    assert list(table.index) == [1, 2, 8]


def test_runtime_table_and_method_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0.0, 1.04, 3.0])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    clock = fa.Stopwatch()
    clock.lap("collect")
    clock.lap("fit")
    baseline = fa.Baseline({}, {}, 12.34)
    assert fa.method_seconds(clock, baseline) == {"CircuitLasso": 3.0, "IG attribution": 12.34}
    table = fa.runtime_table(clock, baseline)
    assert table["seconds"].to_dict() == {
        "CircuitLasso: collect": 1.0, "CircuitLasso: fit": 2.0, "CircuitLasso": 3.0,
        "IG attribution": 12.3,
    }  # fmt: skip
    # the anchored ranking: CircuitLasso's stages, the ablation means and its own seconds
    baseline = fa.Baseline({}, {}, 12.34, means_seconds=2.0)
    anchored = fa.Anchored({}, 0.5)
    assert fa.method_seconds(clock, baseline, anchored) == {
        "CircuitLasso": 3.0, fa.ANCHORED: 5.5, "IG attribution": 12.34,
    }  # fmt: skip
    assert fa.runtime_table(clock, baseline, anchored)["seconds"].to_dict() == {
        "CircuitLasso: collect": 1.0, "CircuitLasso: fit": 2.0, "CircuitLasso": 3.0,
        fa.ANCHORED: 5.5, "IG attribution": 12.3,
    }  # fmt: skip
    # the rankings of one forward pass: the ablation means and that pass, each
    forward = ForwardScores({0: np.ones(2)}, {0: np.ones(2)}, 0.25)
    assert fa.method_seconds(clock, baseline, anchored, forward) == {
        "CircuitLasso": 3.0, fa.ANCHORED: 5.5, DIRECT: 2.25, DEVIATION: 2.25,
        "IG attribution": 12.34,
    }  # fmt: skip


def test_write_curves_holds_both_sweeps_marked_by_ablation(tmp_path: Path) -> None:
    node = pd.concat([sweep("a", [1, 2], [0.1, 0.9]), sweep("b", [1], [0.3])])
    edge = sweep("a", [4], [0.7])
    path = tmp_path / "new" / "curves.csv"
    fa.write_curves(node, edge, path)
    curves = pd.read_csv(path)
    assert list(curves["ablation"]) == ["node", "node", "node", "edge"]
    assert list(curves["faithfulness"]) == [0.1, 0.9, 0.3, 0.7]
    assert list(curves["method"]) == ["a", "a", "b", "a"]
    assert [p.name for p in path.parent.iterdir()] == ["curves.csv"]


def test_size_for_and_curve_points() -> None:
    data = pd.concat([sweep("b", [1, 4, 64, 100], [0.2, 0.81, 0.79, 1.0]),
                      sweep("a", [4, 8192], [0.123456, 0.5])])  # fmt: skip
    assert fa.size_for(data, "b", 0.8) == 4
    assert fa.size_for(data, "b", 0.95) == 100
    assert fa.size_for(data, "a", 0.8) is None
    assert fa.curve_points(data, "faithfulness") == {
        "a": {"4": 0.1235, "8192": 0.5}, "b": {"4": 0.81, "64": 0.79},
    }  # fmt: skip
    assert fa.curve_points(data, "completeness", points=(1,)) == {"a": {}, "b": {"1": 0.8}}


def test_summary_of_a_small_experiment(chain, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = nx.DiGraph([("z0.1", "z1.0"), ("z1.0", "z2.1")])
    traced = fa.TracedSurrogate(graph, chain, [(2, 1), (1, 0), (2, 3), (0, 1)])
    node = pd.concat([sweep("CircuitLasso", [4, 5], [0.9, 1.0]), sweep("random", [4], [0.1])])
    edge = sweep("CircuitLasso", [4, 9], [0.5, 1.0])
    ticks = iter([0.0, 2.0])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    clock = fa.Stopwatch()
    clock.lap("all")
    found = fa.summary(traced, node, edge, clock, fa.Baseline({}, {}, 5.678), target=0.8,
                       metric=MinimalPairMargin())  # fmt: skip
    assert found == {
        "metric": "minimal_pairs",
        "circuit": {"nodes": 3, "edges": 2},
        "surrogate": {"ranked_features": 4, "edges": 9},
        "ranked_features_by_layer": {"2": 2, "1": 1, "0": 1},
        "m_full": 0.6,
        "m_empty": -0.1,
        "features_for_faithfulness_0.8": {"CircuitLasso": 4, "random": None},
        "edges_for_faithfulness_0.8": {"CircuitLasso": 9},
        "node_faithfulness": {"CircuitLasso": {"4": 0.9}, "random": {"4": 0.1}},
        "node_completeness": {"CircuitLasso": {"4": 0.1}, "random": {"4": 0.9}},
        "edge_faithfulness": {"CircuitLasso": {"4": 0.5}},
        "edge_completeness": {"CircuitLasso": {"4": 0.5}},
        "seconds": {"CircuitLasso": 2.0, "IG attribution": 5.68},
    }
    label = LabelFit(2, np.zeros(4), 0.0, 1.0, True)
    readout = fa.summary(traced, node, edge, clock, fa.Baseline({}, {}, 5.678), target=0.8,
                         metric=label)  # fmt: skip
    assert readout == {**found, "metric": "readout"}
    anchored = fa.summary(traced, node, edge, clock, fa.Baseline({}, {}, 5.678, 1.0), target=0.8,
                          metric=label, anchored=fa.Anchored({}, 0.25))  # fmt: skip
    assert anchored["seconds"] == {"CircuitLasso": 2.0, fa.ANCHORED: 3.25, "IG attribution": 5.68}
