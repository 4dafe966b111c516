"""Paired clean and corrupted prompts of an InterpBench task, as token ids with position masks."""

from __future__ import annotations

import numpy as np
import torch

from circuitlasso.data.interpbench.compile import CompiledTask
from circuitlasso.data.interpbench.convert import encode_inputs
from circuitlasso.data.prompt_pairs import PromptPairs


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
