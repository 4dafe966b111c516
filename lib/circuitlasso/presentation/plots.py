"""Seaborn figures shared by the notebooks. Each function takes tables (or a report) and returns
a Figure."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.evaluation.cost.scaling import rows_varying

sns.set_theme(context="notebook", style="whitegrid")


def loglog_cost(timings: pd.DataFrame, slopes: pd.DataFrame) -> Figure:
    """Solve time against M, L and d (log-log), one panel each, with the fitted slope.

    ``timings`` as returned by :func:`circuitlasso.evaluation.cost.proposition1.time_block_lasso`,
    ``slopes`` by :func:`circuitlasso.evaluation.cost.scaling.loglog_slopes`.
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


def crossover(table: pd.DataFrame) -> Figure:
    """Measured time ratio against Proposition 2's predicted ratio, log-log, one marker per config.

    ``table`` as returned by :func:`circuitlasso.evaluation.cost.crossover.crossover_grid`:
    EAP-IG / CircuitLasso and EAP / CircuitLasso (whole times), and EAP-IG's gradient passes over
    CircuitLasso's solve (the costs beyond the shared forward passes, which the proposition
    compares), against ``predicted_ratio``, with the line y = x and the lines where either ratio
    is 1 (the quadrant above and right of both: both say CircuitLasso is cheaper).
    """
    series = (
        ("eap_ig_ratio", "EAP-IG", "o"),
        ("eap_ratio", "EAP", "s"),
        ("eap_ig_additional_ratio", "EAP-IG beyond the shared passes", "^"),
    )
    fig, ax = plt.subplots(figsize=(6.5, 4.4))
    for column, label, marker in series:
        ax.scatter(table["predicted_ratio"], table[column], marker=marker, label=label, zorder=3)
    for _, row in table.iterrows():
        ax.annotate(
            f"{row['layers']}x{row['d_model']}, n={row['n_token']}",
            (row["predicted_ratio"], row["eap_ig_ratio"]),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize="x-small",
        )
    values = table[["predicted_ratio", *(column for column, _, _ in series)]].to_numpy(float)
    low, high = min(values.min(), 1.0) / 2, max(values.max(), 1.0) * 2
    ax.plot([low, high], [low, high], "--", color="grey", lw=1, label="y = x")
    ax.axhline(1.0, color="black", lw=1)
    ax.axvline(1.0, color="black", lw=1)
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(low, high),
        ylim=(low, high),
        xlabel="predicted ratio EAP-IG / CircuitLasso (Prop. 2)",
        ylabel="measured time ratio / CircuitLasso",
    )
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    return fig


