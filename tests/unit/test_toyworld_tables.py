"""The toy world's notebook tables and summary, checked against counts and values written out
by hand."""

from __future__ import annotations

import pandas as pd

from circuitlasso.data.toyworld.datasets import violation_counts
from circuitlasso.data.toyworld.report import report_summary


def test_violation_counts_counts_each_split() -> None:
    splits = {
        "train": pd.DataFrame({"violation": ["none", "none", "agreement", "none"]}),
        "test": pd.DataFrame({"violation": ["agreement", "reflexive"]}),
    }
    table = violation_counts(splits)
    assert table.index.name == "sentences by violation"
    assert list(table.columns) == ["train", "test"]
    assert table.loc["none", "train"] == 3
    assert table.loc["agreement", "train"] == 1
    assert table.loc["agreement", "test"] == 1
    assert table.loc["reflexive", "test"] == 1
    assert pd.isna(table.loc["none", "test"])
    assert pd.isna(table.loc["reflexive", "train"])


def test_report_summary_picks_the_reference_keys() -> None:
    report = {
        "lm_next_token_accuracy": 0.5,
        "lm_next_token_loss": 2.0,
        "lm_minimal_pair_accuracy": {"agreement": 0.9},
        "lm_by_text": {"unused": 1},
        "probe_test_accuracy": 0.8,
        "probe": {"recall_by_violation": {"none": 0.7}, "train_accuracy": 1.0},
        "saes": [
            {"layer": 0, "explained_variance": 0.9, "dead_fraction": 0.01, "l0": 5.0},
            {"layer": 3, "explained_variance": 0.95, "dead_fraction": 0.0, "l0": 7.0},
        ],
        "category_features": [
            {"category": "reflexive", "feature": 4, "precision": 1.0},
            {"category": "hunger", "feature": 9, "precision": 0.6},
        ],
    }
    assert report_summary(report) == {
        "lm_next_token_accuracy": 0.5,
        "lm_next_token_loss": 2.0,
        "lm_minimal_pair_accuracy": {"agreement": 0.9},
        "probe_test_accuracy": 0.8,
        "probe_recall_by_violation": {"none": 0.7},
        "sae_explained_variance": {"0": 0.9, "3": 0.95},
        "sae_dead_fraction": {"0": 0.01, "3": 0.0},
        "category_precision": {"reflexive": 1.0, "hunger": 0.6},
    }
