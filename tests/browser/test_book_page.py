"""A book built with the project's ``_config.yml``, read in Chromium with the network cut: the
method chapter's formulas are typeset (no raw ``\\(`` left), a wide table scrolls, a long code
cell is collapsed; and the project's whole book as `make book` builds it (the book test's), every
page of it opened, asks nothing of the network and raises no script error."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from playwright.sync_api import Page

from circuitlasso.presentation import reproduce as rp
from circuitlasso.presentation.reproduce import collapse_long_cells

ROOT = Path(__file__).resolve().parents[2]
# sphinx-thebe 0.3.1 declares this constant in two scripts of every page: harmless, not ours
THEME_ERRORS = {"Identifier 'THEBE_JS_URL' has already been declared"}
# pydata-sphinx-theme logs it where the page has no stored colour mode yet: a fresh browser's
THEME_CONSOLE_ERRORS = {"Got invalid theme mode: . Resetting to auto."}


@pytest.fixture(scope="module")
def book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built HTML of a two-chapter book: the method chapter and an executed-notebook-like
    page with a long code cell and a wide table."""
    root = tmp_path_factory.mktemp("book")
    shutil.copy(ROOT / "_config.yml", root)
    (root / "book").mkdir()
    shutil.copy(ROOT / "book" / "method.md", root / "book")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/method\nchapters:\n"
                                   "  - file: book/wide\n")  # fmt: skip
    wide = pd.DataFrame([[f"value {r}.{c}" for c in range(30)] for r in range(3)])
    nb = nbformat.v4.new_notebook()
    long_code = "\n".join(f"step_{i} = {i}" for i in range(8))
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Wide\n\nThe readout $A_{L,y}$ of a table."),
        nbformat.v4.new_code_cell(long_code),
        nbformat.v4.new_code_cell(
            "table",
            outputs=[
                nbformat.v4.new_output(
                    "execute_result",
                    {"text/html": wide.to_html(), "text/plain": "table"},
                    execution_count=1,
                )
            ],
        ),  # fmt: skip
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    collapse_long_cells(nb)
    nbformat.write(nb, root / "book" / "wide.ipynb")
    return _jupyter_book(root)


def _jupyter_book(root: Path) -> Path:
    """Build the book at ``root`` (execution off, as ``make book`` renders); its HTML folder."""
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    run = subprocess.run([str(jupyter_book), "build", str(root)], capture_output=True, text=True,
                         timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return root / "_build" / "html"


def typeset(page: Page) -> None:
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
    page.evaluate("MathJax.startup.promise")


@pytest.mark.slow
def test_the_method_chapter_typesets_its_math_offline(page: Page, book: Path, screenshot) -> None:
    assert (book / "_static" / "mathjax" / "tex-chtml.js").is_file()
    html = (book / "book" / "method.html").read_text()
    assert "cdn.jsdelivr" not in html and "_static/mathjax/tex-chtml.js" in html
    page.goto((book / "book" / "method.html").as_uri())
    typeset(page)
    text = page.inner_text("main")
    assert "\\(" not in text and "\\[" not in text and "$$" not in text
    assert page.locator("main mjx-container").count() > 10
    screenshot("book-method-math")
    assert set(page.errors) <= THEME_ERRORS and page.remote == []


@pytest.mark.slow
def test_a_wide_table_scrolls_and_a_long_cell_is_collapsed(page: Page, book: Path,
                                                           screenshot) -> None:  # fmt: skip
    page.goto((book / "book" / "wide.html").as_uri())
    typeset(page)
    assert "\\(" not in page.inner_text("main")
    holder = page.locator(".cell_output .output.text_html").first
    overflow = holder.evaluate("e => [getComputedStyle(e).overflowX, e.scrollWidth, e.clientWidth]")
    assert overflow[0] == "auto" and overflow[1] > overflow[2], overflow
    assert holder.evaluate("e => e.getBoundingClientRect().right") <= page.evaluate(
        "document.querySelector('main').getBoundingClientRect().right"
    )
    assert page.locator(".cell.tag_hide-input").count() == 1
    code = page.locator(".cell.tag_hide-input .cell_input")
    assert not code.is_visible()
    page.locator(".cell.tag_hide-input summary").first.click()
    assert code.is_visible() and "step_7 = 7" in code.inner_text()
    screenshot("book-wide-table-and-collapsed-cell")
    assert set(page.errors) <= THEME_ERRORS and page.remote == []


@pytest.mark.slow
@pytest.mark.book
def test_every_page_of_the_book_stays_offline(page: Page, built_book: Path) -> None:
    """Every HTML page of the book as `make book` builds it (the book test's, ``built_book``),
    its theme's Jinja macro files under ``_static/`` aside (assets, not pages), the search,
    index and module index pages among them, opened in turn: no request leaves the machine (a
    notebook's ipywidgets output, for one, would load require.js and the widgets' HTML manager
    from a CDN) and no script fails."""
    html = built_book / "_build" / "html"
    pages = sorted(p for p in html.rglob("*.html") if "_static" not in p.relative_to(html).parts)
    toc = rp.toc_files(built_book)
    assert {html / f"{entry}.html" for entry in toc} <= set(pages)
    outside: dict[str, list[str]] = {}
    failures: dict[str, list[str]] = {}
    opened = 0
    for path in pages:
        name = str(path.relative_to(html))
        for seen in (page.remote, page.errors, page.console_errors):  # type: ignore[attr-defined]
            seen.clear()
        page.goto(path.as_uri())
        page.wait_for_load_state("networkidle")  # deferred and late scripts have run
        assert page.url.startswith("file:") and page.locator("main").count() == 1, name
        opened += 1
        if page.remote:  # type: ignore[attr-defined]
            outside[name] = list(page.remote)  # type: ignore[attr-defined]
        errors = [*page.errors, *page.console_errors]  # type: ignore[attr-defined]
        if set(errors) - THEME_ERRORS - THEME_CONSOLE_ERRORS:
            failures[name] = errors
    n_outside = sum(map(len, outside.values()))
    print(
        f"opened {opened} of {len(pages)} HTML pages ({len(toc)} _toc.yml entries): "
        f"{n_outside} requests leave the machine, {len(failures)} pages with script errors"
    )
    assert opened == len(pages) > len(toc)
    assert outside == {}, f"{n_outside} requests leave the machine: {outside}"
    assert failures == {}, failures
