"""TopK SAEs on the residual stream of SmolLM2-135M-Instruct, trained here, shipped in the package.

No SAE of this decoder (:mod:`circuitlasso.data.smollm2`) is published, so they are trained here
on ``blocks.{l}.hook_resid_post`` (a block's output) at the real tokens of CoLA's 8,551 training
sentences, the English text available offline, with the training every model's SAEs share
(:func:`circuitlasso.data.sae_training.train_layer_sae`: sae-lens's ``SAETrainer`` on shuffled
token activations, in rounds, dead latents re-initialized between rounds). Their quality is
measured on CoLA's in-domain dev sentences, held out.

Layers (:data:`SAE_LAYERS`): every fifth block's output and the last, blocks 4, 9, 14, 19, 24
and 29 (0-indexed) of 30. Evenly spaced, so each layer-pair regression spans five blocks and the
circuit sees the whole depth; the last is the residual stream the unembedding reads (through the
final RMSNorm), where a readout of the label sits. Six SAEs of width 1536 fit the package's
budget for these weights (24 MB in float16, 3.5 MB a layer), where all 30 blocks would take
106 MB; a wider SAE (2048) would cost a layer.

Tokens: an SAE encodes, at collection (:func:`circuitlasso.collect.features.
collect_sae_features`), the positions that :func:`circuitlasso.forward.prompt_batches` marks
real, and it is trained on exactly those (:func:`token_activations`). The model reads each
sentence after ``<|endoftext|>``, its BOS (:mod:`circuitlasso.data.smollm2`), which becomes the
decoder's attention sink: on CoLA its residual norm is 9 to 120 times the words' after blocks 2,
4, 14, 19, 24 and 29 (twice after block 9). As a special id it is left out of the mask, so
neither training nor collection sees it. Read without it, the sentence's first word is the sink,
a real token, and held 69 % to 89 % of the variance of CoLA's dev tokens at blocks 4, 14, 19, 24
and 29: an SAE could pass the explained-variance bar by reconstructing that one token. The
report records, per layer, the median norm of the first real token over the others'
(``first_token_norm_ratio``, near 1 when the sink is left out), and whether a BOS was prepended
and which ids were left out (``prepend_bos``, ``excluded_token_ids``); a test checks these
against the model as it loads. Among the words, block 4 has massive tokens of its own (most of
them "the": 4 % of the tokens, 70 % of the variance there); ``explained_variance_typical`` leaves
out tokens over :data:`MASSIVE` times the median norm.

Builds: :func:`build_smollm2_saes` trains and writes a seeded build (float32, default under the
cache, :func:`default_build_dir`) with ``report.json`` and ``manifest.json``, atomically
(:func:`circuitlasso.data.artifacts.staged_folder`); :func:`ship_smollm2_saes` writes its float16
copy with the quality measured again with the float16 weights, by default into the package
(``smollm2_built/``, read through ``importlib.resources``, so a wheel carries them).
``circuitlasso real decoder-saes --ship`` does both (BUILD_TIME). :func:`load_smollm2_saes`
reads the shipped ones; the book never trains them. Another CPU rounds differently: a rebuild
elsewhere gives close, not identical, weights.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.cache import cache_key, cache_root
from circuitlasso.data import sae_training
from circuitlasso.data.artifacts import MANIFEST_FILE
from circuitlasso.data.cola import load_cola
from circuitlasso.data.sae_training import SAEConfig
from circuitlasso.data.smollm2 import GGUF_SHA256, N_LAYERS, load_smollm2
from circuitlasso.forward import length_order, prompt_batches, special_token_ids

LAYER_HOOK = "blocks.{layer}.hook_resid_post"
SAE_LAYERS = (4, 9, 14, 19, 24, 29)
"""The blocks whose output has an SAE (module docstring)."""
CIRCUIT_LAYERS = (4, 9, 14, 19)
"""The layers a CoLA circuit of this decoder keeps (the ``decoder`` profile's, the report's
readout): up to block 19, the last block where the readout clears the majority class by the
paper's own margin on GPT-2 (3.5 points). The readout on CoLA's 8,551 training sentences, scored
on the 527 in-domain dev ones (majority class 0.693), reaches 0.742 at block 14 (MCC 0.32) and
0.734 at block 19 (MCC 0.29), then falls: 0.715 at block 24 (MCC 0.22) and the majority class at
block 29 (0.694, MCC 0.08), where a dense probe of the residual stream (on 2,000 of the
sentences) does no better; at blocks 4 and 9 it stays at the majority class. The last blocks of
a language model serve the next token (``circuitlasso real report`` prints the readout on every
layer with an SAE). The forward pass of a circuit then stops after block 19."""
SAE_CONFIG = SAEConfig(k=48, training_tokens=300_000, b_dec_init="mean")
"""The SAEs' setting, the same for every layer: width 1536, k 48, 300,000 training tokens (about
3.7 passes over CoLA's training tokens) in 3 rounds, batches of 512, learning rate 1e-2, the
decoder bias started at the activations' mean. The cheapest setting of a sweep on the deepest
blocks that meets the bars (explained variance 0.8, at most 10 % dead) on every layer, in
2 x 300,000 tokens of one core's time: at k 32 blocks 19 and 24 explained 0.794 and 0.798; twice
the tokens gained block 29 as much as k 48 did (0.840 and 0.841 against 0.822); the bias started
at 0 left 26 % of block 29's latents dead (0.9 % from the mean)."""
SHIPPED_DIR = "smollm2_built"
"""The package data folder (under ``circuitlasso/data``) of the shipped SAEs."""
BUILD_COMMAND = "circuitlasso real decoder-saes --ship"
BATCH_SIZE = 64
MASSIVE = 5.0
"""A token's residual norm over the median that counts as massive (:func:`layer_quality`)."""


