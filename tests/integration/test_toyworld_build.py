"""The toy world end to end: a quick rebuild (loads, fits the model, is deterministic) and the
artifacts shipped in the package (manifest hashes, the stored report within the reference)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from sae_lens import StandardSAE, StandardSAEConfig
from safetensors.torch import load_file

from circuitlasso.data.artifacts import MANIFEST_FILE, REPORT_FILE, manifest_mismatches
from circuitlasso.data.sae_training import QUALITY_BATCH, sae_quality
from circuitlasso.data.toyworld import (
    build_toy_world,
    default_toy_dir,
    load_toy_model,
    load_toy_saes,
)
from circuitlasso.data.toyworld.build import retrained_toy_saes
from circuitlasso.data.toyworld.report import (
    ENCODE_BATCH,
    category_features,
    encode,
    mean_pool,
    report_summary,
    top_activating_tokens,
)
from circuitlasso.presentation.reproduce import Project
from circuitlasso.presentation.summaries import compare_summary

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_toy_world(tmp_path_factory.mktemp("toy") / "quick", seed=0, quick=True)


@pytest.mark.slow
def test_quick_build_writes_a_consistent_manifest(quick_build: Path, tmp_path: Path) -> None:
    manifest = json.loads((quick_build / MANIFEST_FILE).read_text())
    assert manifest["command"] == f"circuitlasso toy build --out {quick_build} --seed 0 --quick"
    assert manifest["seed"] == 0 and manifest["quick"] is True
    assert {"torch", "sae-lens", "transformer-lens"} <= set(manifest["versions"])
    assert "tokenizer.json" in manifest["files"] and REPORT_FILE in manifest["files"]
    assert manifest_mismatches(quick_build) == []
    tampered = Path(shutil.copytree(quick_build, tmp_path / "tampered"))
    (tampered / "tokenizer.json").write_text("{}")
    (tampered / "extra.txt").write_text("x")
    (tampered / REPORT_FILE).unlink()
    assert manifest_mismatches(tampered) == [
        f"missing: {REPORT_FILE}",
        "unlisted: extra.txt",
        "sha256 differs: tokenizer.json",
    ]


@pytest.mark.slow
def test_quick_build_loads_and_its_saes_encode_the_model_stream(quick_build: Path) -> None:
    model = load_toy_model(quick_build)
    saes = load_toy_saes(path=quick_build)
    assert sorted(saes) == list(range(model.cfg.n_layers))
    # stored in float16 (parameters; buffers as they are), read as float32
    stored = load_file(quick_build / "model" / "model.safetensors")
    assert {stored[name].dtype for name, _ in model.named_parameters()} == {torch.float16}
    assert stored["blocks.0.attn.W_Q"].float().equal(model.blocks[0].attn.W_Q.detach())
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    sae_stored = load_file(
        quick_build / "saes" / "blocks.0.hook_resid_post" / "sae_weights.safetensors"
    )
    assert {t.dtype for t in sae_stored.values()} == {torch.float16}
    assert sae_stored["W_dec"].float().equal(saes[0].W_dec.detach())
    tokens = model.to_tokens(["He said that himself was hungry .", "Is Mary tired ?"])
    assert tokens.shape == (2, 8)
    assert (tokens[:, 0] == model.tokenizer.bos_token_id).all()
    assert model.to_str_tokens("He said that himself was hungry.")[1:5] == [
        "he",
        "said",
        "that",
        "himself",
    ]
    _, cache = model.run_with_cache(tokens)
    for layer, sae in saes.items():
        resid = cache[f"blocks.{layer}.hook_resid_post"]
        assert sae.cfg.metadata.hook_name == f"blocks.{layer}.hook_resid_post"
        features = sae.encode(resid)
        assert features.shape == (2, 8, 16 * model.cfg.d_model)
        assert sae.decode(features).shape == resid.shape
        # its own layer's stream: reconstructed far better than by the stream's mean
        error = ((sae.decode(features) - resid) ** 2).sum()
        spread = ((resid - resid.mean((0, 1))) ** 2).sum()
        assert error < 0.5 * spread, (layer, float(1 - error / spread))
    assert sorted(load_toy_saes([1], path=quick_build)) == [1]
    with pytest.raises(ValueError, match=r"layers \[7\] out of range"):
        load_toy_saes([7], path=quick_build)


@pytest.mark.slow
def test_quick_build_is_deterministic(quick_build: Path, tmp_path: Path) -> None:
    again = build_toy_world(tmp_path / "again", seed=0, quick=True)
    first = json.loads((quick_build / MANIFEST_FILE).read_text())["files"]
    assert json.loads((again / MANIFEST_FILE).read_text())["files"] == first


@pytest.mark.slow
def test_a_second_sae_build_keeps_the_model_and_trains_other_saes(
    quick_build: Path, tmp_path: Path
) -> None:
    other = retrained_toy_saes(7, tmp_path / "other", source=quick_build)
    built = json.loads((quick_build / MANIFEST_FILE).read_text())["files"]
    files = json.loads((other / MANIFEST_FILE).read_text())["files"]
    kept = {name: digest for name, digest in built.items() if not name.startswith("saes/")}
    assert {name: files[name] for name in kept if name != REPORT_FILE} == {
        name: digest for name, digest in kept.items() if name != REPORT_FILE
    }  # the model and the tokenizer, byte for byte
    weights = sorted(name for name in built if name.startswith("saes/") and "safetensors" in name)
    assert weights and all(files[name] != built[name] for name in weights)  # other SAEs
    # the SAE seed decides them: the same seed again gives the same bytes, another seed others
    again = retrained_toy_saes(7, tmp_path / "again", source=quick_build)
    third = retrained_toy_saes(8, tmp_path / "third", source=quick_build)
    seeds = {name: json.loads((folder / MANIFEST_FILE).read_text())["files"] for name, folder in
             (("again", again), ("third", third))}  # fmt: skip
    assert all(seeds["again"][name] == files[name] for name in weights)
    assert all(seeds["third"][name] != files[name] for name in weights)
    model = load_toy_model(other)
    saes, shipped = load_toy_saes(path=other), load_toy_saes(path=quick_build)
    assert sorted(saes) == list(range(model.cfg.n_layers))
    for layer, sae in saes.items():
        assert sae.cfg.d_sae == shipped[layer].cfg.d_sae
        assert not torch.equal(sae.W_dec, shipped[layer].W_dec)
    stamp = (other / MANIFEST_FILE).stat().st_mtime_ns
    assert retrained_toy_saes(7, other, source=quick_build) == other  # complete: kept as it is
    assert (other / MANIFEST_FILE).stat().st_mtime_ns == stamp


def test_missing_toy_world_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="circuitlasso toy build"):
        load_toy_model(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="circuitlasso toy build"):
        load_toy_saes(path=tmp_path / "nothing")


def test_committed_toy_world_matches_its_manifest_and_its_report_the_reference() -> None:
    """The shipped files are the manifest's, and the shipped report holds within the reference
    the toyworld section's report, computed afresh from the same files, is checked against (the
    book test): so the stored report is what the shipped model and SAEs give."""
    root = default_toy_dir()
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    assert manifest["command"] == "circuitlasso toy build --seed 0"
    assert manifest_mismatches(root) == []
    stored = json.loads((root / REPORT_FILE).read_text())
    reference = yaml.safe_load(Project(ROOT).reference("toy").read_text())["toyworld"]
    assert compare_summary(report_summary(stored), reference) == []


def test_report_metrics_match_direct_computation() -> None:
    torch.manual_seed(0)
    sae = StandardSAE(StandardSAEConfig(d_in=6, d_sae=10))
    with torch.no_grad():
        for parameter in sae.parameters():
            parameter.normal_()
        sae.b_enc -= 2.0  # some features never fire
    x = torch.randn(max(ENCODE_BATCH, QUALITY_BATCH) + 904, 6)  # more than one encoding batch
    with torch.no_grad():
        features = sae.encode(x)
        residual = ((sae.decode(features) - x) ** 2).sum()
    quality = sae_quality(sae, x)
    assert quality["l0"] == pytest.approx(float((features > 0).sum(1).float().mean()))
    spread = ((x - x.mean(0)) ** 2).sum()
    assert quality["explained_variance"] == pytest.approx(float(1 - residual / spread), rel=1e-5)
    assert quality["dead_fraction"] == pytest.approx(
        float((features.max(0).values <= 0).float().mean())
    )
    assert torch.equal(encode(sae, x), features)

    owners = torch.tensor([0, 0, 2, 2, 2])
    pooled = mean_pool(torch.arange(10.0).reshape(5, 2), owners, 3)
    assert torch.equal(pooled, torch.tensor([[1.0, 2.0], [0.0, 0.0], [6.0, 7.0]]))


def test_top_activating_tokens_and_category_features() -> None:
    features = torch.tensor(
        [[3.0, 0.0], [0.0, 1.0], [5.0, 2.0], [1.0, 0.0], [0.0, 4.0], [2.0, 0.0]]
    )
    top = top_activating_tokens(features, k=2)
    assert {f: rows.tolist() for f, rows in top.items()} == {0: [2, 0], 1: [4, 2]}
    assert {f: rows.tolist() for f, rows in top_activating_tokens(features, k=4).items()} == {
        0: [2, 0, 5, 3]
    }
    words = np.array(["himself", "the", "herself", "cat", "dog", "itself"])
    examples = category_features(
        top_activating_tokens(features, k=3),
        words,
        {"reflexives": {"himself", "herself", "itself"}},
    )
    assert examples == [
        {
            "category": "reflexives",
            "feature": 0,
            "precision": pytest.approx(1.0),
            "top_tokens": [["herself", 1], ["himself", 1], ["itself", 1]],
        }
    ]
