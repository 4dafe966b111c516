"""Prompt circuits in circuit-tracer's attribution-graph viewer, served by its local server with
the page's scripts from local copies: a toy-world prompt's, and the CoLA sentences' on the real
decoder (SmolLM2-135M with its shipped SAEs) that the book's chapter writes. Every node and link
of the file is drawn, clicking a node shows its label, a feature's panel shows its top prompts,
and no request leaves the machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page

from circuitlasso.circuits import trace as tr
from circuitlasso.presentation import circuit_tracer as ct

ROW = 7


@pytest.fixture(scope="module")
def graph(toy_circuit, tmp_path_factory: pytest.TempPathFactory) -> Path:
    study, lasso = toy_circuit.study, toy_circuit.lasso
    circuit = lasso.prompt_circuit(ROW)
    tr.interpret_circuit(circuit, study.top_tokens)
    return ct.to_circuit_tracer(circuit, study.prompts[ROW], lasso, study.model, study.saes,
                                study.prompts, tmp_path_factory.mktemp("graphs"),
                                name=study.name, examples=3)  # fmt: skip


def click(page: Page, node_id: str) -> None:
    """Click the drawn node ``node_id`` (the graph is drawn again as nodes are clicked)."""
    box = page.evaluate(
        "id => [...document.querySelectorAll('.link-graph text.node')]"
        ".find(t => t.__data__.node_id === id).getBoundingClientRect().toJSON()",
        node_id,
    )
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


def test_the_viewer_draws_the_graph_offline(page: Page, graph: Path, screenshot) -> None:
    with ct.serve(graph.parent) as viewer:
        check_viewer(page, graph, viewer.url)
        screenshot("circuit-tracer-viewer")


@pytest.mark.slow
@pytest.mark.book
def test_the_viewer_draws_the_books_decoder_prompt_graphs_offline(
    page: Page, built_book: Path, screenshot
) -> None:
    """The graphs the CoLA chapter on the decoder writes (SmolLM2-135M with its shipped SAEs),
    in the book as `make book` builds it (the book test's, ``built_book``)."""
    folder = built_book / "book" / "sections" / "graphs" / "cola_circuits_decoder"
    graphs = sorted(folder.glob("*-prompt-*.json"))
    assert graphs, f"no prompt graph in {folder}"
    with ct.serve(folder) as viewer:
        for graph in graphs:
            check_viewer(page, graph, f"{viewer.url}?slug={graph.stem}")
        screenshot("circuit-tracer-viewer-decoder")


def check_viewer(page: Page, graph: Path, url: str) -> None:
    """The viewer at ``url`` draws every node of ``graph``, lists its links in the nodes'
    panels, shows each node's label and a feature's top prompts (as many as its file in the
    graph's folder holds), and fetches nothing from outside the machine; the page is left on
    that feature's panel."""
    data = json.loads(graph.read_text())
    nodes = {n["node_id"]: n for n in data["nodes"]}
    for seen in (page.remote, page.errors, page.console_errors):  # type: ignore[attr-defined]
        seen.clear()
    page.goto(url)
    drawn = page.locator(".link-graph text.node")
    drawn.first.wait_for()
    ids = drawn.evaluate_all("ts => ts.map(t => t.__data__.node_id)")
    assert sorted(ids) == sorted(nodes)

    # each node's panel lists its input links: over every node, the file's links
    inputs = page.locator(".node-connections .features.input .feature-row")
    listed = 0
    for node_id in ids:
        click(page, node_id)
        title = page.locator(".node-connections .header-top-row .feature-title")
        assert title.inner_text() == nodes[node_id]["clerp"]  # its label
        listed += inputs.count()
    assert listed == len(data["links"])
    print(f"{len(ids)} nodes and {listed} links drawn of {len(nodes)} and {len(data['links'])}; "
          f"{len(page.remote)} requests left the machine")  # type: ignore[attr-defined]  # fmt: skip

    # a feature's panel: its label and its top activating prompts, read from the folder
    feature = next(n for n in ids if nodes[n]["feature_type"] != "logit")
    click(page, feature)
    assert page.locator(".feature-detail .pp-clerp").inner_text() == nodes[feature]["clerp"]
    scan = graph.parent / "features" / Path(data["metadata"]["scan"]).name
    examples = json.loads((scan / f"{nodes[feature]['feature']}.json").read_text())
    n_examples = sum(len(q["examples"]) for q in examples["examples_quantiles"])
    page.locator(".feature-detail .ctx-container").first.wait_for()
    assert page.locator(".feature-detail .ctx-container").count() == n_examples >= 1
    assert page.errors == [] and page.console_errors == []  # type: ignore[attr-defined]
    assert page.remote == []  # type: ignore[attr-defined]
