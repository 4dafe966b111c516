"""The package as a user installs it (conftest.py's ``installed_quickstart``): what the install
gives the tests that read it, and the helper that runs its commands."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def run_in(command: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    """``command``'s stdout; CalledProcessError (with its output) when it fails."""
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


@dataclass(frozen=True)
class InstalledQuickstart:
    """The built ``wheel``, the ``venv`` it is installed in (``env``: the environment its
    commands run with), and the Quickstart's ``stdout`` and folder ``run_dir``."""

    wheel: Path
    venv: Path
    env: dict[str, str]
    run_dir: Path
    stdout: str
