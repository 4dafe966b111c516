"""Run the section notebooks with papermill on a parameter profile.

Templates live in ``notebooks/<section>.ipynb`` (first code cell tagged ``parameters``), profiles in
``notebooks/params/<profile>.yaml`` (a mapping ``section -> {name: value}``), and executed copies
go to ``book/sections/<page>.ipynb``. A section's page is the section's name, unless ``_toc.yml``
gives it a page of its own on a profile, ``book/sections/<section>_<profile>``: the same template
on another model, one page each (:func:`pages`). Templates are never executed in place.

Each template ends with a JSON summary that :mod:`circuitlasso.presentation.summaries` checks.
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import yaml

from circuitlasso.cache import WRITE_LOG_ENV, atomic_path, cache_root
from circuitlasso.timing import Stopwatch

PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"
ONLY_TAG = "only-"  # a cell tagged only-<profile> is kept on that profile alone
BOOK_PROFILES = ("toy", "real", "decoder")  # what `make book` runs (see plan)
QUICK = "quick"  # notebooks/params/quick/, notebooks/reference/quick/: the quick build's sizes
HIDE_INPUT_TAG = "hide-input"  # the book shows the cell's output, its code behind a toggle
LONG_CELL = 5  # lines of code above which an executed cell's code is collapsed in the book


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

    def quick_params(self, profile: str) -> Path:
        """The smaller sizes of a quick build of ``profile``'s sections (:func:`quick_sections`)."""
        return self.params / QUICK / f"{profile}.yaml"

    @property
    def sections_out(self) -> Path:
        return self.root / "book" / "sections"

    def template(self, section: str) -> Path:
        return self.notebooks / f"{section}.ipynb"

    def executed(self, page: str) -> Path:
        return self.sections_out / f"{page}.ipynb"

    def reference(self, profile: str, quick: bool = False) -> Path:
        folder = self.notebooks / "reference"
        return (folder / QUICK if quick else folder) / f"{profile}.yaml"


def find_project(start: Path | None = None) -> Project:
    """The checkout containing ``start`` (default: the working directory), else the package's."""
    candidates = [Path(start or Path.cwd()).resolve()]
    candidates += list(candidates[0].parents)
    candidates.append(Path(__file__).resolve().parents[3])  # lib/circuitlasso/presentation/
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
    listed = [s for s in _toc_pages(project) if s in found]
    return listed + sorted(found - set(listed))


def profile_sections(project: Project, profile: str) -> list[str]:
    """The sections ``notebooks/params/<profile>.yaml`` has an entry for, in book order: what
    ``circuitlasso reproduce --profile <profile>`` runs by default."""
    check_choice("profile", profile, profiles(project))
    table = yaml.safe_load((project.params / f"{profile}.yaml").read_text()) or {}
    return [s for s in sections(project) if s in table]


def quick_sections(project: Project, profile: str) -> dict[str, dict[str, Any]]:
    """``{section: parameters}`` of ``notebooks/params/quick/<profile>.yaml``: a quick build
    (``circuitlasso reproduce --quick``, the book test) runs these sections of ``profile`` with
    these values over the profile's, and checks them against
    ``notebooks/reference/quick/<profile>.yaml``; the profile's other sections run as they are."""
    path = project.quick_params(profile)
    table = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    return {section: dict(values or {}) for section, values in table.items()}


def summary_reference(project: Project, profile: str, section: str, quick: bool = False) -> Path:
    """The reference ``section``'s summary on ``profile`` is checked against: the quick build's
    (``notebooks/reference/quick/``) for a section it runs smaller, else the profile's."""
    return project.reference(profile, quick=quick and section in quick_sections(project, profile))


def pages(project: Project) -> dict[str, tuple[str, str]]:
    """The pages of ``_toc.yml`` that run a section on a profile of their own,
    ``book/sections/<section>_<profile>``: ``{page: (section, profile)}`` in book order (e.g.
    ``{"cola_circuits_decoder": ("cola_circuits", "decoder")}``)."""
    own = {f"{s}_{p}": (s, p) for s in sections(project) for p in profiles(project)}
    return {stem: own[stem] for stem in _toc_pages(project) if stem in own}


