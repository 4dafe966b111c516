"""The circuit explorer in Chromium, offline: a node's panel, walking to a parent, the filters,
the per-prompt mode, and the page inside a notebook output."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page

from circuitlasso.presentation import explorer as ex


@pytest.fixture(scope="module")
def data(toy_circuit) -> dict:
    study = toy_circuit.study
    return ex.explorer_data(toy_circuit.lasso, study.model, study.saes, study.prompts, study.y,
                            circuit=toy_circuit.circuit, name=study.name, sentences=3,
                            rows=20)  # fmt: skip


def radii(page: Page) -> dict[str, float]:
    return page.eval_on_selector_all(
        "g.node",
        "gs => Object.fromEntries(gs.map(g => [g.dataset.id, "
        "Number(g.querySelector('circle').getAttribute('r'))]))",
    )


def test_a_node_opens_its_panel_and_the_per_prompt_mode_resizes_nodes(
    page: Page, data: dict, tmp_path: Path, screenshot
) -> None:
    page.goto(ex.write_html(data, tmp_path / "explorer.html").as_uri())
    nodes = {n["id"]: n for n in data["nodes"]}
    assert set(radii(page)) == set(nodes)

    # a node with parents: its panel lists its top tokens, sentences and parents
    child = max((e["target"] for e in data["edges"]), key=lambda n: nodes[n]["importance"])
    parents = {e["source"] for e in data["edges"] if e["target"] == child}
    page.click(f'g.node[data-id="{child}"]')
    panel = page.locator("#panel")
    assert panel.locator("h2").inner_text() == child
    shown = panel.locator(".top-tokens li").all_inner_texts()
    assert shown == [f"{token} ×{count}" for token, count in nodes[child]["top_tokens"]]
    assert set(panel.locator(".parents li").evaluate_all("ls => ls.map(l => l.dataset.id)")) \
        == parents  # fmt: skip
    assert panel.locator(".sentence").count() == len(nodes[child]["sentences"])
    first = nodes[child]["sentences"][0]
    assert panel.locator(".sentence").first.locator(".tok").all_inner_texts() == first["tokens"]
    screenshot("explorer-node-panel")

    # walk to a parent: its panel lists the child among its children
    parent = sorted(parents)[0]
    panel.locator(f'.parents li[data-id="{parent}"] button').click()
    assert panel.locator("h2").inner_text() == parent
    assert child in panel.locator(".children li").evaluate_all("ls => ls.map(l => l.dataset.id)")

    # the token search marks the nodes whose top tokens contain it
    token = nodes[child]["top_tokens"][0][0]
    page.fill("#search", token)
    marked = set(page.eval_on_selector_all("g.node.match", "gs => gs.map(g => g.dataset.id)"))
    assert marked == {n for n, d in nodes.items() if any(token in t for t, _ in d["top_tokens"])}
    page.fill("#search", "")

    # the coefficient filter hides the weaker edges
    page.eval_on_selector("#min-coef", "s => { s.value = 50; s.dispatchEvent(new Event('input')) }")
    top = max(abs(e["coef"]) for e in data["edges"])
    visible = page.eval_on_selector_all(
        "path.edge", "ps => ps.filter(p => p.style.display !== 'none').length"
    )
    assert visible == sum(abs(e["coef"]) >= top / 2 for e in data["edges"]) < len(data["edges"])
    page.eval_on_selector("#min-coef", "s => { s.value = 0; s.dispatchEvent(new Event('input')) }")

    # per-prompt mode: the sizes become that prompt's |A| * |z|
    dataset = radii(page)
    index = max(range(len(data["prompts"])), key=lambda i: len(data["prompts"][i]["importance"]))
    prompt = data["prompts"][index]
    page.select_option("#mode", str(index))
    per_prompt = radii(page)
    assert per_prompt != dataset
    inactive = set(page.eval_on_selector_all("g.node.inactive", "gs => gs.map(g => g.dataset.id)"))
    assert inactive == set(nodes) - set(prompt["importance"])
    ranked = sorted(prompt["importance"], key=prompt["importance"].get)
    same_layer = [n for n in ranked if nodes[n]["layer"] == nodes[ranked[-1]]["layer"]]
    assert [per_prompt[n] for n in same_layer] == sorted(per_prompt[n] for n in same_layer)
    assert prompt["text"] in page.inner_text("#prompt-text")
    screenshot("explorer-per-prompt")
    page.select_option("#mode", "")
    assert radii(page) == dataset
    assert page.errors == [] and page.remote == []


def test_the_explorer_renders_inside_a_notebook_output(page: Page, data: dict, screenshot) -> None:
    page.set_content(f"<main><p>a notebook cell's output</p>{ex.show(data)._repr_html_()}</main>")
    frame = page.frame_locator("iframe.circuitlasso-explorer")
    assert frame.locator("g.node").count() == len(data["nodes"])
    frame.locator("g.node").first.click()
    assert frame.locator("#panel h2").inner_text() == frame.locator("g.node").first.get_attribute(
        "data-id"
    )
    screenshot("explorer-in-notebook-output")
    assert page.errors == [] and page.remote == []
