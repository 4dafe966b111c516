"""Minimal pairs through a traced circuit: what changes between an acceptable sentence and its
one-word-different unacceptable twin.

For each pair (:mod:`circuitlasso.data.minimal_pairs`) both sentences' SAE features are
collected; the model's decision on each (its own classifier where it has one, else the
readout's) is read off; and the dataset-level circuit is weighted by each sentence's own
activations (:func:`~circuitlasso.circuits.trace.prompt_importance`, the explorer's per-prompt
circuit). The circuit feature whose contribution changes most between the two sentences is
named with its top tokens, and the pair counts as *located* when those tokens include the word
that was changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.trace import node_name
from circuitlasso.collect import collect_sae_features
from circuitlasso.data.minimal_pairs import MinimalPair, load_minimal_pairs
from circuitlasso.data.models import model_decisions
from circuitlasso.estimator import CircuitLasso
from circuitlasso.forward import Model, SAEMap
from circuitlasso.study import FeatureStudy

TOP_TOKENS = 10
"""How many of a feature's top tokens the changed word is looked for among."""


def _word(token: str) -> str:
    return token.lower().removeprefix("##").removeprefix("Ġ").strip()


def pair_table(
    lasso: CircuitLasso,
    circuit: Circuit,
    model: Model,
    saes: SAEMap,
    pairs: Sequence[MinimalPair],
    top_tokens: Callable[[int, int], Counter[str]],
    decide: Callable[[list[str]], np.ndarray] | None = None,
) -> pd.DataFrame:
    """One row per pair: the phenomenon, both sentences, the changed words, the decision on each
    sentence (1 = acceptable) and whether both are right, the circuit feature whose
    contribution changes most (``z{layer}.{feature}``), that change (good minus bad), its top
    tokens and whether they hold a changed word.

    ``lasso``: fitted on features of ``model`` with ``saes``; ``circuit``: its traced circuit;
    ``top_tokens(layer, feature)``: a feature's top tokens over the training prompts;
    ``decide(sentences) -> (N,)``: the model's own decisions (default: the readout's).
    """
    sentences = [s for pair in pairs for s in (pair.good, pair.bad)]
    Z = collect_sae_features(model, saes, sentences, cache=False, progress=False)
    layers = {int(layer) for layer in Z}
    missing = {data["layer"] for _, data in circuit.nodes(data=True)} - layers
    if missing:
        raise ValueError(f"the circuit has features of layers {sorted(missing)} not in saes")
    decided = decide(sentences) if decide is not None else lasso.predict(Z)
    importance = lasso.prompt_importance(circuit, Z, range(len(sentences)))
    rows = []
    for i, pair in enumerate(pairs):
        good, bad = importance[2 * i], importance[2 * i + 1]
        change = {node: good.get(node, 0.0) - bad.get(node, 0.0) for node in good.keys() | bad}
        top = max(change, key=lambda node: abs(change[node]), default=None)
        tokens: list[str] = []
        if top is not None:
            layer, feature = circuit.nodes[top]["layer"], circuit.nodes[top]["feature"]
            assert node_name(layer, feature) == top
            tokens = [t for t, _ in top_tokens(layer, feature).most_common(TOP_TOKENS)]
        changed = [w for w in pair.changed if w]
        rows.append(
            {
                "phenomenon": pair.phenomenon,
                "good": pair.good,
                "bad": pair.bad,
                "changed": " / ".join(pair.changed).rstrip(" /"),
                "decision_good": int(decided[2 * i]),
                "decision_bad": int(decided[2 * i + 1]),
                "both_right": bool(decided[2 * i] == 1 and decided[2 * i + 1] == 0),
                "top_feature": top,
                "change": change.get(top, 0.0) if top is not None else 0.0,
                "top_tokens": " ".join(tokens),
                "located": any(_word(t) in changed for t in tokens),
            }
        )
    return pd.DataFrame(rows)


def phenomenon_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per phenomenon (and over all pairs): pairs, the share where both decisions are right and
    the share located (the top-changing feature's top tokens hold the changed word)."""
    grouped = table.groupby("phenomenon", sort=False)
    summary = pd.DataFrame(
        {
            "pairs": grouped.size(),
            "both_right": grouped["both_right"].mean(),
            "located": grouped["located"].mean(),
        }
    )
    summary.loc["all"] = [len(table), table["both_right"].mean(), table["located"].mean()]
    summary["pairs"] = summary["pairs"].astype(int)
    return summary


def study_pairs(
    lasso: CircuitLasso,
    circuit: Circuit,
    study: FeatureStudy,
    pairs: Sequence[MinimalPair] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`phenomenon_summary` and :func:`pair_table` of ``pairs`` (default: every committed
    pair) on a study's model, SAEs and top tokens, decided by the model's own classifier where it
    has one (:func:`~circuitlasso.data.models.model_decisions`)."""
    pairs = load_minimal_pairs() if pairs is None else pairs
    decide = model_decisions(study.name, study.model)
    table = pair_table(lasso, circuit, study.model, study.saes, pairs, study.top_tokens, decide)
    return phenomenon_summary(table), table