def toy_world_quality(report: dict) -> Figure:
    """Left: explained variance and dead fraction of each layer's SAE against the report's
    targets. Right: the acceptability probe's accuracy per violation type against chance.

    ``report`` as returned by :func:`circuitlasso.data.toyworld.toy_report`.
    """
    saes = pd.DataFrame(report["saes"])
    limits = report["thresholds"]
    probe = report["probe"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.38
    layers = np.arange(len(saes))
    left.bar(layers - width / 2, saes["explained_variance"], width, label="explained variance")
    left.bar(layers + width / 2, saes["dead_fraction"], width, label="dead fraction")
    left.axhline(limits["explained_variance_min"], color="C0", ls="--", lw=1)
    left.axhline(limits["dead_fraction_max"], color="C1", ls="--", lw=1)
    left.set_xticks(layers, [str(layer) for layer in saes["layer"]])
    left.set(xlabel="layer (hook_resid_post)", ylim=(0, 1.05), title="SAEs (dashed: targets)")
    left.legend(fontsize="small", loc="center right")
    recall = pd.Series(probe["recall_by_violation"])
    right.bar(recall.index, recall.to_numpy(), color="C2")
    right.axhline(probe["chance_accuracy"], color="black", ls="--", lw=1, label="majority class")
    right.set(
        ylim=(0, 1.05),
        ylabel="accuracy",
        title=f"probe on layer-{report['probe_layer']} SAE features, test split",
    )
    right.tick_params(axis="x", labelrotation=20)
    right.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    return fig


def _slant_xticks(ax: plt.Axes) -> None:
    """Long x tick labels slanted by 30 degrees, anchored at their right end."""
    ax.tick_params(axis="x", labelrotation=30)
    for tick in ax.get_xticklabels():
        tick.set_horizontalalignment("right")


def interpbench_summary(table: pd.DataFrame) -> Figure:
    """Per case and method: edge SHD (left) and wall time (right, log scale), one row per variant.

    ``table`` has a row per case x variant x method with ``edge_shd`` and ``total_s``, as returned
    by :func:`circuitlasso.data.interpbench.run_cases`. An SHD of 0 draws no bar.
    """
    missing = [c for c in ("case", "variant", "method", "edge_shd", "total_s") if c not in table]
    if missing:
        raise ValueError(f"table lacks columns {missing}")
    variants = list(dict.fromkeys(table["variant"]))
    methods = list(dict.fromkeys(table["method"]))
    width = min(3 + 0.15 * table["case"].nunique() * len(methods), 9)  # one panel, inches
    fig, axes = plt.subplots(
        len(variants), 2, figsize=(2 * width, 3.2 * len(variants)), squeeze=False
    )
    panels = (("edge_shd", "edge SHD (lower is better)"), ("total_s", "wall time (s, log)"))
    for row, variant in zip(axes, variants, strict=True):
        data = table[table["variant"] == variant].assign(case=lambda t: t["case"].astype(str))
        for ax, (column, label) in zip(row, panels, strict=True):
            sns.barplot(
                data=data, x="case", y=column, hue="method", hue_order=methods, ax=ax, legend=False
            )
            ax.set(xlabel="case", ylabel=label, title=f"{variant}: {label.split(' (')[0]}")
            if column == "total_s":
                ax.set_yscale("log")
            if data["case"].str.len().max() > 3:  # named tasks
                _slant_xticks(ax)
    palette = sns.color_palette(n_colors=len(methods))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in palette]
    fig.legend(handles, methods, loc="upper center", ncol=min(len(methods), 6), fontsize="small")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.2 * len(variants))))
    return fig


def suite_comparison(comparison: pd.DataFrame, label: str = "mean edge SHD") -> Figure:
    """Per variant (one panel each), the mean of each method on each suite, as grouped bars.

    ``comparison`` is indexed by (variant, method) with one column per suite, as returned by
    :func:`circuitlasso.evaluation.interpbench.report.suite_comparison`.
    """
    if comparison.index.nlevels != 2 or comparison.empty:
        raise ValueError("comparison must be a non-empty (variant, method)-indexed table")
    long = comparison.rename_axis(index=["variant", "method"], columns="suite").stack()
    data = long.rename("value").reset_index()
    variants = list(dict.fromkeys(data["variant"]))
    fig, axes = plt.subplots(1, len(variants), figsize=(6 * len(variants), 3.6), squeeze=False)
    for ax, variant in zip(axes[0], variants, strict=True):
        panel = data[data["variant"] == variant]
        sns.barplot(data=panel, x="method", y="value", hue="suite", ax=ax)
        ax.set(xlabel="", ylabel=label, title=variant)
        _slant_xticks(ax)
    fig.tight_layout()
    return fig


EDGE_COLORS = {
    "persistence": "black",
    "merging": "tab:blue",
    "dropping": "tab:orange",
    "other": "grey",
}


PAGE_WIDTH = 8.0
"""Inches: the book's text column at the inline backend's 100 dpi. A figure no wider is shown at
its own size, so the font sizes set here are the ones a reader sees."""
NAME_PT, CAPTION_PT = 9.0, 8.0


