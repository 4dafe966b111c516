"""A traced SAE-feature circuit checked against the toy world's planted ground truth.

Each unacceptable toy-cola sentence breaks one rule at a word of a known planted category
(:data:`~circuitlasso.data.toyworld.grammar.VIOLATION_CATEGORIES`: a misplaced reflexive, a verb
that does not agree, a wrong or missing final punctuation mark, a determiner without its noun).
A feature *is* a planted category when at least half of its top tokens belong to it
(:func:`~circuitlasso.data.toyworld.datasets.dominant_category`); top tokens come from the
study (:meth:`~circuitlasso.study.FeatureStudy.top_tokens`).

- :func:`categories_by_layer` and :func:`violations_reached`: the planted categories a circuit's
  nodes are, per layer, and which violations' categories are among them
  (:func:`has_planted_truth`: whether a study's sentences say which rule they break).
- :func:`ranking_comparison`: the same check within the last layers, for circuits traced by
  ``|A| * std(z)`` and by ``|A|`` alone.
- :func:`violation_diagnosis`: per kind of unacceptable test sentence, how often the readout
  rejects it, where the violation's category first comes in the readout's ranking, and which
  features actually reject these sentences.
- :func:`check_tables`: the four tables of the three checks, for a study's traced circuit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import Features
from circuitlasso.data.toyworld.datasets import dominant_category
from circuitlasso.data.toyworld.grammar import VIOLATION_CATEGORIES
from circuitlasso.estimator import CircuitLasso
from circuitlasso.study import FeatureStudy

RANKINGS = {True: "|A| * std(z)", False: "|A| (paper)"}  # trace_circuit's standardized


def _categories(study: FeatureStudy, circuit: Circuit, layers: set[int] | None = None) -> dict:
    """Node name -> its planted category (or None), for the nodes on ``layers`` (None: all)."""
    return {
        node: dominant_category(study.top_tokens(data["layer"], data["feature"]))
        for node, data in circuit.nodes(data=True)
        if layers is None or data["layer"] in layers
    }


def _reached(categories: set[str | None]) -> dict[str, bool]:
    return {violation: c in categories for violation, c in VIOLATION_CATEGORIES.items()}


REACHED = "violation categories in the circuit"


def categories_by_layer(study: FeatureStudy, circuit: Circuit) -> pd.DataFrame:
    """Per layer of ``circuit`` with at least one categorized node, from the last down: the
    planted categories its nodes are (column ``planted categories reached``, sorted, joined)."""
    found: dict[int, set[str]] = {}
    for node, category in _categories(study, circuit).items():
        if category is not None:
            found.setdefault(circuit.nodes[node]["layer"], set()).add(category)
    table = pd.DataFrame(
        {"planted categories reached": {layer: ", ".join(sorted(c)) for layer, c in found.items()}}
    )
    return table.rename_axis("layer").sort_index(ascending=False)


def has_planted_truth(study: FeatureStudy) -> bool:
    """Whether ``study``'s test sentences say which planted rule each one breaks (a
    ``violation`` column, as the toy world's do): only then can a circuit be checked here."""
    return "violation" in study.test.columns


def violations_reached(study: FeatureStudy, circuit: Circuit) -> pd.Series:
    """Per violation (index), whether its planted category is the category of a node of
    ``circuit`` (bool; the series is named ``violation categories in the circuit``)."""
    return pd.Series(_reached(set(_categories(study, circuit).values())), name=REACHED)


