"""The package as a user installs it: a wheel built from the sources, installed into a fresh
virtual environment (its dependencies borrowed from this one, the source tree kept out), and the
Quickstart page's script run there once, in an empty folder. The wheel's checks
(test_wheel.py) and the Quickstart's (test_quickstart.py) read that one run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from installed_wheel import InstalledQuickstart, run_in

from circuitlasso import cache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def installed_quickstart(
    tmp_path_factory: pytest.TempPathFactory, quickstart_script: str
) -> InstalledQuickstart:
    root = tmp_path_factory.mktemp("wheel")
    # on the path: the tests' network guard (tests/hermetic), not the checkout's sources
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "hermetic")}
    env |= {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            cache.CACHE_ENV: str(root / "cache")}  # fmt: skip
    # build from a copy of the sources: the build's own folders stay out of the checkout
    source = root / "source"
    shutil.copytree(ROOT / "lib", source / "lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    run_in([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", root, source], root, env)
    (wheel,) = root.glob("circuitlasso-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    run_in([*pip, "--python", python, "install", "--no-deps", wheel], root, env)
    # the dependencies from this environment's site-packages: a .pth line adds the folder, but
    # the .pth files in it (this checkout's editable install among them) are not read
    site = Path(run_in([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                       root, env).strip())  # fmt: skip
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    run_dir = root / "run"
    run_dir.mkdir()
    stdout = run_in([python, "-c", quickstart_script], run_dir, env)
    return InstalledQuickstart(wheel, venv, env, run_dir, stdout)
