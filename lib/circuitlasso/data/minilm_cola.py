"""all-MiniLM-L6-v2 fine-tuned on CoLA: the real encoder with an acceptability decision.

The sentence encoder was trained for sentence similarity, and its last layer does not carry CoLA's
label linearly (a readout and a dense probe stay at the majority class), so a circuit of its label
readout explains a decision the model does not make. Fine-tuning on the task, the standard way a
BERT-family model does CoLA (GLUE), gives it one: the top ``trained_layers`` blocks and a linear
head on the mean of the last layer's real-token states (the token average every feature in this
library is, so the label readout ``A_{L,y}`` reads what the head reads) are trained with AdamW on
CoLA's in-domain training sentences, less a seeded validation share (the blocks in full, or with
``lora_rank`` as a low-rank update of each of their linear maps, which a build stores in a fraction
of the space; by default all six blocks, at rank 8); the embeddings, and the blocks below the
trained ones, stay as they were. The learning rate and the number of epochs are chosen on the
validation share by Matthews correlation (CoLA's GLUE metric), never on the dev set the chapters
report.

A build is seeded and written to a folder under the cache (:func:`default_finetune_dir`, keyed
by the configuration): the trained blocks' and the head's weights (``weights.safetensors``, HF
names), ``report.json`` (the sweep, the choice, the dev accuracy and MCC) and ``manifest.json``,
atomically. Training runs on the CPU with torch's deterministic algorithms; another thread
count or CPU rounds differently, so a rebuild elsewhere gives close, not identical, weights.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from sae_lens import SAE
from safetensors.torch import load_file, save_file
from sklearn.metrics import matthews_corrcoef
from tqdm import tqdm
from transformer_lens import HookedEncoder
from transformers import BertModel, BertTokenizer

from circuitlasso.cache import cache_key, cache_root
from circuitlasso.data.artifacts import (
    MANIFEST_FILE,
    REPORT_FILE,
    staged_folder,
    write_json,
    write_manifest,
)
from circuitlasso.data.cola import load_cola
from circuitlasso.data.minilm import LAYER_HOOK, N_LAYERS, load_minilm, minilm_hf, minilm_tokenizer
from circuitlasso.data.minilm_saes import (
    build_minilm_saes,
    default_saes_dir,
    load_minilm_saes,
    ship_minilm_saes,
)
from circuitlasso.data.sae_training import SAEConfig, combined_report, saes_report
from circuitlasso.forward import hook_activations, mean_over_real, prompt_batches, special_ids

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel

NAME = "all-minilm-l6-v2-cola"
BUILD_COMMAND = "circuitlasso real finetune"
WEIGHTS_FILE = "weights.safetensors"
HEAD = "head."
PEFT_PREFIX = "base_model.model."
"""What ``peft`` puts before the names of the model it adapts."""
SHIPPED_DIR = "minilm_cola_built"
"""The package data folder (under ``circuitlasso/data``) of the shipped build."""
SAE_CONFIG = SAEConfig(k=48, training_tokens=1_800_000)
"""The SAEs of the fine-tuned model's trained blocks: a fine-tuned last block is harder to
reconstruct than the sentence model's layers (at their setting, k 32 and 900,000 tokens, the
top-two-blocks model's explained 0.766 of its variance); the cheapest setting of the sweep
(``benchmarks/real_saes.py --finetuned``) that meets 0.8 at the same width. On the default
build every layer explains at least 0.81 with under 1 % dead latents."""


SWEEP_LEARNING_RATES = (5e-4, 1e-3)
SWEEP_EPOCHS = 5


@dataclass(frozen=True)
class FinetuneConfig:
    """What is trained and how. The defaults of ``learning_rate`` and ``epochs`` are the best
    validation MCC (0.319) of :func:`sweep` over :data:`SWEEP_LEARNING_RATES` and 1 to
    :data:`SWEEP_EPOCHS` epochs (``circuitlasso real finetune --sweep`` prints the table). Fewer
    trained blocks learn less: the top two in full reached at most 0.246, all six in full 0.353
    at 21 MB, against 0.66 MB for the rank-8 update."""

    trained_layers: int = 6
    lora_rank: int = 8
    """0: the trained blocks learn every weight. r > 0: each linear map of theirs keeps its
    weight W and learns a rank-r update, W + 2 B A (LoRA with alpha 2r, ``peft``); a build stores
    the factors A and B, and reading it adds the update to the sentence model's weights."""
    learning_rate: float = 5e-4
    epochs: int = 4
    batch_size: int = 32
    weight_decay: float = 0.01
    validation_share: float = 0.1
    seed: int = 0

    @property
    def trained_blocks(self) -> list[int]:
        """The indices of the trained blocks, the top ``trained_layers`` of the six."""
        return list(range(N_LAYERS - self.trained_layers, N_LAYERS))


