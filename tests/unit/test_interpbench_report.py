"""Report tables of an InterpBench run, on a small hand-made run with values worked out by hand."""

import json

import pandas as pd
import pytest

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.evaluation.interpbench import report
from circuitlasso.presentation import plots

# (case, variant, method): (edge_shd, best_edge_shd, edge_auroc, n_edges, total_s)
RUN = {
    ("a", "exact", "eap"): (1, 1, 0.9, 4, 1.0),
    ("a", "exact", "eap-ig"): (0, 0, 1.0, 3, 4.0),
    ("a", "exact", "circuitlasso-linear"): (1, 0, 0.8, 4, 2.0),
    ("a", "distractors", "eap"): (1, 1, 0.9, 4, 2.0),
    ("a", "distractors", "eap-ig"): (1, 0, 0.95, 4, 6.0),
    ("a", "distractors", "circuitlasso-linear"): (5, 2, 0.7, 8, 1.0),
    ("b", "exact", "eap"): (0, 0, 1.0, 2, 0.5),
    ("b", "exact", "eap-ig"): (0, 0, 1.0, 2, 3.0),
    ("b", "exact", "circuitlasso-linear"): (0, 0, 1.0, 2, 1.5),
    ("b", "distractors", "eap"): (2, 1, 0.8, 4, 1.0),
    ("b", "distractors", "eap-ig"): (1, 1, 0.9, 3, 8.0),
    ("b", "distractors", "circuitlasso-linear"): (4, 3, 0.6, 6, 4.0),
}
TRUE_EDGES = {"a": 3, "b": 2}


def run_table() -> pd.DataFrame:
    rows = []
    for (case, variant, method), (shd, best, auroc, n_edges, total) in RUN.items():
        rows.append(
            {
                "case": case,
                "variant": variant,
                "method": method,
                "edge_shd": shd,
                "node_shd": shd // 2,
                "best_edge_shd": best,
                "edge_auroc": auroc,
                "n_edges": n_edges,
                "n_true_edges": TRUE_EDGES[case],
                "collect_s": total / 4,
                "solve_s": total * 3 / 4,
                "total_s": total,
            }
        )
    return pd.DataFrame(rows)


def test_case_means_per_variant_and_method_in_run_order():
    means = report.case_means(run_table())
    assert list(means.index) == [
        (v, m) for v in ("exact", "distractors") for m in ("eap", "eap-ig", "circuitlasso-linear")
    ]
    assert means.loc[("exact", "circuitlasso-linear"), "edge_shd"] == pytest.approx(0.5)
    assert means.loc[("distractors", "circuitlasso-linear"), "edge_shd"] == pytest.approx(4.5)
    assert means.loc[("distractors", "eap-ig"), "total_s"] == pytest.approx(7.0)
    assert means.loc[("distractors", "eap"), "edge_auroc"] == pytest.approx(0.85)
    with pytest.raises(ValueError, match="lacks columns"):
        report.case_means(run_table().drop(columns="edge_shd"))


def test_median_speedups_over_case_and_variant():
    table = run_table()
    # vs EAP-IG: 4/2, 6/1, 3/1.5, 8/4 -> median of (2, 6, 2, 2) = 2
    assert report.median_speedups(table, "eap-ig") == {"circuitlasso-linear": pytest.approx(2.0)}
    # vs EAP: 1/2, 2/1, 0.5/1.5, 1/4 -> median of (1/4, 1/3, 1/2, 2) = (1/3 + 1/2) / 2
    assert report.median_speedups(table, "eap")["circuitlasso-linear"] == pytest.approx(5 / 12)
    # a pair where the method did not run is skipped: (1/2, 1/3, 1/4) -> 1/3
    dropped = (table["case"] == "a") & (table["variant"] == "distractors")
    partial = table[~(dropped & (table["method"] == "circuitlasso-linear"))]
    assert report.median_speedups(partial, "eap")["circuitlasso-linear"] == pytest.approx(1 / 3)
    assert report.median_speedups(table[table["method"] != "eap"], "eap") == {}
    speedups = report.speedup_table(table)
    assert list(speedups.columns) == ["vs eap-ig", "vs eap"]
    assert speedups.loc["circuitlasso-linear", "vs eap"] == pytest.approx(5 / 12)


