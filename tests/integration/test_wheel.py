"""The package as a wheel (built and installed by conftest.py's ``installed_quickstart``): it
carries its trained weights and assets, and the Quickstart runs from it, not from the sources."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from installed_wheel import InstalledQuickstart, run_in

from circuitlasso.circuits.circuit import Circuit

ROOT = Path(__file__).resolve().parents[2]
TOY = "circuitlasso/data/toyworld/built"
FINETUNED = "circuitlasso/data/minilm_cola_built"  # the fine-tuned model and its SAEs
ASSETS = "circuitlasso/presentation/assets"
WEIGHTS_CAP = 30e6  # bytes of trained weights the package may carry
# the decoders' SAEs, each folder capped by tests/unit/test_decoder_saes.py
DECODER_SAES = (
    "circuitlasso/data/smollm2_built",
    "circuitlasso/data/gemma3_built",
)  # their own caps

# run in the fresh environment: where the package and its toy world are, and whether the
# source tree is on the path
WHERE = """
import json, sys, circuitlasso
from circuitlasso.data.artifacts import manifest_mismatches
from circuitlasso.data.toyworld import default_toy_dir
print(json.dumps({"package": circuitlasso.__file__, "toy": str(default_toy_dir()),
                  "mismatches": manifest_mismatches(default_toy_dir()), "path": sys.path}))
"""


@pytest.mark.slow
def test_the_wheel_carries_the_toy_world_and_runs_the_quickstart(
    installed_quickstart: InstalledQuickstart,
) -> None:
    installed = installed_quickstart
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for built in (TOY, f"{FINETUNED}/model", f"{FINETUNED}/saes", *DECODER_SAES):
        manifest = json.loads((ROOT / "lib" / built / "manifest.json").read_text())
        assert {f"{built}/{name}" for name in [*manifest["files"], "manifest.json"]} <= names
    assert {f"{ASSETS}/explorer.js", f"{ASSETS}/static/circuitlasso-book.css"} <= names

    python = installed.venv / "bin" / "python"
    where = json.loads(run_in([python, "-c", WHERE], installed.run_dir, installed.env))
    assert Path(where["package"]).is_relative_to(installed.venv)
    assert Path(where["toy"]).is_relative_to(installed.venv) and where["mismatches"] == []
    assert str(ROOT / "lib") not in where["path"]  # the checkout's editable install

    ratio, nodes, _, edges = installed.stdout.split()
    assert float(ratio) in (0.01, 0.03, 0.1)
    circuit = Circuit.load(installed.run_dir / "circuit.json")
    assert 0 < int(nodes) == circuit.number_of_nodes()
    assert 0 < int(edges) == circuit.number_of_edges()
    cli = installed.venv / "bin" / "circuitlasso"
    assert run_in([cli, "--help"], installed.run_dir, installed.env).startswith("usage:")


def test_the_trained_weights_the_package_carries_stay_under_30_MB() -> None:
    """The toy world and the fine-tuned model with its SAEs: every file of their builds
    (weights, configs, reports, manifests) counts."""
    sizes = {
        built: sum(p.stat().st_size for p in (ROOT / "lib" / built).rglob("*") if p.is_file())
        for built in (TOY, FINETUNED)
    }
    assert all(size > 1e6 for size in sizes.values()), sizes
    assert sum(sizes.values()) <= WEIGHTS_CAP, sizes
