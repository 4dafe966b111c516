"""An interactive explorer of a traced SAE-feature circuit: one self-contained HTML file.

:func:`explorer_data` gathers what the explorer shows from a fitted
:class:`~circuitlasso.estimator.CircuitLasso` and its interpreted circuit, with the model, SAEs,
prompts and labels its features came from (:func:`study_data`: those of a
:class:`~circuitlasso.study.FeatureStudy`); :func:`save_data` and :func:`load_data`
write and read it as JSON; :func:`write_html` writes the page (the JSON, and the explorer's own
script and style inlined: nothing is fetched when it is viewed, no server is needed); :func:`show`
displays it in a notebook cell, and so in the book.
The command ``circuitlasso explore DATA.json --out explorer.html`` writes the page from the JSON.

The page shows layers as columns and features as nodes whose area is their importance; hovering
over or clicking a feature opens its panel (label, top tokens, top activating sentences with
per-token activations, parents and children with coefficients and edge types, each a link to
walk the circuit). Filters: minimum ``|coef|``, minimum importance, a token search. Per-prompt
mode: pick a sentence and the sizes become that prompt's importance ``|A| * |z|``.

The JSON (schema ``circuitlasso.explorer/1``) is one object:

- ``schema``: ``"circuitlasso.explorer/1"``; a reader refuses any other value.
- ``title``, ``model``: strings.
- ``layers``: the layers with nodes, ascending.
- ``readout``: ``{"layer": L, "columns": [...]}``, the layer ``A_{L,y}`` reads and the name of
  each of its columns (the positive class of a binary label, each class of a multi-class one,
  ``"y"`` for a real-valued one).
- ``nodes``: one object per feature: ``id`` (``"z{layer}.{feature}"``), ``layer``, ``feature``,
  ``importance`` (the trace's score over the data set), ``label`` (its top tokens, joined),
  ``top_tokens`` (``[token, count]`` pairs, most common first), ``readout`` (its row of
  ``A_{L,y}``, one number per readout column; null below the readout layer) and ``sentences``:
  its top activating training sentences, each ``{"prompt": row, "tokens": [...], "values":
  [...], "mean": ...}`` with one value per token.
- ``edges``: one object per edge, parent to child: ``source``, ``target``, ``coef`` (the entry
  of ``A_{l-1,l}``), ``score`` (the trace's score) and ``type`` (``persistence``, ``merging``,
  ``dropping`` or ``other``).
- ``prompts``: the sentences of the per-prompt mode, each ``{"prompt": row, "text": ...,
  "label": ..., "importance": {node id: value}}``: a root's ``|A_{L,y}| * |z_L|`` on that
  sentence, a parent's sum over its edges of ``|coef| * |z|`` (nodes at zero left out), the
  scores :func:`~circuitlasso.circuits.trace.trace_circuit` ranks by for one prompt.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from IPython.display import HTML

from circuitlasso.cache import atomic_path
from circuitlasso.circuits import interpret
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.trace import check_interpreted, node_name
from circuitlasso.estimator import CircuitLasso
from circuitlasso.forward import Model, SAEMap, sae_layers
from circuitlasso.study import FeatureStudy

SCHEMA = "circuitlasso.explorer/1"
"""The version of the JSON the explorer reads; bump it when a field changes meaning."""

EDGE_TYPES = ("persistence", "merging", "dropping", "other")
_NODE_KEYS = ("id", "layer", "feature", "importance", "label", "top_tokens", "readout", "sentences")
_EDGE_KEYS = ("source", "target", "coef", "score", "type")
_PROMPT_KEYS = ("prompt", "text", "label", "importance")
_TOP_KEYS = ("schema", "title", "model", "layers", "readout", "nodes", "edges", "prompts")


def _num(value: float) -> float:
    """``value`` as a Python float with 6 significant digits (a smaller JSON)."""
    return float(f"{float(value):.6g}")


def _plain(value: Any) -> Any:
    """A numpy scalar as a Python one (labels read from a data frame)."""
    return value.item() if isinstance(value, np.generic) else value


def check_circuit(circuit: Circuit) -> None:
    """Raise ``ValueError`` naming the first problem of a circuit the viewers cannot show: no
    node, a node without ``layer``, ``feature`` or ``importance``, not interpreted
    (:func:`~circuitlasso.circuits.trace.check_interpreted`), an edge without a ``coef`` or of an
    unknown type."""
    if circuit.number_of_nodes() == 0:
        raise ValueError("the circuit has no nodes")
    for node, data in circuit.nodes(data=True):
        missing = [k for k in ("layer", "feature", "importance") if k not in data]
        if missing:
            raise ValueError(f"node {node} lacks {missing}: trace the circuit with trace_circuit")
    check_interpreted(circuit)
    for parent, child, data in circuit.edges(data=True):
        if "coef" not in data or data["type"] not in EDGE_TYPES:
            raise ValueError(
                f"edge {parent} -> {child} lacks a coef or has an unknown edge type "
                f"{data['type']!r}: trace the circuit with trace_circuit"
            )


def node_label(data: Mapping[str, Any]) -> str:
    """An interpreted node's label: its three most common top tokens
    (:func:`~circuitlasso.circuits.interpret.token_text`), joined."""
    tokens = list(data["top_tokens"])[:3]
    return ", ".join(interpret.token_text(str(t)) for t in tokens) or "(never active)"


def readout_columns(lasso: CircuitLasso) -> list[str]:
    """The name of each column of ``A_{L,y}``: the positive class of a binary label, each class of
    a multi-class one, ``"y"`` for a real-valued one."""
    if lasso.kind_ == "binary":
        return [str(_plain(lasso.classes_[1]))]
    if lasso.kind_ == "multiclass":
        return [str(_plain(c)) for c in lasso.classes_]
    return ["y"]


def _prompt_rows(rows: int | Sequence[int], total: int) -> list[int]:
    """``rows`` rows spread evenly over ``total`` (an int), or the rows given."""
    if isinstance(rows, int):
        if rows < 0:
            raise ValueError(f"rows must be >= 0, got {rows}")
        return sorted({int(i) for i in np.linspace(0, total - 1, min(rows, total))})
    chosen = [int(i) for i in rows]
    bad = [i for i in chosen if not 0 <= i < total]
    if bad:
        raise ValueError(f"prompt rows {bad} out of range: there are {total} prompts")
    return chosen


def explorer_data(
    lasso: CircuitLasso,
    model: Model,
    saes: SAEMap,
    prompts: Sequence[str],
    labels: Sequence | np.ndarray,
    *,
    circuit: Circuit,
    name: str | None = None,
    sentences: int = 5,
    rows: int | Sequence[int] = 40,
    title: str | None = None,
) -> dict[str, Any]:
    """What the explorer shows of ``circuit``, traced from the readout of the fitted
    :class:`~circuitlasso.estimator.CircuitLasso` ``lasso`` and labelled (``lasso.interpret``),
    as a JSON-ready dict of the module's schema.

    ``model``, ``saes`` and ``prompts: (M,)`` are those the features ``lasso`` was fitted on were
    collected with (row ``i`` is ``prompts[i]``), ``labels: (M,)`` their targets. ``name``: the
    model's name (default ``model.cfg.model_name``). ``sentences``: top activating prompts per
    node. ``rows``: the prompts of the per-prompt mode: that many spread evenly, or the rows
    given.
    """
    Z, readout = lasso.X_fit_, lasso.readout_layer_
    saes = sae_layers(saes)
    check_circuit(circuit)
    if len(prompts) != Z[readout].shape[0] or len(labels) != len(prompts):
        raise ValueError(
            f"got {len(prompts)} prompts and {len(labels)} labels for features of "
            f"{Z[readout].shape[0]} prompts: pass those the features were collected on"
        )
    layers = sorted({int(layer) for _, layer in circuit.nodes(data="layer")})
    if not set(layers) <= set(saes):
        raise ValueError(f"the circuit has layers {layers}, saes only {sorted(saes)}")
    coef = np.atleast_2d(lasso.coef_).T  # (D, 1) or (D, K)
    located = {}
    for node, data in circuit.nodes(data=True):
        layer, feature = int(data["layer"]), int(data["feature"])
        if node != node_name(layer, feature):
            raise ValueError(f"node {node} should be named {node_name(layer, feature)}")
        located[node] = (layer, feature)
    tops = interpret.nodes_top_activations(
        model, saes, located.values(), prompts, Z, n=sentences
    )  # one model run for every node's top prompts
    nodes = []
    for node, data in circuit.nodes(data=True):
        layer, feature = located[node]
        top = tops[(layer, feature)]
        tokens = [[str(t), int(c)] for t, c in data["top_tokens"].items()]
        nodes.append(
            {
                "id": node,
                "layer": layer,
                "feature": feature,
                "importance": _num(data["importance"]),
                "label": node_label(data),
                "top_tokens": tokens,
                "readout": [_num(v) for v in coef[feature]] if layer == readout else None,
                "sentences": [
                    {
                        "prompt": a.row,
                        "tokens": a.tokens,
                        "values": [_num(v) for v in a.values],
                        "mean": _num(a.mean),
                    }
                    for a in top
                ],  # fmt: skip
            }
        )
    edges = [
        {"source": parent, "target": child, "coef": _num(data["coef"]),
         "score": _num(data.get("score", abs(data["coef"]))), "type": data["type"]}
        for parent, child, data in circuit.edges(data=True)
    ]  # fmt: skip
    shown = _prompt_rows(rows, len(prompts))
    per_prompt = lasso.prompt_importance(circuit, prompts=shown)
    name = str(model.cfg.model_name) if name is None else name
    return check_data(
        {
            "schema": SCHEMA,
            "title": title or f"Circuit of {name}: {len(nodes)} features, {len(edges)} edges",
            "model": name,
            "layers": layers,
            "readout": {"layer": int(readout), "columns": readout_columns(lasso)},
            "nodes": nodes,
            "edges": edges,
            "prompts": [
                {
                    "prompt": row,
                    "text": prompts[row],
                    "label": _plain(labels[row]),
                    "importance": {node: _num(v) for node, v in importance.items()},
                }
                for row, importance in zip(shown, per_prompt, strict=True)
            ],  # fmt: skip
        }
    )


def study_data(lasso: CircuitLasso, study: FeatureStudy, **options: Any) -> dict[str, Any]:
    """:func:`explorer_data` of ``lasso``, fitted on ``study``'s features: its model, SAEs,
    prompts, labels and name; ``options`` (``circuit`` among them) as :func:`explorer_data`
    takes them."""
    return explorer_data(
        lasso, study.model, study.saes, study.prompts, study.y, name=study.name, **options
    )


def _missing(record: Mapping[str, Any], keys: Sequence[str], where: str) -> None:
    absent = [k for k in keys if k not in record]
    if absent:
        raise ValueError(f"explorer data: {where} lacks {absent}")


def check_data(data: Any) -> dict[str, Any]:
    """``data`` if it is explorer JSON of schema ``circuitlasso.explorer/1``; else a ValueError
    naming the first problem (another schema version, a missing field, an edge to an unknown
    node, an unknown edge type)."""
    if not isinstance(data, dict):
        raise ValueError(f"explorer data must be a JSON object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise ValueError(
            f"explorer data has schema {data.get('schema')!r}; this version reads {SCHEMA!r}"
        )
    _missing(data, _TOP_KEYS, "the top level")
    ids = set()
    for node in data["nodes"]:
        _missing(node, _NODE_KEYS, f"node {node.get('id', '?')}")
        ids.add(node["id"])
        if node["layer"] not in data["layers"]:
            raise ValueError(f"explorer data: node {node['id']} is on a layer not in 'layers'")
    for edge in data["edges"]:
        _missing(edge, _EDGE_KEYS, "an edge")
        unknown = {edge["source"], edge["target"]} - ids
        if unknown:
            raise ValueError(f"explorer data: an edge names unknown nodes {sorted(unknown)}")
        if edge["type"] not in EDGE_TYPES:
            raise ValueError(f"explorer data: edge type {edge['type']!r} not in {EDGE_TYPES}")
    for prompt in data["prompts"]:
        _missing(prompt, _PROMPT_KEYS, f"prompt {prompt.get('prompt', '?')}")
        unknown = set(prompt["importance"]) - ids
        if unknown:
            raise ValueError(f"explorer data: a prompt scores unknown nodes {sorted(unknown)}")
    return data


def save_data(data: Mapping[str, Any], path: str | Path) -> Path:
    """Write checked explorer data as JSON to ``path``, atomically; return the path."""
    path = Path(path)
    text = json.dumps(check_data(dict(data)), ensure_ascii=False, allow_nan=False)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def load_data(path: str | Path) -> dict[str, Any]:
    """Read and check explorer JSON (see :func:`check_data`)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    return check_data(data)


