"""Tables of an InterpBench run: per case, means over cases, median speedups, parity, JSON summary.

A run is one DataFrame with a row per case x variant x method, as returned by
:func:`circuitlasso.evaluation.interpbench.evaluate_compiled` (concatenated by
:func:`run_cases`, with the trained IOI case and timed by :func:`timed_benchmark`, told by
:func:`run_note`; the held-out suite by :func:`run_heldout`). The other functions only reshape
it; the benchmark script and the notebook both print them.

- :func:`case_means`: the mean of each column over cases, per variant and method (paper Fig. 2).
- :func:`median_speedups`: per CircuitLasso method, the median over case x variant of the
  baseline's wall time divided by the method's (same prompts, same device).
- :func:`parity`: per variant, a method's mean edge SHD against a reference method's, with the
  hindsight SHD, AUROC and circuit sizes that say whether a gap comes from the ranking of the edge
  scores or from the threshold.
- :func:`edge_ranking`: one method's edges on one model by decreasing score, marked kept / true,
  to see which edges a method gets wrong (:func:`case_edge_rankings` for a case's methods,
  :func:`describe_ranking` for how many of the kept edges are wrong and why).
- :func:`parity_report`: the parity table as shown and its text, or why there is none.
- :func:`speedup_note` and :func:`parity_text`: the lines that read those tables against the
  paper; :func:`suite_comparison`: the InterpBench and held-out suites' means side by side;
  :func:`section_summary`: the notebook's JSON summary.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from circuitlasso.circuits.circuit import Circuit, circuit_at_threshold, tie_scores
from circuitlasso.data.graph import Edge
from circuitlasso.data.interpbench.compile import compile_case, compile_task
from circuitlasso.data.interpbench.convert import VARIANTS, Variant, to_hooked_transformer
from circuitlasso.data.interpbench.heldout import HELDOUT_TASKS
from circuitlasso.data.interpbench.programs import CASES, TracrTask
from circuitlasso.data.interpbench.prompts import make_prompts
from circuitlasso.evaluation.interpbench.evaluate import (
    DEFAULT_SETTINGS,
    METHODS,
    RunSettings,
    evaluate_compiled,
    run_method,
)
from circuitlasso.evaluation.interpbench.ioi import evaluate_ioi
from circuitlasso.timing import Stopwatch

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
PAPER_SPEEDUPS = {"eap-ig": 3.0, "eap": 2.1}  # circuitlasso-linear's, paper Sec. 4.1
SUITES: dict[str, dict[str, TracrTask]] = {"interpbench": CASES, "heldout": HELDOUT_TASKS}


def suite_task(suite: str, case: str | int) -> TracrTask:
    """The task ``case`` of ``suite`` ("interpbench" or "heldout"); ValueError naming the ids."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; known suites: {', '.join(SUITES)}")
    tasks = SUITES[suite]
    if str(case) not in tasks:
        raise ValueError(f"unknown {suite} case id {case!r}; known ids: {', '.join(tasks)}")
    return tasks[str(case)]


def run_cases(
    cases: Sequence[str | int],
    variants: Sequence[Variant] = VARIANTS,
    settings: RunSettings = DEFAULT_SETTINGS,
    progress: bool = True,
    suite: str = "interpbench",
) -> pd.DataFrame:
    """:func:`evaluate_compiled` for every case of ``suite`` x variant, concatenated (one row per
    method); ``suite`` is "interpbench" (:data:`CASES`) or "heldout" (:data:`HELDOUT_TASKS`).
    Each task is compiled once."""
    tasks = [suite_task(suite, case) for case in cases]
    jobs = [(task, variant) for task in tasks for variant in variants]
    if not jobs:
        raise ValueError("no case x variant to run: pass at least one case and one variant")
    compiled = {task.case_id: compile_task(task) for task in tasks}
    tables = [
        evaluate_compiled(compiled[task.case_id], variant, settings)
        for task, variant in tqdm(jobs, desc="cases", disable=not progress)
    ]
    return pd.concat(tables, ignore_index=True)


