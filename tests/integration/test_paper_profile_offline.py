"""The paper profile of the SAE-feature section, run offline with GPT-2's tokenizer mirrored
locally: it must go as far as the model download and stop there with the loader's message saying
what to download and where."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from circuitlasso import reproduce as rp

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_DIR = ROOT.parent / "shared" / "data" / "gpt2-tokenizer"


@pytest.mark.slow
def test_cola_circuits_on_the_paper_profile_stops_at_the_download_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("_toc.yml", "notebooks"):
        source = ROOT / name
        copy = shutil.copytree if source.is_dir() else shutil.copy
        copy(source, tmp_path / name)
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("CIRCUITLASSO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CIRCUITLASSO_MIRROR", str(TOKENIZER_DIR))  # the tokenizer is mirrored
    project = rp.Project(tmp_path)
    parameters = rp.resolve_parameters(project, "paper", "cola_circuits", {})
    assert parameters["model_name"] == "gpt2" and parameters["dataset"] == "cola"
    with pytest.raises(rp.ReproduceError) as failure:
        rp.run_section(project, "cola_circuits", parameters, progress=False)
    message = str(failure.value)
    assert "ResourceUnavailableError" in message, message
    assert "cannot load model 'gpt2' from the Hugging Face hub repo 'gpt2'" in message, message
    executed = nbformat.read(project.executed("cola_circuits"), as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert "hf download gpt2" in errors[0]["evalue"], errors[0]["evalue"]
