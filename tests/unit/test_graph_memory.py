"""The memory budget of passes through the component graph's hooks (`data.graph`): batches are
sized so that collection and EAP stay within `memory_gib`, give the results of one batch, and a
prompt that cannot fit is refused before any work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from circuitlasso.collect import collect_nodes
from circuitlasso.data.graph import pass_bytes_per_prompt, prompts_per_batch
from circuitlasso.data.random_models import build_model, gpt2_family, random_prompt_pairs
from circuitlasso.evaluation.eap import edge_attribution_patching
from circuitlasso.memory import GIB, MemoryBudgetError

# A child process builds a model, notes its resident peak, runs one method on 64 pairs of 64
# tokens within a 0.5 GiB budget and prints how much its peak grew and what one batch would take.
PEAK_SCRIPT = """
import json, resource, sys, torch
from circuitlasso.collect import collect_nodes
from circuitlasso.data.graph import pass_bytes_per_prompt
from circuitlasso.data.random_models import build_model, gpt2_family, random_prompt_pairs
from circuitlasso.evaluation.eap import edge_attribution_patching
torch.set_num_threads(1)
model = build_model(gpt2_family(2, 256), n_ctx=64, seed=0)
pairs = random_prompt_pairs(64, 64, model.cfg.d_vocab, seed=0)
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if sys.argv[1] == "collect":
    collect_nodes(model, torch.cat([pairs.clean, pairs.corrupted]), memory_gib=0.5)
    whole = 128 * pass_bytes_per_prompt(model, 64)
else:
    edge_attribution_patching(model, pairs.clean, pairs.corrupted, ig_steps=1, memory_gib=0.5)
    whole = 64 * pass_bytes_per_prompt(model, 64, gradients=True)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) * 1024
print(json.dumps({"grown": grown, "whole": whole}))
"""


@pytest.mark.slow  # a pass over many prompts
@pytest.mark.parametrize("method", ["collect", "eap"])
def test_a_pass_over_many_prompts_stays_within_its_budget(method):
    out = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, method], capture_output=True, text=True, check=True
    )
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    assert measured["whole"] > 2 * GIB  # all prompts in one batch would take 4x the budget
    assert measured["grown"] <= 0.5 * GIB


@pytest.fixture(scope="module")
def small():
    model = build_model(gpt2_family(2, 64), n_ctx=8, seed=0)
    return model, random_prompt_pairs(24, 8, model.cfg.d_vocab, seed=1)


def few_prompts_gib(model, gradients: bool) -> float:
    """A budget that holds about 5 of `small`'s prompts."""
    return 5 * pass_bytes_per_prompt(model, 8, gradients) / GIB


def test_batches_sized_by_the_budget_give_the_results_of_one_batch(small):
    model, pairs = small
    tokens = torch.cat([pairs.clean, pairs.corrupted])
    budget = few_prompts_gib(model, gradients=False)
    assert prompts_per_batch(model, 8, budget) < len(tokens) // 4
    batched = collect_nodes(model, tokens, memory_gib=budget)
    whole = collect_nodes(model, tokens, batch_size=len(tokens))
    torch.testing.assert_close(batched.X, whole.X, rtol=1e-5, atol=1e-6)

    budget = 3 * few_prompts_gib(model, gradients=True)
    batched = edge_attribution_patching(model, pairs.clean, pairs.corrupted, 2, memory_gib=budget)
    whole = edge_attribution_patching(model, pairs.clean, pairs.corrupted, 2, batch_size=24)
    assert batched.slot_scores.keys() == whole.slot_scores.keys()
    for key, score in whole.slot_scores.items():
        assert batched.slot_scores[key] == pytest.approx(score, rel=1e-4, abs=1e-7)


def test_a_prompt_over_the_budget_is_refused_before_any_work(small):
    model, pairs = small
    tiny = 0.5 * pass_bytes_per_prompt(model, 8) / GIB
    with pytest.raises(MemoryBudgetError, match="one prompt of 8 positions.*memory_gib"):
        collect_nodes(model, pairs.clean, memory_gib=tiny)
    with pytest.raises(MemoryBudgetError, match="forward and backward pass"):
        edge_attribution_patching(model, pairs.clean, pairs.corrupted, memory_gib=tiny)
    with pytest.raises(ValueError, match="memory_gib must be a positive number"):
        collect_nodes(model, pairs.clean, memory_gib=0)
