"""The figures: the faithfulness panels and the crossover plot, their scales, ideal lines and input
checks."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from circuitlasso.presentation import plots


def sweep(method: str, sizes: list[int]) -> pd.DataFrame:
    n = len(sizes)
    return pd.DataFrame({"method": method, "n": sizes, "faithfulness": [i / n for i in range(n)],
                         "completeness": [1 - i / n for i in range(n)]})  # fmt: skip


def test_faithfulness_figure_has_node_and_edge_rows_with_ideal_lines() -> None:
    node = pd.concat([sweep("CircuitLasso", [0, 1, 2, 4]), sweep("IG attribution", [1, 2, 4])])
    fig = plots.faithfulness_curves(node, sweep("CircuitLasso", [1, 8, 64]))
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [
        "node ablation: faithfulness",
        "node ablation: completeness",
        "edge ablation: faithfulness",
        "edge ablation: completeness",
    ]
    assert all(ax.get_xscale() == "log" for ax in axes)
    # one line per method (size 0 left out of the log axis) plus the dashed ideal value; the
    # legend's handles are lines without data
    lines = [[line for line in ax.lines if len(line.get_xdata())] for ax in axes]
    assert [len(drawn) for drawn in lines] == [3, 3, 2, 2]
    assert [drawn[-1].get_ydata()[0] for drawn in lines] == [1.0, 0.0, 1.0, 0.0]
    assert list(lines[0][0].get_xdata()) == [1, 2, 4]
    assert axes[0].get_legend() is not None
    plt.close(fig)


def test_faithfulness_figure_names_missing_columns() -> None:
    table = sweep("CircuitLasso", [1, 2])
    with pytest.raises(ValueError, match=r"edge table lacks columns \['completeness'\]"):
        plots.faithfulness_curves(table, table.drop(columns="completeness"))


@pytest.mark.parametrize("n_layers", [3, 12])
def test_circuit_tree_is_readable_at_page_width(n_layers: int) -> None:
    """At most the page wide whatever the layer count, fonts of at least 7.5 points, and no two
    texts overlapping or leaving the figure."""
    from circuitlasso.circuits.circuit import Circuit

    circuit = Circuit()
    for layer in range(n_layers):
        for i in range(6):
            circuit.add_node(f"z{layer}.{10000 + i}", layer=layer, feature=10000 + i,
                             importance=float(i))  # fmt: skip
            if layer:
                circuit.add_edge(f"z{layer - 1}.{10000 + (i * 7) % 6}", f"z{layer}.{10000 + i}",
                                 coef=0.5, type="merging")  # fmt: skip
    labels = {node: "themselves, herself, everybody, somewhere" for node in circuit}
    fig = plots.circuit_tree(circuit, labels)
    assert fig.get_figwidth() <= plots.PAGE_WIDTH
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.axes[0].texts if t.get_text()]
    assert len(texts) == 2 * 6 * n_layers + n_layers  # names, captions, layer titles
    assert min(t.get_fontsize() for t in texts) >= 7.5
    frame = fig.bbox
    boxes = [t.get_window_extent(renderer) for t in texts]
    for box in boxes:
        assert (
            frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 <= box.y1 <= frame.y1
        )
    overlapping = [
        (texts[i].get_text(), texts[j].get_text())
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes[i].overlaps(boxes[j])
    ]
    assert overlapping == []
    plt.close(fig)


def test_crossover_figure_is_loglog_with_the_diagonal_and_unit_lines() -> None:
    table = pd.DataFrame(
        {
            "layers": [2, 4],
            "d_model": [128, 128],
            "n_token": [16, 256],
            "predicted_ratio": [0.5, 20.0],
            "eap_ig_ratio": [0.05, 2.0],
            "eap_ratio": [0.01, 0.4],
            "eap_ig_additional_ratio": [0.2, 30.0],
        }
    )
    fig = plots.crossover(table)
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    lines = [np.asarray(line.get_xydata()) for line in ax.get_lines()]
    assert any(np.allclose(xy[:, 0], xy[:, 1]) and len(xy) == 2 for xy in lines)  # y = x
    assert sum(np.allclose(xy[:, 1], 1.0) for xy in lines) == 1  # measured ratio 1
    assert sum(np.allclose(xy[:, 0], 1.0) for xy in lines) == 1  # predicted ratio 1
    assert len(ax.collections) == 3 and len(ax.texts) == 2
    assert max(ax.get_ylim()) >= 30.0  # every point within the axes
