"""A resumable store of measured rows: each row saved as soon as it is measured, keyed by its run,
this machine and the library's version, and read back by a later call instead of measured again;
and where a saved benchmark result came from (:func:`provenance`).
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable
from datetime import datetime, timezone
from importlib.metadata import version as package_version
from pathlib import Path

import torch

from circuitlasso.cache import cache_key, load_or_compute


def stored_row(
    store: str | Path, measure: Callable[[], dict[str, object]], **run: object
) -> dict[str, object]:
    """``measure()``'s row with the UTC time it ended (``measured_at``), saved in ``store`` under
    ``run``, this machine (:func:`machine_description`) and the library's version; or the row
    saved there by an earlier call with the same ones, read back without measuring."""
    key = cache_key(**run, machine=machine_description(), version=package_version("circuitlasso"))

    def timed() -> dict[str, object]:
        ended = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return {**measure(), "measured_at": ended}

    return load_or_compute(key, timed, root=store)


def machine_description() -> str:
    """The CPU's model name (where the OS says it), its logical cores and torch's threads."""
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        models = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        name = models[0] if models else name
    return f"{name}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def provenance(script: str | Path, argv: list[str]) -> dict[str, str]:
    """Where a benchmark result comes from: the ``command`` (``python benchmarks/<script> ...``
    with ``argv``), the ``commit`` of the checkout holding ``script`` (``+dirty`` when its
    library or benchmarks differ from it; ``unknown`` outside a git checkout) and the
    ``machine`` (:func:`machine_description`)."""
    script = Path(script).resolve()

    def git(*args: str) -> str:
        found = subprocess.run(
            ["git", *args], cwd=script.parent, capture_output=True, text=True, check=False
        )
        return found.stdout.strip() if found.returncode == 0 else ""

    commit = git("rev-parse", "HEAD") or "unknown"
    if commit != "unknown" and git("status", "--porcelain", "--", "../lib", "../benchmarks"):
        commit += "+dirty"
    return {
        "command": " ".join(["python", f"benchmarks/{script.name}", *argv]),
        "commit": commit,
        "machine": machine_description(),
    }
