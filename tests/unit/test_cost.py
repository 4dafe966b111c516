"""Proposition 1 timing helpers and Proposition 2 arithmetic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from circuitlasso.evaluation import cost


def test_planted_sem_is_standardized_and_triangular() -> None:
    x = cost.planted_block_sem(500, 3, 8, density=0.3, seed=1)
    assert x.shape == (500, 24)
    torch.testing.assert_close(x.mean(0), torch.zeros(24), atol=1e-5, rtol=0)
    torch.testing.assert_close(x.std(0), torch.ones(24), atol=1e-5, rtol=0)
    # the first block is pure noise; later blocks correlate with earlier ones
    corr = torch.corrcoef(x.T)
    assert corr[:8, 8:].abs().max() > 0.3
    torch.testing.assert_close(x, cost.planted_block_sem(500, 3, 8, density=0.3, seed=1))


def test_loglog_slopes_recover_known_exponents() -> None:
    rows = [(m, 4, 8) for m in (100, 200, 400)] + [(100, 4, w) for w in (8, 16, 32)]
    rows += [(100, n, 8) for n in (3, 5)]
    timings = pd.DataFrame(rows, columns=["M", "L", "d"])
    timings["seconds"] = timings["M"] * timings["d"] ** 2 * timings["L"] ** 3 * 1e-6
    timings["bound"] = timings["M"] * timings["L"] * (timings["L"] - 1) * timings["d"] ** 2 / 2
    slopes = cost.loglog_slopes(timings).set_index("size")
    np.testing.assert_allclose(slopes["measured_slope"], [1.0, 3.0, 2.0], atol=1e-9)
    np.testing.assert_allclose(slopes.loc[["M", "d"], "proposition_1_slope"], [1.0, 2.0])


def test_loglog_slopes_need_two_values() -> None:
    timings = pd.DataFrame({"M": [10, 20], "L": [3, 3], "d": [4, 4], "seconds": [1, 2]})
    timings["bound"] = 1.0
    with pytest.raises(ValueError, match="'L' over fewer than 2 values"):
        cost.loglog_slopes(timings)


def test_time_block_lasso_reports_certified_solves() -> None:
    timings = cost.time_block_lasso([(200, 3, 4)], repeats=1, tol=1e-6)
    row = timings.iloc[0]
    assert (row["M"], row["L"], row["d"]) == (200, 3, 4)
    assert row["bound"] == 200 * 3 * 2 * 16 / 2
    assert row["seconds"] > 0 and row["iterations"] >= 1
    assert row["max_gap"] < 1e-5
    assert row["seconds_per_iteration"] == pytest.approx(row["seconds"] / row["iterations"])


def test_proposition2_thresholds_match_the_paper_formulas() -> None:
    gpt2 = cost.MODEL_SHAPES["gpt2"]
    short = cost.proposition2(gpt2, n_locations=24, n_tokens=400, eps=1e-6)
    # condition (1): L(L-1) / (24 S (2+f) sqrt(eps)) = 552 / (24 * 12 * 6 * 1e-3)
    assert short["n_token_threshold"] == pytest.approx(552 / 1.728)
    assert short["condition_holds"] and short["regime"].startswith("(1)")
    long = cost.proposition2(gpt2, n_locations=24, n_tokens=1000, eps=1e-6)
    # condition (2): sqrt(L(L-1) d / (24 S sqrt(eps)))
    assert long["n_token_threshold"] == pytest.approx(np.sqrt(552 * 768 / (24 * 12 * 1e-3)))
    assert not long["condition_holds"]
    eap = 12 * 12 * 400 * 768**2 * 6 + 12 * 12 * 400**2 * 768 + 24 * 768
    assert short["cost_ratio"] == pytest.approx(eap / (552 * 768**2 / 2e-3))


def test_proposition2_table_rejects_unknown_models() -> None:
    table = cost.proposition2_table(["gpt2", "gemma-2-2b"], [1, 2], [16, 4096], 1e-6)
    assert len(table) == 8 and set(table["L"]) == {12, 24, 26, 52}
    with pytest.raises(ValueError, match="unknown model 'llama'; valid: gpt2"):
        cost.proposition2_table(["llama"], [1], [16], 1e-6)