def test_parity_reports_the_gap_and_where_it_comes_from():
    check = report.parity(run_table())
    assert list(check.index) == ["exact", "distractors"]
    exact, distractors = check.loc["exact"], check.loc["distractors"]
    assert exact["gap"] == pytest.approx(0.5) and bool(exact["parity"])  # 0.5 - 0: at tolerance
    assert distractors["gap"] == pytest.approx(3.5) and not bool(distractors["parity"])
    assert distractors["circuitlasso-linear best_edge_shd"] == pytest.approx(2.5)
    assert distractors["eap-ig edge_auroc"] == pytest.approx(0.925)
    assert distractors["circuitlasso-linear n_edges"] == pytest.approx(7.0)
    assert distractors["n_true_edges"] == pytest.approx(2.5)
    assert not report.parity(run_table(), tolerance=0.4).loc["exact", "parity"]
    with pytest.raises(ValueError, match="'acdc' is not in the table"):
        report.parity(run_table(), method="acdc")


def test_summary_is_the_benchmark_json():
    result = report.summary(run_table())
    assert result["cases"] == ["a", "b"]
    assert result["mean_edge_shd"]["circuitlasso-linear"] == {"exact": 0.5, "distractors": 4.5}
    assert result["mean_edge_auroc"]["eap-ig"] == {"exact": 1.0, "distractors": 0.925}
    assert result["median_speedup_vs_eap_ig"] == {"circuitlasso-linear": pytest.approx(2.0)}
    assert json.loads(json.dumps(result)) == result


def test_benchmark_script_prints_the_tables_and_ends_with_the_json(
    monkeypatch, capsys, tmp_path, benchmark_script
):
    module = benchmark_script("interpbench")
    calls = []

    def fake_run(cases, variants, settings, suite):
        calls.append((cases, variants, settings, suite))
        return run_table()

    monkeypatch.setattr(module, "run_cases", fake_run)
    csv = tmp_path / "run.csv"
    module.main(["--quick", "--methods", "eap,eap-ig,circuitlasso-linear", "--csv", str(csv)])
    methods = ("eap", "eap-ig", "circuitlasso-linear")
    settings = report.RunSettings(methods, n_prompts=200, seed=0, trials=1)
    assert calls == [(["3", "13", "19", "29"], ["exact", "distractors"], settings, "interpbench")]
    lines = capsys.readouterr().out.strip().splitlines()
    assert "means over cases" in lines
    assert json.loads(lines[-1]) == report.summary(run_table())
    assert len(pd.read_csv(csv)) == len(RUN)


def test_edge_ranking_marks_kept_true_and_outside_edges():
    scores = {
        ("input", "a0.h1"): 1.0,
        ("a0.h0", "output"): 2.0,
        ("input", "a0.h0"): 3.0,
        ("a0.h1", "m0"): 0.5,
        ("input", "output"): 0.0,
    }
    truth = Circuit([("input", "a0.h0"), ("a0.h0", "output")])
    # above 0.75: the two true edges and input -> a0.h1, pruned since a0.h1 reaches no output
    ranked = report.edge_ranking(scores, 0.75, truth)
    assert list(zip(ranked["parent"], ranked["child"], strict=True)) == [
        ("input", "a0.h0"),
        ("a0.h0", "output"),
        ("input", "a0.h1"),
        ("a0.h1", "m0"),
        ("input", "output"),
    ]
    assert ranked["kept"].tolist() == [True, True, False, False, False]
    assert ranked["true"].tolist() == [True, True, False, False, False]
    assert ranked["child_in_circuit"].tolist() == [True, True, False, False, True]
    assert ranked["parent_in_circuit"].tolist() == [True, True, True, False, True]
    assert len(report.edge_ranking(scores, 0.4, truth, top=2)) == 2
    scores[("m0", "output")] = 0.6  # now a0.h1 -> m0 -> output is a path above 0.4
    assert report.edge_ranking(scores, 0.4, truth)["kept"].tolist() == [True] * 5 + [False]


def test_edge_ranking_leaves_scores_equal_up_to_rounding_in_their_order():
    # two edges of equal attribution, computed along different paths, differ in the last digits;
    # which comes first must not depend on them
    truth = Circuit([("input", "a0.h0"), ("a0.h0", "output")])
    for last in (1e-9, -1e-9):
        scores = {("input", "a0.h0"): 3.115, ("a0.h0", "output"): 3.115 + last,
                  ("input", "output"): 3.0}  # fmt: skip
        ranked = report.edge_ranking(scores, 1.0, truth)
        assert list(zip(ranked["parent"], ranked["child"], strict=True)) == list(scores)
        assert ranked["score"].tolist() == list(scores.values())


