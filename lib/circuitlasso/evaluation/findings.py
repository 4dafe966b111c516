"""The paper's qualitative CoLA findings (Sec. 4.2.1), looked for in a traced feature circuit.

The paper labels four GPT-2 roots ("-self", "hunger/thirst", "tired/weary", ending
punctuation), follows "-self" down five layers (persistence) and shows features that merge or
drop their parents' concepts. Here a node *is* a concept when at least half of its top tokens
are the concept's words (:func:`~circuitlasso.data.concepts.dominant_concept`); the circuit
must have been interpreted (:meth:`~circuitlasso.study.FeatureStudy.interpret_circuit`:
node ``top_tokens``, edge ``type``).

- :func:`concept_table`: per concept, what the paper reports and which of the circuit's nodes
  are that concept, how many are roots, and the longest chain of them over consecutive layers.
- :func:`edge_type_table`: per edge type, how many edges have it and the strongest one.

Whether a circuit for the readout ``A_{L,y}`` can say anything depends on the readout having
learned the label: :func:`readout_baselines` puts its test accuracy beside the majority class
and a dense probe on the same layer's activations (every direction, not a sparse choice of SAE
features), which tells a readout that misses the label from a model that does not carry it
linearly. :func:`study_summary` is the JSON summary of a run on a study.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from circuitlasso.circuits import trace as tr
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.collect.layers import LayerFeatures
from circuitlasso.data.concepts import ENGLISH_CONCEPTS, dominant_concept
from circuitlasso.estimator import CircuitLasso
from circuitlasso.evaluation import planted
from circuitlasso.evaluation.debias.probes import fit_probe
from circuitlasso.study import FeatureStudy, run_summary

PAPER_CONCEPTS = {
    "reflexives": 'root z12.20726 "-self"; persists over layers 8 to 12',
    "hunger_thirst": 'root z12.776 "hunger/thirst"; z9.22314 feeds z10.5574 "ate/eat"',
    "tired_weary": 'root z12.19322 "tired/weary"',
    "final_punctuation": 'root z12.3092 "ending punctuation"',
    "agreement_verbs": "not among the labelled features",
}
PAPER_EDGES = {
    "persistence": '"-self" from z8.15186 up to z12.20726',
    "merging": "z9.10609 merges z8.15186 and z8.27170",
    "dropping": 'z11.6368 keeps "himself" of z10.2985\'s "-self" words',
    "other": "",
}


def _layers(circuit: Circuit, nodes: Collection[str]) -> str:
    return ", ".join(str(layer) for layer in sorted({circuit.nodes[n]["layer"] for n in nodes},
                                                    reverse=True))  # fmt: skip


def concept_table(
    circuit: Circuit,
    concepts: Mapping[str, Collection[str]] = ENGLISH_CONCEPTS,
    paper: Mapping[str, str] = PAPER_CONCEPTS,
) -> pd.DataFrame:
    """One row per concept (index ``concept``): ``in the paper`` (``paper``'s text), ``nodes``
    (the circuit's nodes that are the concept, from the last layer down), ``roots`` (how many
    of them are last-layer nodes), ``layers`` and ``longest chain`` (the most consecutive
    layers a parent-to-child path of the concept's nodes spans: persistence)."""
    tr.check_interpreted(circuit)
    last = max((layer for _, layer in circuit.nodes(data="layer")), default=None)
    found: dict[str, list[str]] = {name: [] for name in concepts}
    for node, tokens in circuit.nodes(data="top_tokens"):
        name = dominant_concept(tokens, concepts)
        if name is not None:
            found[name].append(node)
    rows = []
    for name, nodes in found.items():
        nodes.sort(key=lambda n: (-circuit.nodes[n]["layer"], -circuit.nodes[n]["importance"]))
        chain = nx.dag_longest_path(circuit.subgraph(nodes)) if nodes else []
        rows.append({
            "concept": name,
            "in the paper": paper.get(name, ""),
            "nodes": ", ".join(nodes),
            "roots": sum(circuit.nodes[n]["layer"] == last for n in nodes),
            "layers": _layers(circuit, nodes),
            "longest chain": len(chain),
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("concept")


def edge_type_table(circuit: Circuit, paper: Mapping[str, str] = PAPER_EDGES) -> pd.DataFrame:
    """One row per edge type (index ``type``): ``in the paper`` (``paper``'s example),
    ``edges`` (how many), ``strongest`` (the edge of largest ``|coef|``, ``parent -> child``)
    and the top tokens of its ``parent`` and ``child``."""
    tr.check_interpreted(circuit)
    captions = tr.node_captions(circuit)
    rows = []
    for kind in paper:
        edges = [(p, c, d) for p, c, d in circuit.edges(data=True) if d.get("type") == kind]
        row: dict[str, object] = {"type": kind, "in the paper": paper[kind], "edges": len(edges)}
        if edges:
            parent, child, _ = max(edges, key=lambda edge: abs(edge[2]["coef"]))
            row |= {"strongest": f"{parent} -> {child}", "parent": captions[parent],
                    "child": captions[child]}  # fmt: skip
        rows.append(row)
    columns = ["type", "in the paper", "edges", "strongest", "parent", "child"]
    return pd.DataFrame(rows, columns=columns).set_index("type").fillna("")


def readout_baselines(study: FeatureStudy, lasso: CircuitLasso) -> pd.DataFrame:
    """Train and test accuracy (columns) of the majority class of the training labels, the binary
    readout of the fitted ``lasso`` on the study's features, and an l2-logistic probe
    (:func:`~circuitlasso.evaluation.debias.probes.fit_probe`) on the token-averaged activation
    at the hook the readout layer's SAE reads (rows; collected with the features,
    :meth:`~circuitlasso.study.FeatureStudy.collect`)."""
    if lasso.kind_ != "binary":
        raise ValueError(f"readout baselines need a binary readout, not a {lasso.kind_} one")
    layer = lasso.readout_layer_
    hook = str(study.saes[layer].cfg.metadata.hook_name)
    majority = int(np.mean(study.y) >= 0.5)
    splits = {"train": (study.Z, study.y), "test": (study.Z_test, study.y_test)}
    X = {}
    for name, (Z, _) in splits.items():
        if not isinstance(Z, LayerFeatures) or layer not in Z.pooled:
            raise ValueError(
                f"the study's {name} features hold no pooled activations of layer "
                f"{layer}: collect them with FeatureStudy.collect"
            )
        X[name] = Z.pooled[layer]
    probe = fit_probe(X["train"], study.y)
    rows = {
        "majority class": {n: float(np.mean(y == majority)) for n, (_, y) in splits.items()},
        f"sparse readout A_L,y ({np.count_nonzero(lasso.coef_)} SAE features)": {
            n: float(np.mean(lasso.predict(Z) == y)) for n, (Z, y) in splits.items()
        },
        f"dense probe ({X['train'].shape[1]} dimensions of {hook})": {
            n: float(np.mean(probe.predict(X[n]) == y)) for n, (_, y) in splits.items()
        },
    }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("accuracy")


def study_summary(
    study: FeatureStudy, lasso: CircuitLasso, ablation: pd.DataFrame, circuit: Circuit
) -> dict[str, Any]:
    """The JSON summary of a run on ``study`` (:func:`~circuitlasso.study.run_summary`):
    the fitted ``lasso``, its penalty ``ablation``
    (:meth:`~circuitlasso.study.FeatureStudy.search_label_lam`), the interpreted
    ``circuit`` with its :func:`concept_table`, and, where the study's sentences carry a planted
    truth (:func:`~circuitlasso.evaluation.planted.has_planted_truth`), the violations whose
    categories it reaches (:func:`~circuitlasso.evaluation.planted.violations_reached`)."""
    reached = (
        planted.violations_reached(study, circuit) if planted.has_planted_truth(study) else None
    )
    return run_summary(lasso, ablation, circuit, reached, concept_table(circuit))
