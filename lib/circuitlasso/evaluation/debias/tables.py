"""The Bias in Bios section's tables and summary, from each model's
:class:`~circuitlasso.evaluation.debias.compare.Comparison`: the candidates as shown
(:func:`candidate_table`), Table 2 (:func:`scores_table`), Table 1 (:func:`removal_table`),
CircuitLasso with and without its removal step (:func:`ablation_table`), the worst-group gap each
method closes (:func:`gap_closed`), each table for several models side by side
(:func:`by_model`), the results CSV (:func:`results_table`, :func:`write_results`) and the
summary (:func:`summary`, every model's: :func:`summaries`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from circuitlasso.cache import atomic_path
from circuitlasso.evaluation.debias.compare import Comparison

SCORES = ["profession", "gender", "worst_group"]  # Table 2's columns
REMOVALS = ["SHIFT", "SHIFT-retrain", "CircuitLasso", "CircuitLasso-retrain"]  # Table 1's rows
ABLATION = ["CircuitLasso-no-removal", "CircuitLasso", "CircuitLasso-retrain"]


def candidate_table(candidates: pd.DataFrame, n_tokens: int = 4) -> pd.DataFrame:
    """Ranked candidates (:func:`~circuitlasso.evaluation.debias.compare.describe` plus
    ``removed``) as shown: ``node``, ``score``, ``top tokens`` (the ``n_tokens`` most frequent as
    ``word xcount``), ``swap_effect``, the ``rule``'s call and ``removed``; numbers to 3
    decimals."""
    tokens = [
        ", ".join(f"{w} x{n}" for w, n in t.most_common(n_tokens)) for t in candidates["tokens"]
    ]
    return (
        candidates.assign(tokens=tokens)
        .drop(columns=["layer", "feature"])
        .rename(columns={"tokens": "top tokens", "gendered": "rule"})
        .round(3)
    )


def scores_table(table: pd.DataFrame) -> pd.DataFrame:
    """Table 2 from a :class:`Comparison` ``table``: ``profession``, ``gender`` and
    ``worst_group`` of every method, to 0.1."""
    return table[SCORES].round(1)


def by_model(
    comparisons: Mapping[str, Comparison], table: Callable[[pd.DataFrame], pd.DataFrame]
) -> pd.DataFrame:
    """One of the section's tables (``table``, e.g. :func:`scores_table` or
    :func:`removal_table`, of a :class:`Comparison` table) for every model of ``comparisons``
    side by side, as the paper sets its models: columns ``(model, column)``."""
    return pd.concat(
        {name: table(found.table) for name, found in comparisons.items()},
        axis=1,
        names=["model", None],
    )


def candidate_tables(
    comparisons: Mapping[str, Comparison], n_tokens: int = 4
) -> list[pd.DataFrame]:
    """:func:`candidate_table` of every model's ranked candidates, model by model and, within a
    model, SHIFT's then CircuitLasso's (the order of ``Comparison.candidates``)."""
    return [
        candidate_table(candidates, n_tokens)
        for comparison in comparisons.values()
        for candidates in comparison.candidates.values()
    ]


def candidate_counts(comparisons: Mapping[str, Comparison]) -> pd.DataFrame:
    """Per model and feature-removal method (rows): how many features the gender rule searched
    (``candidates``) and how many it removed (``removed``)."""
    rows = {
        (name, method): {"candidates": len(found), "removed": len(comparison.removed[method])}
        for name, comparison in comparisons.items()
        for method, found in comparison.candidates.items()
    }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(["model", "method"])


def removal_table(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 from a :class:`Comparison` ``table``: the feature-removal methods' ``features``
    (int) and ``seconds`` (to 0.1 s)."""
    return table.loc[REMOVALS, ["features", "seconds"]].astype({"features": int}).round(1)


def ablation_table(table: pd.DataFrame) -> pd.DataFrame:
    """CircuitLasso without and with its removal step, from a :class:`Comparison` ``table``:
    ``worst_group``, ``gender`` and ``profession`` (to 0.1) and the ``features`` removed (int)."""
    columns = ["worst_group", "gender", "profession", "features"]
    return table.loc[ABLATION, columns].astype({"features": int}).round(1)


def gap_closed(table: pd.DataFrame) -> pd.DataFrame:
    """Per method but ORIGINAL and ORACLE, from a :class:`Comparison` ``table``: the share of the
    worst-group gap between ORIGINAL and ORACLE it closes, ``(w - w_ORIGINAL) / (w_ORACLE -
    w_ORIGINAL)`` (to 3 decimals; 1: as good as ORACLE, below 0: worse than ORIGINAL), and
    ``|gender - 50|`` (to 0.1)."""
    worst = table["worst_group"]
    closed = (worst - worst["ORIGINAL"]) / (worst["ORACLE"] - worst["ORIGINAL"])
    return pd.DataFrame(
        {
            "worst-group gap closed": closed.round(3),
            "|gender - 50|": (table["gender"] - 50).abs().round(1),
        }
    ).drop(index=["ORIGINAL", "ORACLE"])


def results_table(comparisons: Mapping[str, Comparison]) -> pd.DataFrame:
    """Every model's :class:`Comparison` ``table`` stacked: index ``(model, method)``, the
    table's columns (``profession``, ``gender``, ``worst_group``, ``features``, ``seconds``, ...);
    what :func:`write_results` writes for the section."""
    return pd.concat({name: found.table for name, found in comparisons.items()}, names=["model"])


def write_results(table: pd.DataFrame, path: str | Path) -> None:
    """Write a :class:`Comparison` ``table`` (or several, stacked under an index level
    ``model``) to the CSV ``path``, to 3 decimals; the file appears complete or not at all."""
    with atomic_path(path) as tmp:
        table.round(3).to_csv(tmp)


def summary(comparison: Comparison, truth: pd.DataFrame | None = None) -> dict[str, Any]:
    """The section's summary: each method's ``scores`` (Table 2, to 0.01), the number of
    ``candidates`` and ``removed`` features of SHIFT and CircuitLasso, each method's ``seconds``
    (to 0.1 s) and, given the rule's ``truth`` table
    (:func:`~circuitlasso.evaluation.debias.toy.rule_vs_toy_truth`), its precision and recall
    against each ground truth."""
    table = comparison.table
    found: dict[str, Any] = {
        "scores": table[SCORES].round(2).to_dict(orient="index"),
        "candidates": {method: len(rows) for method, rows in comparison.candidates.items()},
        "removed": {method: len(nodes) for method, nodes in comparison.removed.items()},
        "seconds": table["seconds"].dropna().round(1).to_dict(),
    }
    if truth is not None:
        found["rule_vs_toy_truth"] = {
            f"{row['method']} {row['ground truth']}": {k: row[k] for k in ("precision", "recall")}
            for row in truth.to_dict(orient="records")
        }
    return found


def summaries(
    comparisons: Mapping[str, Comparison], truths: Mapping[str, pd.DataFrame] | None = None
) -> dict[str, dict[str, Any]]:
    """:func:`summary` of each model's comparison, with its rule-vs-truth table where ``truths``
    (model -> :func:`~circuitlasso.evaluation.debias.toy.rule_vs_toy_truth`) has one: the
    section's summary, model -> summary."""
    truths = truths or {}
    return {name: summary(comparison, truths.get(name)) for name, comparison in comparisons.items()}
