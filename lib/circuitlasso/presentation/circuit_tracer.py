"""A traced circuit in circuit-tracer's attribution-graph viewer, served offline.

:func:`to_circuit_tracer` writes a feature circuit (a prompt's, ``CircuitLasso.prompt_circuit``, or
the data set's, ``CircuitLasso.trace()``), interpreted, as a graph file of circuit-tracer's viewer
(``circuit_tracer.frontend``, validated by its pydantic models) into a folder: each feature a node
at the prompt's token where it is most active, its label its top tokens; each edge a link weighted
by its coefficient of ``A_{l-1,l}``; each readout-layer feature linked to the output, the target
logit node, by its coefficient of ``A_{L,y}``.

The folder holds:

- ``{slug}.json``: the graph (``metadata``, ``qParams``, ``nodes``, ``links``);
- ``graph-metadata.json``: ``{"graphs": [metadata, ...]}``, the list the viewer offers;
- ``features/{name}/{index}.json``: each feature's top activating training prompts with
  per-token values (the viewer's feature panel; ``index`` is circuit-tracer's Cantor pairing of
  layer and feature).

:func:`study_graphs` writes the graphs of the prompts a chapter shows (each root's top training
prompts, each prompt's own circuit) into one folder; shown in the notebook, they are linked from
the chapter's page. :func:`serve` serves such a folder with circuit-tracer's local server
(``circuitlasso view DIR``). The package's page loads its scripts from CDNs
(:data:`CDN_SCRIPTS`); the page served here loads pinned copies from the npm registry instead
(``make install`` puts them under the environment's ``share/circuitlasso-viewer``), so nothing
leaves the machine.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from circuit_tracer.frontend import feature_models, graph_models, local_server
from circuit_tracer.frontend.utils import add_graph_metadata

from circuitlasso.cache import atomic_path
from circuitlasso.circuits import interpret
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.trace import node_name, root_features
from circuitlasso.estimator import CircuitLasso
from circuitlasso.forward import (
    Model,
    SAEMap,
    real_token_mask,
    sae_layers,
    token_strings,
    tokenize_batch,
)
from circuitlasso.presentation.book import GRAPHS
from circuitlasso.presentation.explorer import check_circuit, node_label, readout_columns
from circuitlasso.study import FeatureStudy

VIEWER_SCRIPTS = Path(sys.prefix) / "share" / "circuitlasso-viewer" / "node_modules"
"""Where ``make install`` puts the viewer's scripts (npm packages, pinned in the Makefile)."""

_LIB = "https://transformer-circuits.pub/2025/attribution-graphs/static_js/lib/"
CDN_SCRIPTS: dict[str, tuple[str, ...]] = {
    _LIB + "hotserver-client-ws.js": (),  # the authors' live reload while editing the page
    _LIB + "d3.js": ("d3/dist/d3.min.js", "d3-collection/dist/d3-collection.min.js"),
    _LIB + "jetpack_2024-07-20.js": ("d3-jetpack/build/d3-jetpack.cjs", "circuit-tracer-axis.js"),
    _LIB + "npy_v0.js": (),  # reads .npy files, which no graph here has
    "https://unpkg.com/dagre@0.8.5/dist/dagre.min.js": ("dagre/dist/dagre.min.js",),
    "https://unpkg.com/pako@2.1.0/dist/pako.min.js": ("pako/dist/pako.min.js",),
}
"""Each script the package's ``index.html`` loads from a CDN, and the local files the page
served here loads in its place (under :data:`VIEWER_SCRIPTS`; ``circuit-tracer-axis.js``, this
package's asset, adds the ``drawAxis`` that the page's d3-jetpack build gives
``d3.conventions``)."""

NPM_INSTALL = (
    "npm install --prefix {prefix} --no-save d3@7.9.0 d3-collection@1.0.7 d3-jetpack@2.2.0 "
    "dagre@0.8.5 pako@2.1.0"
)
_SCRIPT = "<script src='{}'></script>\n"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "model"


