"""Scaling fits of measured costs: grids that vary one size at a time from a base, and log-log
slopes along each size, of Proposition 1's timed solves (`loglog_slopes`) and of a crossover grid
(`crossover_scaling`) against the propositions' counts; where a crossover grid's measured ratios
cross 1 against the predicted one (`crossover_fit`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from circuitlasso.circuits.components import LINEAR_TOL
from circuitlasso.data.random_models import gpt2_family
from circuitlasso.evaluation.cost.algebra import eap_ig_additional_count, proposition1_count

SIZES = ("M", "L", "d")


def vary_one_at_a_time(
    base: Sequence[int], grids: Sequence[Sequence[int]]
) -> list[tuple[int, ...]]:
    """Configurations equal to `base` but in one position, which takes each value of its grid:
    sorted, without repeats (`base` itself is among them when a grid holds its value)."""
    if len(base) != len(grids):
        raise ValueError(f"base has {len(base)} sizes but there are {len(grids)} grids")
    return sorted(
        {
            tuple(base[:k]) + (value,) + tuple(base[k + 1 :])
            for k, grid in enumerate(grids)
            for value in grid
        }
    )


def rows_varying(timings: pd.DataFrame, column: str, varied: Sequence[str] = SIZES) -> pd.DataFrame:
    """Rows of `timings` where every size in `varied` but `column` sits at its base (most
    frequent) value, sorted by `column`."""
    held = timings
    for other in varied:
        if other != column:
            held = held[held[other] == timings[other].mode().iloc[0]]
    return held.sort_values(column)


def loglog_slopes(timings: pd.DataFrame, column: str = "seconds") -> pd.DataFrame:
    """Exponent of `column` in each size, fitted on `rows_varying` (the other two sizes held at
    their base values): least squares of log(column) on log(size). The same fit of the `bound`
    column gives the slope Proposition 1 predicts on that grid. One row per size."""
    rows = []
    for size in SIZES:
        held = rows_varying(timings, size)
        if held[size].nunique() < 2:
            raise ValueError(f"cannot fit a slope for {size!r} over fewer than 2 values")
        x = np.log(held[size].to_numpy(float))
        rows.append(
            {
                "size": size,
                "measured_slope": np.polyfit(x, np.log(held[column].to_numpy(float)), 1)[0],
                "proposition_1_slope": np.polyfit(x, np.log(held["bound"].to_numpy(float)), 1)[0],
            }
        )
    return pd.DataFrame(rows)


CROSSOVER_SIZES = ("layers", "d_model", "n_token")


def crossover_scaling(table: pd.DataFrame) -> pd.DataFrame:
    """How each method's cost beyond the shared passes grows along each size of a
    `crossover_grid` table, against Proposition 2's counts.

    For every number of prompt pairs and every size varied with the other two at their base
    (most frequent) values: the log-log exponent, on that size, of CircuitLasso's solve
    (``solve``) and of EAP-IG's gradient passes (``eap_ig``), next to the same fit of
    Proposition 1's count (``solve_count``) and of EAP-IG's count (``eap_ig_count``). A
    measured exponent below its count's means the count overstates how that cost grows.
    """
    rows = []
    for n_prompts, runs in table.groupby("n_prompts"):
        shapes = [gpt2_family(s, d) for s, d in zip(runs["layers"], runs["d_model"], strict=True)]
        runs = runs.assign(
            solve=runs["circuitlasso_solve_s"],
            eap_ig=runs["eap_ig_additional_ratio"] * runs["circuitlasso_solve_s"],
            solve_count=[
                proposition1_count(1, L, d, LINEAR_TOL)
                for L, d in zip(runs["L"], runs["d_model"], strict=True)
            ],
            eap_ig_count=[
                eap_ig_additional_count(shape, L, n)
                for shape, L, n in zip(shapes, runs["L"], runs["n_token"], strict=True)
            ],
        )
        for size in CROSSOVER_SIZES:
            held = rows_varying(runs, size, CROSSOVER_SIZES)
            if held[size].nunique() < 2:
                continue
            x = np.log(held[size].to_numpy(float))
            row: dict[str, object] = {"n_prompts": n_prompts, "size": size}
            for column in ("solve", "solve_count", "eap_ig", "eap_ig_count"):
                row[column] = float(np.polyfit(x, np.log(held[column].to_numpy(float)), 1)[0])
            rows.append(row)
    return pd.DataFrame(rows)


CROSSOVER_RATIOS = ("eap_ig_ratio", "eap_ratio", "eap_ig_additional_ratio", "eap_additional_ratio")


def crossover_fit(table: pd.DataFrame, measured: Sequence[str] = CROSSOVER_RATIOS) -> pd.DataFrame:
    """Where each measured ratio of `crossover_grid` crosses 1, against the predicted ratio.

    One row per column in `measured`: the slope of the least-squares line of log(measured) on
    log(predicted_ratio), the predicted ratio at which that line reaches a measured ratio of 1
    (the measured crossover; 1 if both agreed), the median of predicted / measured, and the
    share of rows where both ratios name the same cheaper method, and the largest measured ratio.
    """
    if table["predicted_ratio"].nunique() < 2:
        raise ValueError("cannot fit the crossover over fewer than 2 predicted ratios")
    x = np.log(table["predicted_ratio"].to_numpy(float))
    rows = {}
    for column in measured:
        y = np.log(table[column].to_numpy(float))
        slope, intercept = np.polyfit(x, y, 1)
        rows[column] = {
            "slope": float(slope),
            "predicted_ratio_at_crossover": float(np.exp(-intercept / slope)),
            "median_predicted_over_measured": float(np.median(np.exp(x - y))),
            "same_cheaper_method": float(np.mean((x > 0) == (y > 0))),
            "max_measured": float(np.exp(y.max())),
        }
    return pd.DataFrame.from_dict(rows, orient="index")
