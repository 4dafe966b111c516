"""The crossover harness: Proposition 2's ratio measured.

Wall times of EAP, EAP-IG and CircuitLasso (collection plus solve, the InterpBench harness's
calls) on GPT-2-family models with seeded random weights (`data.random_models`), on the same
random prompts, one row per (layers, d_model, n_token, prompt pairs) next to the ratio
Proposition 2 predicts for that shape (the ratio of the costs beyond the forward passes both
methods share, so measured as well: EAP-IG's gradient passes over CircuitLasso's solve,
``eap_ig_additional_ratio``), and CircuitLasso's solve next to its floor, Proposition 1's count
divided by the measured throughput of a dense product (`time_methods`); a model too large to run
whole measured on a share of its children and prompts and projected (`projected_time_methods`);
every run of a grid, resumable from a store (`crossover_grid`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformer_lens import HookedTransformer

from circuitlasso.circuits.components import LINEAR_TOL, linear_edge_scores
from circuitlasso.collect import collect_nodes
from circuitlasso.data.graph import graph_nodes
from circuitlasso.data.prompt_pairs import PromptPairs
from circuitlasso.data.random_models import (
    ModelShape,
    build_model,
    gpt2_family,
    random_prompt_pairs,
)
from circuitlasso.evaluation.cost.algebra import proposition1_count, proposition2
from circuitlasso.evaluation.cost.store import stored_row
from circuitlasso.evaluation.interpbench.evaluate import run_method
from circuitlasso.timing import Stopwatch

CROSSOVER_METHODS = {"eap": "eap", "eap_ig": "eap-ig", "circuitlasso": "circuitlasso-linear"}


def product_throughput(m: int, k: int, n: int, repeats: int = 5) -> float:
    """Multiply-adds per second of a dense float64 ``(m, k) @ (k, n)`` product on this machine
    with torch's current threads, best of ``repeats`` after one warm-up."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=generator, dtype=torch.float64)
    b = torch.randn(k, n, generator=generator, dtype=torch.float64)
    a @ b
    clock = Stopwatch()
    for repeat in range(repeats):
        with clock.timed(str(repeat)):
            a @ b
    return m * k * n / max(min(clock.laps.values()), 1e-9)


def _random_run(
    n_layers: int, d_model: int, n_tokens: int, n_prompts: int, seed: int
) -> tuple[ModelShape, HookedTransformer, PromptPairs]:
    """The GPT-2-family shape, its seeded random model (vocabulary d_model) and `n_prompts`
    random prompt pairs of `n_tokens` tokens that a crossover row is measured on."""
    shape = gpt2_family(n_layers, d_model)
    model = build_model(shape, n_ctx=n_tokens, seed=seed)
    return shape, model, random_prompt_pairs(n_prompts, n_tokens, model.cfg.d_vocab, seed)


