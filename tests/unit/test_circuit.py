import math

import numpy as np
import pytest
import torch

from circuitlasso.circuits.circuit import (
    Circuit,
    best_threshold_shd,
    block_norm_scores,
    circuit_at_threshold,
    edge_auroc,
    edge_shd,
    gap_threshold,
    node_shd,
    prune_to_output,
)

TRUE = Circuit([("input", "m0"), ("m0", "a1.h0"), ("a1.h0", "output")])


def test_nodes_are_edge_endpoints_and_json_round_trips(tmp_path):
    assert set(TRUE.nodes) == {"input", "m0", "a1.h0", "output"}
    path = tmp_path / "sub" / "circuit.json"
    TRUE.save(path)
    assert Circuit.load(path) == TRUE
    assert not list(path.parent.glob("*.tmp"))


def test_equality_is_by_nodes_and_edges():
    assert Circuit(reversed(list(TRUE.edges))) == TRUE
    assert Circuit(TRUE) == TRUE  # a graph gives its edges, not its nodes
    assert Circuit(list(TRUE.edges)[:2]) != TRUE
    grown = Circuit(TRUE.edges)
    grown.add_node("m5")  # an isolated node is part of the circuit
    assert grown != TRUE
    with pytest.raises(TypeError, match="unhashable"):
        hash(TRUE)


def test_feature_view_and_attributes_survive_json():
    circuit = Circuit()
    circuit.add_node("z2.7", layer=2, feature=7, importance=1.5)
    circuit.add_node("z1.3", layer=1, feature=3)
    circuit.add_node("z1.0", layer=1, feature=0)
    circuit.add_edge("z1.3", "z2.7", coef=-0.25)
    circuit.add_edge("z1.0", "z2.7", coef=0.5)
    assert circuit.features_by_layer() == {1: [0, 3], 2: [7]}
    assert TRUE.features_by_layer() == {}  # component nodes have no features
    back = Circuit.from_json(circuit.to_json())
    assert isinstance(back, Circuit) and back == circuit
    assert dict(back.nodes(data=True)) == dict(circuit.nodes(data=True))
    assert back.edges["z1.3", "z2.7"] == {"coef": -0.25}
    with pytest.raises(ValueError, match="node-link"):
        Circuit.from_json('{"edges": []}')


@pytest.mark.parametrize("edge", [("a", "a"), ("a",), ("a", 3)])
def test_bad_edges_are_rejected(edge):
    with pytest.raises(ValueError, match="edge"):
        Circuit([edge])


def test_acyclicity():
    assert TRUE.is_acyclic()
    assert not Circuit([("a", "b"), ("b", "c"), ("c", "a")]).is_acyclic()


def test_shd_counts_symmetric_differences():
    predicted = Circuit([("input", "m0"), ("m0", "output"), ("a0.h1", "output")])
    # edges: 1 shared, 2 extra, 2 missing; nodes: a1.h0 missing, a0.h1 extra
    assert edge_shd(predicted, TRUE) == 4
    assert node_shd(predicted, TRUE) == 2
    assert edge_shd(TRUE, TRUE) == node_shd(TRUE, TRUE) == 0


def test_prune_keeps_only_paths_into_the_output():
    circuit = Circuit([*TRUE.edges, ("input", "a0.h3"), ("a0.h3", "a1.h2"), ("a0.h2", "m0")])
    assert prune_to_output(circuit) == Circuit([*TRUE.edges, ("a0.h2", "m0")])


