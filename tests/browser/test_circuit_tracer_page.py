"""A toy-world prompt circuit in circuit-tracer's attribution-graph viewer, served by its local
server with the page's scripts from local copies: every node and link of the file is drawn,
clicking a node shows its label, and no request leaves the machine."""

from __future__ import annotations

import json
from collections.abc import Iterator
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


@pytest.fixture
def viewer(graph: Path) -> Iterator[ct.Viewer]:
    with ct.serve(graph.parent) as running:
        yield running


def test_the_viewer_draws_the_graph_offline(page: Page, graph: Path, viewer: ct.Viewer,
                                            screenshot) -> None:  # fmt: skip
    data = json.loads(graph.read_text())
    nodes = {n["node_id"]: n for n in data["nodes"]}
    page.goto(viewer.url)
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
    page.locator(".feature-detail .ctx-container").first.wait_for()
    assert page.locator(".feature-detail .ctx-container").count() == 3
    screenshot("circuit-tracer-viewer")
    assert page.errors == [] and page.console_errors == []  # type: ignore[attr-defined]
    assert page.remote == []  # type: ignore[attr-defined]
