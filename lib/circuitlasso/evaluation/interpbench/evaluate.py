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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from transformer_lens import HookedTransformer

from circuitlasso.circuits.anchored import anchored_circuit
from circuitlasso.circuits.circuit import (
    Circuit,
    EdgeScores,
    best_threshold_shd,
    circuit_at_threshold,
    edge_auroc,
    edge_shd,
    gap_threshold,
    node_shd,
)
from circuitlasso.circuits.components import component_circuit
from circuitlasso.data.graph import Edge, candidate_edges, graph_nodes
from circuitlasso.data.interpbench.compile import CompiledTask, compile_case, compile_task
from circuitlasso.data.interpbench.convert import Variant, to_hooked_transformer
from circuitlasso.data.interpbench.programs import TracrTask, get_task
from circuitlasso.data.interpbench.prompts import make_prompts
from circuitlasso.data.prompt_pairs import PromptPairs
from circuitlasso.evaluation.eap import edge_attribution_patching
from circuitlasso.evaluation.patched import PATCHED_ROWS, patched_lasso

EAP_IG_STEPS = 10
METHODS = (
    "eap",  # edge attribution patching
    "eap-ig",  # EAP with integrated gradients, EAP_IG_STEPS steps
    "circuitlasso-linear",  # the paper's block-upper-triangular Lasso
    "circuitlasso-linear-read",  # the same with parents seen through the child's read weights
    "circuitlasso-nonlinear",  # group-lasso MLP per child
    "circuitlasso-nonlinear-read",  # the same with parents seen through the child's read weights
    "circuitlasso-anchored",  # signed scores tied to the metric (circuits.anchored)
    "circuitlasso-patched",  # the metric regressed on random patchings (evaluation.patched)
)


@dataclass(frozen=True)
class RunSettings:
    """What every InterpBench run fixes: the ``methods`` (names in :data:`METHODS`), ``n_prompts``
    clean and ``n_prompts`` corrupted prompts per task, the ``seed`` of the prompts, the converted
    weights and the methods, and the ``trials`` (timed runs) per method."""

    methods: Sequence[str] = METHODS
    n_prompts: int = 1000
    seed: int = 0
    trials: int = 3

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"trials must be >= 1, got {self.trials}")
        if self.n_prompts < 1:
            raise ValueError(f"n_prompts must be >= 1, got {self.n_prompts}")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; expected a subset of {METHODS}")
        object.__setattr__(self, "methods", tuple(self.methods))


DEFAULT_SETTINGS = RunSettings()


@dataclass(frozen=True)
class MethodRun:
    """One run of one method: edge scores, its own threshold and the time split in seconds;
    ``slot_scores``, signed scores per receiver slot, where the method gives them."""

    scores: EdgeScores
    threshold: float
    collect_seconds: float
    solve_seconds: float
    slot_scores: dict[tuple[str, str], float] | None = None


def run_method(
    method: str,
    model: HookedTransformer,
    prompts: PromptPairs,
    seed: int = 0,
    answers: torch.Tensor | None = None,
    patched_rows: int = PATCHED_ROWS,
) -> MethodRun:
    """Run one of ``METHODS`` on the model and prompts. ``answers: (M, 2)``, the (answer, wrong)
    token ids of each clean prompt (its corrupted prompt is read on the same two), make
    CircuitLasso's output node the logit difference (:func:`~circuitlasso.circuits.components.
    component_circuit`); EAP keeps its own metric. ``patched_rows``: the patched passes of
    ``circuitlasso-patched`` (:func:`~circuitlasso.evaluation.patched.patched_lasso`)."""
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
    if method == "circuitlasso-anchored":
        found = anchored_circuit(
            model,
            prompts.clean,
            prompts.corrupted,
            prompts.lasso_mask(),
            metric_mask=torch.cat([prompts.position_mask, prompts.position_mask])
            if prompts.position_mask.ndim == 2
            else prompts.position_mask,
            answers=answers,
        )
        return MethodRun(found.scores, found.threshold, found.collect_seconds,
                         found.solve_seconds, found.slot_scores)  # fmt: skip
    if method == "circuitlasso-patched":
        patched = patched_lasso(
            model,
            prompts.clean,
            prompts.corrupted,
            position_mask=prompts.position_mask,
            answers=answers,
            n_rows=patched_rows,
            seed=seed,
        )
        return MethodRun(patched.scores, gap_threshold(patched.scores), patched.collect_seconds,
                         patched.attribute_seconds, patched.slot_scores)  # fmt: skip
    if method in METHODS:
        lasso = component_circuit(
            model,
            torch.cat([prompts.clean, prompts.corrupted]),
            prompts.lasso_mask(),
            nonlinear=method.startswith("circuitlasso-nonlinear"),
            read_projection=method.endswith("-read"),
            seed=seed,
            answers=None if answers is None else torch.cat([answers, answers]),
        )
        return MethodRun(lasso.scores, lasso.threshold, lasso.collect_seconds, lasso.solve_seconds)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def evaluate_model(
    model: HookedTransformer,
    ground_truth: Iterable[Edge],
    prompts: PromptPairs,
    settings: RunSettings = DEFAULT_SETTINGS,
) -> pd.DataFrame:
    """One row per method of ``settings``: accuracy at the method's rule and in hindsight, AUROC,
    median times (``settings.n_prompts`` is unused: ``prompts`` are given).

    ``ground_truth``: the true circuit's edges (a :class:`~circuitlasso.circuits.circuit.Circuit`
    or the edge set a task gives)."""
    ground_truth = Circuit(ground_truth)
    candidates = set(candidate_edges(graph_nodes(model)))
    outside = ground_truth.edges - candidates
    if outside:
        raise ValueError(f"ground-truth edges not in the model's graph: {sorted(outside)[:5]}")
    rows = []
    for method in settings.methods:
        runs = [run_method(method, model, prompts, settings.seed) for _ in range(settings.trials)]
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
                "n_edges": predicted.number_of_edges(),
                "n_true_edges": ground_truth.number_of_edges(),
                "collect_s": collect,
                "solve_s": solve,
                "total_s": total,
            }
        )
    return pd.DataFrame(rows)


def evaluate_compiled(
    compiled: CompiledTask,
    variant: Variant = "exact",
    settings: RunSettings = DEFAULT_SETTINGS,
) -> pd.DataFrame:
    """:func:`evaluate_model` on the converted ``variant`` of a compiled task."""
    model = to_hooked_transformer(compiled, variant, seed=settings.seed)
    prompts = make_prompts(compiled, settings.n_prompts, settings.seed)
    table = evaluate_model(model, compiled.ground_truth, prompts, settings)
    table.insert(0, "variant", variant)
    table.insert(0, "case", compiled.task.case_id)
    return table


def evaluate_task(
    task: TracrTask,
    variant: Variant = "exact",
    settings: RunSettings = DEFAULT_SETTINGS,
) -> pd.DataFrame:
    """Compile a (custom) RASP task and evaluate it like an InterpBench case."""
    return evaluate_compiled(compile_task(task), variant, settings)


def evaluate_case(
    case_id: str | int,
    variant: Variant = "exact",
    settings: RunSettings = DEFAULT_SETTINGS,
) -> pd.DataFrame:
    """Evaluate the InterpBench case ``case_id`` (see module docstring for the columns)."""
    get_task(case_id)  # clear error for an unknown id before compiling anything
    return evaluate_compiled(compile_case(str(case_id)), variant, settings)
