"""Seaborn figures shared by the notebooks. Each function takes a DataFrame and returns a Figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from circuitlasso.cost import rows_varying

sns.set_theme(context="notebook", style="whitegrid")


def loglog_cost(timings: pd.DataFrame, slopes: pd.DataFrame) -> Figure:
    """Solve time against M, L and d (log-log), one panel each, with the fitted slope.

    ``timings`` as returned by :func:`circuitlasso.cost.time_block_lasso`, ``slopes`` by
    :func:`circuitlasso.cost.loglog_slopes`.
    """
    fig, axes = plt.subplots(1, len(slopes), figsize=(4 * len(slopes), 3.4), squeeze=False)
    for ax, (_, fit) in zip(axes[0], slopes.iterrows(), strict=True):
        column = fit["size"]
        others = [c for c in slopes["size"] if c != column]
        held = rows_varying(timings, column, list(slopes["size"]))
        ax.loglog(held[column], held["seconds"], "o-", label="measured")
        anchor = held["seconds"].iloc[0] / held[column].iloc[0] ** fit["proposition_1_slope"]
        ax.loglog(
            held[column],
            anchor * held[column] ** fit["proposition_1_slope"],
            "--",
            color="grey",
            label="Prop. 1 shape",
        )
        fixed = ", ".join(f"{o}={timings[o].mode().iloc[0]}" for o in others)
        ax.set(
            xlabel=column,
            ylabel="solve time (s)",
            title=f"slope {fit['measured_slope']:.2f} ({fixed})",
        )
        ax.set_xticks(held[column].to_list(), [str(v) for v in held[column]])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def cost_ratio(table: pd.DataFrame) -> Figure:
    """EAP-IG / CircuitLasso cost bound against sequence length, one line per model and L."""
    data = table.assign(setting=table["model"] + ", L=" + table["L"].astype(str))
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    sns.lineplot(data=data, x="n_token", y="cost_ratio", hue="setting", marker="o", ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="tokens per prompt", ylabel="EAP-IG / CircuitLasso")
    ticks = sorted(data["n_token"].unique())
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.axhline(1.0, color="black", lw=1)
    ax.text(ticks[-1], 1.1, "CircuitLasso cheaper above", ha="right", va="bottom", fontsize="small")
    ax.set_ylim(bottom=min(np.nanmin(data["cost_ratio"]) / 2, 0.5))
    ax.legend(title=None, fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    return fig
