"""Run the section notebooks with papermill on a parameter profile.

Templates live in ``notebooks/<section>.ipynb`` (first code cell tagged ``parameters``), profiles in
``notebooks/params/<profile>.yaml`` (a mapping ``section -> {name: value}``), and executed copies
go to ``book/sections/<section>.ipynb``. Templates are never executed in place.
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import yaml

PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"


class ReproduceError(ValueError):
    """A profile, section, parameter or notebook cell that cannot be run; the message says which."""


@dataclass(frozen=True)
class Project:
    """Paths of a companion checkout: ``root`` holds ``notebooks/`` and ``book/``."""

    root: Path

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def params(self) -> Path:
        return self.notebooks / "params"

    @property
    def sections_out(self) -> Path:
        return self.root / "book" / "sections"

    def template(self, section: str) -> Path:
        return self.notebooks / f"{section}.ipynb"

    def executed(self, section: str) -> Path:
        return self.sections_out / f"{section}.ipynb"


def find_project(start: Path | None = None) -> Project:
    """The checkout containing ``start`` (default: the working directory), else the package's."""
    candidates = [Path(start or Path.cwd()).resolve()]
    candidates += list(candidates[0].parents)
    candidates.append(Path(__file__).resolve().parents[2])
    for path in candidates:
        if (path / "notebooks" / "params").is_dir() and (path / "_toc.yml").is_file():
            return Project(path)
    raise ReproduceError(
        "no companion checkout found (a folder with notebooks/params/ and _toc.yml); "
        "run from the repository root or pass --root"
    )


def profiles(project: Project) -> list[str]:
    """Names of the parameter profiles, e.g. ``['paper', 'toy']``."""
    return sorted(p.stem for p in project.params.glob("*.yaml"))


def sections(project: Project) -> list[str]:
    """Names of the section templates, in book order (the order of ``_toc.yml``)."""
    found = {p.stem for p in project.notebooks.glob("*.ipynb")}
    toc = (project.root / "_toc.yml").read_text()
    ordered = [s for s in found if f"book/sections/{s}" in toc]
    ordered.sort(key=lambda s: toc.index(f"book/sections/{s}"))
    return ordered + sorted(found - set(ordered))


def template_parameters(path: Path) -> dict[str, Any]:
    """Names and default values assigned in the template's ``parameters`` cell."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and PARAMETERS_TAG in cell.metadata.get("tags", []):
            tree = ast.parse(cell.source)
            return {
                target.id: ast.literal_eval(node.value)
                for node in tree.body
                if isinstance(node, ast.Assign)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
    raise ReproduceError(f"{path.name}: no code cell tagged '{PARAMETERS_TAG}'")


def check_choice(kind: str, name: str, valid: Iterable[str]) -> None:
    """Raise a ReproduceError listing ``valid`` when ``name`` is not among them."""
    valid = list(valid)
    if name not in valid:
        raise ReproduceError(f"unknown {kind} '{name}'; valid: {', '.join(valid) or '(none)'}")


def resolve_parameters(
    project: Project, profile: str, section: str, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """Profile values for ``section`` updated by ``overrides``, all checked against the template."""
    check_choice("profile", profile, profiles(project))
    check_choice("section", section, sections(project))
    known = template_parameters(project.template(section))
    table = yaml.safe_load((project.params / f"{profile}.yaml").read_text()) or {}
    values = {"profile": profile, **(table.get(section) or {})}
    for source, mapping in (
        (f"notebooks/params/{profile}.yaml [{section}]", values),
        ("-p", overrides),
    ):
        for name in mapping:
            if name not in known:
                raise ReproduceError(
                    f"unknown parameter '{name}' for section '{section}' (from {source}); "
                    f"valid: {', '.join(known)}"
                )
    return {**values, **overrides}


def split_overrides(
    project: Project, chosen: Iterable[str], overrides: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Give each chosen section the overrides its template declares.

    A name that no chosen section declares is an error listing the valid names.
    """
    declared = {s: template_parameters(project.template(s)) for s in chosen}
    for name in overrides:
        if not any(name in known for known in declared.values()):
            valid = sorted({n for known in declared.values() for n in known})
            raise ReproduceError(f"unknown parameter '{name}'; valid: {', '.join(valid)}")
    return {s: {k: v for k, v in overrides.items() if k in known} for s, known in declared.items()}


