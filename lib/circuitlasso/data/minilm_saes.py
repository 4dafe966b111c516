"""TopK SAEs on every layer of all-MiniLM-L6-v2, trained here with sae-lens on real English.

No SAE of this model is published, so they are trained on the model's per-layer representation
(``blocks.{l}.hook_normalized_resid_post``, see :mod:`circuitlasso.data.minilm`) at the real
tokens (no ``[CLS]``, ``[SEP]`` or padding) of CoLA's 8,551 training sentences, the only English
text available offline here. Training uses sae-lens's ``SAETrainer`` on a stream of shuffled
token activations, in rounds: between rounds, latents that never fire are re-initialized towards
poorly reconstructed activations (as for the toy world's SAEs,
:func:`circuitlasso.data.sae_training.reinitialize_dead_latents`).

A build is seeded and written to a folder (default: under the cache,
:func:`default_saes_dir`, keyed by the configuration) with a ``report.json`` (explained variance
and dead features per layer, on CoLA's in-domain dev sentences) and a ``manifest.json`` (sha256
of every file, seed, versions, command), atomically: a folder either holds a complete build or
none. Another CPU rounds differently, so a rebuild elsewhere gives close, not identical, weights.
A build of the default configuration (every layer) takes about 6 minutes on 2 cores and is
made on first use. The model fine-tuned on CoLA (:mod:`circuitlasso.data.minilm_cola`) adapts
every block, so it has SAEs of its own; :func:`ship_minilm_saes` writes a build's float16 copy,
as the package ships those.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from sae_lens import SAE, LoggingConfig, SAETrainer, TopKTrainingSAE, TopKTrainingSAEConfig
from sae_lens.config import SAETrainerConfig
from tqdm.auto import tqdm
from transformer_lens import HookedEncoder

from circuitlasso.cache import cache_key, cache_root
from circuitlasso.data.artifacts import (
    MANIFEST_FILE,
    REPORT_FILE,
    staged_folder,
    write_json,
    write_manifest,
)
from circuitlasso.data.cola import load_cola
from circuitlasso.data.minilm import LAYER_HOOK, N_LAYERS, load_minilm
from circuitlasso.data.sae_training import reinitialize_dead_latents
from circuitlasso.forward import hook_activations, prompt_batches, to_dense

BUILD_COMMAND = "circuitlasso real build"


@dataclass(frozen=True)
class MiniLMSAEConfig:
    """Width, sparsity and schedule of the SAEs (the same for every layer).

    ``training_tokens`` (all rounds together) are drawn, in shuffled passes, from the training
    sentences' real tokens (about 80,000 per layer). The defaults come from a sweep over width,
    k, tokens and learning rate (``benchmarks/real_saes.py``): the smallest setting with an
    explained variance of at least 0.8 and at most 10 % dead features on every layer."""

    width: int = 1536
    k: int = 32
    training_tokens: int = 900_000
    rounds: int = 3
    batch_tokens: int = 512
    lr: float = 1e-2
    seed: int = 0


SHIPPED_DTYPE = torch.float16
"""The dtype of a shipped build's weights (:func:`ship_minilm_saes`)."""
ALL_LAYERS = tuple(range(N_LAYERS))


def default_saes_dir(cfg: MiniLMSAEConfig = MiniLMSAEConfig()) -> Path:
    """Where the build of ``cfg`` (every layer) lives: under the cache, keyed by ``cfg``."""
    return cache_root() / "minilm-saes" / cache_key(**asdict(cfg))[:16]


def sae_dir(root: Path, layer: int) -> Path:
    return root / "saes" / LAYER_HOOK.format(layer=layer)


@torch.no_grad()
def token_activations(
    model: HookedEncoder, sentences: list[str], *, batch_size: int = 64
) -> dict[int, torch.Tensor]:
    """``{layer: (T, d_model)}`` float32 representation of every layer at the sentences' ``T``
    real tokens (row-major over sentences, then positions)."""
    hooks = [LAYER_HOOK.format(layer=layer) for layer in range(N_LAYERS)]
    parts: dict[int, list[torch.Tensor]] = {layer: [] for layer in range(N_LAYERS)}
    for tokens, real in prompt_batches(model, sentences, batch_size):
        saved = hook_activations(model, tokens, hooks, stop_at_layer=N_LAYERS)
        for layer, hook in enumerate(hooks):
            parts[layer].append(saved[hook][real.to(saved[hook].device)].float().cpu())
    return {layer: torch.cat(p) for layer, p in parts.items()}


