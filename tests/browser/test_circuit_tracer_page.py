"""Prompt circuits in circuit-tracer's attribution-graph viewer, served by its local server with
the page's scripts from local copies: a toy-world prompt's, and a CoLA sentence's on the real
decoder (SmolLM2-135M with its shipped SAEs). Every node and link of the file is drawn, clicking a
node shows its label, a feature's panel shows its top prompts, and no request leaves the machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page

from circuitlasso import cache
from circuitlasso.circuits import trace as tr
from circuitlasso.estimator import CircuitLasso
from circuitlasso.presentation import circuit_tracer as ct
from circuitlasso.study import FeatureStudy

ROW = 7


@pytest.fixture(scope="module")
def graph(toy_circuit, tmp_path_factory: pytest.TempPathFactory) -> Path:
    study, lasso = toy_circuit.study, toy_circuit.lasso
    circuit = lasso.prompt_circuit(ROW)
    tr.interpret_circuit(circuit, study.top_tokens)
    return ct.to_circuit_tracer(circuit, study.prompts[ROW], lasso, study.model, study.saes,
                                study.prompts, tmp_path_factory.mktemp("graphs"),
                                name=study.name, examples=3)  # fmt: skip


@pytest.fixture(scope="module")
def decoder_graph(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CoLA sentence's circuit on SmolLM2-135M, from 300 training sentences and two of its SAE
    layers, written as a graph file."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        patch.setenv(cache.MIRROR_ENV, str(shared_data))
        study = FeatureStudy.load("smollm2-135m", [9, 14], "resid_post", "cola",
                                  ("train", "in_domain_dev"), max_prompts=300, label_prompts=20,
                                  seed=1, batch_size=64)  # fmt: skip
    lasso = CircuitLasso(label_lam_ratio=0.05, lam_ratio=0.1, roots=4, k=2, min_prompts=5)
    lasso.fit(study.Z, study.y)
    circuit = lasso.prompt_circuit(ROW)
    tr.interpret_circuit(circuit, study.top_tokens)
    return ct.to_circuit_tracer(circuit, study.prompts[ROW], lasso, study.model, study.saes,
                                study.prompts, tmp_path_factory.mktemp("decoder_graphs"),
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
        check_viewer(page, graph, viewer)
        screenshot("circuit-tracer-viewer")


@pytest.mark.slow  # the real decoder, its features collected and a circuit fitted
def test_the_viewer_draws_a_decoder_prompt_graph_offline(
    page: Page, decoder_graph: Path, screenshot
) -> None:
    with ct.serve(decoder_graph.parent) as viewer:
        check_viewer(page, decoder_graph, viewer)
        screenshot("circuit-tracer-viewer-decoder")


def check_viewer(page: Page, graph: Path, viewer: ct.Viewer) -> None:
    """The viewer at ``viewer.url`` draws every node of ``graph``, lists its links in the
    nodes' panels, shows each node's label and a feature's top prompts, and fetches nothing
    from outside the machine; the page is left on that feature's panel."""
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
    assert page.errors == [] and page.console_errors == []  # type: ignore[attr-defined]
    assert page.remote == []  # type: ignore[attr-defined]
