"""TopK SAEs on a real decoder's residual stream, trained here and shipped in the package.

What the decoders' SAE sets share (:class:`DecoderSAEs` names one: its model, layers, setting,
package folder and build command; :mod:`circuitlasso.data.smollm2_saes` and
:mod:`circuitlasso.data.gemma3_saes` each define theirs). An SAE reads
``blocks.{l}.hook_resid_post`` (a block's output) and is trained on the real tokens of CoLA's
8,551 training sentences, the English text available offline, with the training every model's
SAEs share (:func:`circuitlasso.data.sae_training.train_layer_sae`); its quality is measured on
CoLA's in-domain dev sentences, held out.

Tokens: an SAE encodes, at collection (:func:`circuitlasso.collect.features.
collect_sae_features`), the positions that :func:`circuitlasso.forward.prompt_batches` marks
real, and it is trained on exactly those (:func:`token_activations`): the model's BOS (an
attention sink, its residual norm many times the words') is a special id, left out. The report
records per layer the median norm of the first real token over the others'
(``first_token_norm_ratio``, near 1 when no sink is among the real tokens), whether a BOS was
prepended and which ids were left out (``prepend_bos``, ``excluded_token_ids``), and the
explained variance without the tokens whose norm is over :data:`MASSIVE` times the median
(``explained_variance_typical``).

Builds: :func:`build_decoder_saes` trains and writes a seeded build (float32, by default under
the cache, :func:`default_build_dir`) with ``report.json`` and ``manifest.json``, atomically
(:func:`circuitlasso.data.artifacts.staged_folder`); :func:`ship_decoder_saes` writes its float16
copy with the quality measured again with the float16 weights, by default into the package (read
through ``importlib.resources``, so a wheel carries them). :func:`load_decoder_saes` reads the
shipped ones; the book never trains them. Another CPU rounds differently: a rebuild elsewhere
gives close, not identical, weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
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
from circuitlasso.forward import length_order, prompt_batches, special_token_ids

LAYER_HOOK = "blocks.{layer}.hook_resid_post"
BATCH_SIZE = 64
MASSIVE = 5.0
"""A token's residual norm over the median that counts as massive (:func:`layer_quality`)."""


@dataclass(frozen=True)
class DecoderSAEs:
    """One decoder's SAE set: ``model`` (its :func:`~circuitlasso.data.models.load_model` name),
    the ``layers`` with an SAE out of ``n_layers``, the training setting ``config``, the package
    data folder ``shipped_dir`` (under ``circuitlasso/data``), the CLI ``command`` that builds
    and ships them, the ``model_sha256`` of the weights' file (it keys a build) and ``load``,
    which loads the model."""

    model: str
    layers: tuple[int, ...]
    n_layers: int
    config: SAEConfig
    shipped_dir: str
    build_dir: str
    command: str
    model_sha256: str
    load: Callable[[], HookedTransformer]

    def check_layers(self, layers: Iterable[int], held: Sequence[int], where: str) -> list[int]:
        """``layers`` as a list; a ``ValueError`` naming those of them not in ``held``."""
        chosen = list(layers)
        missing = [layer for layer in chosen if layer not in held]
        if missing:
            raise ValueError(
                f"no {self.model} SAE for layers {missing} {where}: SAEs read blocks.<layer>."
                f"hook_resid_post of layers {list(held)}"
            )
        return chosen


def shipped_saes_dir(saes: DecoderSAEs) -> Path:
    """The float16 SAEs shipped with the package (:func:`ship_decoder_saes`)."""
    root = resources.files("circuitlasso.data") / saes.shipped_dir
    if not isinstance(root, Path):  # a zipped install
        raise FileNotFoundError(f"the shipped {saes.model} SAEs at {root} are not a folder on disk")
    return root