def test_summary_figure_has_shd_and_log_time_panels_per_variant():
    fig = plots.interpbench_summary(run_table())
    axes = fig.axes
    assert len(axes) == 4
    assert [ax.get_title() for ax in axes] == [
        "exact: edge SHD",
        "exact: wall time",
        "distractors: edge SHD",
        "distractors: wall time",
    ]
    assert [ax.get_yscale() for ax in axes] == ["linear", "log"] * 2
    assert len(axes[0].patches) == 6  # 2 cases x 3 methods
    with pytest.raises(ValueError, match="total_s"):
        plots.interpbench_summary(run_table().drop(columns="total_s"))


def test_suite_comparison_puts_each_suites_means_side_by_side():
    table = run_table()
    other = table[table["case"] == "a"]  # a second "suite": case a alone
    comparison = report.suite_comparison({"InterpBench": table, "held-out": other})
    assert list(comparison.columns) == ["InterpBench", "held-out"]
    assert comparison.loc[("distractors", "circuitlasso-linear"), "InterpBench"] == 4.5
    assert comparison.loc[("distractors", "circuitlasso-linear"), "held-out"] == 5
    auroc = report.suite_comparison({"s": table}, "edge_auroc")
    assert auroc.loc[("exact", "eap"), "s"] == pytest.approx(0.95)
    with pytest.raises(ValueError, match="no run"):
        report.suite_comparison({})
    fig = plots.suite_comparison(comparison)
    assert [ax.get_title() for ax in fig.axes] == ["exact", "distractors"]
    assert len(fig.axes[0].patches) >= 6  # 3 methods x 2 suites


def test_section_summary_adds_the_heldout_means():
    table = run_table()
    summary = report.section_summary(table, heldout=table[table["case"] == "b"])
    assert summary["means"]["distractors"]["circuitlasso-linear"]["edge_shd"] == 4.5
    assert summary["heldout_means"]["distractors"]["circuitlasso-linear"]["edge_shd"] == 4
    assert "heldout_means" not in report.section_summary(table)


def test_parity_report_is_the_parity_table_transposed_with_its_text():
    check, verdict = report.parity_report(run_table(), 0.5)
    assert list(check.columns) == ["exact", "distractors"]
    assert check.loc["gap", "exact"] == pytest.approx(0.5)
    assert check.loc["gap", "distractors"] == pytest.approx(3.5)
    # (0.8 + 1.0) / 2 and (0.7 + 0.6) / 2
    assert check.loc["circuitlasso-linear edge_auroc", "exact"] == pytest.approx(0.9)
    assert check.loc["circuitlasso-linear edge_auroc", "distractors"] == pytest.approx(0.65)
    assert check.loc["eap-ig edge_auroc", "distractors"] == pytest.approx(0.925)
    assert verdict.splitlines() == [
        "exact: circuitlasso-linear mean edge SHD 0.50 vs EAP-IG 0.00 (gap +0.50): parity "
        "reached at tolerance 0.5",
        "distractors: circuitlasso-linear mean edge SHD 4.50 vs EAP-IG 1.00 (gap +3.50): parity "
        "NOT reached at tolerance 0.5",
    ]


def test_parity_report_says_when_a_method_of_the_pair_did_not_run():
    table = run_table()
    check, verdict = report.parity_report(table[table["method"] != "eap-ig"], 0.5)
    assert check.empty
    assert verdict == "circuitlasso-linear or eap-ig did not run: no parity to check"


def test_run_note_counts_runs_and_cases_and_tells_the_settings():
    settings = report.RunSettings(n_prompts=200, seed=7, trials=1)
    note = report.run_note(run_table(), 41.6, settings, 2)
    assert note.splitlines() == [
        "12 runs on 2 cases in 42 s",
        "M=200 prompt pairs, 1 trial(s), 2 thread(s), seed 7",
    ]


def test_run_heldout_runs_the_heldout_suite_without_progress(monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(ValueError, match="unknown heldout case id '3'"):
        report.run_heldout(["3"])
    calls = []
    monkeypatch.setattr(report, "run_cases", lambda *args: calls.append(args) or run_table())
    settings = report.RunSettings(["eap"], 10, 1, 2)
    report.run_heldout(["h-sort"], ["exact"], settings)
    assert calls == [(["h-sort"], ["exact"], settings, False, "heldout")]
