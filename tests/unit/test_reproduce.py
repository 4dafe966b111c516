"""Parameter handling of `circuitlasso reproduce`, on a small project written in tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import numpy as np
import pytest
import yaml

from circuitlasso.presentation import reproduce as rp
from circuitlasso.presentation import summaries as sm
from circuitlasso.presentation.cli import build_parser, main


def _template(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    params = nbformat.v4.new_code_cell(source)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("result = seed * 2\nprint(result)")]
    nbformat.write(nb, path)


@pytest.fixture
def project(tmp_path: Path) -> rp.Project:
    (tmp_path / "notebooks" / "params").mkdir(parents=True)
    _template(tmp_path / "notebooks" / "alpha.ipynb", 'profile = "toy"\nseed = 0\nlam = 0.1')
    _template(tmp_path / "notebooks" / "beta.ipynb", 'profile = "toy"\nseed = 0\nwidth = 4')
    (tmp_path / "notebooks" / "params" / "toy.yaml").write_text("alpha:\n  lam: 0.1\n")
    (tmp_path / "notebooks" / "params" / "paper.yaml").write_text("alpha:\n  lam: 0.01\n")
    (tmp_path / "_toc.yml").write_text(
        "root: book/intro\nchapters:\n- file: book/sections/beta\n- file: book/sections/alpha\n"
    )
    return rp.Project(tmp_path)


def test_sections_follow_toc_order(project: rp.Project) -> None:
    assert rp.sections(project) == ["beta", "alpha"]
    assert rp.profiles(project) == ["paper", "toy"]


def test_a_section_with_a_page_of_its_own_on_a_profile_runs_there_beside_the_other(
    project: rp.Project,
) -> None:
    (project.params / "toy.yaml").write_text("alpha:\n  lam: 0.1\nbeta:\n  width: 2\n")
    toc = project.root / "_toc.yml"
    toc.write_text(toc.read_text() + "- file: book/sections/alpha_paper\n")
    assert rp.pages(project) == {"alpha_paper": ("alpha", "paper")}
    assert rp.page_section(project, "alpha_paper") == "alpha"
    assert rp.page_section(project, "beta") == "beta"
    assert rp.sections(project) == ["beta", "alpha"]  # a page is not a template
    assert rp.plan(project, ["toy", "paper"]) == {"beta": "toy", "alpha": "toy",
                                                  "alpha_paper": "paper"}  # fmt: skip
    assert rp.plan(project, ["paper"]) == {"alpha_paper": "paper"}
    assert rp.plan(project, ["toy", "paper"], ["alpha"]) == {"alpha": "toy", "alpha_paper": "paper"}
    parameters = rp.resolve_parameters(project, "paper", "alpha", {})
    out = rp.run_section(project, "alpha_paper", parameters, progress=False)
    assert out == project.executed("alpha_paper") and not project.executed("alpha").exists()
    ran = nbformat.read(out, as_version=4)
    assert ran.metadata["papermill"]["parameters"] == {"profile": "paper", "lam": 0.01}


def test_a_profile_runs_the_sections_it_lists(project: rp.Project) -> None:
    (project.params / "toy.yaml").write_text("alpha:\n  lam: 0.1\nbeta:\n  width: 2\n")
    assert rp.profile_sections(project, "toy") == ["beta", "alpha"]
    assert rp.profile_sections(project, "paper") == ["alpha"]


def test_each_section_runs_on_the_last_profile_listing_it(project: rp.Project) -> None:
    (project.params / "toy.yaml").write_text("alpha:\n  lam: 0.1\nbeta:\n  width: 2\n")
    assert rp.plan(project, ["toy", "paper"]) == {"beta": "toy", "alpha": "paper"}
    assert rp.plan(project, ["paper", "toy"]) == {"beta": "toy", "alpha": "toy"}
    assert rp.plan(project, ["toy", "paper"], ["alpha"]) == {"alpha": "paper"}
    with pytest.raises(rp.ReproduceError, match="no chosen profile lists section 'beta'"):
        rp.plan(project, ["paper"], ["beta"])


def test_cells_tagged_for_another_profile_are_left_out() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(text) for text in ("both", "toy", "real")]
    nb.cells[1].metadata["tags"] = ["only-toy"]
    nb.cells[2].metadata["tags"] = ["only-real", "hide-input"]
    assert [c.source for c in rp.profile_cells(nb, "toy").cells] == ["both", "toy"]
    assert [c.source for c in rp.profile_cells(nb, "real").cells] == ["both", "real"]
    assert [c.source for c in rp.profile_cells(nb, "paper").cells] == ["both"]
    assert len(nb.cells) == 3


def test_template_parameters_reads_defaults(project: rp.Project) -> None:
    assert rp.template_parameters(project.template("alpha")) == {
        "profile": "toy",
        "seed": 0,
        "lam": 0.1,
    }


def test_profile_values_and_overrides_are_merged(project: rp.Project) -> None:
    params = rp.resolve_parameters(project, "paper", "alpha", {"seed": 3})
    assert params == {"profile": "paper", "lam": 0.01, "seed": 3}


@pytest.mark.parametrize(
    ("profile", "section", "overrides", "message"),
    [
        ("huge", "alpha", {}, "unknown profile 'huge'; valid: paper, toy"),
        ("toy", "gamma", {}, "unknown section 'gamma'; valid: beta, alpha"),
        ("toy", "alpha", {"lamb": 1}, "unknown parameter 'lamb' for section 'alpha'"),
    ],
)
def test_bad_names_are_listed(
    project: rp.Project, profile: str, section: str, overrides: dict, message: str
) -> None:
    with pytest.raises(rp.ReproduceError, match=message):
        rp.resolve_parameters(project, profile, section, overrides)


def test_profile_file_with_unknown_parameter_is_rejected(project: rp.Project) -> None:
    (project.params / "toy.yaml").write_text("alpha:\n  lr: 3\n")
    with pytest.raises(rp.ReproduceError, match=r"'lr'.*params/toy.yaml \[alpha\]"):
        rp.resolve_parameters(project, "toy", "alpha", {})


def test_overrides_go_to_the_sections_declaring_them(project: rp.Project) -> None:
    split = rp.split_overrides(project, ["alpha", "beta"], {"lam": 1.0, "seed": 2})
    assert split == {"alpha": {"lam": 1.0, "seed": 2}, "beta": {"seed": 2}}
    with pytest.raises(rp.ReproduceError, match="unknown parameter 'depth'; valid: lam, "):
        rp.split_overrides(project, ["alpha", "beta"], {"depth": 1})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("seed=3", ("seed", 3)),
        ("lams=[0.1, 1e-3]", ("lams", [0.1, 1e-3])),
        ("m=gpt2", ("m", "gpt2")),
    ],
)
def test_parse_assignment(text: str, expected: tuple) -> None:
    assert rp.parse_assignment(text) == expected


def test_parse_assignment_rejects_missing_equals() -> None:
    with pytest.raises(rp.ReproduceError, match="key=value"):
        rp.parse_assignment("seed")


def test_cli_reports_one_line_errors(project: rp.Project, capsys: pytest.CaptureFixture) -> None:
    code = main(["reproduce", "--root", str(project.root), "--profile", "gpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == "circuitlasso: error: unknown profile 'gpu'; valid: paper, toy"
    code = main(["reproduce", "--root", str(project.root), "--profile", "toy", "-p", "zzz=1"])
    assert code == 2
    assert "unknown parameter 'zzz'; valid: lam, profile, seed\n" in capsys.readouterr().err


def test_help_describes_every_option(capsys: pytest.CaptureFixture) -> None:
    parser = build_parser()
    for argv in (["--help"], ["reproduce", "--help"], ["toy", "build", "--help"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
    text = capsys.readouterr().out
    for option in ("--profile", "--section", "--parameter", "--root", "--update-baseline"):
        assert option in text
    for action in parser._subparsers._group_actions[0].choices["reproduce"]._actions:
        assert action.help, f"option {action.option_strings} has no help text"


@pytest.mark.slow
def test_run_section_writes_executed_copy_and_build_info(project: rp.Project) -> None:
    params = rp.resolve_parameters(project, "paper", "alpha", {"seed": 21})
    out = rp.run_section(project, "alpha", params, progress=False)
    nb = nbformat.read(out, as_version=4)
    assert nb.cells[-1].outputs[0]["text"].strip() == "42"
    assert nbformat.read(project.template("alpha"), as_version=4).cells[-1].outputs == []
    info = rp.build_info(project)
    assert info["alpha"]["profile"] == "paper"
    assert "**paper**" in rp.write_build_info(project).read_text()


@pytest.mark.slow
def test_failing_cell_is_named(project: rp.Project) -> None:
    nb = nbformat.read(project.template("beta"), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("raise RuntimeError('boom')"))
    nbformat.write(nb, project.template("beta"))
    with pytest.raises(
        rp.ReproduceError,
        match=r"'beta' failed in cell 3 \[raise RuntimeError\('boom'\)\]: RuntimeError: boom",
    ):
        rp.run_section(project, "beta", {"profile": "toy"}, progress=False)


@pytest.mark.slow
def test_update_baseline_copies_outputs_into_the_template(project: rp.Project) -> None:
    rp.run_section(project, "alpha", {"profile": "toy"}, progress=False)
    rp.update_baseline(project, "alpha")
    template = nbformat.read(project.template("alpha"), as_version=4)
    assert [c.metadata.get("tags", []) for c in template.cells] == [["parameters"], []]
    assert template.cells[-1].outputs[0]["text"].strip() == "0"


def test_update_baseline_refuses_a_copy_of_another_template(project: rp.Project) -> None:
    project.sections_out.mkdir(parents=True)
    nbformat.write(nbformat.read(project.template("beta"), as_version=4), project.executed("alpha"))
    with pytest.raises(rp.ReproduceError, match="does not match its template"):
        rp.update_baseline(project, "alpha")


# ---------------------------------------------------------------- summaries and the reference

REFERENCE = {
    "accuracy": {"value": 0.93, "abs": 0.01},
    "seconds": {"unchecked": "wall time"},
    "gap": {"max": 1e-10},
    "lam": {"value": 1e-5},
    "by_layer": {"0": {"value": 100.0, "rel": 0.1}, "1": {"min": 0.5, "max": 1.0}},
}


def _summary(**changes) -> dict:
    summary = {"accuracy": 0.935, "seconds": 3.2, "gap": 1e-12, "lam": 1e-5,
               "by_layer": {"0": 95.0, "1": 0.7}}  # fmt: skip
    return {**summary, **changes}


def test_a_summary_within_every_tolerance_matches() -> None:
    assert sm.compare_summary(_summary(), REFERENCE) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"accuracy": 0.9199}, "accuracy: 0.9199 differs from 0.93 by more than 0.01"),
        ({"gap": 2e-10}, "gap: 2e-10 is above its bound 1e-10"),
        ({"lam": 1e-4}, "lam: 0.0001 != 1e-05"),
        (
            {"by_layer": {"0": 111.0, "1": 0.7}},
            "by_layer.0: 111.0 differs from 100.0 by more than 10",
        ),
        ({"by_layer": {"0": 95.0, "1": 0.4}}, "by_layer.1: 0.4 is below its bound 0.5"),
        ({"accuracy": "high"}, "accuracy: 'high' is not a number"),
        ({"extra": 1}, "extra: in the summary but not in the reference"),
    ],
)
def test_each_departure_is_named(changes: dict, expected: str) -> None:
    assert sm.compare_summary(_summary(**changes), REFERENCE) == [expected]


def test_a_missing_number_is_a_departure_and_unchecked_ones_are_not_compared() -> None:
    summary = _summary(seconds=1e9)
    del summary["gap"]
    assert sm.compare_summary(summary, REFERENCE) == [
        "gap: in the reference but not in the summary"
    ]


def test_the_summary_is_read_back_from_the_executed_notebook(project: rp.Project, capsys) -> None:
    sm.print_summary({"n": np.int64(3), "values": np.arange(2.0), "ok": np.bool_(True),
                      "recall": float("nan")})  # fmt: skip
    line = capsys.readouterr().out
    assert line == '{"n": 3, "values": [0.0, 1.0], "ok": true, "recall": null}\n'
    nb = nbformat.read(project.template("alpha"), as_version=4)
    nb.cells[-1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="table\n" + line)]
    project.sections_out.mkdir(parents=True)
    nbformat.write(nb, project.executed("alpha"))
    read = sm.read_summary(project.executed("alpha"))
    assert read == {"n": 3, "values": [0.0, 1.0], "ok": True, "recall": None}
    # the kernel may send the line in two messages, its newline last
    nb.cells[-1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=line[:-1]),
                            nbformat.v4.new_output("stream", name="stdout", text="\n")]  # fmt: skip
    nbformat.write(nb, project.executed("alpha"))
    assert sm.read_summary(project.executed("alpha")) == read
    project.reference("toy").parent.mkdir()
    project.reference("toy").write_text(
        "alpha:\n  n: {value: 3}\n  values: {unchecked: x}\n  recall: {value: null}\n"
    )
    with pytest.raises(rp.ReproduceError, match="no entry for section.s. beta"):
        sm.check_summaries(project, "toy")
    found = sm.check_summaries(project, "toy", ["alpha"])
    assert found == {"alpha": ["ok: in the summary but not in the reference"]}
    with pytest.raises(rp.ReproduceError, match="no reference for profile 'paper'"):
        sm.check_summaries(project, "paper", ["alpha"])


def test_a_notebook_checks_its_summary_within_the_references_tolerances(
    project: rp.Project,
) -> None:
    # the line a section prints in a cell nbval compares: the same text on any CPU as long as
    # every number stays within its tolerance
    project.reference("toy").parent.mkdir()
    project.reference("toy").write_text(yaml.safe_dump({"alpha": REFERENCE}))
    assert sm.summary_check("alpha", _summary(), "toy", project) == (
        "alpha: all 6 checks of toy.yaml hold"
    )
    assert sm.summary_check("alpha", _summary(accuracy=np.float64(0.94)), "toy", project) == (
        "alpha: all 6 checks of toy.yaml hold"
    )
    assert sm.summary_check("alpha", _summary(accuracy=0.9199, gap=2e-10), "toy", project) == (
        "alpha: 2 departure(s) from toy.yaml: accuracy: 0.9199 differs from 0.93 by more than "
        "0.01; gap: 2e-10 is above its bound 1e-10"
    )
    assert sm.summary_check("beta", _summary(), "toy", project) == (
        "beta: no reference for the 'toy' profile (toy.yaml)"
    )
    assert sm.summary_check("alpha", _summary(), "paper", project) == (
        "alpha: no reference for the 'paper' profile (paper.yaml)"
    )


def test_a_notebook_without_a_summary_is_named(project: rp.Project) -> None:
    project.sections_out.mkdir(parents=True)
    nbformat.write(
        nbformat.read(project.template("alpha"), as_version=4), project.executed("alpha")
    )
    with pytest.raises(rp.ReproduceError, match="alpha.ipynb: its last printed line is not a JSON"):
        sm.read_summary(project.executed("alpha"))


@pytest.mark.slow
def test_the_build_ends_with_a_table_of_its_stages(
    project: rp.Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Each section's seconds and the files it wrote to the cache."""
    monkeypatch.setenv("CIRCUITLASSO_CACHE", str(tmp_path / "cache"))
    project.params.joinpath("toy.yaml").write_text("alpha:\n  lam: 0.1\nbeta:\n  width: 4\n")
    _append(project, "alpha", _cache_writes(1))
    assert (
        main(["reproduce", "--root", str(project.root), "--profile", "toy", "--no-progress"]) == 0
    )
    table = capsys.readouterr().out.split("wrote ")[-1].splitlines()[1:]
    assert table[0].split() == ["stage", "profile", "seconds", "cache", "writes"]
    rows = {line.split()[0]: line.split()[1:] for line in table[2:]}
    assert rows["beta"][0] == "toy" and rows["beta"][2:] == ["nothing", "new"]
    assert rows["alpha"][0] == "toy" and rows["alpha"][2:] == ["1", "new", "files"]
    seconds = float(rows["alpha"][1]) + float(rows["beta"][1])
    assert float(rows["total"][0]) == pytest.approx(seconds, abs=0.11)


