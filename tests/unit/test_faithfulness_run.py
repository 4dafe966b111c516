"""The faithfulness experiment as one object against the steps it replaces.

Reference: the functions of :mod:`circuitlasso.evaluation.faithfulness` called one step at a time
on the same toy study, as the section used to call them (the estimator fitted and traced anew,
the metric chosen, the baseline, the rankings and both sweeps); every table but the seconds must
be the same.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from circuitlasso import cache
from circuitlasso.circuits.features import fit_label
from circuitlasso.collect import collect_sae_features
from circuitlasso.data.minimal_pairs import load_minimal_pairs
from circuitlasso.estimator import CircuitLasso
from circuitlasso.evaluation import faithfulness as fa
from circuitlasso.evaluation.ablate import rank_features
from circuitlasso.evaluation.acceptability import sentence_log_probs
from circuitlasso.evaluation.attribution import DEVIATION, forward_scores
from circuitlasso.evaluation.faithfulness_run import FaithfulnessRun
from circuitlasso.study import FeatureStudy

torch.set_num_threads(1)

LAM, LAM_RATIO, MIN_PROMPTS, K = 1e-3, 0.1, 5, 2
NODE_SIZES, EDGE_SIZES = [1, 8], [2, 16]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> FeatureStudy:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        return FeatureStudy.load("toy", [2, 3], "resid_post", "toy_cola", max_prompts=200,
                                 seed=1, batch_size=100)  # fmt: skip


@pytest.fixture(scope="module")
def run(study: FeatureStudy) -> FaithfulnessRun:
    sentences = fa.evaluation_sentences(study.train, study.test, 3, 12, seed=1)
    run = FaithfulnessRun(study, sentences, seed=1, batch_size=8)
    run.fit_circuit(LAM, LAM_RATIO, MIN_PROMPTS, k=K)
    run.attribution("readout", steps=2, anchor={"top": "readout"})
    run.node_sweep(NODE_SIZES)
    run.edge_sweep(EDGE_SIZES)
    return run


@pytest.fixture(scope="module")
def steps(study: FeatureStudy) -> dict:
    """The section's former cells, one function call at a time."""
    sentences = fa.evaluation_sentences(study.train, study.test, 3, 12, seed=1)
    estimator = CircuitLasso(label_lam=LAM, lam_ratio=LAM_RATIO, min_prompts=MIN_PROMPTS)
    estimator.fit(study.Z, study.y)
    traced = fa.trace_surrogate(estimator, study.y, k=K)
    measure, evaluated = fa.evaluation_metric("readout", estimator, sentences)
    baseline = fa.attribution_baseline(study.model, study.saes, measure, evaluated, steps=2,
                                       batch_size=8)  # fmt: skip
    Z = collect_sae_features(study.model, study.saes, evaluated.prompts, batch_size=8,
                             cache=False, progress=False)  # fmt: skip
    weights = measure.weights(evaluated.labels, len(evaluated.prompts))
    anchored = fa.Anchored(fa.anchored_scores(traced.surrogate, Z, baseline.means, weights), 0.0)
    forward = forward_scores(study.model, study.saes, measure, evaluated.prompts,
                             evaluated.labels, baseline.means, batch_size=8)  # fmt: skip
    rankings = fa.node_rankings(traced, baseline, study.saes, 1, anchored, forward)
    node = fa.node_sweep(study.model, study.saes, measure, evaluated, rankings, baseline.means,
                         sizes=NODE_SIZES, batch_size=8)  # fmt: skip
    edge = fa.edge_sweep(traced.surrogate, fa.edge_rankings(traced.surrogate, 1), EDGE_SIZES)
    return {"traced": traced, "measure": measure, "baseline": baseline, "anchored": anchored,
            "forward": forward, "node": node, "edge": edge}  # fmt: skip


def test_load_is_the_study_and_its_evaluation_sentences(study: FeatureStudy) -> None:
    calls = []

    def load(*args: object, **kwargs: object) -> FeatureStudy:
        calls.append((args, kwargs))
        return study

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FeatureStudy, "load", load)
        loaded = FaithfulnessRun.load("toy", [2, 3], "resid_post", "toy_cola", n_eval=3,
                                      n_reference=12, max_prompts=200, seed=1,
                                      batch_size=8)  # fmt: skip
    assert calls == [(("toy", [2, 3], "resid_post", "toy_cola"),
                      {"max_prompts": 200, "seed": 1, "batch_size": 8})]  # fmt: skip
    assert loaded.study is study
    assert loaded.sentences == fa.evaluation_sentences(study.train, study.test, 3, 12, seed=1)
    assert (loaded.seed, loaded.batch_size) == (1, 8)
    assert str(loaded) == f"{loaded.sentences}, SAEs on layers [2, 3]"


def test_fit_circuit_is_the_estimator_then_the_trace(run: FaithfulnessRun, steps: dict) -> None:
    assert run.traced is not None
    assert run.traced.ranking == steps["traced"].ranking
    assert sorted(run.traced.circuit.edges) == sorted(steps["traced"].circuit.edges)
    assert run.traced.surrogate.edges() == steps["traced"].surrogate.edges()
    assert list(run.clock.laps) == [
        "collect SAE features", "label regression", "layer-pair regressions, trace, ranking",
    ]  # fmt: skip
    assert run.clock.laps["collect SAE features"] == run.study.Z.compute_seconds  # type: ignore[attr-defined]


