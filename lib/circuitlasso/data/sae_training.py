"""What SAE training shares across models: the configuration of a model's TopK SAEs
(:class:`SAEConfig`), the activations they are trained on (a model's hooks read at the real tokens
of sentences, :func:`real_token_activations`), one SAE trained with sae-lens's ``SAETrainer`` on
shuffled passes over them in rounds, dead latents re-initialized between rounds (the resampling
of Bricken et al., 2023; :func:`train_layer_sae`), its quality (:func:`sae_quality`), a build of
one SAE per layer written with its report and manifest (:func:`build_saes`), a build's report
(:func:`saes_report`, :func:`combined_report`), its float16 copy with the quality measured again
(:func:`ship_saes`) and the SAEs read back (:func:`load_layer_saes`, from the folders of
:func:`layer_sae_dir`).

The model-specific modules (:mod:`circuitlasso.data.minilm_saes`,
:mod:`circuitlasso.data.smollm2_saes`) choose the hooks, layers, sentences and defaults; the
toy world's SAEs (:mod:`circuitlasso.data.toyworld.saes`) are trained by :func:`train_layer_sae`
too, and written in the toy world's own layout.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from sae_lens import SAE, LoggingConfig, SAETrainer, TopKTrainingSAE, TopKTrainingSAEConfig
from sae_lens.config import SAETrainerConfig
from sae_lens.saes.sae import TrainingSAE
from sae_lens.training import sae_trainer
from tqdm import tqdm

from circuitlasso.data.artifacts import (
    MANIFEST_FILE,
    REPORT_FILE,
    staged_folder,
    write_json,
    write_manifest,
)
from circuitlasso.forward import Model, hook_activations, prompt_batches, to_dense

SHIPPED_DTYPE = torch.float16
"""The dtype of a shipped build's weights (:func:`ship_saes`)."""
B_DEC_INITS = ("zeros", "mean")


@dataclass(frozen=True)
class SAEConfig:
    """Width, sparsity and schedule of a model's SAEs (the same for every layer).

    ``training_tokens`` (all rounds together) are drawn, in shuffled passes, from the training
    sentences' real tokens. ``b_dec_init``: the decoder bias starts at ``"zeros"`` (sae-lens's
    initialization) or at the ``"mean"`` of the training activations (for a residual stream whose
    mean is far from 0: at a learning rate of 1e-2 a bias starting at 0 moves too little in a
    round to reach a mean of hundreds, and latents spend themselves on it). The defaults are
    all-MiniLM-L6-v2's, from a sweep over width, k, tokens and learning rate
    (``benchmarks/real_saes.py``): the smallest setting with an explained variance of at least
    0.8 and at most 10 % dead features on every layer."""

    width: int = 1536
    """Latents."""
    k: int = 32
    """Latents active per token (TopK)."""
    training_tokens: int = 900_000
    rounds: int = 3
    """Runs of sae-lens's trainer; dead latents are re-initialized between them."""
    batch_tokens: int = 512
    lr: float = 1e-2
    seed: int = 0
    """Layer ``l``'s SAE is seeded with ``seed + l``."""
    b_dec_init: str = "zeros"

    def __post_init__(self) -> None:
        if self.b_dec_init not in B_DEC_INITS:
            raise ValueError(f"b_dec_init must be one of {B_DEC_INITS}, got {self.b_dec_init!r}")

    def key_parts(self) -> dict[str, Any]:
        """The fields that name a build (its cache key): all of them, ``b_dec_init`` only when
        it is not ``"zeros"``, so that builds made before it existed keep their keys."""
        parts = asdict(self)
        if parts["b_dec_init"] == "zeros":
            del parts["b_dec_init"]
        return parts


@torch.no_grad()
def real_token_activations(
    model: Model,
    sentences: Sequence[str],
    hooks: Mapping[int, str],
    *,
    batch_size: int = 64,
) -> dict[int, torch.Tensor]:
    """``{layer: (T, d_model)}`` float32 activations at each of ``hooks`` (``{layer: hook
    name}``) at the sentences' ``T`` real tokens (:func:`circuitlasso.forward.prompt_batches`'s
    mask, the tokens the feature collector averages over), row-major over sentences, then
    positions; the model runs up to the last layer asked for."""
    parts: dict[int, list[torch.Tensor]] = {layer: [] for layer in hooks}
    stop = max(hooks) + 1
    for tokens, real in prompt_batches(model, list(sentences), batch_size):
        saved = hook_activations(model, tokens, list(hooks.values()), stop_at_layer=stop)
        for layer, hook in hooks.items():
            parts[layer].append(saved[hook][real.to(saved[hook].device)].float().cpu())
    return {layer: torch.cat(p) for layer, p in parts.items()}


