"""The lines and summary the InterpBench section prints, on small hand-made runs, the run with
the IOI case, and one case's edge rankings against the direct calls."""

from __future__ import annotations

import pandas as pd
import pytest

from circuitlasso import timing
from circuitlasso.data.interpbench import compile_case, make_prompts, to_hooked_transformer
from circuitlasso.evaluation.interpbench import report
from circuitlasso.evaluation.interpbench.evaluate import run_method

# (case, variant, method): (edge_shd, edge_auroc, total_s)
RUN = {
    ("a", "exact", "eap"): (1, 0.9, 1.0),
    ("a", "exact", "eap-ig"): (0, 1.0, 4.0),
    ("a", "exact", "circuitlasso-linear"): (1, 0.8, 2.0),
    ("a", "distractors", "eap"): (1, 0.9, 2.0),
    ("a", "distractors", "eap-ig"): (1, 0.95, 6.0),
    ("a", "distractors", "circuitlasso-linear"): (5, 0.7, 1.0),
    ("b", "exact", "eap"): (0, 1.0, 0.5),
    ("b", "exact", "eap-ig"): (0, 1.0, 3.0),
    ("b", "exact", "circuitlasso-linear"): (0, 1.0, 1.5),
    ("b", "distractors", "eap"): (2, 0.8, 1.0),
    ("b", "distractors", "eap-ig"): (1, 0.9, 8.0),
    ("b", "distractors", "circuitlasso-linear"): (4, 0.6, 4.0),
}


def run_table() -> pd.DataFrame:
    rows = [
        {"case": c, "variant": v, "method": m, "edge_shd": shd, "edge_auroc": auroc,
         "total_s": total}
        for (c, v, m), (shd, auroc, total) in RUN.items()
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_section_summary_by_hand():
    result = report.section_summary(run_table())
    assert list(result["means"]) == ["exact", "distractors"]
    assert result["means"]["exact"]["circuitlasso-linear"] == {"edge_shd": 0.5, "edge_auroc": 0.9}
    assert result["means"]["distractors"]["eap-ig"] == {"edge_shd": 1.0, "edge_auroc": 0.925}
    # vs EAP-IG: 4/2, 6/1, 3/1.5, 8/4 -> median 2; vs EAP: 1/2, 2/1, 0.5/1.5, 1/4 -> 5/12
    assert result["median_speedup"] == {
        "vs eap-ig": {"circuitlasso-linear": 2.0},
        "vs eap": {"circuitlasso-linear": 0.417},
    }


def test_speedup_note_reads_the_table_against_the_paper():
    speedups = report.speedup_table(run_table())
    assert report.speedup_note(speedups) == (
        "circuitlasso-linear: 2.0x EAP-IG's speed (paper: 3.0x), 0.4x EAP's speed (paper: 2.1x)"
    )
    assert "did not run" in report.speedup_note(speedups, "circuitlasso-nonlinear")


def test_parity_text_one_line_per_variant():
    check = pd.DataFrame(
        {
            "circuitlasso-linear edge_shd": [0.5, 4.5],
            "eap-ig edge_shd": [0.0, 1.0],
            "gap": [0.5, 3.5],
            "parity": [True, False],
        },
        index=pd.Index(["exact", "distractors"], name="variant"),
    )
    assert report.parity_text(check, 0.5).splitlines() == [
        "exact: circuitlasso-linear mean edge SHD 0.50 vs EAP-IG 0.00 (gap +0.50): parity "
        "reached at tolerance 0.5",
        "distractors: circuitlasso-linear mean edge SHD 4.50 vs EAP-IG 1.00 (gap +3.50): parity "
        "NOT reached at tolerance 0.5",
    ]
    with pytest.raises(ValueError, match="lacks columns"):
        report.parity_text(check.drop(columns="gap"), 0.5)


def test_describe_ranking_counts_kept_false_and_outside_edges():
    ranked = pd.DataFrame(
        {
            "kept": [True, True, True, True, False],
            "true": [True, False, False, False, True],
            "parent_in_circuit": [True, True, False, True, True],
            "child_in_circuit": [True, True, True, False, True],
        }
    )
    # kept and false: rows 1-3; of those, rows 2 and 3 touch a node outside the true circuit
    assert report.describe_ranking(ranked) == (
        "4 edges kept, 3 false, 2 of them touching a node outside the true circuit"
    )


def test_timed_benchmark_adds_the_ioi_rows_only_when_asked(monkeypatch: pytest.MonkeyPatch):
    calls = []
    cases = run_table()
    hub = pd.DataFrame({"case": ["ioi"], "variant": ["trained"], "method": ["eap"]})
    now = [100.0]  # a fake clock that moves only while the cases (5 s) and IOI (2 s) run
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])

    def fake_cases(*args) -> pd.DataFrame:
        calls.append(args)
        now[0] += 5.0
        return cases

    def fake_ioi(*args) -> pd.DataFrame:
        calls.append(args)
        now[0] += 2.0
        return hub

    monkeypatch.setattr(report, "run_cases", fake_cases)
    monkeypatch.setattr(report, "evaluate_ioi", fake_ioi)
    settings = report.RunSettings(["eap"], 10, 1, 2)
    table, seconds = report.timed_benchmark(["a", "b"], ["exact"], settings)
    assert table.equals(cases) and seconds == 5.0  # the cases' run, timed whole
    assert calls == [(["a", "b"], ["exact"], settings)]
    both, seconds = report.timed_benchmark(["a"], ["exact"], settings, ioi=True, ioi_source="here")
    assert calls[-1] == ("here", settings) and seconds == 5.0 + 2.0  # the IOI rows' run too
    assert len(both) == len(cases) + 1 and both.iloc[-1]["case"] == "ioi"
    assert both.index.tolist() == list(range(len(both)))


def test_case_edge_rankings_match_the_direct_calls():
    rankings = report.case_edge_rankings("13", "distractors", ["eap", "circuitlasso-linear"], 60, 2)
    compiled = compile_case("13")
    model = to_hooked_transformer(compiled, "distractors", seed=2)
    prompts = make_prompts(compiled, 60, 2)
    assert list(rankings) == ["eap", "circuitlasso-linear"]
    for method, ranked in rankings.items():
        run = run_method(method, model, prompts, 2)
        direct = report.edge_ranking(run.scores, run.threshold, compiled.ground_truth)
        pd.testing.assert_frame_equal(ranked, direct)
        assert ranked["true"].sum() == len(set(compiled.ground_truth) & set(run.scores))