def timed_benchmark(
    cases: Sequence[str | int],
    variants: Sequence[Variant] = VARIANTS,
    settings: RunSettings = DEFAULT_SETTINGS,
    *,
    ioi: bool = False,
    ioi_source: str | Path | None = None,
) -> tuple[pd.DataFrame, float]:
    """:func:`run_cases`, then with ``ioi`` the trained IOI case
    (:func:`~circuitlasso.evaluation.interpbench.ioi.evaluate_ioi`, from the hub or the local
    ``ioi_source``) as more rows of the same table; with the run's wall-clock seconds."""
    clock = Stopwatch()
    tables = [run_cases(cases, variants, settings)]
    if ioi:
        tables.append(evaluate_ioi(ioi_source, settings))
    return pd.concat(tables, ignore_index=True), clock.lap("benchmark")


def run_note(table: pd.DataFrame, seconds: float, settings: RunSettings, threads: int) -> str:
    """Two lines on a run ``table`` that took ``seconds``: how many runs on how many cases, and
    its ``settings`` (prompt pairs, trials, seed) and torch ``threads``."""
    return (
        f"{len(table)} runs on {table['case'].nunique()} cases in {seconds:.0f} s\n"
        f"M={settings.n_prompts} prompt pairs, {settings.trials} trial(s), {threads} thread(s), "
        f"seed {settings.seed}"
    )


def run_heldout(
    cases: Sequence[str],
    variants: Sequence[Variant] = VARIANTS,
    settings: RunSettings = DEFAULT_SETTINGS,
) -> pd.DataFrame:
    """:func:`run_cases` on the held-out RASP programs (suite "heldout",
    :data:`~circuitlasso.data.interpbench.heldout.HELDOUT_TASKS`), without a progress bar."""
    return run_cases(cases, variants, settings, False, "heldout")


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


def parity_report(
    table: pd.DataFrame,
    tolerance: float,
    method: str = "circuitlasso-linear",
    reference: str = "eap-ig",
) -> tuple[pd.DataFrame, str]:
    """:func:`parity` as the section shows it, transposed (rows: its columns; columns: variants)
    and to 3 decimals, with its :func:`parity_text`; when ``method`` or ``reference`` did not run,
    an empty table and a line that says so."""
    ran = set(table["method"])
    if method not in ran or reference not in ran:
        return pd.DataFrame(), f"{method} or {reference} did not run: no parity to check"
    check = parity(table, method, reference, tolerance)
    return check.round(3).T, parity_text(check, tolerance, method, reference)


def edge_ranking(
    scores: Mapping[Edge, float], threshold: float, truth: Iterable[Edge], top: int | None = None
) -> pd.DataFrame:
    """Edges by decreasing score: ``kept`` (in the method's circuit at ``threshold``), ``true``
    (in ``truth``) and whether each endpoint is a node of ``truth``; the first ``top`` rows.
    Scores within ``SCORE_TIE_RTOL`` of each other are ties (``tie_scores``), kept in the
    order of ``scores``, so that rounding does not order them."""
    kept = circuit_at_threshold(scores, threshold).edges
    tied = tie_scores(scores)
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
    edges = list(scores)  # the rows' order
    order = sorted(range(len(edges)), key=lambda i: -tied[edges[i]])
    table = pd.DataFrame([rows[i] for i in order])
    return table.head(top).reset_index(drop=True) if top else table.reset_index(drop=True)


def case_edge_rankings(
    case: str | int,
    variant: Variant,
    methods: Sequence[str] = ("circuitlasso-linear", "eap-ig"),
    n_prompts: int = 1000,
    seed: int = 0,
    top: int | None = None,
) -> dict[str, pd.DataFrame]:
    """Per method, :func:`edge_ranking` of its run on InterpBench ``case`` (the ``variant`` of its
    compiled model, ``n_prompts`` seeded prompt pairs) against the case's true circuit."""
    compiled = compile_case(str(case))
    model = to_hooked_transformer(compiled, variant, seed=seed)
    prompts = make_prompts(compiled, n_prompts, seed)
    rankings = {}
    for method in methods:
        run = run_method(method, model, prompts, seed)
        rankings[method] = edge_ranking(run.scores, run.threshold, compiled.ground_truth, top)
    return rankings