def _token_values(
    model: Model, saes: Mapping[int, Any], prompt: str, wanted: Mapping[int, Sequence[int]]
) -> tuple[list[str], np.ndarray, dict[int, np.ndarray]]:
    """The prompt's tokens as the model reads it ``(P,)``, the positions of its real tokens
    ``(T,)`` and per layer of ``wanted`` the values of its features there ``(T, F_layer)``."""
    ids, _ = tokenize_batch(model, [prompt], 0)  # the context and empty checks
    ids = ids[0]
    real = np.flatnonzero(real_token_mask(model, ids).numpy())
    values = interpret.layers_token_values(model, saes, wanted, [ids])
    return token_strings(model, ids), real, {layer: v[0] for layer, v in values.items()}


def _readout_output(lasso: CircuitLasso, z: np.ndarray, column: int) -> tuple[str, float]:
    """The output node's token and probability on a prompt whose readout-layer features
    averaged over its real tokens are ``z: (D,)``: the target class and its probability, or
    the predicted value of a real-valued readout (probability 0)."""
    Z = {lasso.readout_layer_: sp.csr_matrix(z[None, :])}
    name = readout_columns(lasso)[column]
    if lasso.kind_ == "regression":
        return f"{name} = {float(lasso.predict(Z)[0]):.4g}", 0.0
    proba = lasso.predict_proba(Z)[0]
    return name, float(proba[column + 1 if lasso.kind_ == "binary" else column])


def _viewer_tokens(model: Model, prompt: str) -> list[str]:
    """The real tokens of ``prompt`` as the viewer shows an example, which it joins without a
    separator: each token the text it adds to the decoded prompt (a decoder's own leading space,
    or the one the tokenizer puts between words), so that joined they read as the prompt."""
    ids, _ = tokenize_batch(model, [prompt], 0)
    real = [int(i) for i, keep in zip(ids[0], real_token_mask(model, ids[0]), strict=True) if keep]
    assert model.tokenizer is not None  # tokenize_batch needs one
    pieces, before = [], ""
    for end in range(1, len(real) + 1):
        text = str(model.tokenizer.decode(real[:end], skip_special_tokens=True))
        pieces.append(text[len(before) :] if text.startswith(before) else text)
        before = text
    return pieces


