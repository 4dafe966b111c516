"""The package as a wheel: built from the sources, installed into a fresh virtual environment
(its dependencies borrowed from this one, the source tree kept out), the Quickstart run there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from circuitlasso import cache
from circuitlasso.circuits.circuit import Circuit

ROOT = Path(__file__).resolve().parents[2]
TOY = "circuitlasso/data/toyworld/built"
FINETUNED = "circuitlasso/data/minilm_cola_built"  # the fine-tuned model and its SAEs
ASSETS = "circuitlasso/presentation/assets"
WEIGHTS_CAP = 30e6  # bytes of trained weights the package may carry

# run in the fresh environment: where the package and its toy world are, and whether the
# source tree is on the path
WHERE = """
import json, sys, circuitlasso
from circuitlasso.data.artifacts import manifest_mismatches
from circuitlasso.data.toyworld import default_toy_dir
print(json.dumps({"package": circuitlasso.__file__, "toy": str(default_toy_dir()),
                  "mismatches": manifest_mismatches(default_toy_dir()), "path": sys.path}))
"""


def _run(command: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


@pytest.mark.slow
def test_the_wheel_carries_the_toy_world_and_runs_the_quickstart(
    tmp_path: Path, quickstart_script: str
) -> None:
    # on the path: the tests' network guard (tests/hermetic), not the checkout's sources
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "hermetic")}
    env |= {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            cache.CACHE_ENV: str(tmp_path / "cache")}  # fmt: skip
    # build from a copy of the sources: the build's own folders stay out of the checkout
    source = tmp_path / "source"
    shutil.copytree(ROOT / "lib", source / "lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path, source],
         tmp_path, env)  # fmt: skip
    (wheel,) = tmp_path.glob("circuitlasso-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for built in (TOY, f"{FINETUNED}/model", f"{FINETUNED}/saes"):
        manifest = json.loads((ROOT / "lib" / built / "manifest.json").read_text())
        assert {f"{built}/{name}" for name in [*manifest["files"], "manifest.json"]} <= names
    assert {f"{ASSETS}/explorer.js", f"{ASSETS}/static/circuitlasso-book.css"} <= names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    _run([*pip, "--python", python, "install", "--no-deps", wheel], tmp_path, env)
    # the dependencies from this environment's site-packages: a .pth line adds the folder, but
    # the .pth files in it (this checkout's editable install among them) are not read
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     tmp_path, env).strip())  # fmt: skip
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    where = json.loads(_run([python, "-c", WHERE], run_dir, env))
    assert Path(where["package"]).is_relative_to(venv)
    assert Path(where["toy"]).is_relative_to(venv) and where["mismatches"] == []
    assert str(ROOT / "lib") not in where["path"]  # the checkout's editable install

    out = _run([python, "-c", quickstart_script], run_dir, env)
    ratio, nodes, _, edges = out.split()
    assert float(ratio) in (0.01, 0.03, 0.1)
    circuit = Circuit.load(run_dir / "circuit.json")
    assert 0 < int(nodes) == circuit.number_of_nodes()
    assert 0 < int(edges) == circuit.number_of_edges()
    assert _run([venv / "bin" / "circuitlasso", "--help"], run_dir, env).startswith("usage:")


def test_the_trained_weights_the_package_carries_stay_under_30_MB() -> None:
    """The toy world and the fine-tuned model with its SAEs: every file of their builds
    (weights, configs, reports, manifests) counts."""
    sizes = {
        built: sum(p.stat().st_size for p in (ROOT / "lib" / built).rglob("*") if p.is_file())
        for built in (TOY, FINETUNED)
    }
    assert all(size > 1e6 for size in sizes.values()), sizes
    assert sum(sizes.values()) <= WEIGHTS_CAP, sizes