def circuit_tree(graph: Circuit, labels: dict[str, str] | None = None, *, lines: int = 2
                 ) -> Figure:  # fmt: skip
    """A traced SAE-feature circuit like the paper's Fig. 3: one column per layer, nodes named
    ``z{layer}.{feature}`` with an optional label below (wrapped to the column, at most
    ``lines`` lines), edges coloured by their ``type`` (persistence black, merging blue, dropping
    orange, other or unclassified grey), width by ``|coef|``.

    At most :data:`PAGE_WIDTH` wide, whatever the number of layers, with the height growing with
    the tallest column, names shrunk to their column if need be (to about 7.5 points at 12
    layers): readable at the book's page width."""
    layers = sorted({data["layer"] for _, data in graph.nodes(data=True)})
    columns: dict[int, list[str]] = {layer: [] for layer in layers}
    for node, data in sorted(graph.nodes(data=True), key=lambda item: -item[1]["importance"]):
        columns[data["layer"]].append(node)
    tallest = max(len(nodes) for nodes in columns.values())
    width = min(PAGE_WIDTH, 1.9 * len(layers) + 0.4)
    column = 72 * width / len(layers)  # points
    chars = max(6, int(column / (0.62 * CAPTION_PT)))  # a caption line's characters
    longest = max(len(node) for node in graph.nodes)
    name_pt = min(NAME_PT, column / (0.64 * longest + 0.5))  # names narrower than their column
    captions = {
        node: textwrap.wrap(text, chars, max_lines=lines, placeholder="…")
        for node, text in (labels or {}).items()
    }
    row = (2.2 * name_pt + 1.25 * CAPTION_PT * lines + 4) / 72  # inches per node
    header, footer = 0.35, 0.4  # inches: layer titles, legend
    fig = plt.figure(figsize=(width, tallest * row + header + footer))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-0.56, len(layers) - 0.44)
    ax.set_ylim(-(tallest - 0.5) - footer / row, 0.5 + header / row)  # one y unit is one row
    position = {
        node: (x, -((tallest - len(nodes)) / 2 + y))
        for x, layer in enumerate(layers)
        for nodes in [columns[layer]]
        for y, node in enumerate(nodes)
    }
    offset = 0.8 * name_pt / 72 / row  # from a name's centre to below its box, in rows
    boxes = {}
    for node, (x, y) in position.items():
        box = {"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.4"}
        boxes[node] = ax.text(x, y, node, ha="center", va="center", fontsize=name_pt, zorder=3,
                              bbox=box)  # fmt: skip
        if captions.get(node):
            ax.text(x, y - offset, "\n".join(captions[node]), ha="center", va="top",
                    fontsize=CAPTION_PT, color="0.25", linespacing=1.1, zorder=3)  # fmt: skip
    weights = [abs(d["coef"]) for _, _, d in graph.edges(data=True)] or [1.0]
    for parent, child, data in graph.edges(data=True):
        ax.annotate(
            "",
            xy=position[child],
            xytext=position[parent],
            zorder=1,
            arrowprops={
                "arrowstyle": "-|>",
                "color": EDGE_COLORS.get(data.get("type", ""), "grey"),
                "lw": 0.8 + 2.5 * abs(data["coef"]) / max(weights),
                "patchA": boxes[parent].get_bbox_patch(),  # from box edge to box edge
                "patchB": boxes[child].get_bbox_patch(),
            },
        )
    for x, layer in enumerate(layers):
        ax.text(x, 0.5 + header / row / 2, f"layer {layer}", ha="center", va="center",
                fontsize=NAME_PT, fontweight="bold")  # fmt: skip
    handles = [plt.Line2D([], [], color=c, label=t) for t, c in EDGE_COLORS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=CAPTION_PT, frameon=False)
    ax.axis("off")
    return fig


