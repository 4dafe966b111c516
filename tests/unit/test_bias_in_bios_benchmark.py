"""benchmarks/bias_in_bios.py over several seeds: each seed's splits and random control drawn with
it, and every method's mean and standard deviation over the seeds (the comparison itself is
replaced by a recorder, its own tests being in test_debias.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from circuitlasso.evaluation.debias import Comparison

METHODS = ["ORIGINAL", "ORACLE", "CircuitLasso"]


def _table(seed: int) -> pd.DataFrame:
    rows = {
        "ORIGINAL": [80 + seed, 70.0, 30 + 2 * seed, np.nan, 1.0],
        "ORACLE": [100.0, 50.0, 100.0, np.nan, 2.0],
        "CircuitLasso": [90.0, 50 + seed, 60 + 4 * seed, 5 + seed, 3.0],
    }
    columns = ["profession", "gender", "worst_group", "features", "seconds"]
    return pd.DataFrame.from_dict(rows, orient="index", columns=columns).rename_axis("method")


def test_the_benchmark_gives_each_methods_mean_and_spread_over_the_seeds(
    benchmark_script, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    script = benchmark_script("bias_in_bios")
    calls: list[tuple] = []
    monkeypatch.setattr(script, "load_run", lambda name, layer: ("model", {layer: "sae"}))

    def splits(dataset, professions, *, seed, max_prompts, profession_signal):
        calls.append(("splits", dataset, seed, max_prompts, profession_signal))
        return {"seed": seed}

    def compare(model, saes, layer, found, professions, concepts, options):
        calls.append(("compare", layer, found["seed"], options.seed, options.lam_ratio))
        return Comparison(_table(found["seed"]), {}, {})

    monkeypatch.setattr(script, "load_splits", splits)
    monkeypatch.setattr(script, "compare_methods", compare)
    script.main(["--model", "smollm2-135m", "--seeds", "0", "2", "4", "--max-prompts", "50"])

    # the decoder's biographies at the profession signal chosen on the dev rows
    assert calls[::2] == [("splits", "synthetic_bios", s, 50, 0.5) for s in (0, 2, 4)]
    assert calls[1::2] == [("compare", 19, s, s, 0.01) for s in (0, 2, 4)]
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["model"] == "smollm2-135m" and line["layer"] == 19 and line["seeds"] == [0, 2, 4]
    assert line["profession_signal"] == 0.5
    # seeds 0, 2, 4: ORIGINAL's worst group 30, 34, 38 -> mean 34, sample std 4
    assert line["ORIGINAL"]["mean_worst_group"] == 34.0 and line["ORIGINAL"]["std_worst_group"] == 4
    assert line["CircuitLasso"]["mean_worst_group"] == 68.0
    assert line["CircuitLasso"]["std_worst_group"] == pytest.approx(8.0)
    assert line["CircuitLasso"]["mean_features"] == 7.0 and line["ORACLE"]["std_profession"] == 0
    assert line["ORIGINAL"]["mean_features"] is None  # removes no feature: no count


def test_one_seed_has_no_spread(benchmark_script) -> None:
    spread = benchmark_script("bias_in_bios").mean_and_spread([_table(1)])
    assert (spread["std"].drop(columns="features").to_numpy() == 0).all()
    assert spread.loc["CircuitLasso", ("mean", "worst_group")] == 64.0


def test_saving_keeps_each_seeds_table_and_where_the_run_came_from(
    benchmark_script, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path
) -> None:
    script = benchmark_script("bias_in_bios")
    monkeypatch.setattr(script, "load_run", lambda name, layer: ("model", {layer: "sae"}))
    monkeypatch.setattr(script, "load_splits", lambda *args, seed, **kwargs: {"seed": seed})
    monkeypatch.setattr(
        script, "compare_methods", lambda *args: Comparison(_table(args[3]["seed"]), {}, {})
    )
    saved = tmp_path / "bias.json"
    script.main(["--model", "smollm2-135m", "--seeds", "1", "3", "--save", str(saved)])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    stored = json.loads(saved.read_text())
    command = f"--model smollm2-135m --seeds 1 3 --save {saved}"
    assert stored["command"] == f"python benchmarks/bias_in_bios.py {command}"
    assert stored["commit"] and stored["machine"]
    assert {k: v for k, v in stored.items() if k in line} == line
    assert stored["per_seed"]["3"]["ORIGINAL"]["worst_group"] == 36.0
    assert stored["per_seed"]["1"]["ORIGINAL"]["features"] is None  # NaN: no feature removed
    assert stored["per_seed"]["1"]["CircuitLasso"]["features"] == 6.0


def test_sae_builds_repeat_every_seed_and_the_spread_covers_them(
    benchmark_script, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path
) -> None:
    script = benchmark_script("bias_in_bios")
    ran: list[tuple] = []
    monkeypatch.setattr(script, "load_run", lambda name, layer: ("model", {0: "a", layer: "b"}))
    monkeypatch.setattr(
        script, "build_saes", lambda seed, layers: {"build": seed, "layers": layers}
    )
    monkeypatch.setattr(script, "load_splits", lambda *args, seed, **kwargs: {"seed": seed})
    monkeypatch.setattr(script, "rule_vs_toy_truth", lambda *args: pd.DataFrame({"x": [1.0]}))

    def compare(model, saes, layer, found, professions, concepts, options):
        ran.append((saes["build"], saes["layers"], found["seed"]))
        return Comparison(_table(found["seed"] + saes["build"]), {}, {})

    monkeypatch.setattr(script, "compare_methods", compare)
    saved = tmp_path / "bias.json"
    script.main(["--seeds", "0", "2", "--sae-seeds", "0", "4", "--save", str(saved)])
    # the toy world's probes on layer 3: each build's SAEs of the layers the run loaded
    assert ran == [(0, [0, 3], 0), (0, [0, 3], 2), (4, [0, 3], 0), (4, [0, 3], 2)]
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["sae_seeds"] == [0, 4] and line["seeds"] == [0, 2]
    # ORIGINAL's worst group 30 + 2 (seed + build): 30, 34, 38, 42 -> mean 36, sample std
    assert line["ORIGINAL"]["mean_worst_group"] == 36.0
    assert line["ORIGINAL"]["std_worst_group"] == round(np.std([30, 34, 38, 42], ddof=1), 2)
    stored = json.loads(saved.read_text())
    assert stored["per_seed"]["SAE build 4, seed 2"]["ORIGINAL"]["worst_group"] == 42.0
    with pytest.raises(SystemExit, match="toy world's SAEs only"):
        script.main(["--model", "smollm2-135m", "--sae-seeds", "1"])


def test_the_saved_commit_is_the_one_taken_before_the_runs(
    benchmark_script, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """A commit made while the comparison runs must not be recorded as the code that ran."""
    script = benchmark_script("bias_in_bios")
    ran: list[int] = []

    def provenance(path, argv) -> dict[str, str]:
        commit = "after the runs" if ran else "before the runs"
        return {"command": "python benchmarks/bias_in_bios.py", "commit": commit, "machine": "m"}

    def compare(*args) -> Comparison:
        ran.append(args[3]["seed"])
        return Comparison(_table(args[3]["seed"]), {}, {})

    monkeypatch.setattr(script, "provenance", provenance)
    monkeypatch.setattr(script, "load_run", lambda name, layer: ("model", {layer: "sae"}))
    monkeypatch.setattr(script, "load_splits", lambda *args, seed, **kwargs: {"seed": seed})
    monkeypatch.setattr(script, "compare_methods", compare)
    saved = tmp_path / "bias.json"
    script.main(["--model", "smollm2-135m", "--seeds", "1", "--save", str(saved)])
    assert ran == [1] and json.loads(saved.read_text())["commit"] == "before the runs"