def toc_files(root: Path) -> list[str]:
    """Every file ``_toc.yml`` under ``root`` lists, in book order: the root, the chapters and
    their nested sections (paths without suffix, as written there)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files, pending = [toc["root"]], list(toc["chapters"])
    while pending:
        entry = pending.pop(0)
        files.append(entry["file"])
        pending[:0] = entry.get("sections", [])
    return files


def _toc_pages(project: Project) -> list[str]:
    """The names of the executed notebooks ``_toc.yml`` lists, in its order."""
    return re.findall(r"book/sections/(\w+)", (project.root / "_toc.yml").read_text())


def page_section(project: Project, page: str) -> str:
    """The section (template) a page runs: the page's own name, or that of :func:`pages`."""
    return pages(project).get(page, (page, ""))[0]


def plan(
    project: Project, chosen_profiles: Iterable[str], chosen: Iterable[str] | None = None
) -> dict[str, str]:
    """``{page: profile}`` in book order. Each section runs on the last of ``chosen_profiles``
    that lists it, into its own page; but a profile the section has a page of its own for
    (:func:`pages`) runs it into that page, beside the other. ``BOOK_PROFILES``: the toy world
    everywhere, the real encoder where it can answer, and the real decoder on pages of its own.
    ``chosen`` restricts the plan to those sections (and their pages)."""
    own = {entry: page for page, entry in pages(project).items()}
    assigned: dict[str, str] = {}
    for profile in chosen_profiles:
        for section in profile_sections(project, profile):
            assigned[own.get((section, profile), section)] = profile
    planned = {page: page_section(project, page) for page in assigned}
    if chosen is not None:
        chosen = list(chosen)
        for section in chosen:
            check_choice("section", section, sections(project))
            if section not in planned.values():
                raise ReproduceError(f"no chosen profile lists section '{section}'")
        planned = {page: section for page, section in planned.items() if section in chosen}
    order = [*_toc_pages(project), *sections(project)]
    return {page: assigned[page] for page in sorted(planned, key=order.index)}


def profile_cells(nb: nbformat.NotebookNode, profile: str) -> nbformat.NotebookNode:
    """``nb`` without the cells tagged ``only-<other profile>``: a template's prose or checks
    that hold for one profile only (e.g. ``only-toy`` for the planted ground truth). A shallow
    copy: the kept cells are ``nb``'s own."""
    kept = [
        cell
        for cell in nb.cells
        if all(
            not tag.startswith(ONLY_TAG) or tag == ONLY_TAG + profile
            for tag in cell.metadata.get("tags", [])
        )
    ]
    return nbformat.NotebookNode({**nb, "cells": kept})


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
    project: Project,
    profile: str,
    section: str,
    overrides: Mapping[str, Any],
    *,
    quick: bool = False,
) -> dict[str, Any]:
    """Profile values for ``section`` updated by the quick build's (``quick``, see
    :func:`quick_sections`), then by ``overrides``; all checked against the template."""
    check_choice("profile", profile, profiles(project))
    check_choice("section", section, sections(project))
    known = template_parameters(project.template(section))
    table = yaml.safe_load((project.params / f"{profile}.yaml").read_text()) or {}
    values = {"profile": profile, **(table.get(section) or {})}
    smaller = quick_sections(project, profile).get(section, {}) if quick else {}
    for source, mapping in (
        (f"notebooks/params/{profile}.yaml [{section}]", values),
        (f"notebooks/params/{QUICK}/{profile}.yaml [{section}]", smaller),
        ("-p", overrides),
    ):
        for name in mapping:
            if name not in known:
                raise ReproduceError(
                    f"unknown parameter '{name}' for section '{section}' (from {source}); "
                    f"valid: {', '.join(known)}"
                )
    return {**values, **smaller, **overrides}


