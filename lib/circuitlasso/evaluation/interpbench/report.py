"""Tables of an InterpBench run: per case, means over cases, median speedups, parity, JSON summary.

A run is one DataFrame with a row per case x variant x method, as returned by
:func:`circuitlasso.data.interpbench.evaluate_case` (concatenated by :func:`run_cases`). The
functions here only reshape it; the benchmark script and the notebook both print them.

- :func:`case_means`: the mean of each column over cases, per variant and method (paper Fig. 2).
- :func:`median_speedups`: per CircuitLasso method, the median over case x variant of the
  baseline's wall time divided by the method's (same prompts, same device).
- :func:`parity`: per variant, a method's mean edge SHD against a reference method's, with the
  hindsight SHD, AUROC and circuit sizes that say whether a gap comes from the ranking of the edge
  scores or from the threshold.
- :func:`edge_ranking`: one method's edges on one model by decreasing score, marked kept / true,
  to see which edges a method gets wrong.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd
from tqdm import tqdm

from circuitlasso.circuits.circuit import Circuit, circuit_at_threshold
from circuitlasso.data.graph import Edge
from circuitlasso.data.interpbench.convert import VARIANTS, Variant
from circuitlasso.evaluation.interpbench.evaluate import METHODS, evaluate_case

ACCURACY_COLUMNS = (
    "edge_shd",
    "node_shd",
    "best_edge_shd",
    "edge_auroc",
    "n_edges",
    "n_true_edges",
)
TIME_COLUMNS = ("collect_s", "solve_s", "total_s")
LASSO_METHODS = tuple(m for m in METHODS if m.startswith("circuitlasso"))
BASELINES = ("eap-ig", "eap")


def run_cases(
    cases: Sequence[str | int],
    variants: Sequence[Variant] = VARIANTS,
    methods: Sequence[str] = METHODS,
    n_prompts: int = 1000,
    seed: int = 0,
    trials: int = 3,
    progress: bool = True,
) -> pd.DataFrame:
    """:func:`evaluate_case` for every case x variant, concatenated (one row per method)."""
    jobs = [(str(case), variant) for case in cases for variant in variants]
    if not jobs:
        raise ValueError("no case x variant to run: pass at least one case and one variant")
    tables = [
        evaluate_case(case, variant, methods, n_prompts, seed, trials)
        for case, variant in tqdm(jobs, desc="cases", disable=not progress)
    ]
    return pd.concat(tables, ignore_index=True)


def _check_columns(table: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"table lacks columns {missing}; it has {list(table.columns)}")


def case_means(
    table: pd.DataFrame, columns: Sequence[str] = ACCURACY_COLUMNS + TIME_COLUMNS
) -> pd.DataFrame:
    """Mean of ``columns`` over cases, indexed by (variant, method) in the table's order."""
    _check_columns(table, ["variant", "method", *columns])
    return table.groupby(["variant", "method"], sort=False)[list(columns)].mean()


def median_speedups(
    table: pd.DataFrame, baseline: str, methods: Sequence[str] = LASSO_METHODS
) -> dict[str, float]:
    """Per method: median over case x variant of ``baseline`` time / method time (``total_s``).

    Only case x variant pairs where both ran count; methods (or a baseline) that did not run are
    left out.
    """
    _check_columns(table, ["case", "variant", "method", "total_s"])
    wide = table.pivot_table(index=["case", "variant"], columns="method", values="total_s")
    if baseline not in wide:
        return {}
    out = {}
    for method in methods:
        if method in wide:
            ratios = (wide[baseline] / wide[method]).dropna()
            if len(ratios):
                out[method] = float(statistics.median(ratios))
    return out


def speedup_table(table: pd.DataFrame, baselines: Sequence[str] = BASELINES) -> pd.DataFrame:
    """:func:`median_speedups` against each baseline: rows methods, columns ``vs <baseline>``."""
    columns = {f"vs {b}": median_speedups(table, b) for b in baselines}
    return pd.DataFrame(columns).rename_axis("median speedup")