def time_methods(
    n_layers: int,
    d_model: int,
    n_tokens: int,
    *,
    n_prompts: int = 8,
    repeats: int = 1,
    seed: int = 0,
) -> dict[str, object]:
    """Wall times of EAP, EAP-IG and CircuitLasso on one GPT-2-family model, and the prediction.

    The model is `build_model(gpt2_family(n_layers, d_model))` (vocabulary d_model). Every
    method runs as in the InterpBench harness (`run_method`) on the same `n_prompts`
    random prompt pairs of `n_tokens` tokens, once on two of the pairs as a warm-up, then
    `repeats` times (best time kept); a time is collection plus solve (EAP: the forward passes
    plus the gradient passes). predicted_ratio is `proposition2`'s cost_ratio with L = the
    model's component nodes and eps = the linear fit's tolerance (`LINEAR_TOL`). CircuitLasso's
    solve is also set against its floor: `proposition1_count` for its M = 2 n_prompts
    observations divided by `product_throughput` at the shape of its products
    ``(M, L d) @ (L d, d)``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    shape, model, prompts = _random_run(n_layers, d_model, n_tokens, n_prompts, seed)
    warmup = PromptPairs(prompts.clean[:2], prompts.corrupted[:2], prompts.position_mask)
    seconds, additional = {}, {}
    for column, method in CROSSOVER_METHODS.items():
        run_method(method, model, warmup, seed)
        runs = [run_method(method, model, prompts, seed) for _ in range(repeats)]
        best = min(runs, key=lambda r: r.collect_seconds + r.solve_seconds)
        seconds[column] = best.collect_seconds + best.solve_seconds
        additional[column] = best.solve_seconds
    return _methods_row(shape, model, n_tokens, n_prompts, seconds, additional)


def _methods_row(
    shape: ModelShape,
    model: HookedTransformer,
    n_tokens: int,
    n_prompts: int,
    seconds: dict[str, float],
    additional: dict[str, float],
) -> dict[str, object]:
    """A crossover row from the methods' seconds (``eap``, ``eap_ig``, ``circuitlasso``) and
    their seconds beyond the forward passes they share (``additional``: EAP's and EAP-IG's
    gradient passes, CircuitLasso's solve): the ratios of both, Proposition 2's prediction and
    the solve's floor."""
    solve = additional["circuitlasso"]
    n_locations = len(graph_nodes(model))
    n_obs = 2 * n_prompts
    predicted = proposition2(shape, n_locations, n_tokens, LINEAR_TOL)
    floor = proposition1_count(n_obs, n_locations, shape.d, LINEAR_TOL) / product_throughput(
        n_obs, n_locations * shape.d, shape.d
    )
    return {
        "layers": shape.S,
        "d_model": shape.d,
        "n_token": n_tokens,
        "L": n_locations,
        "n_prompts": n_prompts,
        "eap_s": seconds["eap"],
        "eap_ig_s": seconds["eap_ig"],
        "circuitlasso_s": seconds["circuitlasso"],
        "circuitlasso_solve_s": solve,
        "solve_floor_s": floor,
        "solve_over_floor": solve / floor,
        "eap_ig_ratio": seconds["eap_ig"] / seconds["circuitlasso"],
        "eap_ratio": seconds["eap"] / seconds["circuitlasso"],
        "eap_ig_additional_ratio": additional["eap_ig"] / solve,
        "eap_additional_ratio": additional["eap"] / solve,
        "predicted_ratio": predicted["cost_ratio"],
        "regime": predicted["regime"],
    }


def projected_time_methods(
    n_layers: int,
    d_model: int,
    n_tokens: int,
    *,
    n_prompts: int = 64,
    children: int = 3,
    eap_prompts: int = 4,
    seed: int = 0,
) -> dict[str, object]:
    """`time_methods` for a model too large to run whole here, with the parts it could not run
    projected (and said to be): CircuitLasso collects every node on all `n_prompts` pairs and
    solves `children` child nodes spread over the depth, its solve projected to every child by
    their share of Proposition 1's count (each child's parent columns); EAP and EAP-IG run on
    `eap_prompts` of the pairs and are projected linearly to all of them (their passes are
    linear in the prompts). No warm-up run."""
    if children < 1 or not 1 <= eap_prompts <= n_prompts:
        raise ValueError(
            f"need children >= 1 and 1 <= eap_prompts <= n_prompts, got {children}, "
            f"{eap_prompts}, {n_prompts}"
        )
    shape, model, prompts = _random_run(n_layers, d_model, n_tokens, n_prompts, seed)
    clock = Stopwatch()
    with clock.timed("collect"):
        acts = collect_nodes(model, torch.cat([prompts.clean, prompts.corrupted]),
                             prompts.lasso_mask())  # fmt: skip
    with_parents = [j for j, parents in enumerate(acts.parents) if parents]
    chosen = sorted({with_parents[round(i)] for i in np.linspace(0, len(with_parents) - 1,
                                                                 children)})  # fmt: skip
    sizes = np.asarray(acts.block_sizes)
    columns = [int(sizes[acts.parents[j]].sum()) for j in range(len(sizes))]
    subset = replace(acts, parents=[ps if j in chosen else [] for j, ps in enumerate(acts.parents)])
    with clock.timed("solve"):
        linear_edge_scores(subset)
    share = sum(columns[j] for j in chosen) / sum(columns[j] for j in with_parents)
    few = PromptPairs(
        prompts.clean[:eap_prompts], prompts.corrupted[:eap_prompts], prompts.position_mask
    )
    seconds, additional = {}, {}
    for column, method in (("eap", "eap"), ("eap_ig", "eap-ig")):
        run = run_method(method, model, few, seed)
        seconds[column] = (run.collect_seconds + run.solve_seconds) * n_prompts / eap_prompts
        additional[column] = run.solve_seconds * n_prompts / eap_prompts
    additional["circuitlasso"] = clock.laps["solve"] / share
    seconds["circuitlasso"] = clock.laps["collect"] + additional["circuitlasso"]
    return {
        **_methods_row(shape, model, n_tokens, n_prompts, seconds, additional),
        "projected": (
            f"solve: {len(chosen)} of {len(with_parents)} children ({share:.1%} of the count), "
            f"{clock.laps['solve']:.3g} s measured; EAP and EAP-IG: {eap_prompts} of "
            f"{n_prompts} pairs"
        ),
    }


def crossover_grid(
    configs: Iterable[tuple[int, int, int]],
    *,
    n_prompts: int | Sequence[int] = 8,
    repeats: int = 1,
    seed: int = 0,
    progress: bool = False,
    store: str | Path | None = None,
) -> pd.DataFrame:
    """`time_methods` for every (layers, d_model, n_token) in `configs` and every number of
    prompt pairs in `n_prompts`, one row each.

    With ``store`` (a folder), each run's row is saved there as soon as it is measured, and a
    later call reads it back instead of measuring it again when the run, the CPU, torch's
    threads and the library's version are the same: a grid that takes hours resumes where it
    stopped. The table then has a ``measured_at`` column (UTC) saying when each row was timed.
    """
    pairs = [n_prompts] if isinstance(n_prompts, int) else list(n_prompts)
    runs = [(config, n) for n in pairs for config in configs]
    rows = []
    for (layers, d_model, n_tokens), n in tqdm(runs, desc="crossover", disable=not progress):
        measure = partial(
            time_methods, layers, d_model, n_tokens, n_prompts=n, repeats=repeats, seed=seed
        )
        if store is None:
            rows.append(measure())
        else:
            sizes = {"layers": layers, "d_model": d_model, "n_tokens": n_tokens, "n_prompts": n}
            rows.append(
                stored_row(store, measure, kind="time_methods", repeats=repeats, seed=seed, **sizes)
            )
    return pd.DataFrame(rows)
