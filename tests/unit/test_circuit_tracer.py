"""Circuits as circuit-tracer graphs: the files against the package's own pydantic models and
the circuit they come from (nodes, links, positions, labels, the output), the errors, the
offline page and its server, and ``circuitlasso view``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from circuit_tracer.frontend import feature_models, graph_models

from circuitlasso.circuits import interpret
from circuitlasso.circuits import trace as tr
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.forward import prompt_ids, real_token_mask
from circuitlasso.presentation import book
from circuitlasso.presentation import circuit_tracer as ct
from circuitlasso.presentation.cli import main

ROW = 7  # a training prompt of the toy study


def convert(toy_circuit, circuit: Circuit, prompt: str, folder: Path, **options) -> Path:
    study = toy_circuit.study
    return ct.to_circuit_tracer(circuit, prompt, toy_circuit.lasso, study.model, study.saes,
                                study.prompts, folder, name=study.name, examples=3,
                                **options)  # fmt: skip


@pytest.fixture(scope="module")
def prompt_circuit(toy_circuit) -> Circuit:
    circuit = toy_circuit.lasso.prompt_circuit(ROW)
    tr.interpret_circuit(circuit, toy_circuit.study.top_tokens)
    return circuit


@pytest.fixture(scope="module")
def written(toy_circuit, prompt_circuit, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("graphs")
    return convert(toy_circuit, prompt_circuit, toy_circuit.study.prompts[ROW], folder)


def test_the_graph_validates_against_circuit_tracers_models(written: Path) -> None:
    graph = graph_models.Model.model_validate_json(written.read_text())
    for link in graph.links:
        graph_models.Link.model_validate(link)
    listed = json.loads((written.parent / "graph-metadata.json").read_text())["graphs"]
    assert [g["slug"] for g in listed] == [graph.metadata.slug] == [written.stem]
    assert graph_models.Metadata.model_validate(listed[0]) == graph.metadata


def test_nodes_and_links_are_the_circuits(toy_circuit, prompt_circuit, written: Path) -> None:
    lasso, study = toy_circuit.lasso, toy_circuit.study
    graph = graph_models.Model.model_validate_json(written.read_text())
    features = [n for n in graph.nodes if n.feature_type != "logit"]
    (output,) = [n for n in graph.nodes if n.feature_type == "logit"]
    roots = [n for n, layer in prompt_circuit.nodes(data="layer") if layer == 3]
    assert len(features) == prompt_circuit.number_of_nodes() > 1
    assert len(graph.links) == prompt_circuit.number_of_edges() + len(roots)
    by_name = {f"z{n.layer}.{n.node_id.split('_')[1]}": n for n in features}
    assert set(by_name) == set(prompt_circuit.nodes)
    ids = prompt_ids(study.model, study.prompts[ROW])
    real = np.flatnonzero(real_token_mask(study.model, ids).numpy())
    assert graph.metadata.prompt_tokens == [str(t) for t in study.model.to_str_tokens(ids)]
    for name, node in by_name.items():
        data = prompt_circuit.nodes[name]
        values = interpret.token_values(study.model, study.saes[data["layer"]], data["feature"],
                                        [ids])[0]  # fmt: skip
        assert node.ctx_idx == real[np.argmax(values)]  # where the feature is most active
        assert node.activation == pytest.approx(values.max(), rel=1e-5)
        assert node.clerp == ", ".join(list(data["top_tokens"])[:3])
        assert node.influence == pytest.approx(data["importance"])
    weights = {(link["source"], link["target"]): link["weight"] for link in graph.links}
    for parent, child, coef in prompt_circuit.edges(data="coef"):
        assert weights[by_name[parent].node_id, by_name[child].node_id] == pytest.approx(coef)
    for root in roots:
        coef = lasso.coef_[0, prompt_circuit.nodes[root]["feature"]]
        assert weights[by_name[root].node_id, output.node_id] == pytest.approx(coef)
    # the output: the target logit, the positive class, its probability on the prompt
    assert output.is_target_logit and output.ctx_idx == len(ids) - 1
    assert output.clerp.startswith('Output "1"')
    z = sp.csr_matrix(study.Z[3][ROW])
    assert output.token_prob == pytest.approx(lasso.predict_proba({3: z})[0, 1], abs=1e-4)


def test_each_feature_has_its_top_prompts_file(toy_circuit, written: Path) -> None:
    graph = graph_models.Model.model_validate_json(written.read_text())
    scan = graph.metadata.scan
    assert scan.startswith("./data/")  # served from the folder, not from the hub
    for node in graph.nodes:
        if node.feature_type == "logit":
            continue
        path = written.parent / scan.removeprefix("./data/") / f"{node.feature}.json"
        page = feature_models.Model.model_validate_json(path.read_text())
        (top,) = page.examples_quantiles
        assert len(top.examples) == 3
        first = top.examples[0]
        assert len(first.tokens) == len(first.tokens_acts_list) > 0
        # the viewer joins an example's tokens without a separator: they read as the prompt
        # (as the toy tokenizer, which lowercases, reads it)
        prompts = {p.lower() for p in toy_circuit.study.prompts}
        for example in top.examples:
            assert "".join(example.tokens) in prompts
        assert page.act_max == pytest.approx(max(max(e.tokens_acts_list) for e in top.examples))


def test_the_data_sets_circuit_shows_the_features_active_on_the_prompt(
    toy_circuit, tmp_path: Path
) -> None:
    study, circuit = toy_circuit.study, toy_circuit.circuit
    active = np.column_stack([study.Z[d["layer"]][:, [d["feature"]]].toarray().ravel() > 0
                              for _, d in circuit.nodes(data=True)])  # fmt: skip
    row = int(np.argmax(active.sum(1)))
    shown = {n for n, on in zip(circuit.nodes, active[row], strict=True) if on}
    assert 0 < len(shown) < circuit.number_of_nodes()
    with pytest.raises(ValueError, match=r"node z\d\.\d+ has no position on the prompt"):
        convert(toy_circuit, circuit, study.prompts[row], tmp_path)
    path = convert(toy_circuit, circuit, study.prompts[row], tmp_path, drop_inactive=True)
    graph = graph_models.Model.model_validate_json(path.read_text())
    assert len(graph.nodes) == len(shown) + 1
    roots = [n for n in shown if circuit.nodes[n]["layer"] == 3]
    edges = [(p, c) for p, c in circuit.edges if p in shown and c in shown]
    assert len(graph.links) == len(edges) + len(roots)


def test_bad_input_is_named(toy_circuit, prompt_circuit, tmp_path: Path) -> None:
    prompt = toy_circuit.study.prompts[ROW]
    with pytest.raises(ValueError, match="the circuit has no nodes"):
        convert(toy_circuit, Circuit(), prompt, tmp_path)
    n_ctx = toy_circuit.study.model.cfg.n_ctx
    with pytest.raises(ValueError, match=f"longer than the model's context of {n_ctx} tokens"):
        convert(toy_circuit, prompt_circuit, " ".join([prompt] * n_ctx), tmp_path)
    bare = Circuit(prompt_circuit)
    bare.add_nodes_from(prompt_circuit.nodes(data=True))
    for node in bare:
        del bare.nodes[node]["top_tokens"]
    with pytest.raises(ValueError, match="has no top_tokens: interpret the circuit first"):
        convert(toy_circuit, bare, prompt, tmp_path)
    with pytest.raises(ValueError, match=r"target 'x' is not a readout column: \['1'\]"):
        convert(toy_circuit, prompt_circuit, prompt, tmp_path, target="x")
    assert not any(tmp_path.iterdir())


def test_the_page_loads_no_script_from_outside(tmp_path: Path) -> None:
    page = ct.viewer_page(tmp_path)
    html = (page / "index.html").read_text()
    assert not re.search(r"src=['\"]https?://", html)
    for files in ct.CDN_SCRIPTS.values():
        for file in files:
            name = Path(file).name.replace(".cjs", ".js")
            assert f"<script src='./vendor/{name}'></script>" in html
            assert (page / "vendor" / name).stat().st_size > 0


def test_the_server_serves_the_page_and_the_graphs(written: Path, tmp_path: Path) -> None:
    with ct.serve(written.parent) as viewer:
        base = viewer.url.removesuffix("index.html")
        with urllib.request.urlopen(viewer.url) as response:
            assert "./vendor/d3.min.js" in response.read().decode()
        with urllib.request.urlopen(base + "data/graph-metadata.json") as response:
            assert json.load(response)["graphs"][0]["slug"] == written.stem
        with urllib.request.urlopen(f"{base}graph_data/{written.name}") as response:
            assert json.load(response) == json.loads(written.read_text())
    with pytest.raises(ValueError, match="has no graph-metadata.json"):
        ct.serve(tmp_path)


def test_view_serves_a_folder_and_prints_its_address(written: Path, tmp_path: Path,
                                                     capsys) -> None:  # fmt: skip
    assert main(["view", str(tmp_path)]) == 2
    assert "has no graph-metadata.json" in capsys.readouterr().err
    command = [sys.executable, "-m", "circuitlasso.presentation.cli", "view",
               str(written.parent), "--port", "0"]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as view:
        try:
            line = view.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith(f"serving {written.parent} at http://localhost:"), line
            url = line.split(" at ")[1].split()[0]
            with urllib.request.urlopen(url) as response:
                assert response.status == 200
        finally:
            view.terminate()


def test_a_chapters_graphs_are_its_roots_top_prompts_own_circuits(toy_circuit, tmp_path: Path):
    study, lasso, circuit = toy_circuit.study, toy_circuit.lasso, toy_circuit.circuit
    folder = tmp_path / "graphs" / "chapter"
    graphs = ct.study_graphs(study, lasso, circuit, folder, roots=2, n=2, examples=2)
    table = graphs.table
    # the rows: each root's top prompts, as root_prompts shows them, a shared prompt once
    expected: dict[int, str] = {}
    for feature in tr.root_features(circuit)[:2]:
        for top in study.top_activations(study.last, feature, 2):
            expected.setdefault(top.row, tr.node_name(study.last, feature))
    assert list(table["prompt"]) == [study.prompts[row] for row in expected]
    assert list(table["root"]) == list(expected.values())
    listed = json.loads((folder / "graph-metadata.json").read_text())["graphs"]
    assert sorted(f"{g['slug']}.json" for g in listed) == sorted(table["graph"])
    for row, (_, entry) in zip(expected, table.iterrows(), strict=True):
        graph = graph_models.Model.model_validate_json((folder / entry["graph"]).read_text())
        assert graph.metadata.prompt == study.prompts[row]
        own = lasso.prompt_circuit(row)  # the prompt's own circuit, every node drawn
        features = [n for n in graph.nodes if n.feature_type != "logit"]
        assert {f"z{n.layer}.{n.node_id.split('_')[1]}" for n in features} == set(own.nodes)
        assert entry["nodes"] == own.number_of_nodes() + 1 == len(graph.nodes)
        assert entry["links"] == len(graph.links)

    page = graphs._repr_html_()  # as a notebook shows it
    for name in table["graph"]:
        assert f'href="graphs/chapter/{name}"' in page
    assert "circuitlasso view book/sections/graphs/chapter" in page


def test_the_built_book_holds_the_sections_graphs_beside_its_pages(tmp_path: Path) -> None:
    source = tmp_path / "src" / book.GRAPHS / "chapter"
    source.mkdir(parents=True)
    (source / "graph-metadata.json").write_text('{"graphs": []}')
    out = tmp_path / "html"
    app = SimpleNamespace(
        srcdir=tmp_path / "src", outdir=out, builder=SimpleNamespace(format="html")
    )
    book._copy(app, None)
    assert (out / "book" / "sections" / "graphs" / "chapter" / "graph-metadata.json").is_file()