def shipped_saes_dir() -> Path:
    """The float16 SAEs shipped with the package (:func:`ship_smollm2_saes`)."""
    root = resources.files("circuitlasso.data") / SHIPPED_DIR
    if not isinstance(root, Path):  # a zipped install
        raise FileNotFoundError(f"the shipped SmolLM2 SAEs at {root} are not a folder on disk")
    return root


def default_build_dir(cfg: SAEConfig = SAE_CONFIG) -> Path:
    """Where a float32 build of ``cfg`` (every layer of :data:`SAE_LAYERS`) is written by default:
    under the cache, keyed by ``cfg``, the layers and the model's file."""
    key = cache_key(**cfg.key_parts(), layers=list(SAE_LAYERS), gguf=GGUF_SHA256)
    return cache_root() / "smollm2-saes" / key[:16]


def _check_layers(layers: Iterable[int], held: Sequence[int], where: str) -> list[int]:
    chosen = list(layers)
    missing = [layer for layer in chosen if layer not in held]
    if missing:
        raise ValueError(
            f"no SmolLM2 SAE for layers {missing} {where}: SAEs read blocks.<layer>."
            f"hook_resid_post of layers {list(held)}"
        )
    return chosen


def token_activations(
    model: HookedTransformer, sentences: Sequence[str], layers: Sequence[int]
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """``{layer: (T, 576)}`` float32 residual stream after each block of ``layers`` at the
    sentences' ``T`` real tokens (the collector's mask, :func:`circuitlasso.forward.
    prompt_batches`), and ``first: (T,)`` bool, True at each sentence's first real token.
    Sentences run shortest first, 64 at a time (the rows' order is that, not the sentences')."""
    sentences = list(sentences)
    ordered = [sentences[i] for i in length_order(model, sentences, BATCH_SIZE)]
    hooks = {layer: LAYER_HOOK.format(layer=layer) for layer in sorted(layers)}
    acts = sae_training.real_token_activations(model, ordered, hooks, batch_size=BATCH_SIZE)
    masks = [real for _, real in prompt_batches(model, ordered, BATCH_SIZE)]
    first = torch.cat([(real.cumsum(1) == 1)[real] for real in masks])
    return acts, first


def layer_quality(sae: SAE, acts: torch.Tensor, first: torch.Tensor) -> dict[str, float]:
    """:func:`~circuitlasso.data.sae_training.sae_quality` of ``sae`` on ``acts: (T, d)``; the
    explained variance of the rows whose norm is at most :data:`MASSIVE` times the median
    (``explained_variance_typical``: the tokens with a massive norm left out); and the median
    norm of the sentences' first real tokens (``first: (T,)``) over the others' (an attention
    sink among the real tokens would make it large)."""
    norms = acts.norm(dim=1)
    typical = norms <= MASSIVE * norms.median()
    typical_quality = sae_training.sae_quality(sae, acts[typical])
    return {
        **sae_training.sae_quality(sae, acts),
        "explained_variance_typical": typical_quality["explained_variance"],
        "first_token_norm_ratio": float(norms[first].median() / norms[~first].median()),
    }


def build_smollm2_saes(
    out_dir: str | Path | None = None,
    cfg: SAEConfig = SAE_CONFIG,
    *,
    model: HookedTransformer | None = None,
    layers: Iterable[int] | None = None,
    progress: bool = True,
) -> Path:
    """Train one SAE of ``cfg`` per layer of ``layers`` (default :data:`SAE_LAYERS`) on the real
    tokens of CoLA's training sentences through ``model`` (default :func:`load_smollm2`), and
    write them with their quality on CoLA's dev sentences (``report.json``) and a manifest to
    ``out_dir`` (default :func:`default_build_dir`), float32, atomically; returns the folder."""
    chosen = sorted(SAE_LAYERS if layers is None else layers)
    sae_training.check_layer_range(chosen, N_LAYERS)
    root = Path(out_dir) if out_dir is not None else default_build_dir(cfg)
    model = model if model is not None else load_smollm2()
    train, train_first = token_activations(model, list(load_cola("train").sentence), chosen)
    dev, dev_first = token_activations(model, list(load_cola("dev").sentence), chosen)
    report = {
        "model": model.cfg.model_name,
        "hook": LAYER_HOOK,
        "prepend_bos": bool(model.cfg.default_prepend_bos),
        "excluded_token_ids": special_token_ids(model),
        "train_sentences": int(train_first.sum()),
        "train_tokens": len(train_first),
        "dev_sentences": int(dev_first.sum()),
        "dev_tokens": len(dev_first),
    }
    return sae_training.build_saes(
        root,
        train,
        chosen,
        cfg,
        hook=LAYER_HOOK,
        score=lambda layer, sae: layer_quality(sae, dev[layer], dev_first),
        report=report,
        command=BUILD_COMMAND,
        config=asdict(cfg),
        progress=progress,
    )


def ship_smollm2_saes(
    build: str | Path,
    out_dir: str | Path | None = None,
    *,
    model: HookedTransformer | None = None,
    layers: Iterable[int] | None = None,
) -> Path:
    """Write ``layers`` (default: every layer it holds) of the build at ``build`` as the shipped
    SAEs at ``out_dir`` (default :func:`shipped_saes_dir`, the package's): weights in float16,
    the quality measured again with them on CoLA's dev sentences through ``model`` (default
    :func:`load_smollm2`), and a manifest
    (:func:`circuitlasso.data.sae_training.ship_saes`). Returns the folder."""

    def scorer(chosen: list[int]) -> sae_training.Scorer:
        decoder = model if model is not None else load_smollm2()
        dev, first = token_activations(decoder, list(load_cola("dev").sentence), chosen)
        return lambda layer, sae: layer_quality(sae, dev[layer], first)

    root = Path(out_dir) if out_dir is not None else shipped_saes_dir()
    return sae_training.ship_saes(Path(build), root, scorer, LAYER_HOOK, layers=layers)


def load_smollm2_saes(
    layers: Iterable[int] | None = None, *, path: str | Path | None = None
) -> dict[int, SAE]:
    """The SAEs by layer (default: every layer of :data:`SAE_LAYERS`), in float32, from the shipped
    build (or the build at ``path``). A layer without an SAE is a ``ValueError`` naming those
    that have one."""
    root = Path(path) if path is not None else shipped_saes_dir()
    if not (root / MANIFEST_FILE).is_file():
        raise FileNotFoundError(
            f"no SmolLM2 SAEs at {root} (no {MANIFEST_FILE}); build and ship them with "
            f"`{BUILD_COMMAND}`"
        )
    held = [int(layer) for layer in sae_training.saes_report(root)["layers"]]
    chosen = _check_layers(held if layers is None else layers, held, f"at {root}")
    return sae_training.load_layer_saes(root, chosen, LAYER_HOOK)


def smollm2_saes_report(path: str | Path | None = None) -> dict[str, Any]:
    """The shipped SAEs' report (or that of the build at ``path``), with the worst layer's
    explained variance and dead share (:func:`~circuitlasso.data.sae_training.saes_report`)."""
    return sae_training.saes_report(Path(path) if path is not None else shipped_saes_dir())
