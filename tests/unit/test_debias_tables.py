"""The Bias in Bios section's several-model tables (candidates, stacked results, summaries) and
the toy concepts by default, against values written out by hand on small comparisons."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from circuitlasso.evaluation.debias import (
    TOY_CONCEPTS,
    Comparison,
    candidate_tables,
    concept_table,
    results_table,
    summaries,
)


def _table(profession: float, seconds: float) -> pd.DataFrame:
    return pd.DataFrame(
        {"profession": [profession, 90.0], "gender": [70.0, 51.0], "worst_group": [20.0, 80.0],
         "features": [np.nan, 3.0], "seconds": [seconds, 2.0]},
        index=pd.Index(["ORIGINAL", "SHIFT"], name="method"),
    )  # fmt: skip


def _candidates(nodes: list[str], tokens: list[Counter[str]]) -> pd.DataFrame:
    n = len(nodes)
    return pd.DataFrame({
        "node": nodes, "layer": [0] * n, "feature": list(range(n)), "score": [0.12345] * n,
        "tokens": tokens, "swap_effect": [0.5] * n, "gendered": [True] * n, "removed": [False] * n,
    })  # fmt: skip


def comparisons() -> dict[str, Comparison]:
    a = Comparison(
        _table(60.0, 10.0),
        {"SHIFT": _candidates(["z0.1"], [Counter({"he": 3, "his": 5})]),
         "CircuitLasso": _candidates(["z2.4", "z2.9"], [Counter({"nurse": 1}), Counter()])},
        {"SHIFT": [(0, 1)], "CircuitLasso": []},
    )  # fmt: skip
    b = Comparison(
        _table(75.0, 30.0),
        {"SHIFT": _candidates([], []), "CircuitLasso": _candidates(["z5.0"], [Counter({"a": 2})])},
        {"SHIFT": [], "CircuitLasso": [(5, 0)]},
    )
    return {"a": a, "b": b}


def test_candidate_tables_go_model_by_model_shift_first() -> None:
    tables = candidate_tables(comparisons())
    assert [table["node"].tolist() for table in tables] == [
        ["z0.1"],
        ["z2.4", "z2.9"],
        [],
        ["z5.0"],
    ]
    assert tables[0]["top tokens"].tolist() == ["his x5, he x3"]
    assert tables[1]["top tokens"].tolist() == ["nurse x1", ""]
    assert tables[3]["score"].tolist() == [0.123]
    assert candidate_tables(comparisons(), n_tokens=1)[0]["top tokens"].tolist() == ["his x5"]


def test_results_table_stacks_every_model_under_a_model_level() -> None:
    table = results_table(comparisons())
    assert table.index.names == ["model", "method"]
    assert table.index.tolist() == [("a", "ORIGINAL"), ("a", "SHIFT"), ("b", "ORIGINAL"),
                                    ("b", "SHIFT")]  # fmt: skip
    assert table.loc[("b", "ORIGINAL"), "profession"] == 75.0
    assert table.loc[("a", "ORIGINAL"), "seconds"] == 10.0
    assert table.loc[("b", "SHIFT"), "features"] == 3.0


def test_summaries_add_the_rule_against_truth_where_a_model_has_one() -> None:
    truth = pd.DataFrame({"method": ["CircuitLasso"], "ground truth": ["top tokens"],
                          "precision": [0.5], "recall": [1.0]})  # fmt: skip
    found = summaries(comparisons(), {"b": truth})
    assert list(found) == ["a", "b"]
    assert "rule_vs_toy_truth" not in found["a"]
    assert found["b"]["rule_vs_toy_truth"] == {
        "CircuitLasso top tokens": {"precision": 0.5, "recall": 1.0}
    }
    assert found["a"]["scores"]["ORIGINAL"] == {
        "profession": 60.0, "gender": 70.0, "worst_group": 20.0,
    }  # fmt: skip
    assert found["b"]["candidates"] == {"SHIFT": 0, "CircuitLasso": 1}
    assert found["b"]["removed"] == {"SHIFT": 0, "CircuitLasso": 1}
    assert found["b"]["seconds"] == {"ORIGINAL": 30.0, "SHIFT": 2.0}
    assert summaries(comparisons()).keys() == {"a", "b"}


def test_concept_table_defaults_to_the_toy_concepts() -> None:
    table = concept_table(None, ["male", "female"])
    assert table.index.tolist() == list(TOY_CONCEPTS)
    kept = table["in the bottleneck"]
    assert not kept["male"] and not kept["female"]
    assert kept.sum() == len(TOY_CONCEPTS) - 2
