"""The circuit explorer's data against the study it comes from, its schema checks, the page and
its command, and the collapsed code cells of the executed notebooks."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.presentation import explorer as ex
from circuitlasso.presentation.cli import main
from circuitlasso.presentation.reproduce import HIDE_INPUT_TAG, collapse_long_cells


def toy_explorer_data(toy_circuit, **options) -> dict:
    study, options = toy_circuit.study, {"circuit": toy_circuit.circuit, **options}
    return ex.explorer_data(toy_circuit.lasso, study.model, study.saes, study.prompts, study.y,
                            name=study.name, **options)  # fmt: skip


@pytest.fixture(scope="module")
def data(toy_circuit) -> dict:
    return toy_explorer_data(toy_circuit, sentences=3, rows=12)


def test_a_studys_data_is_the_explorer_data_of_its_model_and_prompts(toy_circuit, data) -> None:
    assert (
        ex.study_data(
            toy_circuit.lasso, toy_circuit.study, circuit=toy_circuit.circuit, sentences=3, rows=12
        )
        == data
    )


def test_nodes_and_edges_are_the_circuits(toy_circuit, data) -> None:
    circuit = toy_circuit.circuit
    assert data["schema"] == ex.SCHEMA == "circuitlasso.explorer/1"
    assert {n["id"] for n in data["nodes"]} == set(circuit.nodes)
    assert {(e["source"], e["target"]) for e in data["edges"]} == set(circuit.edges)
    assert data["layers"] == [1, 2, 3] and data["readout"] == {"layer": 3, "columns": ["1"]}
    for node in data["nodes"]:
        attrs = circuit.nodes[node["id"]]
        assert node["importance"] == pytest.approx(attrs["importance"], rel=1e-5)
        assert node["top_tokens"] == [[t, c] for t, c in attrs["top_tokens"].items()]
        assert node["label"] == ", ".join(list(attrs["top_tokens"])[:3])
        on_readout = node["layer"] == 3
        assert (node["readout"] is not None) == on_readout
        if on_readout:
            coef = toy_circuit.lasso.coef_[0, node["feature"]]
            assert node["readout"] == [pytest.approx(coef, rel=1e-5)]
    for edge in data["edges"]:
        attrs = circuit.edges[edge["source"], edge["target"]]
        assert edge["coef"] == pytest.approx(attrs["coef"], rel=1e-5)
        assert edge["type"] == attrs["type"]


def test_sentences_are_the_features_top_prompts_with_per_token_values(toy_circuit, data) -> None:
    study = toy_circuit.study
    for node in data["nodes"][:4]:
        table = study.top_prompts(node["layer"], node["feature"], n=3)
        sentences = node["sentences"]
        assert len(sentences) == len(table) > 0
        for sentence, (_, row) in zip(sentences, table.iterrows(), strict=True):
            assert len(sentence["tokens"]) == len(sentence["values"])
            assert np.allclose(sentence["values"], row["per_token"], atol=1e-3)
            assert sentence["mean"] == pytest.approx(row["value"], rel=1e-5)
            assert study.prompts[sentence["prompt"]].lower().split() == sentence["tokens"]
            z = study.Z[node["layer"]][sentence["prompt"], node["feature"]]
            assert sentence["mean"] == pytest.approx(z, rel=1e-5)


def test_per_prompt_importance_is_the_traces_score_on_that_prompt(toy_circuit, data) -> None:
    study, lasso, circuit = toy_circuit.study, toy_circuit.lasso, toy_circuit.circuit
    assert len(data["prompts"]) == 12
    roots = [d["feature"] for _, d in circuit.nodes(data=True) if d["layer"] == 3]
    for prompt in data["prompts"][::4]:
        row = prompt["prompt"]
        assert prompt["text"] == study.prompts[row] and prompt["label"] == study.y[row]
        traced = lasso.trace(roots=roots, depth=0, prompt=row)
        for node, attrs in traced.nodes(data=True):
            expected = attrs["importance"]
            assert prompt["importance"].get(node, 0.0) == pytest.approx(expected, rel=1e-5)
        for node, attrs in circuit.nodes(data=True):
            if attrs["layer"] == 3:
                continue
            z = study.Z[attrs["layer"]][row, attrs["feature"]]
            weight = sum(abs(c) for _, _, c in circuit.out_edges(node, data="coef"))
            assert prompt["importance"].get(node, 0.0) == pytest.approx(weight * abs(z), rel=1e-5)
    assert any(p["importance"] for p in data["prompts"])
    assert lasso.readout_importance().shape == (study.Z[3].shape[1],)


def _one_edge(circuit: Circuit) -> Circuit:
    """The circuit's first edge with its two nodes, every attribute kept."""
    parent, child = next(iter(circuit.edges))
    small = Circuit()
    small.add_nodes_from((n, circuit.nodes[n]) for n in (parent, child))
    small.add_edge(parent, child, **circuit.edges[parent, child])
    return small


