"""One TopK SAE per layer on ``blocks.{l}.hook_resid_post``, trained by the project's one SAE
trainer (:func:`~circuitlasso.data.sae_training.train_layer_sae`, sae-lens's ``SAETrainer`` in
rounds, dead latents re-initialized between them) on the real tokens of a random sample of the
language model's training texts: ``<bos>`` and ``<pad>`` positions are left out, so the SAE
sees exactly the token activations a sentence produces at inference time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformer_lens import HookedTransformer

from circuitlasso.data.sae_training import SAEConfig, real_token_activations, train_layer_sae
from circuitlasso.data.toyworld.artifacts import STORED_DTYPE, sae_dir
from circuitlasso.data.toyworld.lm import resid_hook


def sae_texts(texts: Sequence[str], n_texts: int, seed: int) -> list[str]:
    """``n_texts`` of ``texts`` (all of them if fewer), drawn at random by ``seed``."""
    chosen = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed))
    return [texts[i] for i in chosen[:n_texts].tolist()]


def train_saes(model: HookedTransformer, texts: Sequence[str], cfg: SAEConfig, root: Path) -> None:
    """Train the SAE of every layer of ``model`` on the real tokens of ``texts`` (layer ``l``
    seeded by ``cfg.seed + l``) and save it at ``sae_dir(root, l)``, in sae-lens's format with
    its weights rounded to ``STORED_DTYPE``. One layer's activations are held at a time."""
    for layer in range(model.cfg.n_layers):
        hook = resid_hook(layer)
        acts = real_token_activations(model, texts, {layer: hook})[layer]
        sae = train_layer_sae(acts, layer, cfg, hook)
        sae.to(STORED_DTYPE).save_model(sae_dir(root, layer))
