"""The paper profile of the SAE-feature sections, run offline with GPT-2's tokenizer mirrored
locally (and Bias in Bios from a local copy in the hub's format): each must go as far as the
download of its first model and stop there with the loader's message saying what to download
and where."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

from circuitlasso.presentation import reproduce as rp

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("section", "model", "repo", "dataset"),
    [
        ("cola_circuits", "gpt2", "gpt2", "cola"),
        ("faithfulness", "gpt2", "gpt2", "cola"),
        ("bias_in_bios", "pythia-70m-deduped", "EleutherAI/pythia-70m-deduped", "bias_in_bios"),
    ],
)
def test_paper_profile_stops_at_the_download_boundary(
    section: str,
    model: str,
    repo: str,
    dataset: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_bias_in_bios: Callable[..., Path],
    gpt2_tokenizer_dir: Path,
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
    monkeypatch.setenv("CIRCUITLASSO_MIRROR", str(gpt2_tokenizer_dir))  # the tokenizer is mirrored
    project = rp.Project(tmp_path)
    overrides = {}
    if section == "bias_in_bios":  # the data set from a local copy in the hub's format
        groups = {(p, g): 3 for p in ("professor", "nurse") for g in ("male", "female")}
        overrides["source"] = str(write_bias_in_bios(tmp_path / "bib", groups))
    parameters = rp.resolve_parameters(project, "paper", section, overrides)
    first = next(iter(parameters["runs"])) if "runs" in parameters else parameters["model_name"]
    assert first == model and parameters["dataset"] == dataset
    with pytest.raises(rp.ReproduceError) as failure:
        rp.run_section(project, section, parameters, progress=False)
    message = str(failure.value)
    assert "ResourceUnavailableError" in message, message
    expected = f"cannot load model '{model}' from the Hugging Face hub repo '{repo}'"
    assert expected in message, message
    executed = nbformat.read(project.executed(section), as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert f"hf download {repo}" in errors[0]["evalue"], errors[0]["evalue"]
