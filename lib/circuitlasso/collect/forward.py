"""The forward-pass toolkit shared by collection, ablation and attribution: prompt checks,
tokenization into right-padded batches with a mask of the real tokens, how far to run the model,
and SAEs spliced into the forward pass.

A *real token* is one whose id is not the tokenizer's BOS, EOS or PAD id
(:func:`special_token_ids`); every average over a prompt's tokens in this library is over its
real tokens, computed by :func:`mean_over_real`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

Hook = tuple[str | Callable[..., Any], Callable[..., Any]]  # TransformerLens forward hook


def check_prompts(prompts: Sequence[str]) -> list[str]:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not a single string")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: need at least one prompt")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise TypeError(f"prompt {i} is a {type(prompt).__name__}, not a string: {prompt!r}")
    return prompts


def special_token_ids(model: HookedTransformer) -> list[int]:
    """The tokenizer's BOS, EOS and PAD ids: the positions left out of the token average."""
    tokenizer = model.tokenizer
    if tokenizer is None:
        raise ValueError("the model has no tokenizer attached (model.set_tokenizer(...))")
    ids = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}
    return sorted(i for i in ids if i is not None)


def tokenize_batch(
    model: HookedTransformer, prompts: list[str], first: int, special: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``tokens: (B, P)`` of prompts ``first...`` and ``real: (B, P)``, the
    positions averaged over; an error names a prompt with no real token or too many."""
    tokens = model.to_tokens(prompts, padding_side="right", truncate=False, move_to_device=False)
    real = ~torch.isin(tokens, special)
    n_ctx = model.cfg.n_ctx
    too_long = real[:, n_ctx:].any(1).nonzero()[:, 0]
    if len(too_long):
        row = int(too_long[0])
        raise ValueError(
            f"prompt {first + row} is longer than the model's context of {n_ctx} tokens: "
            f"{prompts[row][:80]!r}"
        )
    empty = (~real.any(1)).nonzero()[:, 0]
    if len(empty):
        row = int(empty[0])
        raise ValueError(
            f"prompt {first + row} has no token to average over (only BOS, EOS or padding): "
            f"{prompts[row]!r}"
        )
    return tokens[:, :n_ctx], real[:, :n_ctx]


def stop_at_layer(hooks: Sequence[str]) -> int | None:
    """The ``stop_at_layer`` that runs the model just far enough to reach every hook."""
    last = -1
    for hook in hooks:
        match = re.match(r"blocks\.(\d+)\.", hook)
        if match:
            last = max(last, int(match[1]))
        elif not hook.startswith("hook_"):  # ln_final, unembed: the whole model runs
            return None
    return last + 1


def to_dense(z: torch.Tensor) -> torch.Tensor:
    """``z`` as a dense tensor (sae-lens SAEs may encode to a sparse one)."""
    return z.to_dense() if z.is_sparse else z


def splice_hooks(
    saes: Mapping[int, SAE],
    real: torch.Tensor,
    ablate: Mapping[int, torch.Tensor] | None = None,
    means: Mapping[int, torch.Tensor] | None = None,
    record: dict[int, torch.Tensor] | None = None,
) -> list[Hook]:
    """Forward hooks splicing each SAE into the model at its hook point.

    ``real: (B, P)`` bool marks the real tokens; ``ablate[layer]: (D,)`` bool the features set
    to ``means[layer]: (D,)`` at real tokens; ``record[layer]`` receives the (ablated) features
    ``(B, P, D)``. The hook returns ``decode(z') + (x - decode(z))``.
    """
    ablate = ablate or {}
    hooks: list[Hook] = []
    for layer, sae in saes.items():

        def splice(x: torch.Tensor, hook: Any, layer: int = layer, sae: SAE = sae) -> torch.Tensor:
            z = to_dense(sae.encode(x))
            edited, mask = z, ablate.get(layer)
            if mask is not None and bool(mask.any()):
                assert means is not None
                where = real.to(z.device)[:, :, None] & mask.to(z.device)
                edited = torch.where(where, means[layer].to(z), z)
            if record is not None:
                record[layer] = edited
            return sae.decode(edited) + (x - sae.decode(z))

        hooks.append((str(sae.cfg.metadata.hook_name), splice))
    return hooks


def prompt_batches(
    model: HookedTransformer, prompts: Sequence[str], batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded ``(tokens, real)`` per batch of prompts, as the collector tokenizes them."""
    prompts = check_prompts(prompts)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    special = torch.tensor(special_token_ids(model), dtype=torch.long)
    return [
        tokenize_batch(model, prompts[s : s + batch_size], s, special)
        for s in range(0, len(prompts), batch_size)
    ]


def stop_for_saes(saes: Mapping[int, SAE]) -> int | None:
    """The ``stop_at_layer`` that runs the model just far enough for every SAE's hook."""
    return stop_at_layer([str(sae.cfg.metadata.hook_name) for sae in saes.values()])