def parse_assignment(text: str) -> tuple[str, Any]:
    """``'key=value'`` -> ``(key, value)``: a Python literal if it is one (``1e-3``, ``[1, 2]``),
    else read as YAML (``true``, ``gpt2``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ReproduceError(f"parameter '{text}' is not of the form key=value")
    try:
        return key.strip(), ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key.strip(), yaml.safe_load(raw)


def _atomic_write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".ipynb.tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        nbformat.write(nb, handle)
    os.replace(tmp, path)


def run_section(
    project: Project,
    section: str,
    parameters: Mapping[str, Any],
    *,
    progress: bool = True,
    kernel_name: str = "python3",
) -> Path:
    """Execute one template into ``book/sections/<section>.ipynb``; return that path.

    On failure the partly executed notebook is kept there and a ReproduceError names the cell.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    out = project.executed(section)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        papermill.execute_notebook(
            str(project.template(section)),
            str(out),
            parameters=dict(parameters),
            kernel_name=kernel_name,
            progress_bar=progress,
            cwd=str(project.notebooks),
            report_mode=False,
        )
    except PapermillExecutionError as err:
        message = str(err.evalue).splitlines()[0] if err.evalue else ""
        failed = [
            c
            for c in nbformat.read(out, as_version=4).cells
            if any(o.get("output_type") == "error" for o in c.get("outputs", []))
        ]
        code = failed[0].source.strip().splitlines()[0] if failed else ""
        raise ReproduceError(
            f"section '{section}' failed in cell {err.cell_index} [{code}]: "
            f"{err.ename}: {message} -- see {out}"
        ) from None
    return out


def update_baseline(project: Project, section: str) -> None:
    """Copy the outputs of an executed notebook back into its template (the nbval baseline).

    The executed copy must have been run with the template's own defaults (the ``toy`` profile),
    so the injected-parameters cell is dropped and the remaining cells match the template's.
    """
    executed = nbformat.read(project.executed(section), as_version=4)
    template = nbformat.read(project.template(section), as_version=4)
    cells = [c for c in executed.cells if INJECTED_TAG not in c.metadata.get("tags", [])]
    if [c.source for c in cells] != [c.source for c in template.cells]:
        raise ReproduceError(f"section '{section}': executed copy does not match its template")
    for target, source in zip(template.cells, cells, strict=True):
        if target.cell_type == "code":
            target.outputs = source.outputs
            target.execution_count = source.execution_count
    _atomic_write_notebook(template, project.template(section))


def build_info(project: Project) -> dict[str, dict[str, Any]]:
    """Per executed section: the profile and parameters papermill recorded in its metadata."""
    info = {}
    for path in sorted(project.sections_out.glob("*.ipynb")):
        meta = nbformat.read(path, as_version=4).metadata.get("papermill", {})
        params = meta.get("parameters", {})
        info[path.stem] = {
            "profile": params.get("profile", "unknown"),
            "parameters": params,
            "end_time": meta.get("end_time"),
        }
    return info


def write_build_info(project: Project) -> Path:
    """Write ``book/sections/build_info.md``, included by the intro page."""
    info = build_info(project)
    used = sorted({entry["profile"] for entry in info.values()})
    lines = [
        f"This book was built with the **{', '.join(used) or 'unknown'}** profile "
        "(read from the papermill metadata of the executed notebooks).",
        "",
        "| section | profile | parameters |",
        "|---|---|---|",
    ]
    for name, entry in info.items():
        shown = {k: v for k, v in entry["parameters"].items() if k != "profile"}
        lines.append(f"| {name} | {entry['profile']} | `{json.dumps(shown)}` |")
    path = project.sections_out / "build_info.md"
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".md.tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path