def describe_ranking(ranked: pd.DataFrame) -> str:
    """How many edges of an :func:`edge_ranking` (taken whole) were kept, how many of those are
    false, and how many of the false ones touch a node outside the true circuit."""
    _check_columns(ranked, ["kept", "true", "parent_in_circuit", "child_in_circuit"])
    wrong = ranked[ranked["kept"] & ~ranked["true"]]
    outside = int((~wrong["parent_in_circuit"] | ~wrong["child_in_circuit"]).sum())
    return (
        f"{int(ranked['kept'].sum())} edges kept, {len(wrong)} false, {outside} of them touching "
        "a node outside the true circuit"
    )


def speedup_note(speedups: pd.DataFrame, method: str = "circuitlasso-linear") -> str:
    """``method``'s median speedups (a :func:`speedup_table`) next to the paper's."""
    if method not in speedups.index:
        return f"{method} did not run: no speedup to compare with the paper's"
    row = speedups.loc[method]
    parts = [
        f"{row[f'vs {baseline}']:.1f}x {baseline.upper()}'s speed (paper: {paper:.1f}x)"
        for baseline, paper in PAPER_SPEEDUPS.items()
        if f"vs {baseline}" in row.index
    ]
    return f"{method}: " + ", ".join(parts)


def parity_text(
    check: pd.DataFrame,
    tolerance: float,
    method: str = "circuitlasso-linear",
    reference: str = "eap-ig",
) -> str:
    """One line per variant of a :func:`parity` table: both mean edge SHDs, the gap, and whether
    parity is reached at ``tolerance``."""
    _check_columns(check, [f"{method} edge_shd", f"{reference} edge_shd", "gap", "parity"])
    return "\n".join(
        f"{variant}: {method} mean edge SHD {row[f'{method} edge_shd']:.2f} vs "
        f"{reference.upper()} {row[f'{reference} edge_shd']:.2f} (gap {row['gap']:+.2f}): parity "
        f"{'reached' if row['parity'] else 'NOT reached'} at tolerance {tolerance}"
        for variant, row in check.iterrows()
    )


def nested_means(table: pd.DataFrame, column: str) -> dict[str, dict[str, float]]:
    """``{method: {variant: mean of column over cases}}``, rounded to 4 decimals."""
    means = case_means(table, [column])[column]
    out: dict[str, dict[str, float]] = {}
    for (variant, method), value in means.items():
        out.setdefault(str(method), {})[str(variant)] = round(float(value), 4)
    return out


def suite_comparison(tables: Mapping[str, pd.DataFrame], column: str = "edge_shd") -> pd.DataFrame:
    """The mean of ``column`` over cases per (variant, method) of each run in ``tables`` (suite
    name -> run table), the suites side by side as columns: (variant x method, suites)."""
    if not tables:
        raise ValueError("no run to compare: pass at least one suite's table")
    return pd.concat(
        {suite: case_means(table, [column])[column] for suite, table in tables.items()}, axis=1
    )


def _nested_rows(means: pd.DataFrame) -> dict:
    """``{variant: {method: {column: value}}}`` from a (variant, method)-indexed frame."""
    return {
        str(variant): {str(method): row.to_dict() for (_, method), row in group.iterrows()}
        for variant, group in means.groupby(level="variant", sort=False)
    }


def section_summary(table: pd.DataFrame, heldout: pd.DataFrame | None = None) -> dict:
    """The notebook's JSON summary: ``means`` (per variant and method, the mean edge SHD and edge
    AUROC over cases, rounded to 4 decimals), ``median_speedup`` (:func:`speedup_table`, per
    baseline and method, rounded to 3) and, given the held-out suite's run, ``heldout_means``
    (as ``means``)."""
    columns = ["edge_shd", "edge_auroc"]
    summary = {
        "means": _nested_rows(case_means(table, columns).round(4)),
        "median_speedup": speedup_table(table).round(3).to_dict(),
    }
    if heldout is not None:
        summary["heldout_means"] = _nested_rows(case_means(heldout, columns).round(4))
    return summary


def summary(table: pd.DataFrame) -> dict:
    """The benchmark's JSON line: mean edge SHD and AUROC, median speedups, the cases that ran."""
    return {
        "mean_edge_shd": nested_means(table, "edge_shd"),
        "mean_edge_auroc": nested_means(table, "edge_auroc"),
        "median_speedup_vs_eap_ig": median_speedups(table, "eap-ig"),
        "median_speedup_vs_eap": median_speedups(table, "eap"),
        "cases": [str(c) for c in dict.fromkeys(table["case"])],
    }
