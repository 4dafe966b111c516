"""Paired clean and corrupted prompts as token ids, with the positions that carry the task: what
EAP, EAP-IG and CircuitLasso on components read (InterpBench's tasks, IOI, random models)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
