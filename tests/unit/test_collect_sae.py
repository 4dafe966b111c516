"""Tests for the SAE-feature collector and the binary target in circuitlasso.collect.

The reference runs each prompt on its own (no padding, no batching) with ``run_with_cache`` and
averages ``sae.encode`` over the positions that do not hold the BOS / EOS / PAD id.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sae_lens import SAE, StandardSAE, StandardSAEConfig, TopKSAE, TopKSAEConfig
from sae_lens.saes.sae import SAEMetadata
from transformer_lens import HookedTransformer

from circuitlasso import cache
from circuitlasso.collect import collect_sae_features
from circuitlasso.collect.features import model_fingerprint
from circuitlasso.data import models
from circuitlasso.data.targets import binary_labels
from circuitlasso.forward import (
    batches_by_length,
    mean_over_real,
    prompt_batches,
    real_token_mask,
)

GPT2_BOS = 50256  # also GPT-2's EOS and PAD
D_MODEL = 32
N_LAYERS = 3
PROMPTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog, twice.",
    "He said that himself was hungry.",
    "Why?",
    "Colorless green ideas sleep furiously in the night",
    "a b c d e f g h i j k l m n o p q",
    "It rains.",
]  # 7 prompts of 1 to 17 tokens: no batch size below 7 divides them evenly


@pytest.fixture(scope="module")
def model(gpt2_tokenizer_dir: Path) -> HookedTransformer:
    tokenizer = models.gpt2_tokenizer(gpt2_tokenizer_dir)
    return models.tiny_gpt2(
        n_layers=N_LAYERS, d_model=D_MODEL, n_heads=2, n_ctx=32, tokenizer=tokenizer
    )


def standard_sae(hook: str, d_sae: int = 96, seed: int = 0, d_in: int = D_MODEL) -> StandardSAE:
    """A random ReLU SAE whose negative encoder bias leaves many features at zero."""
    torch.manual_seed(seed)
    sae = StandardSAE(
        StandardSAEConfig(d_in=d_in, d_sae=d_sae, metadata=SAEMetadata(hook_name=hook))
    )
    with torch.no_grad():
        sae.W_enc.normal_(0, 1 / d_in**0.5)
        sae.b_enc.normal_(-0.5, 0.3)
    return sae.eval()


def topk_sae(hook: str, d_sae: int = 80, k: int = 6, seed: int = 1) -> TopKSAE:
    torch.manual_seed(seed)
    cfg = TopKSAEConfig(d_in=D_MODEL, d_sae=d_sae, k=k, metadata=SAEMetadata(hook_name=hook))
    return TopKSAE(cfg).eval()


@pytest.fixture(scope="module")
def saes() -> dict[int, SAE]:
    return {
        0: standard_sae("blocks.0.hook_resid_post"),
        1: topk_sae("blocks.1.hook_resid_post"),
    }


def reference(model: HookedTransformer, sae: SAE, prompts: list[str]) -> np.ndarray:
    """Dense ``(M, D)``: each prompt alone, mean of the SAE features over its non-special tokens."""
    hook = sae.cfg.metadata.hook_name
    rows = []
    with torch.no_grad():
        for prompt in prompts:
            tokens = model.to_tokens(prompt)
            assert tokens.shape[0] == 1 and tokens[0, 0] == GPT2_BOS
            _, activations = model.run_with_cache(tokens, names_filter=hook)
            keep = tokens[0] != GPT2_BOS
            rows.append(sae.encode(activations[hook][0, keep]).mean(0))
    return torch.stack(rows).numpy()


@pytest.fixture
def forward_calls(model: HookedTransformer) -> Iterator[list[int]]:
    """Calls of each block and of the embedding (index -1 ... last block; -1 at position 0)."""
    counts = [0] * (N_LAYERS + 1)
    modules = [model.embed, *model.blocks]
    handles = []
    for i, module in enumerate(modules):

        def count(*args: object, i: int = i) -> None:
            counts[i] += 1

        handles.append(module.register_forward_hook(count))
    yield counts
    for handle in handles:
        handle.remove()


@pytest.mark.parametrize("batch_size", [1, 3, 4, 10])
def test_matches_per_prompt_dense_reference(
    model: HookedTransformer, saes: dict[int, SAE], batch_size: int, tmp_path: Path
) -> None:
    z = collect_sae_features(model, saes, PROMPTS, batch_size=batch_size, cache_dir=tmp_path)
    assert set(z) == {0, 1}
    for layer, sae in saes.items():
        expected = reference(model, sae, PROMPTS)
        assert 0 < (expected == 0).mean() < 1  # the features are neither all zero nor dense
        got = z[layer]
        assert isinstance(got, sp.csr_matrix)
        assert got.dtype == np.float32
        assert got.shape == (len(PROMPTS), sae.cfg.d_sae)
        assert got.has_canonical_format
        np.testing.assert_allclose(got.toarray(), expected, rtol=1e-5, atol=1e-6)
        assert got.nnz == np.count_nonzero(expected)


def test_pooled_activations_come_from_the_same_pass_as_the_features(
    model: HookedTransformer, saes: dict[int, SAE], tmp_path: Path
) -> None:
    z = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path, pooled=[1])
    assert list(z.pooled) == [1] and z.pooled[1].shape == (len(PROMPTS), D_MODEL)
    hook = saes[1].cfg.metadata.hook_name
    with torch.no_grad():  # each prompt alone: the mean over its tokens but BOS
        expected = []
        for prompt in PROMPTS:
            tokens = model.to_tokens(prompt)
            _, activations = model.run_with_cache(tokens, names_filter=hook)
            expected.append(activations[hook][0, tokens[0] != GPT2_BOS].double().mean(0))
    np.testing.assert_allclose(z.pooled[1], torch.stack(expected).numpy(), rtol=1e-5, atol=1e-6)
    # the features are those of a call without pooled activations, and rows keep them aligned
    plain = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
    assert plain.pooled == {} and (plain[1] != z[1]).nnz == 0
    part = z.rows([2, 0])
    np.testing.assert_array_equal(part.pooled[1], z.pooled[1][[2, 0]])
    again = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path, pooled=[1])
    np.testing.assert_array_equal(again.pooled[1], z.pooled[1])  # loaded from the cache
    with pytest.raises(ValueError, match=r"pooled layers \[5\] have no SAE; layers: \[0, 1\]"):
        collect_sae_features(model, saes, PROMPTS, cache_dir=tmp_path, pooled=[5])


def test_batches_run_shortest_first_and_rows_come_back_in_input_order(
    model: HookedTransformer,
) -> None:
    batches, order = batches_by_length(model, PROMPTS, 3)
    lengths = [len(model.to_str_tokens(p, prepend_bos=False)) for p in PROMPTS]
    assert [lengths[i] for i in order] == sorted(lengths)
    assert sorted(order) == list(range(len(PROMPTS)))
    padded = sum(tokens.numel() for tokens, _ in batches)
    in_input_order = sum(t.numel() for t, _ in prompt_batches(model, PROMPTS, 3))
    assert padded < in_input_order
    rows = [(tokens[r], real[r]) for tokens, real in batches for r in range(len(tokens))]
    for (tokens, real), i in zip(rows, order, strict=True):  # row r is prompt order[r]
        alone, alone_real = prompt_batches(model, [PROMPTS[i]], 1)[0]
        n = alone.shape[1]
        assert torch.equal(tokens[:n], alone[0]) and torch.equal(real[:n], alone_real[0])
        assert not real[n:].any()


def test_special_tokens_inside_a_prompt_are_left_out(
    model: HookedTransformer, saes: dict[int, SAE], tmp_path: Path
) -> None:
    prompt = "Hello<|endoftext|> world"
    tokens = model.to_tokens(prompt)[0]
    assert tokens.tolist()[0] == GPT2_BOS and tokens.tolist()[2] == GPT2_BOS
    z = collect_sae_features(model, saes, [prompt, "Why?"], cache_dir=tmp_path)
    sae = saes[0]
    hook = sae.cfg.metadata.hook_name
    with torch.no_grad():
        _, activations = model.run_with_cache(tokens[None], names_filter=hook)
        expected = sae.encode(activations[hook][0, [1, 3]]).mean(0).numpy()
        with_bos = sae.encode(activations[hook][0]).mean(0).numpy()
    np.testing.assert_allclose(z[0][0].toarray()[0], expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(expected, with_bos, atol=1e-3)  # leaving BOS out matters here


def test_real_token_mask_leaves_out_bos_eos_and_pad_wherever_they_stand(
    model: HookedTransformer,
) -> None:
    tokens = torch.tensor([[GPT2_BOS, 15496, GPT2_BOS, 995], [464, 2068, GPT2_BOS, GPT2_BOS]])
    expected = [[False, True, False, True], [True, True, False, False]]
    assert real_token_mask(model, tokens).tolist() == expected
    assert real_token_mask(model, tokens[1]).tolist() == expected[1]  # any shape


def test_mean_over_real_averages_the_marked_positions_of_each_row() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 4, generator=g)
    real = torch.tensor([[1, 1, 0, 0, 0], [0, 1, 0, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    values, mask = x.double().numpy(), real.numpy()
    expected = np.stack([values[i][mask[i]].mean(0) for i in range(3)])
    full = mean_over_real(x, real)
    assert full.dtype == torch.float64
    np.testing.assert_allclose(full.numpy(), expected, rtol=1e-12)
    # the real positions' values alone, row-major, as the collector has them
    packed = mean_over_real(x[real], real, dtype=torch.float32)
    assert packed.dtype == torch.float32
    np.testing.assert_allclose(packed.numpy(), expected, rtol=1e-6)
    # differentiable: d(sum of the means)/dx is 1 / count at the marked positions, 0 elsewhere
    leaf = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(mean_over_real(leaf, real).sum(), leaf)
    weights = mask / mask.sum(1, keepdims=True)
    np.testing.assert_allclose(grad.numpy(), np.repeat(weights[:, :, None], 4, 2), rtol=1e-6)


def test_mean_over_real_rejects_what_it_cannot_average() -> None:
    x, real = torch.ones(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="row 1 has no real position"):
        mean_over_real(x, torch.tensor([[True, False, False], [False, False, False]]))
    with pytest.raises(ValueError, match="bool mask matching x"):
        mean_over_real(x, real[:, :2])
    with pytest.raises(ValueError, match="bool mask matching x"):
        mean_over_real(x, real.float())
    with pytest.raises(ValueError, match=r"x must be \(B, P, d\) or \(6, d\)"):
        mean_over_real(x[:, :2].reshape(4, 4), real)


def test_runs_only_the_blocks_the_saes_read(
    model: HookedTransformer, tmp_path: Path, forward_calls: list[int]
) -> None:
    saes = {1: standard_sae("blocks.1.hook_resid_mid")}
    z = collect_sae_features(model, saes, PROMPTS, batch_size=4, cache_dir=tmp_path)
    assert forward_calls == [2, 2, 2, 0]  # embedding, blocks 0 and 1 twice; block 2 never
    np.testing.assert_allclose(
        z[1].toarray(), reference(model, saes[1], PROMPTS), rtol=1e-5, atol=1e-6
    )


def test_rerun_loads_from_cache_without_running_the_model(
    model: HookedTransformer, saes: dict[int, SAE], tmp_path: Path, forward_calls: list[int]
) -> None:
    first = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
    assert forward_calls[0] == 3
    again = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
    assert forward_calls[0] == 3
    for layer in saes:
        assert (first[layer] != again[layer]).nnz == 0

    # a different prompt list, SAE weights or caller key part is a different entry
    collect_sae_features(model, saes, PROMPTS[:-1], batch_size=3, cache_dir=tmp_path)
    assert forward_calls[0] == 3 + 2
    other = {0: standard_sae("blocks.0.hook_resid_post", seed=5), 1: saes[1]}
    changed = collect_sae_features(model, other, PROMPTS, batch_size=3, cache_dir=tmp_path)
    assert forward_calls[0] == 3 + 2 + 3
    assert (changed[0] != first[0]).nnz > 0
    collect_sae_features(
        model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path, cache_key_parts={"split": "dev"}
    )
    assert forward_calls[0] == 3 + 2 + 3 + 3


NEURON = 5  # an MLP neuron the old strided-sample fingerprint never read


def cache_entries(root: Path) -> list[str]:
    results = root / "results"
    return sorted(p.name for p in results.iterdir()) if results.exists() else []


@pytest.mark.parametrize("weight", ["W_in", "W_out"])
def test_editing_one_mlp_neuron_is_a_new_entry_with_new_features(
    model: HookedTransformer,
    saes: dict[int, SAE],
    tmp_path: Path,
    forward_calls: list[int],
    weight: str,
) -> None:
    first = collect_sae_features(model, saes, PROMPTS, batch_size=4, cache_dir=tmp_path)
    param = getattr(model.blocks[0].mlp, weight)  # W_in: (d_model, d_mlp), W_out: (d_mlp, d_model)
    index = (slice(None), NEURON) if weight == "W_in" else (NEURON,)
    original = param[index].clone()
    try:
        with torch.no_grad():
            param[index] = torch.randn(original.shape, generator=torch.Generator().manual_seed(3))
        edited = collect_sae_features(model, saes, PROMPTS, batch_size=4, cache_dir=tmp_path)
        assert forward_calls[0] == 2 + 2  # computed again, not loaded
        expected = reference(model, saes[0], PROMPTS)
    finally:
        with torch.no_grad():
            param[index] = original
    assert len(cache_entries(tmp_path)) == 2
    assert np.abs(expected - first[0].toarray()).max() > 1e-2  # stale features would be wrong
    np.testing.assert_allclose(edited[0].toarray(), expected, rtol=1e-5, atol=1e-6)


def test_model_fingerprint_covers_every_buffer(model: HookedTransformer) -> None:
    before = model_fingerprint(model)
    ignore = model.blocks[2].attn.IGNORE  # a buffer, not a parameter
    original = ignore.clone()
    try:
        ignore.fill_(-123.0)
        assert model_fingerprint(model) != before
    finally:
        ignore.copy_(original)
    assert model_fingerprint(model) == before


def test_editing_one_sae_decoder_row_is_a_new_entry(
    model: HookedTransformer, tmp_path: Path, forward_calls: list[int]
) -> None:
    sae = standard_sae("blocks.0.hook_resid_post")
    collect_sae_features(model, {0: sae}, PROMPTS, batch_size=4, cache_dir=tmp_path)
    with torch.no_grad():
        sae.W_dec[2] += 0.5  # a row that a strided sample of W_dec (96 x 32) would miss
    collect_sae_features(model, {0: sae}, PROMPTS, batch_size=4, cache_dir=tmp_path)
    assert forward_calls[0] == 2 + 2
    assert len(cache_entries(tmp_path)) == 2


def test_cache_false_neither_reads_nor_writes_the_cache(
    model: HookedTransformer,
    saes: dict[int, SAE],
    tmp_path: Path,
    forward_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "root"))
    cached = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path / "dir")
    files = sorted(tmp_path.rglob("*"))
    assert len(files) > 1 and not (tmp_path / "root").exists()
    for cache_dir in (tmp_path / "dir", None):
        fresh = collect_sae_features(
            model, saes, PROMPTS, batch_size=3, cache=False, cache_dir=cache_dir
        )
        for layer in saes:
            assert (fresh[layer] != cached[layer]).nnz == 0
    assert forward_calls[0] == 3 * 3  # the cached batches are computed again, not read
    assert sorted(tmp_path.rglob("*")) == files  # nothing written, not even a folder


def test_default_cache_dir_is_the_cache_root(
    model: HookedTransformer, saes: dict[int, SAE], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "root"))
    collect_sae_features(model, saes, PROMPTS, batch_size=4)
    assert len(list((tmp_path / "root" / "results").glob("*/chunk_*.pt"))) == 2


def test_the_same_prompts_in_another_order_share_the_cache(
    model: HookedTransformer, saes: dict[int, SAE], tmp_path: Path, forward_calls: list[int]
) -> None:
    first = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
    assert forward_calls[0] == 3
    shuffled = [PROMPTS[i] for i in (4, 0, 6, 2, 5, 1, 3)]
    second = collect_sae_features(model, saes, shuffled, batch_size=3, cache_dir=tmp_path)
    assert forward_calls[0] == 3  # loaded, not run again
    for layer in saes:
        assert (second[layer] != first[layer][[4, 0, 6, 2, 5, 1, 3]]).nnz == 0
    assert len(list((tmp_path / "results").iterdir())) == 1


def test_compute_seconds_are_those_of_a_first_run_when_loaded(
    model: HookedTransformer,
    saes: dict[int, SAE],
    tmp_path: Path,
    forward_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]  # a fake clock that moves only while a batch runs through the model
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    seconds_per_batch = [10.0]

    def slow_batch(*args: object) -> None:
        now[0] += seconds_per_batch[0]

    handle = model.embed.register_forward_hook(slow_batch)
    try:
        first = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
        assert forward_calls[0] == 3 and first.compute_seconds == 3 * 10.0
        loaded = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
        assert forward_calls[0] == 3  # read back: no batch ran again
        assert loaded.compute_seconds == 3 * 10.0  # the first run's seconds
        seconds_per_batch[0] = 1.0
        uncached = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache=False)
        assert forward_calls[0] == 6 and uncached.compute_seconds == 3 * 1.0  # its own seconds
    finally:
        handle.remove()


def test_interrupted_run_resumes_from_saved_batches(
    model: HookedTransformer, saes: dict[int, SAE], tmp_path: Path, forward_calls: list[int]
) -> None:
    def fail_on_second_batch(*args: object) -> None:
        if forward_calls[0] == 2:
            raise KeyboardInterrupt

    handle = model.embed.register_forward_hook(fail_on_second_batch)
    try:
        with pytest.raises(KeyboardInterrupt):
            collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
    finally:
        handle.remove()
    saved = list((tmp_path / "results").rglob("*"))
    # no partial file: the first batch and its seconds
    files = sorted(p.name for p in saved if p.is_file())
    assert files == ["chunk_000000.pt", "chunk_000000.seconds"]

    z = collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
    assert forward_calls[0] == 2 + 2  # two before the interruption, the two missing batches after
    for layer, sae in saes.items():
        np.testing.assert_allclose(
            z[layer].toarray(), reference(model, sae, PROMPTS), rtol=1e-5, atol=1e-6
        )


def test_sae_hook_not_on_the_model_lists_close_matches(
    model: HookedTransformer, tmp_path: Path
) -> None:
    saes = {0: standard_sae("blocks.0.hook_resid_pots")}
    with pytest.raises(ValueError, match="blocks.0.hook_resid_pots") as err:
        collect_sae_features(model, saes, PROMPTS, cache_dir=tmp_path)
    assert "blocks.0.hook_resid_post" in str(err.value)


def test_sae_width_mismatch(model: HookedTransformer, tmp_path: Path) -> None:
    saes = {0: standard_sae("blocks.0.hook_resid_post", d_in=2 * D_MODEL)}
    with pytest.raises(ValueError, match=f"d_in={2 * D_MODEL}.*d_model={D_MODEL}"):
        collect_sae_features(model, saes, PROMPTS, cache_dir=tmp_path)


@pytest.mark.parametrize(
    ("prompts", "error", "match"),
    [
        ([], ValueError, "prompts is empty"),
        ("a single string", TypeError, "not a single string"),
        (["fine", 3], TypeError, "prompt 1 is a int"),
        (["fine", "also fine", ""], ValueError, "prompt 2 has no token"),
        (["<|endoftext|>", "fine"], ValueError, "prompt 0 has no token"),
        (["fine", "word " * 40], ValueError, "prompt 1 is longer than the model's context of 32"),
    ],
)
def test_bad_prompts(
    model: HookedTransformer,
    saes: dict[int, SAE],
    tmp_path: Path,
    prompts: object,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        collect_sae_features(model, saes, prompts, cache_dir=tmp_path)  # type: ignore[arg-type]


def test_no_saes_or_bad_batch_size(
    model: HookedTransformer, saes: dict[int, SAE], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="saes is empty"):
        collect_sae_features(model, {}, PROMPTS, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        collect_sae_features(model, saes, PROMPTS, batch_size=0, cache_dir=tmp_path)


def test_nan_activations_name_the_hook_and_prompt(
    model: HookedTransformer, saes: dict[int, SAE], tmp_path: Path
) -> None:
    def poison(module: object, inputs: object, output: torch.Tensor) -> torch.Tensor:
        output = output.clone()
        output[1, 2] = float("nan")  # second prompt of each batch, third position
        return output

    # batches run shortest first: the first holds prompts 0, 3 and 6 ("Hello", "Why?" and
    # "It rains."), so its second row is prompt 3
    handle = model.blocks[0].hook_resid_post.register_forward_hook(poison)
    try:
        with pytest.raises(ValueError, match=r"resid_post' for prompts \[3\], e.g. 'Why\?'"):
            collect_sae_features(model, saes, PROMPTS, batch_size=3, cache_dir=tmp_path)
    finally:
        handle.remove()
    assert not list((tmp_path / "results").rglob("*.pt"))


def test_nan_features_name_the_sae(model: HookedTransformer, tmp_path: Path) -> None:
    sae = standard_sae("blocks.0.hook_resid_post")
    with torch.no_grad():
        sae.W_enc[:, 7] = float("nan")
    with pytest.raises(ValueError, match=r"features of the SAE on 'blocks.0.hook_resid_post'"):
        collect_sae_features(model, {0: sae}, PROMPTS, cache_dir=tmp_path)


@pytest.mark.parametrize(
    ("labels", "positive", "expected"),
    [
        ([0, 1, 1, 0], None, [0, 1, 1, 0]),
        (np.array([True, False, True]), None, [1, 0, 1]),
        (torch.tensor([-1, 1, 1]), None, [0, 1, 1]),
        (np.array([2.0, 5.0, 2.0]), None, [0, 1, 0]),
        (["bad", "good", "good"], None, [0, 1, 1]),
        (["acceptable", "unacceptable"], "acceptable", [1, 0]),
        ([0, 1, 1, 0], 0, [1, 0, 0, 1]),
    ],
)
def test_binary_labels(labels: object, positive: object, expected: list[int]) -> None:
    y = binary_labels(labels, positive=positive)
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        ([0, 1, 2], "exactly two values, got 3: \\[0, 1, 2\\]"),
        ([1, 1, 1], "exactly two values, got 1"),
        ([0.0, 1.0, float("nan")], "NaN at positions \\[2\\]"),
        (["a", None, "b"], "None or NaN at positions \\[1\\]"),
        (["yes", "no", "maybe"], "exactly two values, got 3"),
        ([0, "a"], "mix types"),
        (np.zeros((2, 2)), "1-D"),
        ([], "empty"),
    ],
)
def test_binary_labels_rejects_non_binary(labels: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        binary_labels(labels)


def test_binary_labels_positive_must_be_a_label() -> None:
    with pytest.raises(ValueError, match="positive=2 is not one of"):
        binary_labels([0, 1], positive=2)
