"""The Bias in Bios section's tables, summary and figure, against hand computations on small
frames, the rule's own word swap, and the figure's drawn bars and lines."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from circuitlasso.data.toyworld import lexicon
from circuitlasso.evaluation.debias import (
    Comparison,
    ablation_table,
    bottleneck,
    by_model,
    candidate_table,
    concept_table,
    gap_closed,
    gender_swap,
    group_sizes,
    removal_table,
    rule_vs_truth,
    scores_table,
    summary,
    toy_name_coverage,
    write_results,
)
from circuitlasso.presentation import plots

METHODS = ["ORIGINAL", "CBP", "ORACLE", "LINEAR PROBING", "SHIFT", "SHIFT-retrain",
           "CircuitLasso-no-removal", "CircuitLasso", "CircuitLasso-retrain"]  # fmt: skip


def results() -> pd.DataFrame:
    """A results table as :class:`Comparison` holds it, with round numbers."""
    return pd.DataFrame(
        {
            "profession": [52.8, 91.4, 100.0, 50.0, 97.7, 100.0, 60.04, 100.0, 99.94],
            "gender": [97.2, 47.2, 50.0, 100.0, 52.3, 50.0, 89.96, 50.0, 49.96],
            "worst_group": [10.0, 86.0, 90.0, 0.0, 50.0, 90.0, 30.0, 100.0, 70.0],
            "features": [None, None, None, None, 49.0, 49.0, 0.0, 2.0, 2.0],
            "seconds": [57.71, 59.5, 54.0, 5.1, 202.46, 213.7, 5.12, 5.12, 6.54],
        },
        index=pd.Index(METHODS, name="method"),
    )


def test_group_sizes_count_each_group_of_each_split() -> None:
    splits = {
        "ambiguous": pd.DataFrame({"profession": ["a", "a", "b"], "gender": ["m", "m", "f"]}),
        "balanced": pd.DataFrame(
            {"profession": ["a", "b", "b", "a"], "gender": ["f", "m", "f", "m"]}
        ),  # fmt: skip
    }
    table = group_sizes(splits)
    assert table.to_dict() == {
        "ambiguous": {("a", "f"): 0, ("a", "m"): 2, ("b", "f"): 1, ("b", "m"): 0},
        "balanced": {("a", "f"): 1, ("a", "m"): 1, ("b", "f"): 1, ("b", "m"): 1},
    }
    assert table.index.names == ["profession", "gender"]
    assert table.dtypes.tolist() == [np.dtype(int)] * 2


def test_concept_table_marks_what_the_bottleneck_keeps() -> None:
    concepts = {"teaching": ["lectures", "seminar"], "male": ["he"], "care": ["ward"],
                "female": ["she", "her"]}  # fmt: skip
    gender = ["male", "female"]
    assert bottleneck(concepts, gender) == {"teaching": ["lectures", "seminar"], "care": ["ward"]}
    table = concept_table(concepts, gender)
    assert table.index.name == "concept"
    assert table.to_dict(orient="index") == {
        "teaching": {"texts": "lectures, seminar", "in the bottleneck": True},
        "male": {"texts": "he", "in the bottleneck": False},
        "care": {"texts": "ward", "in the bottleneck": True},
        "female": {"texts": "she, her", "in the bottleneck": False},
    }
    with pytest.raises(ValueError, match=r"gender concepts \['man'\] are not among"):
        concept_table(concepts, ["male", "man"])


def test_candidate_table_shows_the_top_tokens_and_the_rules_call() -> None:
    candidates = pd.DataFrame({
        "node": ["z3.7", "z0.2"], "layer": [3, 0], "feature": [7, 2], "score": [1.23456, -0.5],
        "tokens": [Counter({"she": 5, "her": 9, ".": 1, "a": 2, "the": 3}), Counter()],
        "swap_effect": [0.45678, 0.0], "gendered": [True, False], "removed": [True, False],
    })  # fmt: skip
    table = candidate_table(candidates)
    assert list(table.columns) == ["node", "score", "top tokens", "swap_effect", "rule", "removed"]
    assert table.to_dict(orient="list") == {
        "node": ["z3.7", "z0.2"], "score": [1.235, -0.5],
        "top tokens": ["her x9, she x5, the x3, a x2", ""], "swap_effect": [0.457, 0.0],
        "rule": [True, False], "removed": [True, False],
    }  # fmt: skip


def test_removal_table_and_gap_closed_by_hand() -> None:
    table = removal_table(results())
    assert list(table.index) == ["SHIFT", "SHIFT-retrain", "CircuitLasso", "CircuitLasso-retrain"]
    assert table["features"].tolist() == [49, 49, 2, 2]
    assert table["features"].dtype == np.dtype(int)
    assert table["seconds"].tolist() == [202.5, 213.7, 5.1, 6.5]
    gap = gap_closed(results())
    assert list(gap.index) == ["CBP", "LINEAR PROBING", "SHIFT", "SHIFT-retrain",
                               "CircuitLasso-no-removal", "CircuitLasso",
                               "CircuitLasso-retrain"]  # fmt: skip
    # ORIGINAL's worst group 10, ORACLE's 90: a gap of 80
    assert gap["worst-group gap closed"].tolist() == [0.95, -0.125, 0.5, 1.0, 0.25, 1.125, 0.75]
    assert gap["|gender - 50|"].tolist() == [2.8, 50.0, 2.3, 0.0, 40.0, 0.0, 0.0]


def test_ablation_table_is_circuitlasso_without_and_with_its_removal_step() -> None:
    table = ablation_table(results())
    assert list(table.index) == ["CircuitLasso-no-removal", "CircuitLasso", "CircuitLasso-retrain"]
    assert list(table.columns) == ["worst_group", "gender", "profession", "features"]
    assert table["worst_group"].tolist() == [30.0, 100.0, 70.0]
    assert table["gender"].tolist() == [90.0, 50.0, 50.0]  # 89.96 and 49.96 to 0.1
    assert table["profession"].tolist() == [60.0, 100.0, 99.9]
    assert table["features"].tolist() == [0, 2, 2] and table["features"].dtype == np.dtype(int)


def test_scores_table_and_any_table_side_by_side_by_model() -> None:
    scores = scores_table(results())
    assert list(scores.columns) == ["profession", "gender", "worst_group"]
    assert list(scores.index) == METHODS
    assert scores.loc["CircuitLasso-retrain"].tolist() == [99.9, 50.0, 70.0]  # to 0.1
    other = results().assign(worst_group=0.0)
    comparisons = {"pythia": Comparison(results(), {}, {}), "gemma": Comparison(other, {}, {})}
    table = by_model(comparisons, scores_table)
    assert table.columns.names == ["model", None]
    columns = ("profession", "gender", "worst_group")
    assert list(table.columns) == [(m, c) for m in ("pythia", "gemma") for c in columns]
    assert table[("pythia", "gender")].tolist() == scores["gender"].tolist()
    assert table[("gemma", "worst_group")].tolist() == [0.0] * len(METHODS)
    removal = by_model(comparisons, removal_table)
    assert removal[("gemma", "features")].tolist() == [49, 49, 2, 2]


def test_write_results_rounds_to_three_decimals(tmp_path: Path) -> None:
    table = results()
    table.loc["SHIFT", "seconds"] = 202.4567
    path = tmp_path / "sections" / "bias_in_bios.csv"
    write_results(table, path)
    back = pd.read_csv(path, index_col="method")
    assert back.loc["SHIFT", "seconds"] == 202.457
    assert list(back.index) == METHODS
    assert back.loc["CircuitLasso", "features"] == 2 and np.isnan(back.loc["CBP", "features"])


def test_rule_vs_truth_counts_calls_against_both_ground_truths() -> None:
    # four candidates of layer 1; rows 0-3 of the balanced set are men, 4-7 women
    male = np.array([True] * 4 + [False] * 4)
    Z = np.zeros((8, 4))
    Z[:4, 0] = [1, 2, 3, 4]  # fires on men only: gendered by prompts
    Z[:, 1] = 1.0  # on everyone: not gendered
    Z[4:, 2] = 1.0  # on women only
    Z[[0, 5], 3] = 1.0  # half and half
    tokens = [Counter({"the": 3}), Counter({"he": 2, "she": 1}), Counter({"her": 1, "a": 3}),
              Counter({"mary": 4})]  # fmt: skip
    candidates = pd.DataFrame({"layer": [1] * 4, "feature": [0, 1, 2, 3], "tokens": tokens,
                               "gendered": [True, True, True, False]})  # fmt: skip
    table = rule_vs_truth({"X": candidates}, {1: sp.csr_matrix(Z)}, male)
    # truth by tokens (at least half gendered words): features 1 and 3; by prompts (at least 90%
    # of one gender): 0 and 2. The rule flags 0, 1 and 2: against tokens 1 hit, against prompts 2
    assert table.to_dict(orient="records") == [
        {"method": "X", "ground truth": "by_tokens", "truly gendered": 2, "flagged": 3,
         "precision": 1 / 3, "recall": 1 / 2},
        {"method": "X", "ground truth": "by_prompts", "truly gendered": 2, "flagged": 3,
         "precision": 2 / 3, "recall": 1.0},
    ]  # fmt: skip


def test_toy_name_coverage_counts_the_names_the_swap_changes() -> None:
    names = set(lexicon.MALE_NAMES) | set(lexicon.FEMALE_NAMES)
    swapped = [name for name in names if gender_swap(name) != name]
    assert toy_name_coverage() == (len(swapped), len(names))
    assert 0 < len(swapped) < len(names)  # measured: 38 of 80


def comparison() -> Comparison:
    candidates = {"SHIFT": pd.DataFrame({"node": ["a", "b", "c"]}),
                  "CircuitLasso": pd.DataFrame({"node": ["d"]})}  # fmt: skip
    return Comparison(results(), candidates, {"SHIFT": [(0, 1), (1, 2)], "CircuitLasso": []})


def test_summary_holds_the_scores_counts_seconds_and_the_rule_against_truth() -> None:
    found = summary(comparison())
    assert list(found) == ["scores", "candidates", "removed", "seconds"]
    assert found["scores"]["CircuitLasso-retrain"] == {
        "profession": 99.94, "gender": 49.96, "worst_group": 70.0,
    }  # fmt: skip
    assert found["scores"]["SHIFT"] == {"profession": 97.7, "gender": 52.3, "worst_group": 50.0}
    assert found["candidates"] == {"SHIFT": 3, "CircuitLasso": 1}
    assert found["removed"] == {"SHIFT": 2, "CircuitLasso": 0}
    assert found["seconds"]["ORIGINAL"] == 57.7 and found["seconds"]["SHIFT"] == 202.5
    truth = pd.DataFrame({"method": ["SHIFT", "CircuitLasso"], "ground truth": ["t", "p"],
                          "truly gendered": [3, 0], "flagged": [2, 1],
                          "precision": [0.5, 1.0], "recall": [1 / 3, np.nan]})  # fmt: skip
    found = summary(comparison(), truth)
    assert found["rule_vs_toy_truth"].keys() == {"SHIFT t", "CircuitLasso p"}
    assert found["rule_vs_toy_truth"]["SHIFT t"] == {"precision": 0.5, "recall": 1 / 3}
    assert np.isnan(found["rule_vs_toy_truth"]["CircuitLasso p"]["recall"])


def test_debias_figure_draws_every_score_the_ideal_line_and_the_seconds() -> None:
    table = results()
    fig = plots.debias_scores(table)
    left, right = fig.axes
    # horizontal bars: method i is row i from the top, its three metrics in legend order
    bars = sorted((p for p in left.patches if p.get_height() > 0), key=lambda p: p.get_y())
    assert [p.get_width() for p in bars] == table[
        ["profession", "gender", "worst_group"]
    ].to_numpy().ravel().tolist()
    assert [round(p.get_y() + p.get_height() / 2) for p in bars[::3]] == list(range(len(METHODS)))
    assert [t.get_text() for t in left.get_legend().get_texts()] == [
        "profession",
        "gender",
        "worst_group",
    ]
    assert [t.get_text() for t in left.get_yticklabels()] == METHODS
    dashed = [line for line in left.lines if line.get_linestyle() == "--"]
    assert [list(line.get_xdata()) for line in dashed] == [[50, 50]]
    seconds = sorted(right.patches, key=lambda p: p.get_y())
    assert [p.get_width() for p in seconds] == table["seconds"].tolist()
    plt.close(fig)
    with pytest.raises(ValueError, match=r"table lacks columns \['seconds'\]"):
        plots.debias_scores(table.drop(columns="seconds"))