def coefficient_distribution(coef: np.ndarray, top: int = 5) -> Figure:
    """The distribution of ``|A_{L,y}|`` over the last layer's features (nonzero ones, log
    scale), with the ``top`` largest marked, like the paper's Fig. 5. ``coef``: a binary or
    real-valued readout's ``(D,)`` coefficients, or ``CircuitLasso.coef_``, ``(1, D)`` or
    ``(D,)``."""
    magnitude = np.abs(np.ravel(coef))
    nonzero = np.sort(magnitude[magnitude > 0])[::-1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    if len(nonzero) == 0:
        left.text(0.5, 0.5, "all coefficients are zero", ha="center", transform=left.transAxes)
    else:
        left.hist(nonzero, bins=np.geomspace(nonzero.min(), nonzero.max() * 1.01, 30))
        left.set_xscale("log")
        for value in nonzero[:top]:
            left.axvline(value, color="tab:red", lw=1)
        right.plot(np.arange(1, len(nonzero) + 1), nonzero, ".-", ms=3)
        right.plot(np.arange(1, min(top, len(nonzero)) + 1), nonzero[:top], "o", color="tab:red",
                   label=f"top {top}")  # fmt: skip
        right.set(xscale="log", yscale="log", xlabel="rank", ylabel="|coefficient|")
        right.legend(fontsize="small")
    left.set(
        xlabel="|coefficient| (nonzero)",
        ylabel="features",
        title=f"{len(nonzero)} of {len(magnitude)} features nonzero",
    )
    fig.tight_layout()
    return fig


def faithfulness_curves(node: pd.DataFrame, edge: pd.DataFrame) -> Figure:
    """Faithfulness and completeness against circuit size like the paper's Fig. 4: node ablation
    (top row) and edge ablation (bottom row), one line per ``method``, the ideal values (1 and 0)
    dashed. Each table has columns ``method, n, faithfulness, completeness``."""
    for name, table in (("node", node), ("edge", edge)):
        missing = [c for c in ("method", "n", "faithfulness", "completeness") if c not in table]
        if missing:
            raise ValueError(f"{name} table lacks columns {missing}")
    methods = list(dict.fromkeys([*node["method"], *edge["method"]]))
    palette = dict(zip(methods, sns.color_palette(n_colors=len(methods)), strict=True))
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey=True)
    for row, (kind, table) in zip(axes, (("nodes", node), ("edges", edge)), strict=True):
        for ax, (column, ideal) in zip(row, (("faithfulness", 1.0), ("completeness", 0.0)),
                                       strict=True):  # fmt: skip
            data = table[table["n"] > 0]
            sns.lineplot(data=data, x="n", y=column, hue="method", palette=palette,
                         marker="o", ax=ax, legend=ax is axes[0, 0])  # fmt: skip
            ax.axhline(ideal, color="grey", linestyle="--", linewidth=1)
            action = "kept" if column == "faithfulness" else "ablated"
            ax.set(xscale="log", xlabel=f"{kind} {action}", ylabel="share of m(M) - m(empty)",
                   title=f"{kind[:-1]} ablation: {column}")  # fmt: skip
    fig.tight_layout()
    return fig


def localization_curves(curves: pd.DataFrame) -> Figure:
    """MIB's faithfulness curves: f against the fraction of edges kept (log axis), a panel per
    ``task``, a line per ``method``; dashed, f = 1 (the full model) and f = 0 (the
    counterfactual). ``curves`` has columns ``task, method, fraction, f``, as
    :meth:`circuitlasso.evaluation.localization.Localization.curves` gives them."""
    missing = [c for c in ("task", "method", "fraction", "f") if c not in curves]
    if missing:
        raise ValueError(f"curves lack columns {missing}")
    tasks = list(dict.fromkeys(curves["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), sharey=True,
                             squeeze=False)  # fmt: skip
    for ax, task in zip(axes[0], tasks, strict=True):
        sns.lineplot(data=curves[curves["task"] == task], x="fraction", y="f", hue="method",
                     marker="o", ax=ax, legend=ax is axes[0, 0])  # fmt: skip
        for level in (0.0, 1.0):
            ax.axhline(level, color="grey", linestyle="--", linewidth=1)
        ax.set(xscale="log", xlabel="fraction of edges kept", ylabel="faithfulness f",
               title=task)  # fmt: skip
    fig.tight_layout()
    return fig


def debias_scores(table: pd.DataFrame) -> Figure:
    """Bias in Bios at a glance: left, each method's profession, gender and worst-group accuracy
    in percent (Table 2; dashed: 50, the ideal gender accuracy); right, its seconds to build the
    classifier. ``table`` has one row per method (index) and columns ``profession, gender,
    worst_group, seconds``, as :class:`circuitlasso.evaluation.debias.Comparison` holds."""
    metrics = ["profession", "gender", "worst_group"]
    missing = [c for c in (*metrics, "seconds") if c not in table]
    if missing:
        raise ValueError(f"table lacks columns {missing}")
    scores = table[metrics].rename_axis("method").reset_index()
    scores = scores.melt("method", var_name="metric", value_name="percent")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [2, 1]})
    sns.barplot(data=scores, y="method", x="percent", hue="metric", ax=left)
    left.axvline(50, color="grey", linestyle="--", linewidth=1)
    left.set(xlabel="% on the balanced test set", ylabel="")
    sns.move_legend(left, "lower center", bbox_to_anchor=(0.5, 1), ncol=3, title=None,
                    frameon=False)  # fmt: skip
    sns.barplot(x=table["seconds"], y=table.index, color="grey", ax=right)
    right.set(xlabel="seconds to build the classifier", ylabel="", yticklabels=[])
    fig.tight_layout()
    return fig
