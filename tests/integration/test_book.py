"""The book as `make book` builds it, its real models' sections at the quick build's sizes
(the session fixture ``built_book``, tests/conftest.py): every section ran, rendered and matches
its reference."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbval_outputs import output_differences

from circuitlasso.presentation import reproduce as rp
from circuitlasso.presentation import summaries as sm

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_section_ran_without_error_cells(built_book: Path) -> None:
    project = rp.Project(built_book)
    planned = rp.plan(project, rp.BOOK_PROFILES)
    assert set(planned.values()) == {"toy", "real", "decoder"}
    assert set(map(functools.partial(rp.page_section, project), planned)) == set(
        rp.sections(project)
    )
    for section in planned:
        nb = nbformat.read(project.executed(section), as_version=4)
        errors = [
            o
            for c in nb.cells
            if c.cell_type == "code"
            for o in c.outputs
            if o.output_type == "error"
        ]
        assert not errors, f"{section}: error outputs {errors}"
        assert nb.metadata["papermill"]["parameters"]["profile"] == planned[section]


@pytest.mark.slow
def test_every_chapter_is_rendered(built_book: Path) -> None:
    html = built_book / "_build" / "html"
    assert (html / "index.html").is_file()
    for entry in rp.toc_files(built_book):
        page = html / f"{entry}.html"
        assert page.is_file(), f"chapter {entry} was not rendered"
        assert "<h1" in page.read_text()


@pytest.mark.slow
def test_section_chapters_show_their_figures(built_book: Path) -> None:
    html = built_book / "_build" / "html"
    project = rp.Project(built_book)
    for section in rp.plan(project, rp.BOOK_PROFILES):
        page = (html / "book" / "sections" / f"{section}.html").read_text()
        images = re.findall(r"<img [^>]*src=\"([^\"]+)\"", page)
        assert images, f"section {section} renders no figure"
        for src in images:
            assert (html / "book" / "sections" / src).resolve().is_file(), src


@pytest.mark.slow
def test_intro_names_the_profiles_from_metadata(built_book: Path) -> None:
    intro = (built_book / "_build" / "html" / "book" / "intro.html").read_text()
    assert "built with the <strong>decoder, real, toy</strong> profiles" in intro


@pytest.mark.slow
def test_api_reference_documents_the_library(built_book: Path) -> None:
    api = (built_book / "_build" / "html" / "book" / "api.html").read_text()
    assert "circuitlasso.presentation.reproduce.run_section" in api


@pytest.mark.slow
def test_every_section_summary_matches_its_profile_reference(built_book: Path) -> None:
    # notebooks/reference/<profile>.yaml, or notebooks/reference/quick/ for the sections the
    # quick build runs smaller: each number's value and the tolerance another machine's rounding
    # is allowed (checked there by running the book under tests/perturbed-fp)
    project = rp.Project(built_book)
    planned = rp.plan(project, rp.BOOK_PROFILES)
    assert {p for p in planned.values() if rp.quick_sections(project, p)} == {"real", "decoder"}
    for profile in set(planned.values()):
        ran = [s for s, p in planned.items() if p == profile]
        problems = sm.check_summaries(project, profile, ran, quick=True)
        assert problems == {section: [] for section in ran}


@pytest.mark.slow
def test_faithfulness_curves_csv_holds_the_swept_values(built_book: Path) -> None:
    project = rp.Project(built_book)
    curves = pd.read_csv(project.executed("faithfulness").with_suffix(".csv"))
    summary = sm.read_summary(project.executed("faithfulness"))
    assert set(curves["ablation"]) == {"node", "edge"}
    for ablation in ("node", "edge"):
        table = curves[curves["ablation"] == ablation]
        found = {m: dict(zip(t["n"].astype(str), t["faithfulness"], strict=True))
                 for m, t in table.groupby("method")}  # fmt: skip
        expected = summary[f"{ablation}_faithfulness"]
        assert found.keys() == expected.keys()
        for method, points in expected.items():
            # the summary rounds to 4 decimals
            assert points == pytest.approx({n: found[method][n] for n in points}, abs=5.1e-5)


def _notebook_defaults(notebook: Path) -> dict[str, object]:
    """The values the notebook's first code cell (its parameters) assigns."""
    cell = next(c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code")
    namespace: dict[str, object] = {}
    exec(cell.source, namespace)  # plain assignments of literals
    return {k: v for k, v in namespace.items() if not k.startswith("__")}


@pytest.mark.slow
def test_toy_sections_show_their_committed_outputs(built_book: Path) -> None:
    # nbval's check on the run the book made under another machine's rounding (make's perturbed
    # nbval job checks the other notebooks): with the toy profile's parameters, which must be
    # the notebook's own
    project = rp.Project(built_book)
    planned = rp.plan(project, rp.BOOK_PROFILES)
    toy = sorted(s for s, p in planned.items() if p == "toy")
    assert toy
    for section in toy:
        committed = ROOT / "notebooks" / f"{section}.ipynb"
        ran = nbformat.read(project.executed(section), as_version=4)
        parameters = dict(ran.metadata["papermill"]["parameters"])
        defaults = _notebook_defaults(committed)
        assert {k: defaults[k] for k in parameters} == parameters, section
        sanitize = ROOT / "tests" / "nbval_sanitize.cfg"
        assert output_differences(project.executed(section), committed, sanitize) == [], section