def ranking_comparison(
    study: FeatureStudy,
    lasso: CircuitLasso,
    *,
    roots: int | None = None,
    k: int | None = None,
    top_layers: int = 2,
) -> pd.DataFrame:
    """:func:`violations_reached` within the ``top_layers`` last layers of the circuits the
    fitted ``lasso`` traces (:meth:`~circuitlasso.estimator.CircuitLasso.trace`, ``roots`` and
    ``k``, None: the estimator's) with standardized and with plain scores: one row per ranking
    (index ``ranking``), one column per violation."""
    if top_layers < 1:
        raise ValueError(f"top_layers must be >= 1, got {top_layers}")
    late = set(sorted(lasso.X_fit_)[-top_layers:])
    rule = {"roots": lasso.roots if roots is None else roots, "k": lasso.k if k is None else k}
    rows = {}
    for standardized, name in RANKINGS.items():
        circuit = lasso.trace(standardized=standardized, **rule)
        rows[name] = _reached(set(_categories(study, circuit, late).values()))
    return pd.DataFrame(rows).T.rename_axis("ranking")


def _mean(Z: Features, rows: np.ndarray) -> np.ndarray:
    return np.asarray(Z[rows].mean(0)).ravel()


def violation_diagnosis(
    study: FeatureStudy,
    lasso: CircuitLasso,
    *,
    standardized: bool | None = None,
    search: int = 100,
    shown: int = 3,
) -> pd.DataFrame:
    """Per violation (index), on the study's test sentences of that kind (``violation`` column):
    their number; the share the binary readout ``A_{L,y}`` of the fitted ``lasso`` classifies
    correctly; the violation's planted category and the first rank of a feature of that category
    among the ``search`` most important last-layer features
    (:meth:`~circuitlasso.estimator.CircuitLasso.readout_importance`: ``|A| * std(z)`` over the
    training prompts if ``standardized``, else ``|A|``; None: as the estimator ranks; None if
    none); and the ``shown`` features that reject these sentences most, the most
    negative entries of ``A_{L,y} * (mean z of the violation's sentences - mean z of the
    acceptable ones)``, each as ``feature (#rank): top tokens``."""
    if "violation" not in study.test.columns:
        raise ValueError("the test data have no 'violation' column: no planted violations to check")
    layer, coef = lasso.readout_layer_, lasso.coef_[0]
    Z_test = study.Z_test[layer]
    order = np.argsort(-lasso.readout_importance(standardized), kind="stable")
    rank = {int(f): r + 1 for r, f in enumerate(order)}
    correct = (lasso.predict_proba(study.Z_test)[:, 1] > 0.5) == (study.y_test == 1)
    kinds = study.test["violation"].to_numpy()
    acceptable = _mean(Z_test, kinds == "none")

    def described(feature: int) -> str:
        words = ", ".join(w for w, _ in study.top_tokens(layer, feature).most_common(3))
        return f"{feature} (#{rank[feature]}): {words}"

    rows = []
    for violation, category in VIOLATION_CATEGORIES.items():
        chosen = kinds == violation
        first = next(
            (r + 1 for r, f in enumerate(order[:search])
             if dominant_category(study.top_tokens(layer, int(f))) == category),
            None,
        )  # fmt: skip
        shift = coef * (_mean(Z_test, chosen) - acceptable)
        rows.append(
            {
                "violation": violation,
                "test sentences": int(chosen.sum()),
                "readout accuracy": round(float(correct[chosen].mean()), 3),
                "planted category": category,
                "first rank of the category": first,
                "features rejecting these sentences": " | ".join(
                    described(int(f)) for f in np.argsort(shift, kind="stable")[:shown]
                ),
            }
        )
    return pd.DataFrame(rows).set_index("violation")


def check_tables(
    study: FeatureStudy, lasso: CircuitLasso, circuit: Circuit
) -> list[pd.DataFrame | pd.Series]:
    """The three checks of the ``circuit`` the fitted ``lasso`` traced on ``study``, as four
    tables in order: :func:`categories_by_layer` and :func:`violations_reached` (the categories
    it reaches), :func:`ranking_comparison` (both rankings, the estimator's ``roots`` and ``k``)
    and :func:`violation_diagnosis` (why a category is reached or not)."""
    return [
        categories_by_layer(study, circuit),
        violations_reached(study, circuit),
        ranking_comparison(study, lasso),
        violation_diagnosis(study, lasso),
    ]