def _feature_file(
    name: str,
    index: int,
    top: Sequence[interpret.Activation],
    frequency: float,
    tokens: Sequence[list[str]],
) -> feature_models.Model:
    """The viewer's file of a feature: its ``top`` prompts, each with its ``tokens`` as the
    viewer shows them (:func:`_viewer_tokens`)."""
    examples = [
        feature_models.Example(
            tokens_acts_list=[float(v) for v in a.values],
            train_token_ind=int(np.argmax(a.values)) if len(a.values) else 0,
            is_repeated_datapoint=False,
            tokens=shown,
        )
        for a, shown in zip(top, tokens, strict=True)
    ]
    top_value = max((float(np.max(a.values)) for a in top if len(a.values)), default=0.0)
    return feature_models.Model(
        transcoder_id=name,
        index=index,
        examples_quantiles=[
            feature_models.ExamplesQuantile(quantile_name="Top activations", examples=examples)
        ],
        top_logits=[],
        bottom_logits=[],
        act_min=0.0,
        act_max=top_value,
        quantile_values=[],
        histogram=[],
        activation_frequency=frequency,
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def to_circuit_tracer(
    circuit: Circuit,
    prompt: str,
    lasso: CircuitLasso,
    model: Model,
    saes: SAEMap,
    prompts: Sequence[str],
    folder: str | Path,
    *,
    slug: str | None = None,
    name: str | None = None,
    target: str | None = None,
    examples: int = 5,
    drop_inactive: bool = False,
) -> Path:
    """Write ``circuit`` on ``prompt`` as a circuit-tracer graph into ``folder`` (see the module
    docstring for the files) and return the graph file's path.

    ``circuit``: traced and interpreted (``top_tokens`` on every node, ``coef`` and ``type`` on
    every edge), from ``lasso`` fitted on features of ``model`` with ``saes`` collected on
    ``prompts: (M,)`` (the top activating prompts of the feature files are rows of them).
    ``slug``: the graph's name in the folder (default: the model's name and a digest of the
    graph). ``name``: the model's (default ``model.cfg.model_name``). ``target``: the readout
    column the output node stands for (default its first: the positive class of a binary
    label). ``examples``: top activating prompts per feature file. ``drop_inactive``: leave out
    the nodes whose feature is never active on ``prompt`` and their links (a data set's circuit
    holds features a prompt does not use; a prompt's own circuit, ``lasso.prompt_circuit``, has
    none).

    A ``ValueError`` names the problem: an empty or uninterpreted circuit, a prompt longer than
    the model's context, a node without a position (a feature never active on ``prompt``, unless
    ``drop_inactive``).
    """
    check_circuit(circuit)
    saes = sae_layers(saes)
    readout = int(lasso.readout_layer_)
    columns = readout_columns(lasso)
    target = columns[0] if target is None else target
    if target not in columns:
        raise ValueError(f"target {target!r} is not a readout column: {columns}")
    column = columns.index(target)
    located: dict[str, tuple[int, int]] = {}
    for node, data in circuit.nodes(data=True):
        layer, feature = int(data["layer"]), int(data["feature"])
        if node != node_name(layer, feature):
            raise ValueError(f"node {node} should be named {node_name(layer, feature)}")
        located[node] = (layer, feature)
    missing = sorted(({layer for layer, _ in located.values()} | {readout}) - set(saes))
    if missing:
        raise ValueError(f"saes has no SAE of layers {missing} (it has {sorted(saes)})")
    wanted: dict[int, list[int]] = {}
    for layer, feature in located.values():
        wanted.setdefault(layer, []).append(feature)
    width = saes[readout].cfg.d_sae
    wanted[readout] = [*wanted.get(readout, []), *range(width)]  # z_L for the output
    tokens, real, values = _token_values(model, saes, prompt, wanted)

    name = str(model.cfg.model_name) if name is None else name
    nodes: dict[str, graph_models.Node] = {}
    for node, (layer, feature) in located.items():
        at = values[layer][:, wanted[layer].index(feature)]  # (T,)
        if not len(at) or at.max() <= 0:
            if drop_inactive:
                continue
            raise ValueError(
                f"node {node} has no position on the prompt: its feature is never active there "
                "(a data set's circuit may hold features a prompt does not use: pass "
                "drop_inactive=True, or convert the prompt's own circuit, "
                "CircuitLasso.prompt_circuit)"
            )
        best = int(np.argmax(at))
        nodes[node] = graph_models.Node.feature_node(
            layer, int(real[best]), feature, influence=float(circuit.nodes[node]["importance"]),
            activation=float(at[best]),
        )  # fmt: skip
        nodes[node].clerp = node_label(circuit.nodes[node])
    if not nodes:
        raise ValueError("no node of the circuit is active on the prompt: nothing to show")
    z = values[readout][:, -width:].mean(0)  # (D,) the readout's input on this prompt
    token, probability = _readout_output(lasso, z, column)
    output = graph_models.Node.logit_node(
        pos=len(tokens) - 1, vocab_idx=model.cfg.d_vocab + column, token=token,
        num_layers=model.cfg.n_layers, target_logit=True, token_prob=probability,
    )  # fmt: skip
    coef = np.atleast_2d(lasso.coef_).T  # (D, 1) or (D, K)
    links = [
        graph_models.Link(source=nodes[parent].node_id, target=nodes[child].node_id,
                          weight=float(data["coef"]))
        for parent, child, data in circuit.edges(data=True) if parent in nodes and child in nodes
    ] + [
        graph_models.Link(source=nodes[node].node_id, target=output.node_id,
                          weight=float(coef[feature, column]))
        for node, (layer, feature) in located.items() if layer == readout and node in nodes
    ]  # fmt: skip
    scan = f"./data/features/{_safe(name)}"
    body = [node.model_dump() for node in nodes.values()] + [output.model_dump()]
    digest = hashlib.sha256(repr((prompt, body, links)).encode()).hexdigest()[:10]
    graph = graph_models.Model(
        metadata=graph_models.Metadata(
            slug=slug or f"{_safe(name)}-{digest}", scan=scan, transcoder_list=[],
            prompt_tokens=tokens, prompt=prompt,
        ),
        qParams=graph_models.QParams(pinnedIds=[], supernodes=[], linkType="both",
                                     clickedId="", sg_pos=""),
        nodes=[*nodes.values(), output],
        links=[link.model_dump() for link in links],
    )  # fmt: skip

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    Z = lasso.X_fit_
    shown = {node: located[node] for node in nodes}
    tops = interpret.nodes_top_activations(model, saes, shown.values(), prompts, Z, n=examples)
    for node, (layer, feature) in shown.items():
        index, top = nodes[node].feature, tops[(layer, feature)]
        frequency = float(Z[layer][:, [feature]].count_nonzero() / Z[layer].shape[0])
        texts = [_viewer_tokens(model, prompts[a.row]) for a in top]
        page = _feature_file(name, index, top, frequency, texts)
        _write(folder / "features" / _safe(name) / f"{index}.json", page.model_dump_json())
    path = folder / f"{graph.metadata.slug}.json"
    _write(path, graph.model_dump_json())
    add_graph_metadata(graph.metadata.model_dump(), str(folder))
    return path


@dataclass
class StudyGraphs:
    """The graphs :func:`study_graphs` wrote: ``table`` (a row per graph: ``root``, ``prompt``,
    ``nodes``, ``links`` and ``graph``, the file's name in ``folder``) and ``folder``. Shown in a
    notebook, the table with each graph linked and the command that opens the folder in the
    viewer; ``folder`` is then a child of the book's graph folder
    (:data:`~circuitlasso.presentation.book.GRAPHS`), which the built book holds beside its
    pages, so the links are relative to a page of ``book/sections``."""

    table: pd.DataFrame
    folder: Path

    def _repr_html_(self) -> str:
        name = html.escape(self.folder.name)
        linked = self.table.assign(
            graph=[f'<a href="{GRAPHS.name}/{name}/{html.escape(g)}">{html.escape(g)}</a>'
                   for g in self.table["graph"]],
            prompt=[html.escape(p) for p in self.table["prompt"]],
        )  # fmt: skip
        return (
            linked.to_html(index=False, escape=False)
            + "<p>Open them in circuit-tracer's viewer, offline: <code>circuitlasso view "
            f"{GRAPHS.as_posix()}/{name}</code> (from the repository's root, after "
            "<code>make book</code>).</p>"
        )


def study_graphs(
    study: FeatureStudy,
    lasso: CircuitLasso,
    circuit: Circuit,
    folder: str | Path,
    *,
    roots: int = 2,
    n: int = 1,
    examples: int = 5,
) -> StudyGraphs:
    """The graphs of the prompts a chapter shows: for each of the ``roots`` most important roots
    of ``circuit`` (traced by ``lasso``, fitted on ``study``'s features), its ``n`` top training
    prompts (those :meth:`~circuitlasso.study.FeatureStudy.root_prompts` shows first), each
    prompt's own circuit (``lasso.prompt_circuit``, labelled by ``study``) written by
    :func:`to_circuit_tracer` into ``folder`` (one viewer folder: ``circuitlasso view
    folder``); a prompt two roots share is written once."""
    layer = study.last
    rows: dict[int, str] = {}  # prompt row -> the root it is shown for
    for feature in root_features(circuit)[:roots]:
        for top in study.top_activations(layer, feature, n):
            rows.setdefault(top.row, node_name(layer, feature))
    table = []
    for row, root in rows.items():
        own = lasso.prompt_circuit(row)
        study.interpret_circuit(own)
        path = to_circuit_tracer(
            own, study.prompts[row], lasso, study.model, study.saes, study.prompts, folder,
            slug=f"{_safe(study.name)}-prompt-{row}", name=study.name, examples=examples,
        )  # fmt: skip
        graph = json.loads(path.read_text(encoding="utf-8"))
        table.append({"root": root, "prompt": study.prompts[row], "nodes": len(graph["nodes"]),
                      "links": len(graph["links"]), "graph": path.name})  # fmt: skip
    columns = ["root", "prompt", "nodes", "links", "graph"]
    return StudyGraphs(pd.DataFrame(table, columns=columns), Path(folder))


def viewer_page(folder: str | Path) -> Path:
    """Write circuit-tracer's viewer into ``folder`` with every CDN script of its
    ``index.html`` replaced by its local copy (:data:`CDN_SCRIPTS`) under ``vendor/``; return
    ``folder``. A ``ValueError`` names a script the page loads that is not known here, or a
    local copy that is not installed (and the command that installs it)."""
    folder = Path(folder)
    assets = resources.files("circuit_tracer") / "frontend" / "assets"
    with resources.as_file(assets) as source:
        shutil.copytree(source, folder, dirs_exist_ok=True)
    page = (folder / "index.html").read_text(encoding="utf-8")
    vendor = folder / "vendor"
    vendor.mkdir(exist_ok=True)
    ours = resources.files("circuitlasso.presentation") / "assets"
    for url, files in CDN_SCRIPTS.items():
        local = []
        for file in files:
            copy = vendor / Path(file).name.replace(".cjs", ".js")
            installed = VIEWER_SCRIPTS / file
            if "/" not in file:
                copy.write_text((ours / file).read_text(encoding="utf-8"), encoding="utf-8")
            elif installed.is_file():
                shutil.copyfile(installed, copy)
            else:
                prefix = VIEWER_SCRIPTS.parent
                raise ValueError(
                    f"the viewer's script {installed} is not installed: run `make install`, or "
                    f"`{NPM_INSTALL.format(prefix=prefix)}`"
                )
            local.append(_SCRIPT.format(f"./vendor/{copy.name}"))
        page = page.replace(_SCRIPT.format(url), "".join(local))
    remote = re.findall(r"<script src=['\"](https?://[^'\"]+)", page)
    if remote:
        raise ValueError(f"the viewer's index.html loads scripts not known here: {remote}")
    (folder / "index.html").write_text(page, encoding="utf-8")
    return folder


@dataclass
class Viewer:
    """circuit-tracer's local server running in a thread over a folder of graphs: ``url`` the
    viewer's address; :meth:`stop` (or leaving a ``with`` block) stops it and removes the
    page's copy."""

    url: str
    server: Any
    page: tempfile.TemporaryDirectory

    def stop(self) -> None:
        self.server.stop()
        self.page.cleanup()

    def __enter__(self) -> Viewer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(folder: str | Path, port: int = 0) -> Viewer:
    """Serve the graphs in ``folder`` (written by :func:`to_circuit_tracer`) with
    circuit-tracer's local server on ``port`` (0: any free port) and the page of
    :func:`viewer_page`; a ``ValueError`` if ``folder`` has no ``graph-metadata.json``."""
    folder = Path(folder).resolve()
    if not (folder / "graph-metadata.json").is_file():
        raise ValueError(
            f"{folder} has no graph-metadata.json: write graphs into it with to_circuit_tracer"
        )
    page = tempfile.TemporaryDirectory(prefix="circuitlasso-viewer-")
    try:
        root = viewer_page(page.name)
        server = local_server.serve(str(folder), frontend_dir=str(root), port=port)
    except BaseException:
        page.cleanup()
        raise
    port = server.httpd.server_address[1]
    return Viewer(f"http://localhost:{port}/index.html", server, page)
