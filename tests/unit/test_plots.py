"""The faithfulness figure: its panels, scales, ideal lines and input checks."""

from __future__ import annotations

import matplotlib.pyplot as plt
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