def _asset(name: str) -> str:
    return (resources.files("circuitlasso.presentation") / "assets" / name).read_text("utf-8")


def render_html(data: Mapping[str, Any]) -> str:
    """The explorer page for ``data``: one HTML document, the JSON, script and style inlined."""
    checked = check_data(dict(data))
    # "<" only occurs in JSON strings, where "\u003c" means the same and cannot end the <script>
    payload = json.dumps(checked, ensure_ascii=False, allow_nan=False).replace("<", "\\u003c")
    parts = {
        "schema": SCHEMA,
        "title": html.escape(checked["title"]),
        "css": _asset("explorer.css"),
        "js": _asset("explorer.js"),
        "data": payload,
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda match: parts[match[1]], _asset("explorer.html"))


def write_html(data: Mapping[str, Any], path: str | Path) -> Path:
    """Write :func:`render_html` of ``data`` to ``path``, atomically; return the path."""
    path = Path(path)
    page = render_html(data)
    with atomic_path(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


def show(data: Mapping[str, Any] | str | Path, height: int = 640) -> HTML:
    """The explorer for ``data`` (a dict, or the path of its JSON) as notebook output: an
    iframe of ``height`` pixels holding the whole page, so it also works in the built book."""
    page = render_html(load_data(data) if isinstance(data, str | Path) else data)
    frame = (
        f'<iframe class="circuitlasso-explorer" srcdoc="{html.escape(page, quote=True)}" '
        f'style="width: 100%; height: {int(height)}px; border: 1px solid #d0d7de;" '
        'title="circuit explorer"></iframe>'
    )
    return HTML(f"<div>{frame}</div>")
