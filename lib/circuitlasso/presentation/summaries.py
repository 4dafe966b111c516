"""The sections' JSON summaries and their references.

Each template ends with :func:`print_summary`: one JSON line with the numbers that matter.
``notebooks/reference/<profile>.yaml`` holds, per section, what each number should be and the
tolerance it is checked at (:func:`compare_summary`), so a rerun on any machine can be checked
against the book without comparing noise-level digits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import nbformat
import yaml

from circuitlasso.presentation.reproduce import (
    Project,
    ReproduceError,
    find_project,
    page_section,
    sections,
    summary_reference,
)

_SPEC_KEYS = {"value", "abs", "rel", "min", "max", "unchecked"}


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays as Python numbers and lists, and NaN as None."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def print_summary(values: Mapping[str, Any]) -> None:
    """Print a section's summary: one JSON line, the last output of its notebook."""
    print(json.dumps(_plain(values), allow_nan=False))


def read_summary(path: Path) -> dict[str, Any]:
    """The summary an executed notebook printed last (see :func:`print_summary`)."""
    nb = nbformat.read(path, as_version=4)
    for cell in reversed(nb.cells):
        # the cell's printed text, whole: the kernel may send one line in several messages
        printed = [o for o in cell.get("outputs", []) if o.get("output_type") == "stream"]
        text = "".join(o["text"] for o in printed if o.get("name") == "stdout")
        if cell.cell_type == "code" and text.strip():
            try:
                return json.loads(text.strip().splitlines()[-1])
            except json.JSONDecodeError:
                break
    raise ReproduceError(f"{path}: its last printed line is not a JSON summary")


def _is_spec(node: Any) -> bool:
    return isinstance(node, Mapping) and bool(node) and set(node) <= _SPEC_KEYS


def _compare(found: Any, spec: Mapping[str, Any], key: str) -> str | None:
    """Why ``found`` breaks ``spec`` (None when it holds)."""
    if "unchecked" in spec:
        return None
    is_number = isinstance(found, int | float) and not isinstance(found, bool)
    if ("min" in spec or "max" in spec or "abs" in spec or "rel" in spec) and not is_number:
        return f"{key}: {found!r} is not a number"
    if "min" in spec and found < spec["min"]:
        return f"{key}: {found} is below its bound {spec['min']}"
    if "max" in spec and found > spec["max"]:
        return f"{key}: {found} is above its bound {spec['max']}"
    if "value" not in spec:
        return None
    expected = spec["value"]
    if "abs" in spec or "rel" in spec:
        allowed = max(spec.get("abs", 0.0), spec.get("rel", 0.0) * abs(expected))
        if abs(found - expected) > allowed:
            return f"{key}: {found} differs from {expected} by more than {allowed:g}"
        return None
    if found != expected:
        return f"{key}: {found!r} != {expected!r}"
    return None


def compare_summary(summary: Mapping[str, Any], reference: Mapping[str, Any], prefix: str = ""
                    ) -> list[str]:  # fmt: skip
    """Every way ``summary`` departs from ``reference``; empty when all checks hold.

    ``reference`` mirrors the summary's nesting; each leaf is a check: ``{value: v}`` (equal),
    ``{value: v, abs: a}`` or ``{value: v, rel: r}`` (within the tolerance), ``{min: ..}`` and/or
    ``{max: ..}`` (a bound), or ``{unchecked: reason}`` (present, not compared). A number in the
    summary that the reference does not mention is a departure too: nothing goes unchecked
    silently.
    """
    problems = []
    for key in sorted(set(summary) | set(reference), key=str):
        name = f"{prefix}{key}"
        if key not in reference:
            problems.append(f"{name}: in the summary but not in the reference")
        elif key not in summary:
            problems.append(f"{name}: in the reference but not in the summary")
        elif _is_spec(reference[key]):
            problem = _compare(summary[key], reference[key], name)
            problems += [problem] if problem else []
        elif isinstance(reference[key], Mapping) and isinstance(summary[key], Mapping):
            problems += compare_summary(summary[key], reference[key], f"{name}.")
        else:
            problems.append(f"{name}: the reference entry is neither a check nor a mapping")
    return problems


def _count_checks(reference: Mapping[str, Any]) -> int:
    return sum(1 if _is_spec(node) else _count_checks(node) for node in reference.values())


def summary_check(section: str, summary: Mapping[str, Any], profile: str,
                  project: Project | None = None) -> str:  # fmt: skip
    """One line saying whether ``summary`` holds within ``notebooks/reference/<profile>.yaml``.

    A section's notebook prints it in a cell that nbval checks: the numbers that another CPU's
    rounding moves by an example or two (accuracies over a few hundred items) are then compared
    with the reference's tolerances rather than digit by digit. Every departure is listed (they
    are expected where a run's parameters differ from the profile's).
    """
    try:
        path = (project or find_project()).reference(profile)
    except ReproduceError:
        return f"{section}: no companion checkout, so no reference to check the summary against"
    reference = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    if section not in reference:
        return f"{section}: no reference for the '{profile}' profile ({path.name})"
    problems = compare_summary(_plain(summary), reference[section])
    if problems:
        return f"{section}: {len(problems)} departure(s) from {path.name}: " + "; ".join(problems)
    count = _count_checks(reference[section])
    return f"{section}: all {count} checks of {path.name} hold"


def check_summaries(project: Project, profile: str, chosen: Iterable[str] | None = None,
                    *, quick: bool = False) -> dict[str, list[str]]:  # fmt: skip
    """Per executed page (a section, or a page of :func:`pages`): how its summary departs from
    the section's entry of ``notebooks/reference/<profile>.yaml``; after a quick build
    (``quick``), from ``notebooks/reference/quick/<profile>.yaml`` for the sections it runs
    smaller (:func:`circuitlasso.presentation.reproduce.quick_sections`)."""
    chosen = {page: page_section(project, page) for page in chosen or sections(project)}
    by_path: dict[Path, list[str]] = {}
    for section in dict.fromkeys(chosen.values()):
        by_path.setdefault(summary_reference(project, profile, section, quick), []).append(section)
    references: dict[str, Any] = {}
    for path, wanted in by_path.items():
        if not path.is_file():
            raise ReproduceError(f"no reference for profile '{profile}' ({path})")
        reference = yaml.safe_load(path.read_text()) or {}
        missing = [s for s in wanted if s not in reference]
        if missing:
            raise ReproduceError(f"{path} has no entry for section(s) {', '.join(missing)}")
        references.update({section: reference[section] for section in wanted})
    return {page: compare_summary(read_summary(project.executed(page)), references[section])
            for page, section in chosen.items()}  # fmt: skip