def test_auroc_matches_the_rank_definition():
    scores = {
        ("input", "m0"): 0.9,
        ("m0", "a1.h0"): 0.2,
        ("a1.h0", "output"): 0.5,
        ("input", "a1.h0"): 0.3,
        ("input", "output"): 0.1,
    }
    labels = [e in TRUE.edges for e in scores]
    pos = [s for s, y in zip(scores.values(), labels, strict=True) if y]
    neg = [s for s, y in zip(scores.values(), labels, strict=True) if not y]
    expected = np.mean([float(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert edge_auroc(scores, TRUE) == pytest.approx(expected)


def test_auroc_needs_every_true_edge_scored():
    with pytest.raises(ValueError, match="missing"):
        edge_auroc({("input", "m0"): 1.0}, TRUE)


def test_auroc_is_nan_with_one_class():
    assert math.isnan(edge_auroc(dict.fromkeys(TRUE.edges, 1.0), TRUE))


def test_best_threshold_finds_the_separating_cut():
    scores = {
        ("input", "m0"): 0.9,
        ("m0", "a1.h0"): 0.7,
        ("a1.h0", "output"): 0.8,
        ("input", "output"): 0.75,
        ("input", "a1.h0"): 0.1,
    }
    shd, threshold = best_threshold_shd(scores, TRUE)
    # cuts in (0.1, 0.7) keep the true path plus input->output (SHD 1); higher cuts lose true
    # edges (SHD >= 2), lower ones add input->a1.h0 as well (SHD 2)
    assert shd == 1
    assert edge_shd(circuit_at_threshold(scores, threshold), TRUE) == 1


def test_gap_threshold_splits_two_clusters():
    scores = {("a", str(i)): s for i, s in enumerate([1.0, 0.8, 0.9, 0.01, 0.02, 0.0])}
    threshold = gap_threshold(scores)
    assert 0.02 < threshold < 0.8


def test_gap_threshold_keeps_uniform_scores_and_handles_zeros():
    assert gap_threshold({("a", "b"): 1.0, ("b", "c"): 0.9}) < 0.9
    assert gap_threshold({("a", "b"): 0.0}) == math.inf
    with pytest.raises(ValueError, match="finite"):
        gap_threshold({("a", "b"): float("nan")})


def test_block_norm_scores_are_frobenius_norms_per_child_column():
    blocks = {
        (0, 1): torch.tensor([[3.0, 0.0], [0.0, 4.0]]),
        (0, 2): torch.tensor([[1.0], [2.0]]),
        (1, 2): torch.zeros(2, 1),
    }
    scores = block_norm_scores(blocks, ["input", "m0", "output"], {1: 2, 2: 1})
    assert scores == {
        ("input", "m0"): pytest.approx(5.0 / 2**0.5),  # ||A||_F over sqrt(2 columns)
        ("input", "output"): pytest.approx(5.0**0.5),
        ("m0", "output"): 0.0,
    }
    with pytest.raises(ValueError, match="out of range"):
        block_norm_scores({(0, 5): torch.ones(1, 1)}, ["input", "m0"], {5: 1})


def test_ranking_metrics_treat_scores_closer_than_the_tolerance_as_ties() -> None:
    """Two edges whose weight a solver split between interchangeable columns score equal up to
    rounding: the ranking metrics must not depend on which rounding came out ahead."""
    from circuitlasso.circuits.circuit import best_threshold_shd, edge_auroc, tie_scores

    true = Circuit([("input", "m0"), ("m0", "output")])
    base = {("input", "m0"): 2.687, ("a0.h0", "m0"): 0.0, ("a0.h0", "output"): 0.0}
    results = set()
    for true_ahead in (1e-9, -1e-9):
        scores = {**base, ("m0", "output"): 1.3435 + true_ahead, ("input", "output"): 1.3435}
        assert tie_scores(scores)[("m0", "output")] == tie_scores(scores)[("input", "output")]
        results.add((edge_auroc(scores, true), best_threshold_shd(scores, true)[0]))
    assert len(results) == 1  # the same whichever rounding came out ahead
    assert results.pop() == (pytest.approx(11 / 12), 1)  # the tie counts half
    assert tie_scores({("a", "b"): 1.0, ("b", "c"): 0.5}) == {("a", "b"): 1.0, ("b", "c"): 0.5}