def split_overrides(
    project: Project, chosen: Iterable[str], overrides: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Give each chosen section the overrides its template declares.

    A name that no chosen section declares is an error listing the valid names.
    """
    declared = {s: template_parameters(project.template(page_section(project, s))) for s in chosen}
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


def run_section(
    project: Project,
    page: str,
    parameters: Mapping[str, Any],
    *,
    progress: bool = True,
    kernel_name: str = "python3",
) -> Path:
    """Execute the template of ``page`` (a section, or a page of :func:`pages`) into
    ``book/sections/<page>.ipynb``; return that path. Its long code cells are collapsed in the
    book (:func:`collapse_long_cells`).

    On failure the partly executed notebook is kept there and a ReproduceError names the cell.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    out = project.executed(page)
    out.parent.mkdir(parents=True, exist_ok=True)
    template = nbformat.read(project.template(page_section(project, page)), as_version=4)
    try:
        papermill.execute_notebook(
            profile_cells(template, str(parameters.get("profile", "toy"))),
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
            f"section '{page}' failed in cell {err.cell_index} [{code}]: "
            f"{err.ename}: {message} -- see {out}"
        ) from None
    executed = nbformat.read(out, as_version=4)
    if collapse_long_cells(executed):
        with atomic_path(out) as tmp:
            nbformat.write(executed, tmp)
    return out


@dataclass(frozen=True)
class StageTime:
    """One stage of a build: ``seconds`` of wall time and the ``new_cache_files`` it wrote."""

    stage: str
    profile: str
    seconds: float
    new_cache_files: int

    @property
    def cache(self) -> str:
        """What the stage left in the cache: a stage that wrote nothing either found what it
        needed there or does not cache its work (timings, fits of a few seconds)."""
        return "nothing new" if self.new_cache_files == 0 else f"{self.new_cache_files} new files"


def run_stage(
    project: Project, section: str, parameters: Mapping[str, Any], *, progress: bool = True
) -> StageTime:
    """:func:`run_section`, timed, with the number of cache files its kernel wrote (each write
    under the cache root that :func:`circuitlasso.cache.atomic_path` logs while it runs)."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "writes"
        os.environ[WRITE_LOG_ENV] = str(log)  # the kernel papermill starts inherits it
        try:
            clock = Stopwatch()
            run_section(project, section, parameters, progress=progress)
            seconds = clock.lap(section)
        finally:
            del os.environ[WRITE_LOG_ENV]
        written = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    root = cache_root().resolve()
    new = {line for line in written if Path(line).is_relative_to(root)}
    return StageTime(section, str(parameters.get("profile", "toy")), seconds, len(new))


def last_seconds(project: Project, section: str, profile: str) -> float | None:
    """Seconds the section's executed copy took (papermill's record), if it ran on ``profile``."""
    path = project.executed(section)
    if not path.is_file():
        return None
    meta = nbformat.read(path, as_version=4).metadata.get("papermill", {})
    ran_on = meta.get("parameters", {}).get("profile")
    seconds = meta.get("duration")
    return float(seconds) if ran_on == profile and seconds is not None else None


def start_order(project: Project, plans: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The sections of ``plans`` longest first, as their last run on the same profile took
    (:func:`last_seconds`); sections never run come first, those of a profile other than ``toy``
    (the real models) before the others, those of the profile with the most of them first (its
    pages, which share one model, take longest together), in the order of ``plans``."""
    profiles = [str(p.get("profile", "toy")) for p in plans.values()]

    def key(section: str) -> tuple[bool, bool, int, float]:
        profile = str(plans[section].get("profile", "toy"))
        seconds = last_seconds(project, section, profile)
        never = seconds is None
        pages = profiles.count(profile) if never and profile != "toy" else 0
        return (not never, profile == "toy" and never, -pages, -(seconds or 0.0))

    return sorted(plans, key=key)  # stable: ties keep the order of plans


