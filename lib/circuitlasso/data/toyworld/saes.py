"""One TopK SAE per layer on ``blocks.{l}.hook_resid_post``, trained with sae-lens's own runner.

The runner gets the toy model (``override_model``) and a pre-tokenized data set of one document
per row (``override_dataset``); ``<bos>`` and ``<pad>`` positions are left out of training, so
the SAE sees exactly the token activations a sentence produces at inference time.

Training runs in rounds. Between rounds, latents that never fire on a sample of activations are
re-initialized towards poorly reconstructed activations
(:func:`~circuitlasso.data.sae_training.reinitialize_dead_latents`), and the next round
continues from the resulting SAE (``override_sae``). The toy language has far fewer distinct
contexts than natural text, and without resampling a third or more of the latents never fire.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset
from sae_lens import (
    SAE,
    LanguageModelSAERunnerConfig,
    LanguageModelSAETrainingRunner,
    LoggingConfig,
    TopKTrainingSAEConfig,
)
from sae_lens.saes.sae import TrainingSAE
from transformer_lens import HookedTransformer

from circuitlasso.data.sae_training import reinitialize_dead_latents
from circuitlasso.data.toyworld.artifacts import load_sae, round_saved_sae
from circuitlasso.data.toyworld.lm import resid_hook, residuals

_EXPECTED_WARNINGS = (
    "The training dataset contains fewer samples",
    "All samples in the training dataset",
    "To copy construct from a tensor",
)


@dataclass(frozen=True)
class SAETrainingConfig:
    """TopK SAE width and sparsity, and the training schedule (sae-lens's runner)."""

    expansion: int = 16
    """Latents per dimension of the residual stream."""
    k: int = 32
    """Latents active per token."""
    training_tokens: int = 1_000_000
    """Real tokens, all rounds together, split evenly over ``rounds``."""
    rounds: int = 5
    """Runs of the trainer; dead latents are re-initialized between them."""
    batch_tokens: int = 2048
    lr: float = 1e-3
    """Peak learning rate of each round: ``warmup_steps`` of warm-up, then cosine decay."""
    warmup_steps: int = 20
    dead_feature_window: int = 100
    """Steps without firing after which sae-lens counts a latent as dead."""
    buffer_batches: int = 64
    store_batch_documents: int = 64
    resample_documents: int = 8000
    """Training documents on which dead latents are found and re-initialized."""


def runner_config(
    d_model: int, layer: int, context: int, cfg: SAETrainingConfig, seed: int
) -> LanguageModelSAERunnerConfig:
    """The sae-lens runner configuration of one training round."""
    if cfg.rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {cfg.rounds}")
    tokens = cfg.training_tokens // cfg.rounds
    steps = tokens // cfg.batch_tokens
    if cfg.buffer_batches * context < cfg.batch_tokens:
        raise ValueError(
            f"buffer_batches * context ({cfg.buffer_batches} * {context}) must be at least "
            f"batch_tokens ({cfg.batch_tokens})"
        )
    if steps <= cfg.warmup_steps:
        raise ValueError(f"{steps} steps per round do not exceed warmup_steps={cfg.warmup_steps}")
    return LanguageModelSAERunnerConfig(
        sae=TopKTrainingSAEConfig(d_in=d_model, d_sae=cfg.expansion * d_model, k=cfg.k),
        model_name="circuitlasso-toyworld",
        model_from_pretrained_kwargs={},
        hook_name=resid_hook(layer),
        dataset_path="",
        is_dataset_tokenized=True,
        streaming=False,
        context_size=context,
        prepend_bos=True,
        exclude_special_tokens=True,
        training_tokens=tokens,
        train_batch_size_tokens=cfg.batch_tokens,
        n_batches_in_buffer=cfg.buffer_batches,
        store_batch_size_prompts=cfg.store_batch_documents,
        lr=cfg.lr,
        lr_warm_up_steps=cfg.warmup_steps,
        lr_scheduler_name="cosineannealing",
        lr_decay_steps=steps - cfg.warmup_steps,
        dead_feature_window=cfg.dead_feature_window,
        device="cpu",
        seed=seed,
        logger=LoggingConfig(log_to_wandb=False),
        checkpoint_path=None,
        output_path=None,
        verbose=False,
    )


def train_sae(
    model: HookedTransformer,
    layer: int,
    rows: torch.Tensor,
    cfg: SAETrainingConfig,
    out_dir: Path,
    seed: int,
) -> SAE:
    """Train the SAE of ``layer`` on ``rows: (N, context)`` (one right-padded document per
    row), save it to ``out_dir`` (``cfg.json`` + ``sae_weights.safetensors``, its weights
    rounded to float16) and return it as saved, in float32."""
    if not 0 <= layer < model.cfg.n_layers:
        raise ValueError(f"layer {layer} out of range for a {model.cfg.n_layers}-layer model")
    if rows.ndim != 2:
        raise ValueError(f"rows must be (documents, context); got shape {tuple(rows.shape)}")
    runner_cfg = runner_config(model.cfg.d_model, layer, rows.shape[1], cfg, seed)
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(len(rows), generator=generator)[: cfg.resample_documents]
    sample = residuals(model, list(rows[chosen]), [layer])[0][layer]
    dataset = Dataset.from_dict({"input_ids": rows.tolist()})
    torch.manual_seed(seed)
    with _quiet_runner():
        sae = _run_round(runner_cfg, model, dataset.shuffle(seed=seed), None)
        for round_index in range(1, cfg.rounds):
            reinitialize_dead_latents(sae, sample, generator)
            sae = _run_round(runner_cfg, model, dataset.shuffle(seed=seed + round_index), sae)
    sae.save_inference_model(out_dir)
    round_saved_sae(out_dir)
    return load_sae(out_dir)


def _run_round(
    runner_cfg: LanguageModelSAERunnerConfig,
    model: HookedTransformer,
    dataset: Dataset,
    sae: TrainingSAE | None,
) -> TrainingSAE:
    """One training round of sae-lens's runner, from ``sae`` (or a fresh SAE if None)."""
    runner = LanguageModelSAETrainingRunner(
        runner_cfg, override_model=model, override_dataset=dataset, override_sae=sae
    )
    return runner.run()


@contextmanager
def _quiet_runner() -> Iterator[None]:
    """Silence the runner's notices about the overridden model and data (expected here)."""
    sae_logger = logging.getLogger("sae_lens")
    level = sae_logger.level
    sae_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for message in _EXPECTED_WARNINGS:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        sae_logger.setLevel(level)
