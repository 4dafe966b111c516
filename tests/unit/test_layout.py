"""The package layout follows the data flow: no module imports from a later stage."""

import ast
import subprocess
import sys
from pathlib import Path

import nbformat
import networkx as nx
import pytest

import circuitlasso
from circuitlasso.presentation.reproduce import profile_cells

LIB = Path(circuitlasso.__file__).parent
# stage of each top-level module or package, in data-flow order; the public API comes last
STAGES = {
    "cache": 0,  # storage shared by every stage: atomic writes, downloads, chunk cache
    "timing": 0,  # the stopwatch every stage times its stages with
    "executor": 0,  # where independent tasks run: here, or on a Ray cluster
    "forward": 0,  # running a model: tokens, real-token masks, hooks, SAEs spliced in
    "memory": 0,  # memory budgets: batches sized by bytes, refused before work when too large
    "_lazy": 0,  # packages whose names load on first use
    "data": 1,
    "collect": 2,
    "solve": 3,
    "circuits": 4,
    "estimator": 5,  # the circuits stage as one scikit-learn estimator: later stages use it
    "study": 6,  # a feature-circuit study around the estimator, the chapters' convenience
    "evaluation": 7,
    "presentation": 8,
    "__init__": 9,
}


def _stage(module: str) -> int:
    """Stage of a dotted ``circuitlasso.x...`` module name; the package itself is its
    ``__init__``, the public API, the last stage."""
    parts = module.split(".")
    return STAGES[parts[1]] if len(parts) > 1 else STAGES["__init__"]


