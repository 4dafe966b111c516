"""The solver section's one-call tables and summary: Proposition 1 timed around a base with its
slopes, the Proposition 2 table as shown, serial against Ray (Ray replaced by a second serial
executor) and the summary, against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from circuitlasso.evaluation import cluster, cost, solver_check
from circuitlasso.executor import SerialExecutor


def test_time_and_slopes_times_each_configuration_and_fits_the_bound_slopes() -> None:
    timings, slopes = cost.time_and_slopes((40, 2, 4), ([40, 80], [2, 3], [4, 8]), repeats=1)
    configs = sorted({(40, 2, 4), (80, 2, 4), (40, 3, 4), (40, 2, 8)})
    assert list(timings[["M", "L", "d"]].itertuples(index=False, name=None)) == configs
    assert timings["bound"].tolist() == [M * L * (L - 1) * d**2 / 2 for M, L, d in configs]
    assert slopes["size"].tolist() == ["M", "L", "d"]
    predicted = slopes.set_index("size")["proposition_1_slope"]
    # bound = M L (L - 1) d^2 / 2: slope 1 in M, 2 in d, log(6 / 2) / log(3 / 2) from L = 2 to 3
    assert predicted["M"] == pytest.approx(1.0)
    assert predicted["d"] == pytest.approx(2.0)
    assert predicted["L"] == pytest.approx(math.log(3) / math.log(1.5))
    assert np.isfinite(slopes["measured_slope"]).all()


def test_regime_table_keeps_the_shown_columns_to_three_decimals() -> None:
    regimes = pd.DataFrame({
        "model": ["gpt2"], "S": [12], "L": [12], "n_token": [64], "regime": ["a"],
        "n_token_threshold": [10.12345], "condition_holds": [True], "cost_ratio": [0.98765],
        "eap_count": [1e9],
    })  # fmt: skip
    table = cost.regime_table(regimes)
    assert list(table.columns) == ["model", "L", "n_token", "regime", "n_token_threshold",
                                   "condition_holds", "cost_ratio"]  # fmt: skip
    assert table.iloc[0].tolist() == ["gpt2", 12, 64, "a", 10.123, True, 0.988]


class SerialStandIn(SerialExecutor):
    """A RayExecutor's place, run serially; records that the cluster was shut down."""

    def __init__(self, logging_level: str) -> None:
        self.stopped = False

    def shutdown(self) -> None:
        self.stopped = True


def test_serial_vs_ray_times_both_executors_on_the_same_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[SerialStandIn] = []

    def ray_executor(logging_level: str) -> SerialStandIn:
        made.append(SerialStandIn(logging_level))
        return made[-1]

    monkeypatch.setattr(cluster, "RayExecutor", ray_executor)
    pairs = cluster.serial_vs_ray((60, 300), seed=1, chunk_size=128)
    assert [executor.stopped for executor in made] == [True]  # the cluster it started is stopped
    assert pairs.index.tolist() == ["serial", "ray (this machine)"]
    assert pairs["tasks"].tolist() == [3, 3]  # ceil(300 / 128) child chunks
    assert pairs["coef_diff_vs_first"].tolist() == [0.0, 0.0]
    assert (pairs["seconds_per_task"] == pairs["seconds"] / 3).all()


def test_section_summary_collects_each_result() -> None:
    table = pd.DataFrame({"objective (ours)": [1.0, 2.0 + 4e-12], "objective (sklearn)": [1.0, 2.0],
                          "support": [3, 5]})  # fmt: skip
    check = solver_check.SklearnComparison(table, 0.1, 1e-6, np.array([1e-9, 3e-9]), True)
    slopes = pd.DataFrame({"size": ["M", "L", "d"], "measured_slope": [0.12345, 1.5, 2.0004]})
    regimes = pd.DataFrame({"condition_holds": [True, False, True]})
    fits = pd.DataFrame({"crossover": [3.14159]}, index=["eap"])
    pairs = pd.DataFrame({"coef_diff_vs_first": [0.0, 2e-7]})
    found = solver_check.section_summary(check, slopes, regimes, fits, pairs)
    assert found == {
        "max_rel_objective_diff_vs_sklearn": pytest.approx(2e-12),
        "max_relative_duality_gap": 3e-9,
        "support_sizes": [3, 5],
        "loglog_slopes": {"M": 0.123, "L": 1.5, "d": 2.0},
        "proposition2_regimes_where_condition_holds": 2,
        "crossover": {"eap": {"crossover": 3.142}},
        "ray_vs_serial_coef_diff": 2e-7,
    }
