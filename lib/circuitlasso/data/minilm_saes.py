"""TopK SAEs on every layer of all-MiniLM-L6-v2, trained here with sae-lens on real English.

No SAE of this model is published, so they are trained on the model's per-layer representation
(``blocks.{l}.hook_normalized_resid_post``, see :mod:`circuitlasso.data.minilm`) at the real
tokens (no ``[CLS]``, ``[SEP]`` or padding) of CoLA's 8,551 training sentences, the only English
text available offline here. Training is the one every model's SAEs share
(:func:`circuitlasso.data.sae_training.train_layer_sae`): sae-lens's ``SAETrainer`` on a stream of
shuffled token activations, in rounds; between rounds, latents that never fire are
re-initialized towards poorly reconstructed activations.

A build is seeded and written to a folder (default: under the cache,
:func:`default_saes_dir`, keyed by the configuration) with a ``report.json`` (explained variance
and dead features per layer, on CoLA's in-domain dev sentences) and a ``manifest.json`` (sha256
of every file, seed, versions, command), atomically: a folder either holds a complete build or
none. Another CPU rounds differently, so a rebuild elsewhere gives close, not identical, weights.
A build of the default configuration (every layer) takes about 6 minutes on 2 cores and is
made on first use. The model fine-tuned on CoLA (:mod:`circuitlasso.data.minilm_cola`) adapts
every block, so it has SAEs of its own; :func:`ship_minilm_saes` writes a build's float16 copy
(:func:`circuitlasso.data.sae_training.ship_saes`), as the package ships those.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from sae_lens import SAE
from transformer_lens import HookedEncoder

from circuitlasso.cache import cache_key, cache_root
from circuitlasso.data import sae_training
from circuitlasso.data.artifacts import MANIFEST_FILE
from circuitlasso.data.cola import load_cola
from circuitlasso.data.minilm import LAYER_HOOK, N_LAYERS, load_minilm
from circuitlasso.data.sae_training import SAEConfig

BUILD_COMMAND = "circuitlasso real build"
ALL_LAYERS = tuple(range(N_LAYERS))
SAE_CONFIG = SAEConfig()
"""The sentence model's SAEs' setting: :class:`~circuitlasso.data.sae_training.SAEConfig`'s
defaults, chosen for it."""


def default_saes_dir(cfg: SAEConfig = SAE_CONFIG) -> Path:
    """Where the build of ``cfg`` (every layer) lives: under the cache, keyed by ``cfg``."""
    return cache_root() / "minilm-saes" / cache_key(**cfg.key_parts())[:16]


def token_activations(
    model: HookedEncoder, sentences: list[str], *, batch_size: int = 64
) -> dict[int, torch.Tensor]:
    """``{layer: (T, d_model)}`` float32 representation of every layer at the sentences' ``T``
    real tokens (row-major over sentences, then positions)."""
    hooks = {layer: LAYER_HOOK.format(layer=layer) for layer in ALL_LAYERS}
    return sae_training.real_token_activations(model, sentences, hooks, batch_size=batch_size)


def build_minilm_saes(
    out_dir: str | Path | None = None,
    cfg: SAEConfig = SAE_CONFIG,
    *,
    model: HookedEncoder | None = None,
    layers: list[int] | None = None,
    progress: bool = True,
) -> Path:
    """Train one SAE per layer of ``layers`` (default all) of ``model`` (default the sentence
    model) and write them, with report and manifest, to ``out_dir`` (default:
    :func:`default_saes_dir`); returns the folder. Written to a staging folder and moved into
    place when complete."""
    root = Path(out_dir) if out_dir is not None else default_saes_dir(cfg)
    model = model if model is not None else load_minilm()
    train = token_activations(model, list(load_cola("train").sentence))
    dev = token_activations(model, list(load_cola("dev").sentence))
    chosen = list(range(N_LAYERS)) if layers is None else list(layers)
    return sae_training.build_saes(
        root,
        train,
        chosen,
        cfg,
        hook=LAYER_HOOK,
        score=lambda layer, sae: sae_training.sae_quality(sae, dev[layer]),
        report={"train_tokens": len(train[0]), "dev_tokens": len(dev[0])},
        command=BUILD_COMMAND,
        config=cfg.key_parts(),
        progress=progress,
    )


def ship_minilm_saes(
    build: str | Path,
    out_dir: str | Path,
    *,
    model: HookedEncoder | None = None,
    layers: Iterable[int] | None = None,
) -> Path:
    """Write ``layers`` (default: every layer it holds) of the build at ``build`` (of ``model``,
    default the sentence model) as a shipped build at ``out_dir`` (2.4 MB a layer): each SAE's
    weights rounded to float16, its quality measured again with those weights on CoLA's
    in-domain dev sentences (``report.json``), and a manifest
    (:func:`circuitlasso.data.sae_training.ship_saes`). Returns the folder."""

    def scorer(chosen: list[int]) -> sae_training.Scorer:
        encoder = model if model is not None else load_minilm()
        dev = token_activations(encoder, list(load_cola("dev").sentence))
        return lambda layer, sae: sae_training.sae_quality(sae, dev[layer])

    return sae_training.ship_saes(Path(build), Path(out_dir), scorer, LAYER_HOOK, layers=layers)


def load_minilm_saes(
    layers: Iterable[int] | None = None,
    *,
    path: str | Path | None = None,
    cfg: SAEConfig = SAE_CONFIG,
) -> dict[int, SAE]:
    """The SAEs by layer (default: all six), in float32, from the build at ``path`` (default
    :func:`default_saes_dir` of ``cfg``), built first (:func:`build_minilm_saes`) when the folder
    holds no complete build."""
    chosen = list(ALL_LAYERS if layers is None else layers)
    sae_training.check_layer_range(chosen, N_LAYERS)
    root = Path(path) if path is not None else default_saes_dir(cfg)
    if chosen and not (root / MANIFEST_FILE).is_file():
        build_minilm_saes(root, cfg)
    return sae_training.load_layer_saes(root, chosen, LAYER_HOOK)


def minilm_saes_report(cfg: SAEConfig = SAE_CONFIG) -> dict[str, Any]:
    """The report (:func:`~circuitlasso.data.sae_training.saes_report`) of the SAEs of every
    layer (built first when absent)."""
    load_minilm_saes(ALL_LAYERS, cfg=cfg)
    return sae_training.saes_report(default_saes_dir(cfg))