def test_a_label_shows_each_top_token_without_surrounding_blanks() -> None:
    tokens = {" the": 5, "\n": 3, ",": 2, " a": 1}  # a decoder's tokens, most common first
    assert ex.node_label({"top_tokens": tokens}) == "the, '\\n', ,"
    assert ex.node_label({"top_tokens": {" ": 1}}) == "' '"
    assert ex.node_label({"top_tokens": {}}) == "(never active)"


def test_prompts_can_be_given_by_row(toy_circuit) -> None:
    circuit = _one_edge(toy_circuit.circuit)
    chosen = toy_explorer_data(toy_circuit, circuit=circuit, sentences=1, rows=[5, 0])
    assert [p["prompt"] for p in chosen["prompts"]] == [5, 0]
    with pytest.raises(ValueError, match=r"prompt rows \[300\] out of range"):
        toy_explorer_data(toy_circuit, circuit=circuit, sentences=1, rows=[300])


def test_an_uninterpreted_circuit_and_other_prompts_are_refused(toy_circuit) -> None:
    bare = Circuit()
    for node, attrs in _one_edge(toy_circuit.circuit).nodes(data=True):
        bare.add_node(node, **{k: v for k, v in attrs.items() if k != "top_tokens"})
    with pytest.raises(ValueError, match=r"no top_tokens: interpret the circuit first"):
        toy_explorer_data(toy_circuit, circuit=bare)
    with pytest.raises(ValueError, match="the circuit has no nodes"):
        toy_explorer_data(toy_circuit, circuit=Circuit())
    study = toy_circuit.study
    with pytest.raises(ValueError, match="got 299 prompts and 300 labels for features of 300"):
        ex.explorer_data(
            toy_circuit.lasso,
            study.model,
            study.saes,
            study.prompts[1:],
            study.y,
            circuit=toy_circuit.circuit,
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema="circuitlasso.explorer/0"), "schema 'circuitlasso.explorer/0'"),
        (lambda d: d.pop("prompts"), r"the top level lacks \['prompts'\]"),
        (lambda d: d["nodes"][0].pop("sentences"), r"lacks \['sentences'\]"),
        (lambda d: d["edges"][0].update(target="z9.9"), r"unknown nodes \['z9.9'\]"),
        (lambda d: d["edges"][0].update(type="sideways"), "edge type 'sideways'"),
        (lambda d: d["prompts"][0]["importance"].update({"z9.9": 1.0}), "scores unknown nodes"),
    ],
)
def test_a_bad_document_names_its_problem(data, change, message) -> None:
    broken = json.loads(json.dumps(data))
    change(broken)
    with pytest.raises(ValueError, match=message):
        ex.check_data(broken)


def _embedded(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page,
                      re.S)  # fmt: skip
    assert match, "no data element in the page"
    return json.loads(match[1])


def test_the_page_holds_the_data_script_and_style_and_nothing_remote(data) -> None:
    tricky = json.loads(json.dumps(data))
    tricky["nodes"][0]["top_tokens"][0][0] = "</script><b>"
    page = ex.render_html(tricky)
    assert _embedded(page) == tricky  # the token cannot end the data element
    assert "{{" not in page and "function select(" in page and ".node circle" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)


def test_save_load_and_the_explore_command(data, tmp_path: Path, capsys) -> None:
    path = ex.save_data(data, tmp_path / "circuit.json")
    assert ex.load_data(path) == data
    assert main(["explore", str(path)]) == 0
    assert _embedded((tmp_path / "circuit.html").read_text()) == data
    assert main(["explore", str(path), "--out", str(tmp_path / "x" / "page.html")]) == 0
    assert (tmp_path / "x" / "page.html").is_file()
    old = json.loads(path.read_text()) | {"schema": "circuitlasso.explorer/0"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    capsys.readouterr()
    assert main(["explore", str(tmp_path / "old.json")]) == 2
    assert "this version reads 'circuitlasso.explorer/1'" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ValueError, match="is not JSON"):
        ex.load_data(tmp_path / "bad.json")


def test_show_is_an_iframe_of_the_whole_page(data, tmp_path: Path) -> None:
    shown = ex.show(data, height=500)._repr_html_()
    srcdoc = re.search(r'srcdoc="([^"]*)"', shown)
    assert srcdoc and html.unescape(srcdoc[1]) == ex.render_html(data)
    assert "height: 500px" in shown
    path = ex.save_data(data, tmp_path / "c.json")
    assert ex.show(path)._repr_html_() == ex.show(data)._repr_html_()


def test_long_code_cells_are_collapsed_but_the_injected_parameters() -> None:
    long = "\n".join(f"x{i} = {i}" for i in range(6))
    short = "# a comment\n\n" + "\n".join(f"y{i} = {i}" for i in range(5))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(long, metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(long, metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell(short),
        nbformat.v4.new_code_cell(long),
        nbformat.v4.new_markdown_cell(long),
    ]
    assert collapse_long_cells(nb) == 2
    assert [c.metadata.get("tags", []) for c in nb.cells] == [
        ["parameters", HIDE_INPUT_TAG], ["injected-parameters"], [], [HIDE_INPUT_TAG], []
    ]  # fmt: skip
    assert collapse_long_cells(nb) == 0  # tagged once