def default_build_dir(saes: DecoderSAEs, cfg: SAEConfig | None = None) -> Path:
    """Where a float32 build of ``cfg`` (default the set's own; every layer of the set) is
    written by default: under the cache, keyed by ``cfg``, the layers and the model's file."""
    cfg = saes.config if cfg is None else cfg
    key = cache_key(**cfg.key_parts(), layers=list(saes.layers), gguf=saes.model_sha256)
    return cache_root() / saes.build_dir / key[:16]


def token_activations(
    model: HookedTransformer, sentences: Sequence[str], layers: Sequence[int]
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """``{layer: (T, d_model)}`` float32 residual stream after each block of ``layers`` at the
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


def build_decoder_saes(
    saes: DecoderSAEs,
    out_dir: str | Path | None = None,
    cfg: SAEConfig | None = None,
    *,
    model: HookedTransformer | None = None,
    layers: Iterable[int] | None = None,
    progress: bool = True,
) -> Path:
    """Train one SAE of ``cfg`` (default the set's) per layer of ``layers`` (default the set's)
    on the real tokens of CoLA's training sentences through ``model`` (default ``saes.load()``),
    and write them with their quality on CoLA's dev sentences (``report.json``) and a manifest
    to ``out_dir`` (default :func:`default_build_dir`), float32, atomically; returns the folder."""
    cfg = saes.config if cfg is None else cfg
    chosen = sorted(saes.layers if layers is None else layers)
    sae_training.check_layer_range(chosen, saes.n_layers)
    root = Path(out_dir) if out_dir is not None else default_build_dir(saes, cfg)
    model = model if model is not None else saes.load()
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
        command=saes.command,
        config=asdict(cfg),
        progress=progress,
    )


def ship_decoder_saes(
    saes: DecoderSAEs,
    build: str | Path,
    out_dir: str | Path | None = None,
    *,
    model: HookedTransformer | None = None,
    layers: Iterable[int] | None = None,
) -> Path:
    """Write ``layers`` (default: every layer it holds) of the build at ``build`` as the shipped
    SAEs at ``out_dir`` (default :func:`shipped_saes_dir`, the package's): weights in float16,
    the quality measured again with them on CoLA's dev sentences through ``model`` (default
    ``saes.load()``), and a manifest (:func:`circuitlasso.data.sae_training.ship_saes`).
    Returns the folder."""

    def scorer(chosen: list[int]) -> sae_training.Scorer:
        decoder = model if model is not None else saes.load()
        dev, first = token_activations(decoder, list(load_cola("dev").sentence), chosen)
        return lambda layer, sae: layer_quality(sae, dev[layer], first)

    root = Path(out_dir) if out_dir is not None else shipped_saes_dir(saes)
    return sae_training.ship_saes(Path(build), root, scorer, LAYER_HOOK, layers=layers)


def load_decoder_saes(
    saes: DecoderSAEs, layers: Iterable[int] | None = None, *, path: str | Path | None = None
) -> dict[int, SAE]:
    """The SAEs by layer (default: every layer of the set), in float32, from the shipped build
    (or the build at ``path``). A layer without an SAE is a ``ValueError`` naming those that
    have one."""
    root = Path(path) if path is not None else shipped_saes_dir(saes)
    if not (root / MANIFEST_FILE).is_file():
        raise FileNotFoundError(
            f"no {saes.model} SAEs at {root} (no {MANIFEST_FILE}); build and ship them with "
            f"`{saes.command}`"
        )
    held = [int(layer) for layer in sae_training.saes_report(root)["layers"]]
    chosen = saes.check_layers(held if layers is None else layers, held, f"at {root}")
    return sae_training.load_layer_saes(root, chosen, LAYER_HOOK)


def decoder_saes_report(saes: DecoderSAEs, path: str | Path | None = None) -> dict[str, Any]:
    """The shipped SAEs' report (or that of the build at ``path``), with the worst layer's
    explained variance and dead share (:func:`~circuitlasso.data.sae_training.saes_report`)."""
    return sae_training.saes_report(Path(path) if path is not None else shipped_saes_dir(saes))