class AcceptabilityClassifier(torch.nn.Module):
    """The encoder and a linear head on the mean of its last layer's real-token states:
    ``(B, P)`` token ids and attention mask -> ``(B, 2)`` logits."""

    def __init__(self, encoder: BertModel, tokenizer: BertTokenizer) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = torch.nn.Linear(encoder.config.hidden_size, 2)
        self.special = torch.tensor(special_ids(tokenizer))

    def forward(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        states = self.encoder(input_ids=ids, attention_mask=attention).last_hidden_state
        real = ~torch.isin(ids, self.special)
        return self.head(mean_over_real(states, real, dtype=states.dtype))


def default_finetune_dir(cfg: FinetuneConfig = FinetuneConfig()) -> Path:
    """The cache folder of the build of ``cfg``."""
    return cache_root() / "minilm-cola" / cache_key(**asdict(cfg))[:16]


def validation_split(n: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded (train, validation) row indices of ``n`` rows, ``share`` of them for validation."""
    if not 0 < share < 1:
        raise ValueError(f"validation_share must be in (0, 1), got {share}")
    order = np.random.default_rng(seed).permutation(n)
    cut = int(round(n * share))
    return np.sort(order[cut:]), np.sort(order[:cut])


def _trainable(classifier: AcceptabilityClassifier, trained_layers: int) -> list[str]:
    """Freeze all but the head and the top ``trained_layers`` blocks; their parameter names."""
    n_layers = classifier.encoder.config.num_hidden_layers
    if not 1 <= trained_layers <= n_layers:
        raise ValueError(f"trained_layers must be in 1..{n_layers}, got {trained_layers}")
    prefixes = [f"encoder.encoder.layer.{i}." for i in range(n_layers - trained_layers, n_layers)]
    names = []
    for name, parameter in classifier.named_parameters():
        parameter.requires_grad = name.startswith(HEAD) or name.startswith(tuple(prefixes))
        if parameter.requires_grad:
            names.append(name)
    return names


def _lora_config(cfg: FinetuneConfig) -> LoraConfig:
    """LoRA of rank ``cfg.lora_rank`` on every linear map of the trained blocks (of the
    classifier or of a bare ``BertModel`` alike)."""
    from peft import LoraConfig  # here: peft takes seconds to import, and only LoRA needs it

    blocks = "|".join(str(i) for i in cfg.trained_blocks)
    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=2 * cfg.lora_rank,
        lora_dropout=0.0,
        target_modules=rf"(.*\.)?encoder\.layer\.({blocks})\..*(query|key|value|dense)",
    )


def _adapted(model: torch.nn.Module, cfg: FinetuneConfig) -> PeftModel:
    """``model`` with LoRA adapters of ``cfg`` (``peft``), whose deprecation warning from
    transformers (a renamed attribute it reads) is not the user's to act on."""
    from peft import get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
        return get_peft_model(model, _lora_config(cfg))


def _readable_weights(
    stored: dict[str, torch.Tensor], cfg: FinetuneConfig
) -> dict[str, torch.Tensor]:
    """A build's stored tensors as float32 weights: the trained blocks' under their
    ``BertModel`` names and the head's under ``head.``; LoRA factors are added to the sentence
    model's weights first (merged, as ``peft`` merges them)."""
    weights = {n: w.float() for n, w in stored.items()}
    if not cfg.lora_rank:
        return weights
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    model = _adapted(minilm_hf(), cfg)
    adapters = {PEFT_PREFIX + n: w for n, w in weights.items() if not n.startswith(HEAD)}
    expected = set(get_peft_model_state_dict(model, save_embedding_layers=False))
    if set(adapters) != expected:
        odd = sorted(set(adapters) ^ expected)[:3]
        raise ValueError(f"the build's LoRA factors do not match the model's layers: {odd}")
    set_peft_model_state_dict(model, adapters)
    merged = model.merge_and_unload().state_dict()
    blocks = tuple(f"encoder.layer.{i}." for i in cfg.trained_blocks)
    head = {n: w for n, w in weights.items() if n.startswith(HEAD)}
    return {**{n: w for n, w in merged.items() if n.startswith(blocks)}, **head}


def _batches(
    tokenizer: BertTokenizer, sentences: list[str], size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded (ids, attention) batches of ``sentences`` in the order given."""
    out = []
    for start in range(0, len(sentences), size):
        encoded = tokenizer(sentences[start : start + size], padding=True, return_tensors="pt")
        out.append((encoded["input_ids"], encoded["attention_mask"]))
    return out


@torch.no_grad()
def predict(
    classifier: torch.nn.Module, tokenizer: BertTokenizer, sentences: list[str]
) -> np.ndarray:
    """(N,) predicted labels (1 = acceptable) of ``sentences``."""
    classifier.eval()
    out = [classifier(ids, attention).argmax(1) for ids, attention in _batches(
        tokenizer, sentences, 128)]  # fmt: skip
    return torch.cat(out).numpy()


def scores(labels: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """Accuracy and Matthews correlation of ``predicted`` against ``labels``."""
    return {
        "accuracy": float((labels == predicted).mean()),
        "mcc": float(matthews_corrcoef(labels, predicted)),
    }


def _epochs(
    cfg: FinetuneConfig, learning_rate: float, epochs: int, *, progress: bool
) -> Iterator[tuple[int, torch.nn.Module, list[str], dict[str, float]]]:
    """Train one run, yielding after each epoch: the epoch, the classifier, its trained
    parameters' names and its validation scores. Deterministic for a seed (and thread count)."""
    tokenizer = minilm_tokenizer()
    train = load_cola("train")
    fit_rows, val_rows = validation_split(len(train), cfg.validation_share, cfg.seed)
    sentences, labels = list(train.sentence), train.label.to_numpy()
    val_sentences = [sentences[i] for i in val_rows]
    torch.manual_seed(cfg.seed)
    model = AcceptabilityClassifier(minilm_hf(), tokenizer)
    names = _trainable(model, cfg.trained_layers)
    classifier: torch.nn.Module = model
    if cfg.lora_rank:
        classifier = _adapted(model, cfg)
        model.head.requires_grad_(True)
        names = [n for n, p in classifier.named_parameters() if p.requires_grad]
    params = [p for p in classifier.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=cfg.weight_decay)
    order = np.random.default_rng(cfg.seed)
    for epoch in range(1, epochs + 1):
        rows = fit_rows[order.permutation(len(fit_rows))]
        classifier.train()
        batches = _batches(tokenizer, [sentences[i] for i in rows], cfg.batch_size)
        targets = torch.from_numpy(labels[rows]).split(cfg.batch_size)
        bar = tqdm(batches, desc=f"lr {learning_rate:g} epoch {epoch}", disable=not progress)
        for (ids, attention), target in zip(bar, targets, strict=True):
            loss = torch.nn.functional.cross_entropy(classifier(ids, attention), target)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        predicted = predict(classifier, tokenizer, val_sentences)
        yield epoch, classifier, names, scores(labels[val_rows], predicted)


def sweep(
    cfg: FinetuneConfig = FinetuneConfig(),
    learning_rates: Sequence[float] = SWEEP_LEARNING_RATES,
    epochs: int = SWEEP_EPOCHS,
    *,
    progress: bool = True,
) -> pd.DataFrame:
    """Validation accuracy and MCC after each epoch of a run at each learning rate (the rest
    as in ``cfg``): one row per (learning rate, epoch). With a constant learning rate, the run
    of ``FinetuneConfig(learning_rate=lr, epochs=e)`` is this sweep's row (lr, e)."""
    rows = []
    with _deterministic():
        for lr in learning_rates:
            for epoch, _, _, valid in _epochs(cfg, lr, epochs, progress=progress):
                rows.append({"learning_rate": lr, "epoch": epoch, **valid})
    return pd.DataFrame(rows)


def finetune(
    cfg: FinetuneConfig = FinetuneConfig(), *, progress: bool = True
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train ``cfg``'s run; returns its trained weights (HF ``BertModel`` names, the head's
    under ``head.``) and its report (validation scores by epoch, dev accuracy and MCC)."""
    dev = load_cola("dev")
    with _deterministic():
        runs = list(_epochs(cfg, cfg.learning_rate, cfg.epochs, progress=progress))
    _, classifier, names, _ = runs[-1]
    validation = [valid for *_, valid in runs]
    predicted = predict(classifier, minilm_tokenizer(), list(dev.sentence))
    on_dev = scores(dev.label.to_numpy(), predicted)
    state = classifier.state_dict()
    if cfg.lora_rank:  # the factors and the head, under the classifier's names
        from peft import get_peft_model_state_dict

        head = {n: w for n, w in state.items() if n.startswith(PEFT_PREFIX + HEAD)}
        adapters = {**get_peft_model_state_dict(classifier, save_embedding_layers=False), **head}
        state = {n.removeprefix(PEFT_PREFIX): w for n, w in adapters.items()}
    else:
        state = {n: state[n] for n in names}
    weights = {n.removeprefix("encoder."): w.detach().clone() for n, w in state.items()}
    train_rows, val_rows = validation_split(len(load_cola("train")), cfg.validation_share, cfg.seed)
    report = {
        "config": asdict(cfg),
        "train_sentences": len(train_rows),
        "validation_sentences": len(val_rows),
        "validation_by_epoch": validation,
        "dev_accuracy": on_dev["accuracy"],
        "dev_mcc": on_dev["mcc"],
        "dev_majority_baseline": float(max(dev.label.mean(), 1 - dev.label.mean())),
    }
    return weights, report


@contextmanager
def _deterministic() -> Iterator[None]:
    """torch's deterministic algorithms for the block."""
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def build_finetuned(
    out_dir: str | Path | None = None, cfg: FinetuneConfig = FinetuneConfig(), *, progress=True
) -> Path:
    """Fine-tune (:func:`finetune`) and write weights, report and manifest to ``out_dir``
    (default :func:`default_finetune_dir`); returns the folder."""
    root = Path(out_dir) if out_dir is not None else default_finetune_dir(cfg)
    weights, report = finetune(cfg, progress=progress)
    with staged_folder(root) as stage:
        save_file({n: w.contiguous() for n, w in weights.items()}, stage / WEIGHTS_FILE)
        write_json(stage / REPORT_FILE, report)
        write_manifest(stage, {"seed": cfg.seed, "command": BUILD_COMMAND, "config": asdict(cfg)})
    return root


def shipped_finetune_dir() -> Path:
    """The build of the default configurations shipped with the package: ``model/`` (the
    trained weights in float16, :func:`ship_finetuned`) and ``saes/`` (the SAEs of the trained
    blocks); it may be absent from a source checkout that never shipped it."""
    root = resources.files("circuitlasso.data") / SHIPPED_DIR
    if not isinstance(root, Path):  # a zipped install
        raise FileNotFoundError(f"the shipped fine-tuned model at {root} is not a folder on disk")
    return root


def finetune_dir(cfg: FinetuneConfig = FinetuneConfig()) -> Path:
    """Where the fine-tuned weights of ``cfg`` are read from: the shipped build for the default
    configuration (when the package holds it), else :func:`default_finetune_dir`."""
    shipped = shipped_finetune_dir() / "model"
    if cfg == FinetuneConfig() and (shipped / MANIFEST_FILE).is_file():
        return shipped
    return default_finetune_dir(cfg)


def finetuned_weights(cfg: FinetuneConfig = FinetuneConfig()) -> dict[str, torch.Tensor]:
    """The fine-tuned weights in float32 (built first when absent): encoder ones under their
    ``BertModel`` names, the head's under ``head.``."""
    root = finetune_dir(cfg)
    if not (root / MANIFEST_FILE).is_file():
        build_finetuned(root, cfg)
    return _readable_weights(load_file(root / WEIGHTS_FILE), cfg)


def finetune_report(cfg: FinetuneConfig = FinetuneConfig()) -> dict[str, Any]:
    """The fine-tuned build's ``report.json`` (built first when absent)."""
    finetuned_weights(cfg)
    return json.loads((finetune_dir(cfg) / REPORT_FILE).read_text())


def encoder_weights(cfg: FinetuneConfig = FinetuneConfig()) -> dict[str, torch.Tensor]:
    """The trained blocks' weights under their ``BertModel`` names."""
    return {k: v for k, v in finetuned_weights(cfg).items() if not k.startswith(HEAD)}


def load_finetuned(
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    cfg: FinetuneConfig = FinetuneConfig(),
) -> HookedEncoder:
    """The fine-tuned encoder as a ``HookedEncoder`` named :data:`NAME` (its head is read by
    :func:`decisions`)."""
    return load_minilm(device=device, dtype=dtype, weights=encoder_weights(cfg), name=NAME)


@torch.no_grad()
def decisions(
    model: HookedEncoder, sentences: list[str], cfg: FinetuneConfig = FinetuneConfig()
) -> np.ndarray:
    """(N,) the fine-tuned model's decisions (1 = acceptable): its head on the mean of the last
    layer's real-token states of ``model`` (the fine-tuned encoder)."""
    head = finetuned_weights(cfg)
    weight, bias = head[f"{HEAD}weight"], head[f"{HEAD}bias"]
    hook = LAYER_HOOK.format(layer=N_LAYERS - 1)
    out = []
    for tokens, real in prompt_batches(model, sentences, 64):
        states = hook_activations(model, tokens, [hook], stop_at_layer=N_LAYERS)[hook]
        pooled = mean_over_real(states, real, dtype=torch.float32).cpu()
        out.append((pooled @ weight.t() + bias).argmax(1))
    return torch.cat(out).numpy()


def finetuned_saes_dir(
    cfg: FinetuneConfig = FinetuneConfig(), sae_cfg: SAEConfig = SAE_CONFIG
) -> Path:
    """Where the SAEs of the fine-tuned model's trained blocks are read from: the shipped ones
    for the default configurations (when the package holds them), else a cache folder."""
    shipped = shipped_finetune_dir() / "saes"
    defaults = cfg == FinetuneConfig() and sae_cfg == SAE_CONFIG
    if defaults and (shipped / MANIFEST_FILE).is_file():
        return shipped
    return _cached_saes_dir(cfg, sae_cfg)


def _cached_saes_dir(cfg: FinetuneConfig, sae_cfg: SAEConfig) -> Path:
    """The cache folder of the trained blocks' SAEs of ``cfg`` and ``sae_cfg``."""
    parts = {**asdict(cfg), **{f"sae_{k}": v for k, v in sae_cfg.key_parts().items()}}
    return cache_root() / "minilm-cola-saes" / cache_key(**parts)[:16]


def load_finetuned_saes(
    layers: list[int] | None = None,
    cfg: FinetuneConfig = FinetuneConfig(),
    sae_cfg: SAEConfig = SAE_CONFIG,
) -> dict[int, SAE]:
    """The fine-tuned model's SAEs by layer (default all six): below the trained blocks the
    sentence model's (the activations there are the same), on the trained blocks SAEs of
    ``sae_cfg`` trained on the fine-tuned model as the sentence model's were
    (:func:`build_minilm_saes`, built on first use)."""
    chosen = list(range(N_LAYERS)) if layers is None else list(layers)
    root = finetuned_saes_dir(cfg, sae_cfg)
    trained = [layer for layer in chosen if layer in cfg.trained_blocks]
    if trained and not (root / MANIFEST_FILE).is_file():
        model = load_finetuned(cfg=cfg)
        build_minilm_saes(root, sae_cfg, model=model, layers=cfg.trained_blocks)
    saes = load_minilm_saes([layer for layer in chosen if layer not in cfg.trained_blocks])
    saes.update(load_minilm_saes(trained, path=root, cfg=sae_cfg) if trained else {})
    return {layer: saes[layer] for layer in chosen}


def finetuned_saes_report(
    cfg: FinetuneConfig = FinetuneConfig(), sae_cfg: SAEConfig = SAE_CONFIG
) -> dict[str, Any]:
    """The SAE report (:func:`saes_report`) of the fine-tuned model: the sentence model's
    layers below the trained blocks, the fine-tuned build's on them."""
    load_finetuned_saes(list(range(N_LAYERS)), cfg, sae_cfg)
    first = cfg.trained_blocks[0]
    tuned = saes_report(finetuned_saes_dir(cfg, sae_cfg), cfg.trained_blocks)
    below = [saes_report(default_saes_dir(), range(first))] if first else []
    return combined_report([*below, tuned])


def ship_finetuned(
    cfg: FinetuneConfig = FinetuneConfig(), out_dir: str | Path | None = None
) -> Path:
    """Write the default build (built first when absent) as the package's shipped one (default
    :func:`shipped_finetune_dir`): ``model/``, the trained weights rounded to float16 with the
    dev scores measured again with them, and ``saes/``, the trained blocks' SAEs in float16
    (:func:`ship_minilm_saes` on the model carrying the float16 weights). Returns the folder."""
    root = Path(out_dir) if out_dir is not None else shipped_finetune_dir()
    build = default_finetune_dir(cfg)
    if not (build / MANIFEST_FILE).is_file():
        build_finetuned(build, cfg)
    saes = _cached_saes_dir(cfg, SAE_CONFIG)
    rounded = {n: w.to(torch.float16) for n, w in load_file(build / WEIGHTS_FILE).items()}
    readable = _readable_weights(rounded, cfg)
    weights = {n: w for n, w in readable.items() if not n.startswith(HEAD)}
    model = load_minilm(weights=weights, name=NAME)
    if not (saes / MANIFEST_FILE).is_file():
        build_minilm_saes(saes, SAE_CONFIG, model=model, layers=cfg.trained_blocks)
    tokenizer = minilm_tokenizer()
    classifier = AcceptabilityClassifier(minilm_hf(weights=weights), tokenizer)
    classifier.head.load_state_dict(
        {"weight": readable[f"{HEAD}weight"], "bias": readable[f"{HEAD}bias"]}
    )
    dev = load_cola("dev")
    on_dev = scores(dev.label.to_numpy(), predict(classifier, tokenizer, list(dev.sentence)))
    report = json.loads((build / REPORT_FILE).read_text())
    with staged_folder(root / "model") as stage:
        save_file(rounded, stage / WEIGHTS_FILE)
        shipped = {
            "weights": "float16",
            "dev_accuracy": on_dev["accuracy"],
            "dev_mcc": on_dev["mcc"],
        }
        write_json(stage / REPORT_FILE, {**report, **shipped})
        write_manifest(stage, {"seed": cfg.seed, "command": BUILD_COMMAND, "config": asdict(cfg)})
    ship_minilm_saes(saes, root / "saes", model=model)
    return root
