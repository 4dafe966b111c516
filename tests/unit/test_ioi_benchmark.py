"""benchmarks/ioi.py end to end on a tiny random GPT-2 with GPT-2's mirrored tokenizer: MIB's
scores in the JSON line and f = 1 at the full budget, EAP and EAP-IG quickly, every method with
the rows read back from the store (slow: CircuitLasso's solves take about 12 s a run here)."""

import json
import re
from pathlib import Path

import pytest
import torch

from circuitlasso.data import models
from circuitlasso.evaluation.saved_localization import StoredBenchmarks

torch.set_num_threads(1)


def _run(
    benchmark_script, gpt2_tokenizer_dir: Path, capsys, options: list[str]
) -> tuple[dict, dict]:
    """The benchmark's ``main`` on a fresh tiny model: what it returns and its JSON line."""
    tokenizer = models.gpt2_tokenizer(gpt2_tokenizer_dir)
    model = models.tiny_gpt2(n_layers=2, d_model=16, n_heads=2, n_ctx=32, tokenizer=tokenizer)
    argv = ["--n-train", "6", "--n-test", "4", "--fractions", "0.1", "0.5", "1.0",
            "--ig-steps", "2", "--tasks", "ioi", "sva", *options]  # fmt: skip
    result = benchmark_script("ioi").main(argv, model=model)
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return result, line


def _check(line: dict, methods: set[str]) -> None:
    keys = {"tasks", "heldout_tasks", "cpr", "cmd", "cpr_abs", "seconds", "model_logit_diff",
            "model_accuracy", "edges", "n_prompts", "device"}  # fmt: skip
    assert keys <= set(line)
    assert line["tasks"] == ["ioi", "sva"] and line["heldout_tasks"] == []
    # 2 layers of 2 heads and an MLP, a head's q, k, v apart: a0's heads read input (2 x 3),
    # m0 reads 3 nodes, a1's heads 4 (2 x 3 x 4), m1 6, the output 7
    assert line["edges"] == 2 * 3 * 1 + 3 + 2 * 3 * 4 + 6 + 7
    assert line["n_prompts"] == {"train": 6, "test": 4}
    assert line["device"] == "cpu"
    for task in ("ioi", "sva"):
        assert isinstance(line["model_logit_diff"][task], float)
        assert 0 <= line["model_accuracy"][task] <= 1
        for key in ("cpr", "cmd", "cpr_abs", "seconds", "faithfulness"):
            assert set(line[key][task]) == methods
        for method in methods:
            f = line["faithfulness"][task][method]
            assert len(f) == 3 and f[-1] == pytest.approx(1.0)


def test_ioi_benchmark_eap(benchmark_script, gpt2_tokenizer_dir: Path, capsys):
    _, line = _run(
        benchmark_script, gpt2_tokenizer_dir, capsys, ["--methods", "eap", "eap-ig", "--fresh"]
    )
    _check(line, {"eap", "eap-ig"})


@pytest.mark.slow
def test_ioi_benchmark_every_method_resumes(
    benchmark_script, tmp_path: Path, gpt2_tokenizer_dir: Path, capsys
):
    names = ["circuitlasso-linear", "circuitlasso-linear-read", "circuitlasso-anchored",
             "circuitlasso-patched", "eap", "eap-ig"]  # fmt: skip
    methods = ["--methods", *names, "--patched-rows", "64"]
    result, line = _run(
        benchmark_script, gpt2_tokenizer_dir, capsys, ["--store", str(tmp_path), *methods]
    )
    _check(line, set(names))
    # a second call reads every row back from the store: the same seconds, measured once
    again, _ = _run(
        benchmark_script, gpt2_tokenizer_dir, capsys, ["--store", str(tmp_path), *methods]
    )
    assert again["cpr"] == result["cpr"] and again["seconds"] == result["seconds"]