def test_attribution_is_the_named_metric_and_its_baseline(
    run: FaithfulnessRun, steps: dict
) -> None:
    assert run.measure is not None and run.baseline is not None
    assert run.measure.name == steps["measure"].name == "readout"
    for layer, scores in steps["baseline"].scores.items():
        np.testing.assert_allclose(run.baseline.scores[layer], scores, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(run.baseline.means[layer], steps["baseline"].means[layer])
    # the readout reads features: the forward pass gives the deviation control alone
    assert run.forward is not None and run.forward.direct is None
    for layer, deviation in steps["forward"].deviation.items():
        np.testing.assert_allclose(run.forward.deviation[layer], deviation, rtol=1e-9)
    table = run.runtime_table()
    assert list(table.index) == [f"CircuitLasso: {s}" for s in run.clock.laps] + [
        "CircuitLasso", fa.ANCHORED, DEVIATION, "IG attribution",
    ]  # fmt: skip


class _Stop(Exception):
    pass


@pytest.mark.parametrize(("per_class", "expected"), [(3, 1), (24, 6), (50, 12)])
def test_minimal_pairs_are_a_quarter_of_the_sentences_per_class_from_each_phenomenon(
    run: FaithfulnessRun, monkeypatch: pytest.MonkeyPatch, per_class: int, expected: int
) -> None:
    given = []

    def metric(name, lasso, sentences, *, pairs):
        given.append(pairs)
        raise _Stop

    monkeypatch.setattr(fa, "evaluation_metric", metric)
    labels = [0] * per_class + [1] * per_class
    sentences = fa.Sentences([f"s{i}" for i in range(2 * per_class)], labels, ["r"])
    fresh = FaithfulnessRun(run.study, sentences, estimator=run.estimator)
    with pytest.raises(_Stop):
        fresh.attribution("minimal_pairs")
    assert given == [load_minimal_pairs(per_phenomenon=expected)]


def test_anchor_is_the_surrogates_scores_on_the_evaluated_sentences(
    run: FaithfulnessRun, steps: dict
) -> None:
    assert run.anchored is not None
    assert run.anchored.scores.keys() == steps["anchored"].scores.keys()
    for layer, scores in steps["anchored"].scores.items():
        np.testing.assert_allclose(run.anchored.scores[layer], scores, rtol=1e-9, atol=1e-15)
        assert np.count_nonzero(scores)


def test_anchor_on_the_models_own_log_probability(
    run: FaithfulnessRun, study: FeatureStudy
) -> None:
    assert run.estimator is not None and run.baseline is not None and run.evaluated is not None
    # reference: the sentence log-probabilities, their Lasso and its trace one call at a time
    target = sentence_log_probs(study.model, study.prompts, batch_size=8)
    fit = fit_label(study.Z[3], target, 0.05, layer=3, kind="regression", min_prompts=MIN_PROMPTS)
    traced = fa.trace_surrogate(run.estimator, study.y.tolist(), k=K, readout=fit)
    used = {f"z3.{f}" for f in np.flatnonzero(fit.coef)}
    assert used and used <= set(traced.circuit.nodes)
    Z = collect_sae_features(study.model, study.saes, run.evaluated.prompts, batch_size=8,
                             cache=False, progress=False)  # fmt: skip
    weights = 2.0 * np.array(run.evaluated.labels) - 1  # the readout metric: signed by labels
    expected = fa.anchored_scores(traced.surrogate, Z, run.baseline.means, weights)
    other = replace(run)  # the module's run keeps its own anchored ranking
    found = other.anchor("log_prob", signed=False, lam_ratio=0.05)  # k parents, as traced
    assert found.scores.keys() == expected.keys()
    for layer, scores in expected.items():
        np.testing.assert_allclose(found.scores[layer], scores, rtol=1e-9, atol=1e-15)
    assert not found.signed and found.ranking() == rank_features(expected)
    assert run.anchored is not None and run.anchored.signed
    with pytest.raises(ValueError, match="unknown top 'logits'; the tops are readout, log_prob"):
        other.anchor("logits")


def test_sweeps_are_the_steps_tables(run: FaithfulnessRun, steps: dict) -> None:
    assert run.node is not None and run.edge is not None
    pd.testing.assert_frame_equal(run.node, steps["node"], rtol=1e-6)
    pd.testing.assert_frame_equal(run.edge, steps["edge"], rtol=1e-6)
    assert set(run.node["method"]) == {
        "CircuitLasso", fa.ANCHORED, DEVIATION, "IG attribution", "random",
    }  # fmt: skip


def test_summary_and_curves_are_the_steps(
    run: FaithfulnessRun, steps: dict, tmp_path: Path
) -> None:
    expected = fa.summary(steps["traced"], steps["node"], steps["edge"], run.clock,
                          steps["baseline"], 0.8, metric=steps["measure"],
                          anchored=steps["anchored"], forward=steps["forward"])  # fmt: skip
    found = run.summary(0.8)
    assert found.pop("seconds")["CircuitLasso"] == round(run.clock.total, 2)
    expected.pop("seconds")
    assert found == expected
    run.write_curves(tmp_path / "curves.csv")
    fa.write_curves(steps["node"], steps["edge"], tmp_path / "steps.csv")
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "curves.csv"), pd.read_csv(tmp_path / "steps.csv"), rtol=1e-6
    )


def test_a_step_before_its_inputs_names_the_step_to_run_first(study: FeatureStudy) -> None:
    fresh = FaithfulnessRun(study, fa.evaluation_sentences(study.train, study.test, 3, 12, 1))
    with pytest.raises(RuntimeError, match="run fit_circuit first"):
        fresh.attribution()
    with pytest.raises(RuntimeError, match="run attribution first"):
        fresh.node_sweep()
    with pytest.raises(RuntimeError, match="run fit_circuit first"):
        fresh.anchor()
    with pytest.raises(RuntimeError, match="run fit_circuit first"):
        fresh.edge_sweep()
    with pytest.raises(RuntimeError, match="run node_sweep first"):
        fresh.write_curves("unused.csv")
