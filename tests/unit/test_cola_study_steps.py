"""The CoLA section's steps as single calls, on the toy world: each gives what the steps it
stands for give when written out (the penalty search and its ablation, the traced and labelled
circuit, the planted-truth checks, the run's summary)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from circuitlasso.circuits import trace as tr
from circuitlasso.estimator import CircuitLasso, penalty_table
from circuitlasso.evaluation import planted
from circuitlasso.evaluation.findings import concept_table, study_summary
from circuitlasso.study import FeatureStudy, run_summary
from circuitlasso.timing import Stopwatch

ABLATION = pd.DataFrame(
    {"lam": [1e-3, 1e-2], "train_loss": [0.2, 0.4], "nonzero": [30, 5],
     "validation_accuracy": [0.8, 0.7], "test_accuracy": [0.75, 0.7]}
)  # fmt: skip


def _fresh(study: FeatureStudy) -> FeatureStudy:
    """The same study with a clock of its own and no top tokens computed yet."""
    return dataclasses.replace(study, clock=Stopwatch(), _tokens={})


def test_search_label_lam_is_the_grid_search_and_its_ablation(toy_circuit) -> None:
    study = _fresh(toy_circuit.study)
    lams = [1e-3, 1e-2]
    lasso, ablation = study.search_label_lam(lams, 0.2, 3, 1, 5, False, cv=2)
    estimator = CircuitLasso(lam_ratio=0.2, roots=3, k=1, min_prompts=5, standardized=False)
    search = GridSearchCV(estimator, {"label_lam": lams}, cv=2).fit(study.Z, study.y)
    expected = penalty_table(search, study.Z, study.y, study.Z_test, study.y_test)
    pd.testing.assert_frame_equal(ablation, expected)
    assert ablation["label_lam"].tolist() == lams
    assert lasso.get_params() == search.best_estimator_.get_params()
    assert lasso.label_lam == search.best_params_["label_lam"]
    np.testing.assert_array_equal(lasso.coef_, search.best_estimator_.coef_)
    assert list(study.clock.laps) == ["label regression (search + fit)"]


def test_trace_circuit_is_the_estimators_circuit_labelled(toy_circuit) -> None:
    study = _fresh(toy_circuit.study)
    lasso = clone(toy_circuit.lasso).fit(study.Z, study.y)
    circuit = study.trace_circuit(lasso)
    fitted = lasso.trace()
    assert circuit == fitted and all("top_tokens" not in d for _, d in fitted.nodes(data=True))
    # the fixture traced the same estimator and labelled it with interpret_circuit
    pd.testing.assert_frame_equal(tr.node_table(circuit), tr.node_table(toy_circuit.circuit))
    pd.testing.assert_frame_equal(tr.edge_table(circuit), tr.edge_table(toy_circuit.circuit))
    assert all(tokens for _, tokens in circuit.nodes(data="top_tokens"))
    assert list(study.clock.laps) == ["layer-pair regressions + trace", "labels"]


def test_trace_circuit_checks_the_prompts_as_interpret_does(toy_circuit) -> None:
    study = _fresh(toy_circuit.study)
    reversed_rows = dataclasses.replace(study, train=study.train.iloc[::-1])
    with pytest.raises(ValueError, match="is not the prompt the features were collected on"):
        reversed_rows.trace_circuit(toy_circuit.lasso)


def test_check_tables_are_the_three_checks_in_order(toy_circuit) -> None:
    study, lasso, circuit = toy_circuit.study, toy_circuit.lasso, toy_circuit.circuit
    by_layer, reached, rankings, diagnosis = planted.check_tables(study, lasso, circuit)
    pd.testing.assert_frame_equal(by_layer, planted.categories_by_layer(study, circuit))
    pd.testing.assert_series_equal(reached, planted.violations_reached(study, circuit))
    pd.testing.assert_frame_equal(rankings, planted.ranking_comparison(study, lasso))
    pd.testing.assert_frame_equal(diagnosis, planted.violation_diagnosis(study, lasso))


def test_study_summary_adds_the_planted_truth_only_where_there_is_one(toy_circuit) -> None:
    study, lasso, circuit = toy_circuit.study, toy_circuit.lasso, toy_circuit.circuit
    reached = planted.violations_reached(study, circuit)
    summary = study_summary(study, lasso, ABLATION, circuit)
    assert summary == run_summary(lasso, ABLATION, circuit, reached, concept_table(circuit))
    assert summary["violation_categories_reached"] == {v: bool(r) for v, r in reached.items()}
    assert set(summary["concepts"]) == set(concept_table(circuit).index)
    unplanted = dataclasses.replace(study, test=study.test.drop(columns="violation"))
    plain = study_summary(unplanted, lasso, ABLATION, circuit)
    assert "violation_categories_reached" not in plain
    assert plain == run_summary(lasso, ABLATION, circuit, concepts=concept_table(circuit))
    with pytest.raises(ValueError, match="lacks columns"):
        study_summary(study, lasso, ABLATION.drop(columns="nonzero"), circuit)
