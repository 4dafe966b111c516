"""The book's Sphinx extension (``_config.yml``: ``sphinx.extra_extensions``): a book that reads
offline.

- Math: MathJax 3 from the pinned PyPI package ``django-static-mathjax`` is copied into the built
  book (``_static/mathjax``) and loaded from there, never from a CDN.
- Graphs: the folders of circuit-tracer graphs that sections write under ``book/sections/graphs``
  (:data:`GRAPHS`) are copied beside the built pages, so that a page's links to them resolve.
- Style (``circuitlasso-book.css``): wide tables and outputs scroll sideways instead of being cut
  off; figures are never wider than the page.

Long code cells are collapsed by :func:`circuitlasso.presentation.reproduce.run_section`, which
tags them in the executed notebooks.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path
from typing import Any

MATHJAX_PATH = "mathjax/tex-chtml.js"
"""Where the pages load MathJax from, relative to the built book's ``_static``."""
MATHJAX_PARTS = ("tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "ui",
                 "a11y", "sre")  # fmt: skip
"""What ``tex-chtml.js`` loads, at once or on demand (TeX extensions, fonts, menu, speech)."""
CSS_FILE = "circuitlasso-book.css"
GRAPHS = Path("book") / "sections" / "graphs"
"""Where sections write their graph folders, relative to the book's root (and to the built book)."""


def mathjax_source() -> Path:
    """The MathJax 3 ``es5`` folder that the PyPI package ``django-static-mathjax`` installs."""
    missing = "MathJax is not installed: pip install django-static-mathjax (the dev extra pins it)"
    try:
        root = Path(str(resources.files("mathjax"))) / "static" / "mathjax" / "es5"
    except ModuleNotFoundError:
        raise FileNotFoundError(missing) from None
    if not (root / "tex-chtml.js").is_file():
        raise FileNotFoundError(missing)
    return root


def copy_mathjax(static: str | Path) -> Path:
    """Copy the parts of MathJax the book loads into ``static/mathjax``; return that folder."""
    source, target = mathjax_source(), Path(static) / "mathjax"
    for part in MATHJAX_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)
        else:
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / part, target / part)
    return target


def _configure(app: Any, config: Any) -> None:
    mathjax_source()  # fail at the start of a build, not at its end
    config.mathjax_path = MATHJAX_PATH
    static = resources.files("circuitlasso.presentation") / "assets" / "static"
    config.html_static_path = [*config.html_static_path, str(static)]


def _copy(app: Any, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        copy_mathjax(Path(app.outdir) / "_static")
        graphs = Path(app.srcdir) / GRAPHS
        if graphs.is_dir():
            shutil.copytree(graphs, Path(app.outdir) / GRAPHS, dirs_exist_ok=True)


def setup(app: Any) -> dict[str, Any]:
    """Register the extension with Sphinx."""
    app.setup_extension("sphinx.ext.mathjax")
    app.connect("config-inited", _configure)
    app.connect("build-finished", _copy)
    app.add_css_file(CSS_FILE)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
