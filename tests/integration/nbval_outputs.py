"""nbval's output check (``--nbval-lax --sanitize-with``) on a notebook that has already run.

The book check executes every toy-profile section with the parameters its notebook carries, the
run that ``pytest --nbval-lax`` would make again. This compares that run's outputs with the
committed ones as nbval compares them: the cells nbval checks (``# NBVAL_CHECK_OUTPUT``, not
``# NBVAL_SKIP``, run in the committed notebook), streams merged, every output field but those
nbval skips, each string sanitized by the same config.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import nbformat
from nbval.plugin import (
    coalesce_streams,
    find_comment_markers,
    find_metadata_tags,
    get_sanitize_patterns,
    transform_streams_for_comparison,
)

SKIPPED_FIELDS = {
    "metadata",
    "traceback",
    "prompt_number",
    "output_type",
    "name",
    "execution_count",
    "application/vnd.jupyter.widget-view+json",
    "image/png",
    "image/jpeg",
}  # nbval's skip_compare without --nbdime


def _options(cell: Any) -> dict[str, bool]:
    options = {"check": False, "skip": False}
    for marker, value in [*find_comment_markers(cell.source), *find_metadata_tags(cell.metadata)]:
        options[marker] = value
    return options


def _fields(outputs: list[Any], patterns: list[tuple[str, str]]) -> dict[str, list[Any]]:
    """Output field (or MIME type) -> its sanitized values in order, as nbval flattens them."""

    def sanitize(value: Any) -> Any:
        if isinstance(value, str):
            for regex, replace in patterns:
                value = re.sub(regex, replace, value)
        return value

    fields = defaultdict(list)
    for output in transform_streams_for_comparison(coalesce_streams(outputs)):
        for key, value in output.items():
            if key in SKIPPED_FIELDS:
                continue
            if key == "data":
                for mime, data in value.items():
                    if mime not in SKIPPED_FIELDS:
                        fields[mime].append(sanitize(data))
            else:
                fields[key].append(sanitize(value))
    return dict(fields)


def output_differences(executed: Path, committed: Path, sanitize_config: Path) -> list[str]:
    """One line per checked cell whose outputs differ between the two notebooks (papermill's
    injected-parameters cell left out of the executed one)."""
    patterns = get_sanitize_patterns(sanitize_config.read_text())
    ran = [c for c in nbformat.read(executed, as_version=4).cells if c.cell_type == "code"]
    ran = [c for c in ran if "injected-parameters" not in c.metadata.get("tags", [])]
    reference = [c for c in nbformat.read(committed, as_version=4).cells if c.cell_type == "code"]
    if len(ran) != len(reference):
        return [f"{len(ran)} code cells ran, the committed notebook has {len(reference)}"]
    differences = []
    for number, (test, ref) in enumerate(zip(ran, reference, strict=True)):
        options = _options(ref)
        if not options["check"] or options["skip"] or ref.execution_count is None:
            continue
        got, expected = _fields(test.outputs, patterns), _fields(ref.outputs, patterns)
        if got != expected:
            keys = sorted(k for k in got.keys() | expected.keys() if got.get(k) != expected.get(k))
            differences.append(f"cell {number}: {keys} differ, first {keys[0]!r}: "
                               f"{str(got.get(keys[0]))[:300]} != "
                               f"{str(expected.get(keys[0]))[:300]}")  # fmt: skip
    return differences
