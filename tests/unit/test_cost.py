"""Proposition 1 timing helpers and Proposition 2 arithmetic."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
import torch

from circuitlasso import timing
from circuitlasso.circuits.components import LINEAR_TOL
from circuitlasso.data import random_models
from circuitlasso.evaluation.cost import algebra, crossover, proposition1, scaling
from circuitlasso.evaluation.interpbench.evaluate import MethodRun


def test_planted_sem_is_standardized_and_triangular() -> None:
    x = proposition1.planted_block_sem(500, 3, 8, density=0.3, seed=1)
    assert x.shape == (500, 24)
    torch.testing.assert_close(x.mean(0), torch.zeros(24), atol=1e-5, rtol=0)
    torch.testing.assert_close(x.std(0), torch.ones(24), atol=1e-5, rtol=0)
    # the first block is pure noise; later blocks correlate with earlier ones
    corr = torch.corrcoef(x.T)
    assert corr[:8, 8:].abs().max() > 0.3
    torch.testing.assert_close(x, proposition1.planted_block_sem(500, 3, 8, density=0.3, seed=1))


def test_loglog_slopes_recover_known_exponents() -> None:
    rows = [(m, 4, 8) for m in (100, 200, 400)] + [(100, 4, w) for w in (8, 16, 32)]
    rows += [(100, n, 8) for n in (3, 5)]
    timings = pd.DataFrame(rows, columns=["M", "L", "d"])
    timings["seconds"] = timings["M"] * timings["d"] ** 2 * timings["L"] ** 3 * 1e-6
    timings["bound"] = timings["M"] * timings["L"] * (timings["L"] - 1) * timings["d"] ** 2 / 2
    slopes = scaling.loglog_slopes(timings).set_index("size")
    np.testing.assert_allclose(slopes["measured_slope"], [1.0, 3.0, 2.0], atol=1e-9)
    np.testing.assert_allclose(slopes.loc[["M", "d"], "proposition_1_slope"], [1.0, 2.0])


def test_loglog_slopes_need_two_values() -> None:
    timings = pd.DataFrame({"M": [10, 20], "L": [3, 3], "d": [4, 4], "seconds": [1, 2]})
    timings["bound"] = 1.0
    with pytest.raises(ValueError, match="'L' over fewer than 2 values"):
        scaling.loglog_slopes(timings)


def test_time_block_lasso_reports_certified_solves(plant_seconds) -> None:
    plant_seconds(proposition1, {"solve 0": 0.5, "solve 1": 0.25, "solve 2": 0.375})
    timings = proposition1.time_block_lasso([(200, 3, 4)], repeats=3, tol=1e-6)
    row = timings.iloc[0]
    assert (row["M"], row["L"], row["d"]) == (200, 3, 4)
    assert row["bound"] == 200 * 3 * 2 * 16 / 2
    assert row["seconds"] == 0.25 and row["iterations"] >= 1  # the best of the three solves
    assert row["max_gap"] < 1e-5
    assert row["seconds_per_iteration"] == pytest.approx(0.25 / row["iterations"])


def test_proposition2_thresholds_match_the_paper_formulas() -> None:
    gpt2 = algebra.MODEL_SHAPES["gpt2"]
    short = algebra.proposition2(gpt2, n_locations=24, n_tokens=400, eps=1e-6)
    # condition (1): L(L-1) / (24 S (2+f) sqrt(eps)) = 552 / (24 * 12 * 6 * 1e-3)
    assert short["n_token_threshold"] == pytest.approx(552 / 1.728)
    assert short["condition_holds"] and short["regime"].startswith("(1)")
    long = algebra.proposition2(gpt2, n_locations=24, n_tokens=1000, eps=1e-6)
    # condition (2): sqrt(L(L-1) d / (24 S sqrt(eps)))
    assert long["n_token_threshold"] == pytest.approx(np.sqrt(552 * 768 / (24 * 12 * 1e-3)))
    assert not long["condition_holds"]
    eap = 12 * 12 * 400 * 768**2 * 6 + 12 * 12 * 400**2 * 768 + 24 * 768
    assert short["cost_ratio"] == pytest.approx(eap / (552 * 768**2 / 2e-3))


def test_proposition2_table_rejects_unknown_models() -> None:
    table = algebra.proposition2_table(["gpt2", "gemma-2-2b"], [1, 2], [16, 4096], 1e-6)
    assert len(table) == 8 and set(table["L"]) == {12, 24, 26, 52}
    with pytest.raises(ValueError, match="unknown model 'llama'; valid: gpt2"):
        algebra.proposition2_table(["llama"], [1], [16], 1e-6)


def test_build_model_has_the_configured_shape() -> None:
    shape = random_models.gpt2_family(3, 128)
    assert (shape.S, shape.d, shape.h, shape.f) == (3, 128, 2, 4.0)
    model = random_models.build_model(shape, n_ctx=32, seed=1)
    cfg = model.cfg
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp) == (3, 128, 2, 64, 512)
    assert (cfg.n_ctx, cfg.d_vocab, cfg.act_fn) == (32, 128, "gelu_new")
    assert model.W_in.shape == (3, 128, 512)
    torch.testing.assert_close(model.W_E, random_models.build_model(shape, n_ctx=32, seed=1).W_E)
    with pytest.raises(ValueError, match="multiple of 64"):
        random_models.gpt2_family(2, 100)


def test_time_methods_row_on_a_tiny_model(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: dict[str, list[MethodRun]] = {}
    run_method = crossover.run_method

    def kept(method, model, prompts, seed=0) -> MethodRun:
        runs.setdefault(method, []).append(run_method(method, model, prompts, seed))
        return runs[method][-1]

    monkeypatch.setattr(crossover, "run_method", kept)
    row = crossover.time_methods(1, 64, 4, n_prompts=2)
    assert set(row) == {
        "layers",
        "d_model",
        "n_token",
        "L",
        "n_prompts",
        "eap_s",
        "eap_ig_s",
        "circuitlasso_s",
        "circuitlasso_solve_s",
        "solve_floor_s",
        "solve_over_floor",
        "eap_ig_ratio",
        "eap_ratio",
        "eap_ig_additional_ratio",
        "eap_additional_ratio",
        "predicted_ratio",
        "regime",
    }
    assert row["L"] == 4  # input, one head, one MLP, output
    # each method's time is its timed run's, collection plus solve, not the warm-up's
    for column, method in crossover.CROSSOVER_METHODS.items():
        _, timed = runs[method]  # the warm-up, then the one timed run
        assert row[f"{column}_s"] == timed.collect_seconds + timed.solve_seconds
    assert row["circuitlasso_solve_s"] == runs["circuitlasso-linear"][1].solve_seconds
    assert row["eap_ig_ratio"] == pytest.approx(row["eap_ig_s"] / row["circuitlasso_s"])
    predicted = algebra.proposition2(random_models.gpt2_family(1, 64), 4, 4, LINEAR_TOL)
    assert row["predicted_ratio"] == pytest.approx(predicted["cost_ratio"])
    assert row["regime"] == predicted["regime"]
    assert row["solve_over_floor"] == pytest.approx(
        row["circuitlasso_solve_s"] / row["solve_floor_s"]
    )


def test_the_floor_is_proposition_1_over_a_measured_product(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    count = algebra.proposition1_count(128, 12, 256, 1e-4)
    assert count == pytest.approx(128 * 66 * 256**2 * 100)
    # the throughput is a wall-clock measurement: its arithmetic is checked on a fake clock, read
    # once when the stopwatch is made, then at the start and end of each timed product
    ticks = iter([0.0, 1.0, 1.5, 2.0, 2.25, 3.0, 3.375])  # products of 0.5, 0.25, 0.375 s
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    rate = crossover.product_throughput(16, 64, 32, repeats=3)
    assert next(ticks, None) is None  # one timed product per repeat
    # multiply-adds of the (16, 64) @ (64, 32) product over the best repeat's seconds
    assert rate == pytest.approx(16 * 64 * 32 / 0.25, rel=1e-12)
    ticks = iter([5.0] * 5)  # products faster than the clock's resolution
    assert crossover.product_throughput(16, 64, 32, repeats=2) == pytest.approx(16 * 64 * 32 / 1e-9)


def test_crossover_fit_finds_where_a_known_line_crosses_one() -> None:
    predicted = np.array([0.5, 2.0, 8.0, 32.0])
    table = pd.DataFrame({"predicted_ratio": predicted, "eap_ig_ratio": predicted / 4})
    fit = scaling.crossover_fit(table, ["eap_ig_ratio"]).loc["eap_ig_ratio"]
    assert fit["slope"] == pytest.approx(1.0)
    assert fit["predicted_ratio_at_crossover"] == pytest.approx(4.0)
    assert fit["median_predicted_over_measured"] == pytest.approx(4.0)
    assert fit["same_cheaper_method"] == 0.75  # all but 2.0, measured 0.5
    with pytest.raises(ValueError, match="fewer than 2 predicted ratios"):
        scaling.crossover_fit(table.iloc[:1])


def test_crossover_scaling_recovers_known_exponents_against_the_counts() -> None:
    # a vary-one-at-a-time grid where the solve grows as the square root of Proposition 1's
    # count and EAP-IG's gradient passes exactly as their count, at two numbers of pairs
    configs = scaling.vary_one_at_a_time([2, 128, 64], [[2, 4, 8], [128, 256, 512], [16, 64]])
    rows = []
    for n_prompts in (8, 64):
        for layers, d, n in configs:
            L = 2 + layers * (d // 64 + 1)
            solve_count = algebra.proposition1_count(1, L, d, LINEAR_TOL)
            shape = random_models.gpt2_family(layers, d)
            eap_count = algebra.eap_ig_additional_count(shape, L, n)
            solve = n_prompts * 1e-9 * solve_count**0.5
            gradient_passes = n_prompts * 1e-12 * eap_count
            rows.append({"layers": layers, "d_model": d, "n_token": n, "L": L,
                         "n_prompts": n_prompts, "circuitlasso_solve_s": solve,
                         "eap_ig_additional_ratio": gradient_passes / solve})  # fmt: skip
    slopes = scaling.crossover_scaling(pd.DataFrame(rows))
    assert len(slopes) == 6
    np.testing.assert_allclose(slopes["solve"], 0.5 * slopes["solve_count"], atol=1e-9)
    np.testing.assert_allclose(slopes["eap_ig"], slopes["eap_ig_count"], atol=1e-9)
    by_size = slopes[slopes["n_prompts"] == 8].set_index("size")
    # the counts' exponents, from the formulas written out: L(L-1) d^2 with L = 2 + 2 (d/64 + 1)
    # along the width (least squares over d = 128, 256, 512), and along the tokens (n = 16, 64)
    # 12 S n d^2 (2+f) + 12 S n^2 d + L d with S = 2, d = 128, f = 4, L = 8; the solve's count
    # does not depend on the tokens
    widths = np.array([128, 256, 512])
    locations = 2 + 2 * (widths // 64 + 1)
    width_slope = np.polyfit(np.log(widths), np.log(locations * (locations - 1) * widths**2), 1)
    assert by_size.loc["d_model", "solve_count"] == pytest.approx(width_slope[0])

    def eap_ig(n: int) -> float:
        return 12 * 2 * n * 128**2 * 6 + 12 * 2 * n**2 * 128 + 8 * 128

    token_slope = np.log(eap_ig(64) / eap_ig(16)) / np.log(4)
    assert by_size.loc["n_token", "eap_ig_count"] == pytest.approx(token_slope)
    assert by_size.loc["n_token", "solve_count"] == pytest.approx(0.0, abs=1e-9)


def test_time_methods_times_collection_plus_solve_after_a_warm_up(monkeypatch) -> None:
    calls = []
    split = {"eap": (1.0, 2.0), "eap-ig": (1.0, 11.0), "circuitlasso-linear": (3.0, 1.0)}

    def fake_run(method, model, prompts, seed=0):
        calls.append((method, len(prompts.clean)))
        collect, solve = split[method]
        slower = 0.0 if calls.count(calls[-1]) == 2 else 5.0  # the second timed run is best
        return MethodRun({}, 0.0, collect + slower, solve)

    monkeypatch.setattr(crossover, "run_method", fake_run)
    row = crossover.time_methods(1, 64, 4, n_prompts=6, repeats=2)
    assert calls == [(m, n) for m in split for n in (2, 6, 6)]  # warm-up on 2 pairs, 2 repeats
    assert (row["eap_s"], row["eap_ig_s"], row["circuitlasso_s"]) == (3.0, 12.0, 4.0)
    assert (row["eap_ig_ratio"], row["eap_ratio"]) == (3.0, 0.75)
    assert row["circuitlasso_solve_s"] == 1.0
    # beyond the shared forward passes: the gradient passes over the solve
    assert (row["eap_ig_additional_ratio"], row["eap_additional_ratio"]) == (11.0, 2.0)


def test_crossover_grid_crosses_configs_with_prompt_pairs(monkeypatch) -> None:
    calls = []

    def fake_time(layers, d_model, n_tokens, *, n_prompts, repeats, seed):
        calls.append((layers, d_model, n_tokens, n_prompts))
        return {"n_prompts": n_prompts}

    monkeypatch.setattr(crossover, "time_methods", fake_time)
    table = crossover.crossover_grid([(1, 64, 4), (2, 64, 4)], n_prompts=[8, 64])
    assert calls == [(1, 64, 4, 8), (2, 64, 4, 8), (1, 64, 4, 64), (2, 64, 4, 64)]
    assert table["n_prompts"].tolist() == [8, 8, 64, 64]


def test_a_stopped_crossover_grid_resumes_from_its_store(monkeypatch, tmp_path) -> None:
    calls = []

    def fake_time(layers, d_model, n_tokens, *, n_prompts, repeats, seed):
        calls.append((layers, n_prompts))
        if len(calls) == 3:
            raise KeyboardInterrupt  # the run is stopped during its third measurement
        return {"layers": layers, "n_prompts": n_prompts, "eap_s": float(len(calls))}

    monkeypatch.setattr(crossover, "time_methods", fake_time)
    configs = [(1, 64, 4), (2, 64, 4)]
    with pytest.raises(KeyboardInterrupt):
        crossover.crossover_grid(configs, n_prompts=[8, 64], store=tmp_path)
    assert calls == [(1, 8), (2, 8), (1, 64)]
    table = crossover.crossover_grid(configs, n_prompts=[8, 64], store=tmp_path)
    # the two runs that ended are read back, the others measured (the stopped one again)
    assert calls[3:] == [(1, 64), (2, 64)]
    assert table["eap_s"].tolist() == [1.0, 2.0, 4.0, 5.0]
    assert table["measured_at"].notna().all()
    again = crossover.crossover_grid(configs, n_prompts=[8, 64], store=tmp_path)
    assert len(calls) == 5
    pd.testing.assert_frame_equal(again, table)
    # another seed, or another thread count, is another run
    crossover.crossover_grid(configs[:1], n_prompts=8, seed=1, store=tmp_path)
    with torch_threads(torch.get_num_threads() + 1):
        crossover.crossover_grid(configs[:1], n_prompts=8, store=tmp_path)
    assert calls[5:] == [(1, 8), (1, 8)]
    assert "measured_at" not in crossover.crossover_grid(configs[:1], n_prompts=8).columns


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_vary_one_at_a_time_moves_one_size_from_the_base() -> None:
    configs = scaling.vary_one_at_a_time((2, 128, 64), ([2, 4], [128, 256], [16]))
    assert configs == [(2, 128, 16), (2, 128, 64), (2, 256, 64), (4, 128, 64)]
    with pytest.raises(ValueError, match="base has 2 sizes but there are 3 grids"):
        scaling.vary_one_at_a_time((2, 128), ([2], [128], [16]))


def test_a_projected_row_says_what_it_projected(monkeypatch, plant_seconds) -> None:
    # CircuitLasso's collection 2 s, its solve of the chosen children 0.5 s (planted)
    plant_seconds(crossover, {"collect": 2.0, "solve": 0.5, **dict.fromkeys("01234", 0.25)})
    runs: dict[str, MethodRun] = {}
    run_method = crossover.run_method

    def kept(method, model, prompts, seed=0) -> MethodRun:
        runs[method] = run_method(method, model, prompts, seed)
        return runs[method]

    monkeypatch.setattr(crossover, "run_method", kept)
    row = crossover.projected_time_methods(2, 64, 4, n_prompts=4, children=2, eap_prompts=2)
    assert row["L"] == 6  # input, one head and one MLP per layer, output
    assert "2 of 5 children" in row["projected"] and "2 of 4 pairs" in row["projected"]
    assert "0.5 s measured" in row["projected"]
    share = float(row["projected"].split("children (")[1].split("% of the count")[0]) / 100
    assert 0 < share < 1
    # the solve projected to every child by the chosen ones' share of the count
    assert row["circuitlasso_solve_s"] == pytest.approx(0.5 / share, rel=1e-3)
    assert row["circuitlasso_s"] == 2.0 + row["circuitlasso_solve_s"]
    # EAP and EAP-IG run on 2 of the 4 pairs, projected linearly: twice their runs' times
    for column, method in (("eap", "eap"), ("eap_ig", "eap-ig")):
        run = runs[method]
        assert row[f"{column}_s"] == pytest.approx(2 * (run.collect_seconds + run.solve_seconds))
        assert row[f"{column}_additional_ratio"] == pytest.approx(
            2 * run.solve_seconds / row["circuitlasso_solve_s"]
        )
    assert row["eap_ig_ratio"] == pytest.approx(row["eap_ig_s"] / row["circuitlasso_s"])
    with pytest.raises(ValueError, match="eap_prompts"):
        crossover.projected_time_methods(1, 64, 4, n_prompts=2, eap_prompts=3)
