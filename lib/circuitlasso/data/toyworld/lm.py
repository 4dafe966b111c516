"""The toy language model: a small ``HookedTransformer`` trained by next-token prediction.

Documents (a sentence or a biography) are encoded one per row, ``<bos>`` first and ``<pad>`` on
the right, exactly as ``model.to_tokens`` encodes a batch at inference time; padded targets
are left out of the loss.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from transformer_lens import HookedTransformer, HookedTransformerConfig

# TransformerLens 3.x marks HookedTransformer as deprecated; sae-lens trains on it, so we keep it.
warnings.filterwarnings(
    "ignore", message="HookedTransformer is deprecated", category=DeprecationWarning
)


def resid_hook(layer: int) -> str:
    """The hook the toy SAEs read: the residual stream after block ``layer``."""
    return f"blocks.{layer}.hook_resid_post"


@dataclass(frozen=True)
class LMConfig:
    """Architecture and training schedule of the toy language model."""

    n_layers: int = 4
    """Transformer blocks."""
    d_model: int = 128
    """Width of the residual stream (a multiple of ``n_heads``)."""
    n_heads: int = 4
    d_mlp: int = 512
    n_ctx: int = 64
    """Longest sequence, in tokens (BOS included)."""
    epochs: int = 3
    """Passes over the training texts."""
    batch_tokens: int = 4096
    """Tokens per optimizer step (texts of similar length are batched together)."""
    lr: float = 3e-3
    """AdamW's peak learning rate: linear warm-up over ``warmup_steps``, then cosine decay."""
    weight_decay: float = 0.01
    warmup_steps: int = 100


def architecture(cfg: LMConfig, d_vocab: int) -> dict[str, Any]:
    """JSON-able ``HookedTransformerConfig`` arguments for ``cfg``."""
    if cfg.d_model % cfg.n_heads:
        raise ValueError(f"d_model={cfg.d_model} is not divisible by n_heads={cfg.n_heads}")
    return {
        "n_layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "n_heads": cfg.n_heads,
        "d_head": cfg.d_model // cfg.n_heads,
        "d_mlp": cfg.d_mlp,
        "n_ctx": cfg.n_ctx,
        "d_vocab": d_vocab,
        "act_fn": "gelu",
        "normalization_type": "LN",
        "positional_embedding_type": "standard",
        "default_prepend_bos": True,
        "device": "cpu",
    }


def make_model(arch: dict[str, Any], tokenizer: PreTrainedTokenizerFast) -> HookedTransformer:
    """A freshly initialized model (from torch's global RNG) with the tokenizer attached."""
    if len(tokenizer) != arch["d_vocab"]:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens but d_vocab={arch['d_vocab']}")
    return HookedTransformer(HookedTransformerConfig(**arch), tokenizer=tokenizer)


def tokenizer_of(model: HookedTransformer) -> PreTrainedTokenizerBase:
    """The tokenizer attached to ``model`` (an error if there is none)."""
    if model.tokenizer is None:
        raise ValueError("the model has no tokenizer attached")
    return model.tokenizer


def encode_documents(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], n_ctx: int
) -> list[torch.Tensor]:
    """One 1-D id tensor per text, ``<bos>`` first; a text longer than ``n_ctx`` is an error."""
    ids = tokenizer(list(texts))["input_ids"]
    too_long = [t for t, row in zip(texts, ids, strict=True) if len(row) > n_ctx]
    if too_long:
        raise ValueError(f"{len(too_long)} texts exceed n_ctx={n_ctx} tokens, e.g. {too_long[0]!r}")
    return [torch.tensor(row, dtype=torch.long) for row in ids]


def pad_documents(
    documents: Sequence[torch.Tensor], pad_id: int, length: int | None = None
) -> torch.Tensor:
    """Right-padded batch ``tokens: (B, T)`` with ``T = length`` or the longest document."""
    width = length or max(len(d) for d in documents)
    tokens = torch.full((len(documents), width), pad_id, dtype=torch.long)
    for row, doc in enumerate(documents):
        tokens[row, : len(doc)] = doc
    return tokens