def imported_modules(source: str, package: str = "circuitlasso") -> list[str]:
    """Every ``circuitlasso`` name ``source`` imports (anywhere: a function's imports count),
    relative imports resolved against ``package``, the dotted package the source sits in."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x, from ..y import z
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # from package import x: x a module or a name, the module itself where it is one
            names += [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return [name for name in names if name.split(".")[0] == "circuitlasso"]


def imports_from_later_stages(source: str, stage: int, package: str = "circuitlasso") -> list[str]:
    found = []
    for name in imported_modules(source, package):
        parts = name.split(".")
        if len(parts) > 1 and parts[1] not in STAGES:  # from circuitlasso import a name
            name = "circuitlasso"
        if _stage(name) > stage:
            found.append(name)
    return found


def _modules() -> dict[str, Path]:
    """``{dotted module name: path}`` of every module of the library (a package by its
    ``__init__``)."""
    found = {}
    for path in LIB.rglob("*.py"):
        parts = path.relative_to(LIB).with_suffix("").parts
        found[".".join(("circuitlasso", *(p for p in parts if p != "__init__")))] = path
    return found


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def import_graph(modules: dict[str, Path], sources: dict[str, str]) -> nx.DiGraph:
    """Module -> module it imports (a name imported from a module counts as the module)."""
    graph = nx.DiGraph()
    for name, path in modules.items():
        for imported in imported_modules(sources[name], _package(name, path)):
            while imported not in modules and "." in imported:
                imported = imported.rsplit(".", 1)[0]
            if imported in modules and imported != name:
                graph.add_edge(name, imported)
    return graph


def test_every_module_belongs_to_a_stage():
    tops = {p.stem if p.is_file() else p.name for p in LIB.iterdir() if p.name != "__pycache__"}
    tops -= {"py"}  # py.typed
    assert {t.removesuffix(".typed") for t in tops} - {"py"} <= set(STAGES)


def test_no_module_imports_from_a_later_stage():
    violations = {}
    for name, path in sorted(_modules().items()):
        stage = STAGES[path.relative_to(LIB).parts[0].removesuffix(".py")]
        found = imports_from_later_stages(path.read_text(), stage, _package(name, path))
        if found:
            violations[str(path.relative_to(LIB))] = found
    assert violations == {}


def test_no_modules_import_each_other_in_a_circle():
    modules = _modules()
    graph = import_graph(modules, {name: path.read_text() for name, path in modules.items()})
    assert [c for c in nx.strongly_connected_components(graph) if len(c) > 1] == []


def test_the_circle_check_sees_a_circle_through_a_functions_import():
    modules = {f"circuitlasso.data.{m}": LIB / "data" / f"{m}.py" for m in ("models", "hf")}
    sources = {
        "circuitlasso.data.models": "def load():\n    from circuitlasso.data.hf import x\n",
        "circuitlasso.data.hf": "from .models import load\n",
    }
    assert list(nx.simple_cycles(import_graph(modules, sources))) != []
    sources["circuitlasso.data.hf"] = "import circuitlasso.cache\n"
    assert list(nx.simple_cycles(import_graph(modules, sources))) == []


def test_the_check_sees_each_import_form():
    for line in (
        "from circuitlasso.evaluation.ablate import rank_features",
        "from circuitlasso import presentation",
        "import circuitlasso.circuits.trace",
        "import circuitlasso",  # the package's __init__: the public API, the last stage
        "from circuitlasso import __version__",
    ):
        assert imports_from_later_stages(line, stage=1), line
    assert not imports_from_later_stages("from circuitlasso.cache import fetch", stage=1)
    # a relative import, from a module of circuitlasso.data, of a later stage
    assert imports_from_later_stages("from ..evaluation import ablate", 1, "circuitlasso.data")
    assert not imports_from_later_stages("from . import graph", 1, "circuitlasso.data")


def public_modules() -> set[str]:
    """Dotted names of every module and package of the library outside ``_private`` files."""
    found = set()
    for path in LIB.rglob("*.py"):
        parts = path.relative_to(LIB).with_suffix("").parts
        if any(p.startswith("_") and p != "__init__" for p in parts):
            continue
        found.add(".".join(("circuitlasso",) + tuple(p for p in parts if p != "__init__")))
    return found


def test_the_api_reference_covers_every_public_module():
    api = (LIB.parents[1] / "book" / "api.md").read_text()
    documented = {
        line.split("::")[1].split()[0] for line in api.splitlines() if "automodule::" in line
    }
    assert public_modules() - documented == set()
    assert documented - public_modules() == set()


NOTEBOOK_CODE_LINES = 45


def test_every_notebook_is_at_most_45_lines_of_code():
    """Notebooks stay thin readers of the library: parameters, calls, tables, figures (every
    non-blank, non-comment line of a code cell counts, the parameters' too), on every page a
    profile makes of them (the template less the cells tagged for other profiles)."""
    notebooks = sorted((LIB.parents[1] / "notebooks").glob("*.ipynb"))
    assert len(notebooks) >= 6
    profiles = [path.stem for path in (LIB.parents[1] / "notebooks" / "params").glob("*.yaml")]
    assert {"toy", "real", "decoder", "paper"} <= set(profiles)
    lengths = {}
    for path in notebooks:
        template = nbformat.read(path, as_version=4)
        for profile in profiles:
            cells = profile_cells(template, profile).cells
            lines = [line for cell in cells if cell.cell_type == "code"
                     for line in cell.source.splitlines()
                     if line.strip() and not line.strip().startswith("#")]  # fmt: skip
            lengths[path.stem, profile] = len(lines)
    assert {name: n for name, n in lengths.items() if n > NOTEBOOK_CODE_LINES} == {}


LAZY_CHECK = """
import sys
import circuitlasso, circuitlasso.data.interpbench as ib, circuitlasso.evaluation.cost as cost
import circuitlasso.data.interpbench.ioi, circuitlasso.evaluation.faithfulness
import circuitlasso.presentation.plots
print("tracr" in sys.modules, "jax" in sys.modules)
print(ib.CASE_IDS[0], "tracr" in sys.modules, cost.rows_varying.__module__)
print("CASE_IDS" in dir(ib), "load_model" in dir(circuitlasso), "__version__" in dir(circuitlasso))
try:
    ib.no_such_name
except AttributeError as err:
    print(err)
"""


@pytest.mark.slow  # a fresh interpreter
def test_packages_load_their_names_on_first_use_and_leave_tracr_to_the_compiler() -> None:
    """IOI prompts, faithfulness and the plots import without tracr and JAX; reading a name of
    ``data.interpbench`` that compiles loads them; ``dir`` lists the lazy names."""
    out = subprocess.run([sys.executable, "-c", LAZY_CHECK], capture_output=True, text=True,
                         check=True).stdout.splitlines()  # fmt: skip
    assert out == [
        "False False",
        "3 True circuitlasso.evaluation.cost.scaling",
        "True True True",
        "module 'circuitlasso.data.interpbench' has no attribute 'no_such_name'",
    ]
