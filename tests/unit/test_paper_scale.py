"""The paper-scale benchmark (benchmarks/paper_scale.py) end to end at a tiny size."""

import json
from pathlib import Path

import pytest
import torch

from circuitlasso import cache
from circuitlasso.solve import MemoryBudgetError

TINY = ["--sentences", "40", "--width", "256", "--layers", "3", "--d-model", "64",
        "--n-heads", "4", "--n-ctx", "128", "--min-prompts", "2", "--threads", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def paper_scale(benchmark_script):
    return benchmark_script("paper_scale")


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CoLA's zip is copied from the mirror into a cache of the test's own."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))


def test_saes_are_unit_norm_tied_and_seeded_per_layer(paper_scale) -> None:
    saes = paper_scale.make_saes(n_layers=2, d_model=16, width=64, k=4, seed=3)
    assert [sae.cfg.metadata.hook_name for sae in saes.values()] == [
        "blocks.0.hook_resid_post",
        "blocks.1.hook_resid_post",
    ]
    for sae in saes.values():
        torch.testing.assert_close(sae.W_dec.norm(dim=1), torch.ones(64))
        torch.testing.assert_close(sae.W_enc, sae.W_dec.T)
        assert not sae.b_enc.any() and not sae.b_dec.any()
        features = sae.encode(torch.randn(5, 16))
        assert ((features > 0).sum(1) <= 4).all() and ((features > 0).sum(1) > 0).all()
    assert not torch.equal(saes[0].W_dec, saes[1].W_dec)
    again = paper_scale.make_saes(n_layers=2, d_model=16, width=64, k=4, seed=3)
    torch.testing.assert_close(again[1].W_dec, saes[1].W_dec)


# each stage's seconds, planted (plant_seconds): a power of two each, so every sum differs
STAGES = {"load model + SAEs": 1.0, "collect": 2.0, "label fit": 4.0, "pair 0->1": 8.0,
          "pair 1->2": 16.0, "trace": 32.0}  # fmt: skip


def test_every_pair_runs_and_the_json_line_sums_the_stages(
    paper_scale, capsys, plant_seconds
) -> None:
    plant_seconds(paper_scale, STAGES)
    stages, summary = paper_scale.run(paper_scale.parse_args(TINY))
    lines = capsys.readouterr().out.strip().splitlines()
    assert paper_scale.STAND_IN in lines
    assert "projected" not in " ".join(lines)  # every pair was measured
    assert list(summary["stage_seconds"]) == list(STAGES)  # every stage, in the order run
    assert summary["stage_seconds"] == STAGES
    assert summary["total_seconds"] == 63.0
    assert summary["pairs_measured"] == [1, 2]
    assert summary["layer_pair_seconds_median"] == (8.0 + 16.0) / 2
    assert summary["peak_gib"] >= max(row["peak_gib"] for row in stages.rows.values()) * 0.99
    for name in ("pair 0->1", "pair 1->2"):
        row = stages.rows[name]
        assert row["outputs"] == 256 and row["nonzero"] > 0 and row["converged"] == 1.0
        assert row["seconds"] == STAGES[name] and row["outputs_per_s"] == 256 / STAGES[name]
        assert 0 < row["active"] <= 256
    assert stages.rows["collect"]["outputs"] == 40


def test_a_subset_of_pairs_is_projected_and_the_last_line_is_json(
    paper_scale, capsys, plant_seconds
) -> None:
    plant_seconds(paper_scale, STAGES)
    summary = paper_scale.main([*TINY, "--pairs", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1]) == paper_scale.rounded(summary)
    assert set(summary) == {
        "total_seconds",
        "peak_gib",
        "stage_seconds",
        "layer_pair_seconds_median",
        "pairs_measured",
        "projected_total_seconds_all_pairs",
    }
    assert summary["stage_seconds"] == {k: v for k, v in STAGES.items() if k != "pair 0->1"}
    assert summary["total_seconds"] == 63.0 - 8.0
    # the measured pair's 16 s counted for both pairs
    assert summary["projected_total_seconds_all_pairs"] == 63.0 - 8.0 + 16.0
    assert any(line.startswith("projected, not measured") for line in lines)
    assert any("went down 1 of 2 layers" in line for line in lines)


def test_the_memory_budget_reaches_the_layer_pair_solver(paper_scale) -> None:
    with pytest.raises(MemoryBudgetError, match="memory budget is 0.00 GiB"):
        paper_scale.run(paper_scale.parse_args([*TINY, "--pairs", "1", "--memory-gib", "1e-6"]))


@pytest.mark.slow  # loads the real decoder
def test_a_real_model_runs_with_its_own_saes_and_pairs_between_its_sae_layers(
    paper_scale, capsys, monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> None:
    monkeypatch.delenv(cache.CACHE_ENV)  # the converted decoder, where every test finds it
    summary = paper_scale.main(["--model", "smollm2-135m", "--sae-layers", "14", "19",
                                "--sentences", "40", "--min-prompts", "2", "--threads", "1",
                                "--data", str(shared_data)])  # fmt: skip
    out = capsys.readouterr().out
    assert "smollm2-135m: 30 layers, d_model=576; SAEs on layers [14, 19], width 1536" in out
    assert paper_scale.STAND_IN not in out  # real weights and SAEs
    assert list(summary["stage_seconds"]) == [
        "load model + SAEs", "collect", "label fit", "pair 14->19", "trace",
    ]  # fmt: skip
    assert summary["pairs_measured"] == [19] and "projected_total_seconds_all_pairs" not in summary
    with pytest.raises(ValueError, match=r"--pairs are child layers among \[19\], got \[14\]"):
        paper_scale.main(["--model", "smollm2-135m", "--sae-layers", "14", "19", "--pairs", "14",
                          "--data", str(shared_data)])  # fmt: skip
