"""Built artifacts on disk (the toy world, the real model's SAEs): JSON files, a manifest with the
sha256 of every file, and folders written whole or not at all."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

from circuitlasso.cache import atomic_path

REPORT_FILE = "report.json"
MANIFEST_FILE = "manifest.json"
VERSIONED_PACKAGES = ("circuitlasso", "torch", "transformer-lens", "sae-lens", "tokenizers")
FILE_MODE = 0o644


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically (:func:`circuitlasso.cache.atomic_path`)."""
    with atomic_path(path, mode=FILE_MODE) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def artifact_files(root: Path) -> list[Path]:
    """Every file under ``root`` except the manifest, sorted."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)


def write_manifest(root: Path, info: dict[str, Any]) -> None:
    """``manifest.json``: ``info`` plus library versions and the sha256 of every file."""
    versions = {name: version(name) for name in VERSIONED_PACKAGES}
    files = {p.relative_to(root).as_posix(): sha256(p) for p in artifact_files(root)}
    write_json(root / MANIFEST_FILE, {**info, "versions": versions, "files": files})


def manifest_mismatches(root: Path | str) -> list[str]:
    """Files whose sha256 differs from ``manifest.json`` or that are missing or unlisted."""
    root = Path(root)
    listed = json.loads((root / MANIFEST_FILE).read_text())["files"]
    present = {p.relative_to(root).as_posix(): p for p in artifact_files(root)}
    problems = [f"missing: {name}" for name in sorted(set(listed) - set(present))]
    problems += [f"unlisted: {name}" for name in sorted(set(present) - set(listed))]
    problems += [
        f"sha256 differs: {name}"
        for name in sorted(set(listed) & set(present))
        if sha256(present[name]) != listed[name]
    ]
    return problems


@contextmanager
def staged_folder(out_dir: Path) -> Iterator[Path]:
    """A fresh sibling folder (mode 0755) that replaces ``out_dir`` if the block succeeds."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-build-", dir=out_dir.parent))
    stage.chmod(0o755)
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    retired = out_dir.with_name(f".{out_dir.name}-previous")
    shutil.rmtree(retired, ignore_errors=True)
    if out_dir.exists():
        os.replace(out_dir, retired)
    os.replace(stage, out_dir)
    shutil.rmtree(retired, ignore_errors=True)