def test_ioi_benchmark_patched(benchmark_script, gpt2_tokenizer_dir: Path, capsys):
    options = ["--methods", "circuitlasso-patched", "--patched-rows", "24", "--fresh"]
    _, line = _run(benchmark_script, gpt2_tokenizer_dir, capsys, options)
    _check(line, {"circuitlasso-patched"})


def test_ioi_benchmark_saves_its_result_with_the_command_and_commit(
    benchmark_script, gpt2_tokenizer_dir: Path, tmp_path: Path, capsys
):
    saved = tmp_path / "ioi_tiny.json"
    options = ["--methods", "eap", "random", "--fresh", "--save", str(saved)]
    _, line = _run(benchmark_script, gpt2_tokenizer_dir, capsys, options)
    stored = json.loads(saved.read_text())
    assert stored["command"].startswith("python benchmarks/ioi.py --n-train 6 --n-test 4")
    assert stored["command"].endswith(f"--save {saved}")
    assert re.fullmatch(r"([0-9a-f]{40}|unknown)(\+dirty)?", stored["commit"])
    assert stored["machine"] and "measured_at" not in stored  # --fresh: measured in this run
    provenance = ("command", "commit", "machine")
    assert {k: v for k, v in stored.items() if k not in provenance} == line
    read = StoredBenchmarks.read(tmp_path)
    assert read.provenance().startswith(f"the model given: {stored['command']} (commit ")
    table = read.table()
    assert len(table) == 4 and not table["held_out"].any()
    for (model, task, method), row in table.iterrows():
        assert model == "the model given"
        assert row["cpr"] == line["cpr"][task][method]
        assert row["seconds"] == line["seconds"][task][method]
    versus = read.versus("eap", "random")
    for (_, task), row in versus.iterrows():
        cpr = line["cpr"][task]["eap"] - line["cpr"][task]["random"]
        cmd = line["cmd"][task]["eap"] - line["cmd"][task]["random"]
        ratio = line["seconds"][task]["eap"] / line["seconds"][task]["random"]
        assert row["cpr_difference"] == pytest.approx(cpr)
        assert row["cmd_difference"] == pytest.approx(cmd)
        assert row["seconds_ratio"] == pytest.approx(ratio)
    # random scores take no time: nothing is faster, and within a wide tolerance they meet all
    assert not versus["met"].any()
    assert read.versus("random", "eap", tolerance=10)["met"].all()
    assert not read.versus("random", "eap", tolerance=-10)["met"].any()
    with pytest.raises(FileNotFoundError, match="ioi_"):
        StoredBenchmarks.read(tmp_path / "empty")


def test_versus_meets_the_goal_only_on_cpr_cmd_and_time_together():
    """Hand-made scores: task a meets it; b misses on CPR, c on CMD, d on time."""
    tasks = ["a", "b", "c", "d"]
    scores = {  # task: (mine, reference) for cpr, cmd, seconds
        "a": ((1.96, 0.08, 5.0), (2.0, 0.04, 10.0)),
        "b": ((1.90, 0.04, 5.0), (2.0, 0.04, 10.0)),
        "c": ((2.00, 0.10, 5.0), (2.0, 0.04, 10.0)),
        "d": ((2.10, 0.04, 10.0), (2.0, 0.04, 10.0)),
    }
    result = {"model": "m", "tasks": tasks, "heldout_tasks": ["d"], "methods": ["mine", "ref"]}
    for k, key in enumerate(("cpr", "cmd", "seconds")):
        result[key] = {t: {"mine": scores[t][0][k], "ref": scores[t][1][k]} for t in tasks}
    result["cpr_abs"] = result["cpr"]
    versus = StoredBenchmarks((result,)).versus("mine", "ref")
    assert list(versus["met"]) == [True, False, False, False]
    assert list(versus["held_out"]) == [False, False, False, True]
    assert versus.loc[("m", "b"), "cpr_difference"] == pytest.approx(-0.1)
    assert versus.loc[("m", "c"), "cmd_difference"] == pytest.approx(0.06)