def run_stages(
    project: Project,
    plans: Mapping[str, Mapping[str, Any]],
    *,
    jobs: int = 1,
    progress: bool = True,
    report: Callable[[str], None] = print,
) -> list[StageTime]:
    """:func:`run_stage` of each ``section -> parameters`` of ``plans``; their times in the order
    of ``plans``. ``report`` gets a line as each section starts (one at a time) and ends.

    ``jobs > 1`` runs that many sections at once, each in its own process whose kernel gets
    ``cpu_count // jobs`` threads (``OMP_NUM_THREADS``, unless already set): two kernels of two
    threads on two cores make every parallel region wait for a descheduled thread. The longest
    start first (:func:`start_order`); progress bars are off. The first failure stops new
    sections from starting and is raised once the running ones end.
    """
    if jobs < 1:
        raise ReproduceError(f"jobs must be at least 1, got {jobs}")
    if jobs == 1:
        stages = []
        for section, parameters in plans.items():
            report(f"[{section}] profile={parameters.get('profile')} "
                   f"parameters={json.dumps(dict(parameters))}")  # fmt: skip
            stages.append(run_stage(project, section, parameters, progress=progress))
            report(f"[{section}] wrote {project.executed(section)}")
        return stages
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    os.environ.setdefault("OMP_NUM_THREADS", threads)
    order = start_order(project, plans)
    done: dict[str, StageTime] = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        running = {}
        for section in order:
            running[pool.submit(run_stage, project, section, plans[section], progress=False)] = (
                section
            )
        try:
            for future in as_completed(running):
                section = running[future]
                done[section] = future.result()
                report(f"[{section}] wrote {project.executed(section)} "
                       f"({done[section].seconds:.0f} s)")  # fmt: skip
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return [done[section] for section in plans]


def stage_table(stages: Iterable[StageTime], wall: float | None = None) -> str:
    """The stages as a text table (stage, profile, seconds, new cache files) with a total, and
    the ``wall`` clock seconds of the whole build where stages ran side by side."""
    rows = [(t.stage, t.profile, f"{t.seconds:.1f}", t.cache) for t in stages]
    total = sum(float(seconds) for _, _, seconds, _ in rows)
    rows.append(("total", "", f"{total:.1f}", ""))
    if wall is not None:
        rows.append(("wall clock (stages side by side)", "", f"{wall:.1f}", ""))
    header = ("stage", "profile", "seconds", "cache writes")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    head = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    return "\n".join([head, "  ".join("-" * w for w in widths), *lines])


def collapse_long_cells(nb: nbformat.NotebookNode, lines: int = LONG_CELL) -> int:
    """Tag ``hide-input`` every code cell of ``nb`` with more than ``lines`` lines of code (blank
    lines and comments left out), but the injected parameters: the values a run used stay in
    view. Returns how many cells were newly tagged. For the executed copies only: the templates
    are the nbval baselines."""
    tagged = 0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type != "code" or INJECTED_TAG in tags or HIDE_INPUT_TAG in tags:
            continue
        code = [
            line
            for line in cell.source.splitlines()
            if line.strip() and not line.strip().startswith("#")
        ]
        if len(code) > lines:
            cell.metadata["tags"] = [*tags, HIDE_INPUT_TAG]
            tagged += 1
    return tagged


def update_baseline(project: Project, section: str) -> None:
    """Copy the outputs of an executed notebook back into its template (the nbval baseline).

    The executed copy must have been run with the template's own defaults (the ``toy`` profile),
    so the injected-parameters cell is dropped and the remaining cells match the template's.
    """
    executed = nbformat.read(project.executed(section), as_version=4)
    template = nbformat.read(project.template(page_section(project, section)), as_version=4)
    cells = [c for c in executed.cells if INJECTED_TAG not in c.metadata.get("tags", [])]
    toy_cells = profile_cells(template, "toy").cells
    if [c.source for c in cells] != [c.source for c in toy_cells]:
        raise ReproduceError(f"section '{section}': executed copy does not match its template")
    for target, source in zip(toy_cells, cells, strict=True):
        if target.cell_type == "code":
            target.outputs = source.outputs
            target.execution_count = source.execution_count
    with atomic_path(project.template(page_section(project, section))) as tmp:
        nbformat.write(template, tmp)


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
        f"This book was built with the **{', '.join(used) or 'unknown'}** "
        f"profile{'s' if len(used) > 1 else ''} (read from the papermill metadata of the "
        "executed notebooks).",
        "",
        "| section | profile | parameters |",
        "|---|---|---|",
    ]
    for name, entry in info.items():
        shown = {k: v for k, v in entry["parameters"].items() if k != "profile"}
        lines.append(f"| {name} | {entry['profile']} | `{json.dumps(shown)}` |")
    path = project.sections_out / "build_info.md"
    with atomic_path(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