def _batches(acts: torch.Tensor, batch: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless shuffled passes over the rows of ``acts``, ``batch`` rows at a time."""
    while True:
        order = torch.randperm(len(acts), generator=generator)
        for start in range(0, len(order) - batch + 1, batch):
            yield acts[order[start : start + batch]]


def train_layer_sae(acts: torch.Tensor, layer: int, cfg: SAEConfig, hook_name: str) -> SAE:
    """A TopK SAE trained on ``acts: (T, d_model)``, recorded as reading ``hook_name`` (of
    ``layer``), seeded by ``cfg.seed + layer``: its decoder bias set as ``cfg.b_dec_init`` says,
    then ``cfg.rounds`` runs of sae-lens's trainer, dead latents re-initialized
    (:func:`reinitialize_dead_latents`) before each but the first."""
    if cfg.rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {cfg.rounds}")
    generator = torch.Generator().manual_seed(cfg.seed + layer)
    torch.manual_seed(cfg.seed + layer)
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=acts.shape[1], d_sae=cfg.width, k=cfg.k))
    if cfg.b_dec_init == "mean":
        with torch.no_grad():
            sae.b_dec.copy_(acts.mean(0))
    steps = cfg.training_tokens // cfg.rounds // cfg.batch_tokens
    trainer_cfg = SAETrainerConfig(
        total_training_samples=steps * cfg.batch_tokens,
        train_batch_size_samples=cfg.batch_tokens,
        lr=cfg.lr,
        lr_end=cfg.lr / 10,
        lr_scheduler_name="cosineannealing",
        lr_decay_steps=steps,
        dead_feature_window=steps,
        feature_sampling_window=steps,
        device="cpu",
        logger=LoggingConfig(log_to_wandb=False),
    )
    # sae-lens's bar is tqdm.auto's, a widget in a notebook: plain text here, as the library's
    with mock.patch.object(sae_trainer, "tqdm", tqdm):
        for round_index in range(cfg.rounds):
            if round_index:
                reinitialize_dead_latents(sae, acts, generator)
            sae = SAETrainer(
                trainer_cfg, sae, data_provider=_batches(acts, cfg.batch_tokens, generator)
            ).fit()
    sae.cfg.metadata.hook_name = hook_name
    with tempfile.TemporaryDirectory() as tmp:
        sae.save_inference_model(tmp)
        return SAE.load_from_disk(tmp, device="cpu").eval()


@torch.no_grad()
def reinitialize_dead_latents(
    sae: TrainingSAE, sample: torch.Tensor, generator: torch.Generator
) -> int:
    """Re-initialize the latents of ``sae`` that never fire on ``sample: (n, d_in)``.

    Each dead latent gets the direction of a sample activation (relative to ``b_dec``) drawn
    with probability proportional to its squared reconstruction error, as decoder row and
    encoder column, scaled to the mean norms of the live latents; its encoder bias becomes the
    live latents' mean. Returns the number of latents re-initialized.
    """
    fired = torch.zeros(sae.cfg.d_sae, dtype=torch.bool)
    errors = []
    for start in range(0, len(sample), 4096):
        batch = sample[start : start + 4096]
        features = sae.encode(batch)
        fired |= (features > 0).any(0)
        errors.append(((sae.decode(features) - batch) ** 2).sum(-1))
    dead = (~fired).nonzero()[:, 0]
    if len(dead) == 0 or not fired.any():
        return 0
    picked = torch.multinomial(torch.cat(errors), len(dead), replacement=False, generator=generator)
    directions = sample[picked] - sae.b_dec
    directions /= directions.norm(dim=-1, keepdim=True).clamp(min=1e-8)
    sae.W_dec[dead] = directions * sae.W_dec[fired].norm(dim=-1).mean()
    sae.W_enc[:, dead] = directions.T * sae.W_enc[:, fired].norm(dim=0).mean()
    sae.b_enc[dead] = sae.b_enc[fired].mean()
    return len(dead)


QUALITY_BATCH = 4096
"""Rows encoded at a time by :func:`sae_quality` (its memory does not grow with ``T``)."""


@torch.no_grad()
def sae_quality(sae: SAE, acts: torch.Tensor) -> dict[str, float]:
    """Explained variance of ``acts: (T, d)`` by the SAE's reconstruction (1 - SSE over the sum
    of squares about the mean), the share of its features that never fire on them, and its mean
    number of active features (L0); encoded :data:`QUALITY_BATCH` rows at a time."""
    sse, active = 0.0, 0
    fired = torch.zeros(sae.cfg.d_sae, dtype=torch.bool)
    for start in range(0, len(acts), QUALITY_BATCH):
        batch = acts[start : start + QUALITY_BATCH]
        z = to_dense(sae.encode(batch))
        sse += float(((sae.decode(z) - batch) ** 2).sum())
        fired |= (z > 0).any(0).cpu()
        active += int((z > 0).sum())
    total = float(((acts - acts.mean(0)) ** 2).sum())
    return {
        "explained_variance": 1 - sse / total,
        "dead_fraction": 1 - float(fired.float().mean()),
        "l0": active / len(acts),
    }


Scorer = Callable[[int, SAE], dict[str, float]]
"""The quality of a layer's SAE on held-out activations (e.g. :func:`sae_quality` on them)."""