def _batches(acts: torch.Tensor, batch: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless shuffled passes over the rows of ``acts``, ``batch`` rows at a time."""
    while True:
        order = torch.randperm(len(acts), generator=generator)
        for start in range(0, len(order) - batch + 1, batch):
            yield acts[order[start : start + batch]]


def train_layer_sae(acts: torch.Tensor, layer: int, cfg: MiniLMSAEConfig) -> SAE:
    """A TopK SAE trained on ``acts: (T, d_model)``, reading ``LAYER_HOOK`` of ``layer``."""
    if cfg.rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {cfg.rounds}")
    generator = torch.Generator().manual_seed(cfg.seed + layer)
    torch.manual_seed(cfg.seed + layer)
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=acts.shape[1], d_sae=cfg.width, k=cfg.k))
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
    for round_index in range(cfg.rounds):
        if round_index:
            reinitialize_dead_latents(sae, acts, generator)
        sae = SAETrainer(
            trainer_cfg, sae, data_provider=_batches(acts, cfg.batch_tokens, generator)
        ).fit()
    sae.cfg.metadata.hook_name = LAYER_HOOK.format(layer=layer)
    with tempfile.TemporaryDirectory() as tmp:
        sae.save_inference_model(tmp)
        return SAE.load_from_disk(tmp, device="cpu").eval()


@torch.no_grad()
def sae_quality(sae: SAE, acts: torch.Tensor) -> dict[str, float]:
    """Explained variance of ``acts: (T, d)`` by the SAE's reconstruction, and the share of
    its features that never fire on them."""
    z = to_dense(sae.encode(acts))
    residual = ((sae.decode(z) - acts) ** 2).sum()
    total = ((acts - acts.mean(0)) ** 2).sum()
    return {
        "explained_variance": float(1 - residual / total),
        "dead_fraction": float((z > 0).any(0).logical_not().float().mean()),
        "l0": float((z > 0).sum(1).float().mean()),
    }


def build_minilm_saes(
    out_dir: str | Path | None = None,
    cfg: MiniLMSAEConfig = MiniLMSAEConfig(),
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
    with staged_folder(root) as stage:
        quality = {}
        for layer in tqdm(chosen, desc="SAEs", unit="layer", disable=not progress):
            sae = train_layer_sae(train[layer], layer, cfg)
            sae.save_model(sae_dir(stage, layer))
            quality[layer] = sae_quality(sae, dev[layer])
        tokens = {"train_tokens": len(train[0]), "dev_tokens": len(dev[0])}
        write_json(stage / REPORT_FILE, {"config": asdict(cfg), **tokens, "layers": quality})
        write_manifest(stage, {"seed": cfg.seed, "command": BUILD_COMMAND, "config": asdict(cfg)})
    return root


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
    in-domain dev sentences (``report.json``), and a manifest. Returns the folder."""
    build = Path(build)
    root = Path(out_dir)
    built = json.loads((build / REPORT_FILE).read_text())
    held = sorted(int(layer) for layer in built["layers"])
    chosen = held if layers is None else sorted(layers)
    missing = sorted(set(chosen) - set(held))
    if missing:
        raise ValueError(f"the build at {build} has no SAE for layers {missing}")
    model = model if model is not None else load_minilm()
    dev = token_activations(model, list(load_cola("dev").sentence))
    with staged_folder(root) as stage:
        quality = {}
        for layer in chosen:
            sae = SAE.load_from_disk(sae_dir(build, layer), device="cpu")
            sae.to(SHIPPED_DTYPE).save_model(sae_dir(stage, layer))
            shipped = SAE.load_from_disk(sae_dir(stage, layer), device="cpu", dtype="float32")
            quality[layer] = sae_quality(shipped, dev[layer])
        write_json(stage / REPORT_FILE, {**built, "weights": "float16", "layers": quality})
        info = json.loads((build / MANIFEST_FILE).read_text())
        write_manifest(stage, {k: info[k] for k in ("seed", "command", "config")})
    return root


def load_minilm_saes(
    layers: Iterable[int] | None = None,
    *,
    path: str | Path | None = None,
    cfg: MiniLMSAEConfig = MiniLMSAEConfig(),
) -> dict[int, SAE]:
    """The SAEs by layer (default: all six), in float32, from the build at ``path`` (default
    :func:`default_saes_dir` of ``cfg``), built first (:func:`build_minilm_saes`) when the folder
    holds no complete build."""
    chosen = list(ALL_LAYERS if layers is None else layers)
    bad = [layer for layer in chosen if not 0 <= layer < N_LAYERS]
    if bad:
        raise ValueError(f"layers {bad} out of range: the model has {N_LAYERS} layers")
    root = Path(path) if path is not None else default_saes_dir(cfg)
    if chosen and not (root / MANIFEST_FILE).is_file():
        build_minilm_saes(root, cfg)
    return {
        layer: SAE.load_from_disk(sae_dir(root, layer), device="cpu", dtype="float32").eval()
        for layer in chosen
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


def minilm_saes_report(cfg: MiniLMSAEConfig = MiniLMSAEConfig()) -> dict[str, Any]:
    """The report (:func:`saes_report`) of the SAEs of every layer (built first when absent)."""
    load_minilm_saes(ALL_LAYERS, cfg=cfg)
    return saes_report(default_saes_dir(cfg))
