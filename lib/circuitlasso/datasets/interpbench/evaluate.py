"""The InterpBench protocol: run circuit-discovery methods on a model with a known circuit.

One function per level: :func:`evaluate_model` (any HookedTransformer, its true circuit and token
batches, e.g. a hub model), :func:`evaluate_task` (a RASP task, compiled and converted here, so a
custom program gets the same evaluation) and :func:`evaluate_case` (an InterpBench case id).

Each method runs ``trials`` times from scratch; the table reports the median wall time split into
collection (forward passes caching activations) and solve (regressions, or EAP's gradient passes),
and the accuracy of the first trial's scores (all methods are deterministic given the seed):
edge SHD and node SHD of the circuit at the method's own ground-truth-free threshold, the best
edge SHD over all thresholds (hindsight), and the edge AUROC over the threshold sweep.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from transformer_lens import HookedTransformer

from circuitlasso.baselines.eap import edge_attribution_patching
from circuitlasso.circuit import (
    Circuit,
    EdgeScores,
    best_threshold_shd,
    circuit_at_threshold,
    edge_auroc,
    edge_shd,
    gap_threshold,
    node_shd,
)
from circuitlasso.collect import candidate_edges, graph_nodes
from circuitlasso.datasets.interpbench.compile import CompiledTask, compile_case, compile_task
from circuitlasso.datasets.interpbench.convert import Variant, encode_inputs, to_hooked_transformer
from circuitlasso.datasets.interpbench.programs import TracrTask, get_task
from circuitlasso.neuron_circuits import circuit_lasso

EAP_IG_STEPS = 10
METHODS = (
    "eap",  # edge attribution patching
    "eap-ig",  # EAP with integrated gradients, EAP_IG_STEPS steps
    "circuitlasso-linear",  # the paper's block-upper-triangular Lasso
    "circuitlasso-linear-read",  # the same with parents seen through the child's read weights
    "circuitlasso-nonlinear",  # group-lasso MLP per child
    "circuitlasso-nonlinear-read",  # the same with parents seen through the child's read weights
)


@dataclass(frozen=True)
class MethodRun:
    """One run of one method: edge scores, its own threshold and the time split in seconds."""

    scores: EdgeScores
    threshold: float
    collect_seconds: float
    solve_seconds: float


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


def run_method(
    method: str, model: HookedTransformer, prompts: PromptPairs, seed: int = 0
) -> MethodRun:
    """Run one of ``METHODS`` on the model and prompts."""
    if method in ("eap", "eap-ig"):
        steps = EAP_IG_STEPS if method == "eap-ig" else 0
        result = edge_attribution_patching(
            model,
            prompts.clean,
            prompts.corrupted,
            ig_steps=steps,
            position_mask=prompts.position_mask,
        )
        return MethodRun(
            result.scores,
            gap_threshold(result.scores),
            result.collect_seconds,
            result.attribute_seconds,
        )
    if method in METHODS:
        lasso = circuit_lasso(
            model,
            torch.cat([prompts.clean, prompts.corrupted]),
            prompts.lasso_mask(),
            nonlinear=method.startswith("circuitlasso-nonlinear"),
            read_projection=method.endswith("-read"),
            seed=seed,
        )
        return MethodRun(lasso.scores, lasso.threshold, lasso.collect_seconds, lasso.solve_seconds)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def evaluate_model(
    model: HookedTransformer,
    ground_truth: Circuit,
    prompts: PromptPairs,
    methods: Sequence[str] = METHODS,
    trials: int = 3,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per method: accuracy at the method's rule and in hindsight, AUROC, median times."""
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; expected a subset of {METHODS}")
    candidates = set(candidate_edges(graph_nodes(model)))
    outside = ground_truth.edges - candidates
    if outside:
        raise ValueError(f"ground-truth edges not in the model's graph: {sorted(outside)[:5]}")
    rows = []
    for method in methods:
        runs = [run_method(method, model, prompts, seed) for _ in range(trials)]
        first = runs[0]
        predicted = circuit_at_threshold(first.scores, first.threshold)
        collect = statistics.median(r.collect_seconds for r in runs)
        solve = statistics.median(r.solve_seconds for r in runs)
        total = statistics.median(r.collect_seconds + r.solve_seconds for r in runs)
        rows.append(
            {
                "method": method,
                "edge_shd": edge_shd(predicted, ground_truth),
                "node_shd": node_shd(predicted, ground_truth),
                "best_edge_shd": best_threshold_shd(first.scores, ground_truth)[0],
                "edge_auroc": edge_auroc(first.scores, ground_truth),
                "n_edges": len(predicted),
                "n_true_edges": len(ground_truth),
                "collect_s": collect,
                "solve_s": solve,
                "total_s": total,
            }
        )
    return pd.DataFrame(rows)


def evaluate_compiled(
    compiled: CompiledTask,
    variant: Variant = "exact",
    methods: Sequence[str] = METHODS,
    n_prompts: int = 1000,
    seed: int = 0,
    trials: int = 3,
) -> pd.DataFrame:
    """:func:`evaluate_model` on the converted ``variant`` of a compiled task."""
    model = to_hooked_transformer(compiled, variant, seed=seed)
    prompts = make_prompts(compiled, n_prompts, seed)
    table = evaluate_model(model, compiled.ground_truth, prompts, methods, trials, seed)
    table.insert(0, "variant", variant)
    table.insert(0, "case", compiled.task.case_id)
    return table


def evaluate_task(
    task: TracrTask,
    variant: Variant = "exact",
    methods: Sequence[str] = METHODS,
    n_prompts: int = 1000,
    seed: int = 0,
    trials: int = 3,
) -> pd.DataFrame:
    """Compile a (custom) RASP task and evaluate it like an InterpBench case."""
    return evaluate_compiled(compile_task(task), variant, methods, n_prompts, seed, trials)


def evaluate_case(
    case_id: str | int,
    variant: Variant = "exact",
    methods: Sequence[str] = METHODS,
    n_prompts: int = 1000,
    seed: int = 0,
    trials: int = 3,
) -> pd.DataFrame:
    """Evaluate the InterpBench case ``case_id`` (see module docstring for the columns)."""
    get_task(case_id)  # clear error for an unknown id before compiling anything
    return evaluate_compiled(compile_case(str(case_id)), variant, methods, n_prompts, seed, trials)