def build_saes(
    root: Path,
    train: Mapping[int, torch.Tensor],
    layers: Sequence[int],
    cfg: SAEConfig,
    *,
    hook: str,
    score: Scorer,
    report: Mapping[str, Any],
    command: str,
    config: Mapping[str, Any],
    progress: bool = True,
) -> Path:
    """Train one SAE of ``cfg`` per layer of ``layers`` on ``train[layer]: (T, d)``, read at the
    hook ``hook.format(layer=layer)``, and write the build at ``root``, atomically: each SAE in
    ``layer_sae_dir(root, hook, layer)``, ``report.json`` (``config``, then ``report``, then each
    layer's ``score(layer, sae)``) and a manifest (``cfg``'s seed, ``command``, ``config``).
    Returns ``root``."""
    with staged_folder(root) as stage:
        quality = {}
        for layer in tqdm(layers, desc="SAEs", unit="layer", disable=not progress):
            sae = train_layer_sae(train[layer], layer, cfg, hook.format(layer=layer))
            sae.save_model(layer_sae_dir(stage, hook, layer))
            quality[layer] = score(layer, sae)
        write_json(stage / REPORT_FILE, {"config": config, **report, "layers": quality})
        write_manifest(stage, {"seed": cfg.seed, "command": command, "config": config})
    return root


def ship_saes(
    build: Path,
    out_dir: Path,
    scorer: Callable[[list[int]], Scorer],
    hook: str,
    *,
    layers: Iterable[int] | None = None,
) -> Path:
    """Write ``layers`` (default: every layer it holds) of the build at ``build`` (SAEs of the hook
    ``hook`` in ``layer_sae_dir(build, hook, layer)``, a ``report.json`` and a manifest) as a
    shipped build at ``out_dir``: each SAE's weights rounded to :data:`SHIPPED_DTYPE`, its quality
    measured again with those weights by ``scorer(layers)`` (called once the layers are checked),
    and a manifest with the build's seed, command and config. Returns the folder."""
    built = json.loads((build / REPORT_FILE).read_text())
    held = sorted(int(layer) for layer in built["layers"])
    chosen = held if layers is None else sorted(layers)
    missing = sorted(set(chosen) - set(held))
    if missing:
        raise ValueError(f"the build at {build} has no SAE for layers {missing}")
    score = scorer(chosen)
    with staged_folder(out_dir) as stage:
        quality = {}
        for layer in chosen:
            sae = SAE.load_from_disk(layer_sae_dir(build, hook, layer), device="cpu")
            sae.to(SHIPPED_DTYPE).save_model(layer_sae_dir(stage, hook, layer))
            folder = layer_sae_dir(stage, hook, layer)
            shipped = SAE.load_from_disk(folder, device="cpu", dtype="float32")
            quality[layer] = score(layer, shipped)
        write_json(stage / REPORT_FILE, {**built, "weights": "float16", "layers": quality})
        info = json.loads((build / MANIFEST_FILE).read_text())
        write_manifest(stage, {k: info[k] for k in ("seed", "command", "config")})
    return out_dir


def layer_sae_dir(root: Path, hook: str, layer: int) -> Path:
    """Where the build at ``root`` keeps the SAE of ``layer``: ``saes/`` and the name of the hook
    it reads (``hook.format(layer=layer)``)."""
    return root / "saes" / hook.format(layer=layer)


def check_layer_range(layers: Iterable[int], n_layers: int) -> None:
    """A ``ValueError`` naming the ``layers`` outside a model of ``n_layers`` layers, if any."""
    bad = [layer for layer in layers if not 0 <= layer < n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range: the model has {n_layers} layers")


def load_layer_saes(root: Path, layers: Iterable[int], hook: str) -> dict[int, SAE]:
    """``{layer: SAE}`` in float32, in eval mode, read from ``layer_sae_dir(root, hook, layer)``."""
    return {
        layer: SAE.load_from_disk(
            layer_sae_dir(root, hook, layer), device="cpu", dtype="float32"
        ).eval()
        for layer in layers
    }


def saes_report(root: str | Path, layers: Iterable[int] | None = None) -> dict[str, Any]:
    """The build's ``report.json`` (its ``layers`` cut to ``layers``, default all it holds),
    with its worst layer's explained variance and dead share (:func:`combined_report`)."""
    report = json.loads((Path(root) / REPORT_FILE).read_text())
    if layers is not None:
        report["layers"] = {str(layer): report["layers"][str(layer)] for layer in layers}
    return combined_report([report])


def combined_report(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first of ``reports`` with the ``layers`` of all of them, and their worst layer's
    explained variance (``sae_explained_variance_min``) and dead share
    (``sae_dead_fraction_max``)."""
    by_layer = {int(k): v for report in reports for k, v in report["layers"].items()}
    layers = {str(layer): by_layer[layer] for layer in sorted(by_layer)}
    return {
        **reports[0],
        "layers": layers,
        "sae_explained_variance_min": min(q["explained_variance"] for q in layers.values()),
        "sae_dead_fraction_max": max(q["dead_fraction"] for q in layers.values()),
    }
