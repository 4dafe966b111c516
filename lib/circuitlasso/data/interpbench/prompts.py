"""Paired clean and corrupted prompts of an InterpBench task, as token ids with position masks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from circuitlasso.data.interpbench.compile import CompiledTask
from circuitlasso.data.interpbench.convert import encode_inputs


@dataclass(frozen=True)
class PromptPairs:
    """Paired clean/corrupted token ids (M, P) and the positions that carry the task.

    ``position_mask`` ((P,) or (M, P) bool) selects the positions EAP's metric sums over;
    ``average_mask`` (same shapes) the positions CircuitLasso averages activations over, by default
    the same. Prompts of different lengths (right-padded) need (M, P) masks; a clean prompt and its
    corrupted partner share one row of each mask.
    """

    clean: torch.Tensor
    corrupted: torch.Tensor
    position_mask: torch.Tensor
    average_mask: torch.Tensor | None = None

    def lasso_mask(self) -> torch.Tensor:
        """The averaging mask for the clean and corrupted prompts stacked: (P,) or (2M, P)."""
        mask = self.position_mask if self.average_mask is None else self.average_mask
        return torch.cat([mask, mask]) if mask.ndim == 2 else mask


def make_prompts(compiled: CompiledTask, n_prompts: int, seed: int) -> PromptPairs:
    """``n_prompts`` clean inputs and their corrupted partners; the BOS position is masked out."""
    if n_prompts < 2:
        raise ValueError(f"n_prompts must be >= 2, got {n_prompts}")
    rng = np.random.default_rng(seed)
    clean = compiled.task.sample_inputs(rng, n_prompts)
    corrupted = compiled.task.sample_corrupted(rng, clean)
    mask = torch.ones(compiled.task.max_seq_len + 1, dtype=torch.bool)
    mask[0] = False
    return PromptPairs(encode_inputs(compiled, clean), encode_inputs(compiled, corrupted), mask)
