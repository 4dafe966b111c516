"""The held-out RASP suite: compiles, converts exactly, disjoint from InterpBench, runs."""

import json

import numpy as np
import pytest
from tracr.rasp import rasp

from circuitlasso.data.interpbench import (
    CASE_IDS,
    HELDOUT_IDS,
    HELDOUT_TASKS,
    compile_task,
    decode_outputs,
    encode_inputs,
    to_hooked_transformer,
)
from circuitlasso.evaluation.interpbench import report


@pytest.fixture(scope="module")
def compiled():
    """Every held-out task compiled once."""
    return {case_id: compile_task(task) for case_id, task in HELDOUT_TASKS.items()}


def test_at_least_eight_tasks_disjoint_from_interpbench():
    assert len(HELDOUT_IDS) >= 8
    assert not set(HELDOUT_IDS) & set(CASE_IDS)
    assert all(case_id.startswith("h-") for case_id in HELDOUT_IDS)


@pytest.mark.slow  # compiles every held-out task
@pytest.mark.parametrize("case_id", HELDOUT_IDS)
def test_exact_model_reproduces_the_rasp_program(compiled, case_id):
    task = HELDOUT_TASKS[case_id]
    inputs = task.sample_inputs(np.random.default_rng(1), 16)
    program = task.make_program()
    expected = [rasp.evaluate(program, row) for row in inputs]
    model = to_hooked_transformer(compiled[case_id], "exact")
    ours = decode_outputs(compiled[case_id], model(encode_inputs(compiled[case_id], inputs)))
    checked = 0
    for row_ours, row_ref in zip(ours, expected, strict=True):
        for a, b in zip(row_ours, row_ref, strict=True):
            if b is not None:  # undefined positions (no previous token) decode to anything
                assert a == pytest.approx(b, abs=1e-3), (case_id, row_ours, row_ref)
                checked += 1
    assert checked > 0


@pytest.mark.slow  # compiles every held-out task
@pytest.mark.parametrize("case_id", HELDOUT_IDS)
def test_ground_truth_is_nonempty_and_within_candidate_edges(compiled, case_id, check_ground_truth):
    check_ground_truth(compiled[case_id])


@pytest.mark.parametrize("case_id", HELDOUT_IDS)
def test_corrupted_inputs_change_the_output_on_most_prompts(case_id):
    task = HELDOUT_TASKS[case_id]
    rng = np.random.default_rng(0)
    clean = task.sample_inputs(rng, 100)
    corrupted = task.sample_corrupted(rng, clean)
    program = task.make_program()
    changed = [
        rasp.evaluate(program, a) != rasp.evaluate(program, b)
        for a, b in zip(clean, corrupted, strict=True)
    ]
    assert np.mean(changed) > 0.5


def test_run_cases_runs_a_heldout_task():
    table = report.run_cases(
        ["h-count"],
        ["exact"],
        report.RunSettings(["circuitlasso-linear"], 20, trials=1),
        progress=False,
        suite="heldout",
    )
    assert list(table["case"]) == ["h-count"] and list(table["method"]) == ["circuitlasso-linear"]
    assert table["n_true_edges"].iloc[0] == 3  # count head -> its MLP -> output


def test_unknown_suite_or_case_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown suite 'other'"):
        report.run_cases(["h-count"], suite="other")
    with pytest.raises(ValueError, match="unknown heldout case id '3'"):
        report.run_cases(["3"], suite="heldout")


def test_benchmark_script_runs_the_heldout_suite(capsys, benchmark_script):
    module = benchmark_script("interpbench")
    args = ["--suite", "heldout", "--cases", "h-rank", "--variants", "exact"]
    result = module.main(
        [*args, "--methods", "circuitlasso-linear", "--n-prompts", "20", "--trials", "1"]
    )
    assert result["cases"] == ["h-rank"]
    assert set(result["mean_edge_shd"]) == {"circuitlasso-linear"}
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    assert module.parse_args(["--suite", "heldout", "--quick"]).cases == ",".join(HELDOUT_IDS)