def parity(
    table: pd.DataFrame,
    method: str = "circuitlasso-linear",
    reference: str = "eap-ig",
    tolerance: float = 0.5,
) -> pd.DataFrame:
    """Per variant: mean edge SHD of ``method`` and ``reference`` over the cases both ran.

    ``gap`` is the method's mean minus the reference's; ``parity`` says whether it is at most
    ``tolerance``. The method's mean hindsight SHD (best threshold), both AUROCs and the mean
    circuit sizes show whether a gap comes from the threshold (hindsight SHD near the
    reference's) or from the edge ranking (low AUROC, hindsight SHD also high).
    """
    _check_columns(table, ["case", "variant", "method", *ACCURACY_COLUMNS])
    for name in (method, reference):
        if name not in set(table["method"]):
            raise ValueError(f"method {name!r} is not in the table: {sorted(set(table['method']))}")
    keys = ["case", "variant"]
    both = table[table["method"] == method].merge(
        table[table["method"] == reference], on=keys, suffixes=("", "_ref")
    )
    rows = []
    for variant, group in both.groupby("variant", sort=False):
        gap = float(group["edge_shd"].mean() - group["edge_shd_ref"].mean())
        rows.append(
            {
                "variant": variant,
                "cases": len(group),
                f"{method} edge_shd": group["edge_shd"].mean(),
                f"{reference} edge_shd": group["edge_shd_ref"].mean(),
                "gap": gap,
                "parity": gap <= tolerance,
                f"{method} best_edge_shd": group["best_edge_shd"].mean(),
                f"{method} edge_auroc": group["edge_auroc"].mean(),
                f"{reference} edge_auroc": group["edge_auroc_ref"].mean(),
                f"{method} n_edges": group["n_edges"].mean(),
                "n_true_edges": group["n_true_edges"].mean(),
            }
        )
    return pd.DataFrame(rows).set_index("variant")


def edge_ranking(
    scores: Mapping[Edge, float], threshold: float, truth: Iterable[Edge], top: int | None = None
) -> pd.DataFrame:
    """Edges by decreasing score: ``kept`` (in the method's circuit at ``threshold``), ``true``
    (in ``truth``) and whether each endpoint is a node of ``truth``; the first ``top`` rows."""
    kept = circuit_at_threshold(scores, threshold).edges
    truth = Circuit(truth)
    rows = [
        {
            "parent": parent,
            "child": child,
            "score": float(score),
            "kept": (parent, child) in kept,
            "true": (parent, child) in truth.edges,
            "parent_in_circuit": parent in truth.nodes,
            "child_in_circuit": child in truth.nodes,
        }
        for (parent, child), score in scores.items()
    ]
    table = pd.DataFrame(rows).sort_values("score", ascending=False, kind="stable")
    return table.head(top).reset_index(drop=True) if top else table.reset_index(drop=True)


def nested_means(table: pd.DataFrame, column: str) -> dict[str, dict[str, float]]:
    """``{method: {variant: mean of column over cases}}``, rounded to 4 decimals."""
    means = case_means(table, [column])[column]
    out: dict[str, dict[str, float]] = {}
    for (variant, method), value in means.items():
        out.setdefault(str(method), {})[str(variant)] = round(float(value), 4)
    return out


def summary(table: pd.DataFrame) -> dict:
    """The benchmark's JSON line: mean edge SHD and AUROC, median speedups, the cases that ran."""
    return {
        "mean_edge_shd": nested_means(table, "edge_shd"),
        "mean_edge_auroc": nested_means(table, "edge_auroc"),
        "median_speedup_vs_eap_ig": median_speedups(table, "eap-ig"),
        "median_speedup_vs_eap": median_speedups(table, "eap"),
        "cases": [str(c) for c in dict.fromkeys(table["case"])],
    }