def _length_bucketed_batches(
    lengths: np.ndarray, batch_tokens: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Batches of document indices with similar lengths and at most ``batch_tokens`` padded
    tokens each, in random order."""
    order = rng.permutation(len(lengths))
    batches: list[np.ndarray] = []
    for start in range(0, len(order), 4096):
        part = order[start : start + 4096]
        part = part[np.argsort(lengths[part], kind="stable")]
        first = 0
        for end in range(1, len(part) + 1):
            if end == len(part) or lengths[part[end]] * (end + 1 - first) > batch_tokens:
                batches.append(part[first:end])
                first = end
    return [batches[i] for i in rng.permutation(len(batches))]


def next_token_loss(
    model: HookedTransformer, tokens: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean cross-entropy, number of correct argmax predictions and number of targets, over
    the non-pad targets of ``tokens: (B, T)``."""
    logits = model(tokens)[:, :-1]
    targets = tokens[:, 1:]
    keep = targets != pad_id
    loss = torch.nn.functional.cross_entropy(logits[keep], targets[keep])
    correct = (logits[keep].argmax(-1) == targets[keep]).float().sum()
    return loss, correct, keep.sum()


def train_lm(
    model: HookedTransformer,
    documents: Sequence[torch.Tensor],
    cfg: LMConfig,
    seed: int,
) -> list[float]:
    """Train in place with AdamW (linear warm-up, cosine decay); returns the loss per step."""
    pad_id = tokenizer_of(model).pad_token_id
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    lengths = np.array([len(d) for d in documents])
    epochs = [_length_bucketed_batches(lengths, cfg.batch_tokens, rng) for _ in range(cfg.epochs)]
    n_steps = sum(len(e) for e in epochs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def schedule(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, n_steps - cfg.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    losses = []
    with tqdm(total=n_steps, desc="Training LM") as bar:
        for batch in (b for e in epochs for b in e):
            tokens = pad_documents([documents[i] for i in batch], pad_id)
            loss, _, _ = next_token_loss(model, tokens, pad_id)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            bar.update()
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    model.eval()
    return losses


@torch.no_grad()
def evaluate_lm(
    model: HookedTransformer, documents: Sequence[torch.Tensor], batch_size: int = 256
) -> dict[str, float]:
    """Next-token ``loss`` (nats) and ``accuracy`` over all non-pad targets of ``documents``."""
    pad_id = tokenizer_of(model).pad_token_id
    total_loss, total_correct, total = 0.0, 0.0, 0
    for start in range(0, len(documents), batch_size):
        tokens = pad_documents(documents[start : start + batch_size], pad_id)
        loss, correct, count = next_token_loss(model, tokens, pad_id)
        total_loss += loss.item() * int(count)
        total_correct += float(correct)
        total += int(count)
    return {"loss": total_loss / total, "accuracy": total_correct / total}


@torch.no_grad()
def sequence_log_probs(
    model: HookedTransformer, documents: Sequence[torch.Tensor], batch_size: int = 256
) -> torch.Tensor:
    """Total log-probability ``(n_documents,)`` of each document's tokens after ``<bos>``."""
    pad_id = tokenizer_of(model).pad_token_id
    totals = []
    for start in range(0, len(documents), batch_size):
        tokens = pad_documents(documents[start : start + batch_size], pad_id)
        log_probs = model(tokens)[:, :-1].log_softmax(-1)
        targets = tokens[:, 1:]
        picked = log_probs.gather(-1, targets[..., None])[..., 0]
        totals.append((picked * (targets != pad_id)).sum(-1))
    return torch.cat(totals)


@torch.no_grad()
def residuals(
    model: HookedTransformer, documents: Sequence[torch.Tensor], layers: Sequence[int]
) -> tuple[dict[int, torch.Tensor], torch.Tensor, torch.Tensor]:
    """``hook_resid_post`` at non-special positions: ``{layer: (n_tokens, d_model)}``, token ids
    ``(n_tokens,)`` and the document index of each token ``(n_tokens,)``."""
    tokenizer = tokenizer_of(model)
    special = torch.tensor([tokenizer.bos_token_id, tokenizer.pad_token_id])
    hooks = [resid_hook(layer) for layer in layers]
    acts: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    ids, owners = [], []
    for start in range(0, len(documents), 256):
        tokens = pad_documents(documents[start : start + 256], tokenizer.pad_token_id)
        _, cache = model.run_with_cache(tokens, names_filter=hooks, stop_at_layer=max(layers) + 1)
        keep = ~torch.isin(tokens, special)
        for layer, hook in zip(layers, hooks, strict=True):
            acts[layer].append(cache[hook][keep])
        ids.append(tokens[keep])
        owners.append((torch.arange(len(tokens)) + start)[:, None].expand_as(tokens)[keep])
    return {k: torch.cat(v) for k, v in acts.items()}, torch.cat(ids), torch.cat(owners)