def _append(project: rp.Project, section: str, source: str) -> None:
    nb = nbformat.read(project.template(section), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(source))
    nbformat.write(nb, project.template(section))


def _cache_writes(n: int) -> str:
    """A cell writing ``n`` files into the cache, as the library writes them."""
    return (
        "from circuitlasso.cache import atomic_path, cache_root\n"
        f"for i in range({n}):\n"
        "    with atomic_path(cache_root() / f'{profile}-{i}') as tmp:\n"
        "        tmp.write_text('x')"
    )


def _meet(mine: Path, other: Path) -> str:
    """A cell that writes the pid of the process running its kernel to ``mine`` and waits for
    ``other``: it ends only if both sections run at once. In the driver's own process (sections
    one after the other) it fails at once, as ``other`` could never come."""
    return (
        "import os, pathlib, time\n"
        f"assert os.getppid() != {os.getpid()}, 'a section run by the driver, not by a job'\n"
        f"pathlib.Path({str(mine)!r}).write_text(str(os.getppid()))\n"
        f"while not pathlib.Path({str(other)!r}).exists():\n"
        "    time.sleep(0.05)\n"
        "print('threads', os.environ.get('OMP_NUM_THREADS'))"
    )


@pytest.mark.slow
def test_jobs_run_sections_side_by_side_and_count_each_ones_cache_writes(
    project: rp.Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("CIRCUITLASSO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(rp.os, "cpu_count", lambda: 4)
    (project.params / "real.yaml").write_text("beta:\n  width: 8\n")
    _append(
        project, "alpha", _meet(tmp_path / "alpha", tmp_path / "beta") + "\n" + _cache_writes(2)
    )
    _append(project, "beta", _meet(tmp_path / "beta", tmp_path / "alpha") + "\n" + _cache_writes(3))
    args = ["reproduce", "--root", str(project.root), "--profile", "toy", "real", "--jobs", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    table = out.split("wrote ")[-1].splitlines()[1:]
    rows = {line.split()[0]: line.split()[1:] for line in table[2:]}
    assert rows["beta"][0] == "real" and rows["beta"][2:] == ["3", "new", "files"]
    assert rows["alpha"][0] == "toy" and rows["alpha"][2:] == ["2", "new", "files"]
    assert table[-1].startswith("wall clock (stages side by side)")
    for section in ("alpha", "beta"):
        outputs = nbformat.read(project.executed(section), as_version=4).cells[-1].outputs
        assert outputs[0]["text"].strip() == "threads 2"  # 4 cores, 2 jobs
    jobs = {(tmp_path / section).read_text() for section in ("alpha", "beta")}
    assert len(jobs) == 2  # each section's kernel started by a job process of its own


@pytest.mark.slow
def test_a_failing_section_among_jobs_is_named(project: rp.Project) -> None:
    _append(project, "beta", "raise RuntimeError('boom')")
    plans = {s: rp.resolve_parameters(project, "toy", s, {}) for s in ("alpha", "beta")}
    with pytest.raises(rp.ReproduceError, match=r"'beta' failed in cell 3 .*RuntimeError: boom"):
        rp.run_stages(project, plans, jobs=2, report=lambda line: None)
    assert project.executed("alpha").is_file()  # the other section still ran to its end


def test_make_test_checks_the_committed_outputs_of_every_notebook() -> None:
    # the book check runs the sections it renders on toy under tests/perturbed-fp and compares
    # their outputs with the committed ones; the perturbed nbval job must check every other one
    # that has committed outputs (a template committed without any, as the decoder-only IOI
    # one, leaves nbval nothing to compare: the book check runs it and checks its summary)
    root = Path(__file__).resolve().parents[2]
    lines = (root / "Makefile").read_text().splitlines()
    recipe = lines[lines.index("nbval-perturbed: install") + 1].split()
    assert recipe[0] == "tests/perturbed-fp" and recipe[-1] == "$(NBVAL_NOTEBOOKS)"
    listed = next(line for line in lines if line.startswith("NBVAL_NOTEBOOKS :="))
    checked_by_nbval = {Path(path).stem for path in listed.split(":=")[1].split()}
    checks = next(line for line in lines if line.startswith("checks:")).split()[1:]
    assert {"book-check", "nbval-perturbed"} <= set(checks)
    project = rp.Project(root)
    planned = rp.plan(project, rp.BOOK_PROFILES)
    on_toy = {rp.page_section(project, p) for p, profile in planned.items() if profile == "toy"}
    with_outputs = {
        section
        for section in rp.sections(project)
        if any(cell.get("outputs") for cell in nbformat.read(project.template(section), 4).cells)
    }
    assert checked_by_nbval == with_outputs - on_toy
    assert "ioi" in set(rp.sections(project)) - with_outputs - on_toy  # the rule is not idle
    assert {path.stem for path in (root / "notebooks").glob("*.ipynb")} == set(rp.sections(project))


def test_sections_start_longest_first_by_their_last_run_and_new_real_ones_before_all(
    project: rp.Project,
) -> None:
    def ran(section: str, profile: str, seconds: float) -> None:
        nb = nbformat.read(project.template(section), as_version=4)
        nb.metadata["papermill"] = {"parameters": {"profile": profile}, "duration": seconds}
        project.executed(section).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, project.executed(section))

    for name in ("gamma", "delta"):
        _template(project.notebooks / f"{name}.ipynb", 'profile = "toy"\nseed = 0')
    plans = {s: {"profile": "toy"} for s in ("alpha", "beta", "gamma", "delta")}
    plans["delta"] = {"profile": "real"}
    ran("alpha", "toy", 10.0)
    ran("beta", "toy", 30.0)
    ran("gamma", "real", 99.0)  # another profile's run: unknown on toy
    assert rp.start_order(project, plans) == ["delta", "gamma", "beta", "alpha"]
    assert rp.last_seconds(project, "beta", "toy") == 30.0
    assert rp.last_seconds(project, "delta", "real") is None
    # never run on these profiles: the profile with more pages first, toy last
    plans = {"alpha": {"profile": "real"}, "beta": {"profile": "decoder"},
             "gamma": {"profile": "decoder"}, "delta": {"profile": "toy"}}  # fmt: skip
    assert rp.start_order(project, plans) == ["beta", "gamma", "alpha", "delta"]


def test_a_quick_build_runs_the_sections_it_lists_smaller_and_checks_them_on_their_own(
    project: rp.Project,
) -> None:
    quick = project.quick_params("paper")
    quick.parent.mkdir()
    quick.write_text("alpha:\n  seed: 5\n")
    assert rp.quick_sections(project, "paper") == {"alpha": {"seed": 5}}
    assert rp.quick_sections(project, "toy") == {}
    assert rp.resolve_parameters(project, "paper", "alpha", {}, quick=True) == {
        "profile": "paper", "lam": 0.01, "seed": 5}  # fmt: skip
    assert rp.resolve_parameters(project, "paper", "alpha", {"seed": 1}, quick=True)["seed"] == 1
    assert "seed" not in rp.resolve_parameters(project, "paper", "alpha", {})
    quick.write_text("alpha:\n  depth: 5\n")
    with pytest.raises(rp.ReproduceError, match=r"'depth'.*params/quick/paper.yaml \[alpha\]"):
        rp.resolve_parameters(project, "paper", "alpha", {}, quick=True)
    quick.write_text("alpha:\n  seed: 5\n")
    # the summaries: the quick run against the quick reference, the other section as it is
    project.sections_out.mkdir(parents=True)
    for section, seed in (("alpha", 5), ("beta", 0)):
        nb = nbformat.read(project.template(section), as_version=4)
        line = f'{{"seed": {seed}}}\n'
        nb.cells[-1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=line)]
        nbformat.write(nb, project.executed(section))
    project.reference("paper").parent.mkdir()
    project.reference("paper").write_text("alpha:\n  seed: {value: 0}\nbeta:\n  seed: {value: 0}\n")
    assert sm.check_summaries(project, "paper", ["alpha", "beta"]) == {
        "alpha": ["seed: 5 != 0"], "beta": []}  # fmt: skip
    with pytest.raises(rp.ReproduceError, match="no reference for profile 'paper'.*quick"):
        sm.check_summaries(project, "paper", ["alpha", "beta"], quick=True)
    project.reference("paper", quick=True).parent.mkdir()
    project.reference("paper", quick=True).write_text("beta:\n  seed: {value: 0}\n")
    with pytest.raises(rp.ReproduceError, match=r"quick/paper.yaml has no entry for .*s. alpha"):
        sm.check_summaries(project, "paper", ["alpha", "beta"], quick=True)
    project.reference("paper", quick=True).write_text("alpha:\n  seed: {value: 5}\n")
    assert sm.check_summaries(project, "paper", ["alpha", "beta"], quick=True) == {
        "alpha": [], "beta": []}  # fmt: skip
