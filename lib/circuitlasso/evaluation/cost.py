"""Cost of the method (paper Propositions 1 and 2): measured solves and the provable regimes.

- `time_block_lasso` solves planted block upper-triangular problems (Eq. 3) over a grid of
  (M, L, d) and records the wall time, the inner iterations (coordinate-descent epochs on the
  CPU, FISTA steps on a GPU) and the time per iteration;
  `loglog_slopes` fits the log-log slope of the time in each size (the others held at their
  base values), next to the slopes of Proposition 1's bound M L(L-1) d^2 / 2 on the same grid.
  The solver precomputes the Gram of the predictors once (one O(M N^2) product); after that an
  iteration no longer touches the M observations, so the measured slope in M is the share of
  the cost that still scales with the data.
- `proposition2` evaluates Proposition 2 for a model shape (`MODEL_SHAPES`), a number of
  component locations L, a prompt length n_token and an accuracy eps: which regime applies, the
  n_token threshold of its condition, whether CircuitLasso is then provably cheaper than EAP-ig,
  and the ratio of the two additional costs from the full expressions.
- `crossover_grid` measures that ratio: wall times of EAP, EAP-IG and CircuitLasso (collection
  plus solve, the InterpBench harness's calls) on GPT-2-family models with seeded random weights
  (`gpt2_family`, `build_model`), on the same random prompts, one row per (layers, d_model,
  n_token, prompt pairs) next to the ratio Proposition 2 predicts for that shape (the ratio of
  the costs beyond the forward passes both methods share, so measured as well: EAP-IG's
  gradient passes over CircuitLasso's solve, ``eap_ig_additional_ratio``), and
  CircuitLasso's solve next to its floor, Proposition 1's count divided by the measured
  throughput of a dense product (`time_methods`);
  `crossover_fit` says where the measured ratio crosses 1 on the predicted ratio's scale.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import partial
from importlib.metadata import version as package_version
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.cache import cache_key, load_or_compute
from circuitlasso.circuits.components import LINEAR_TOL, linear_edge_scores
from circuitlasso.collect import collect_nodes
from circuitlasso.data.graph import graph_nodes
from circuitlasso.data.interpbench.prompts import PromptPairs
from circuitlasso.evaluation.interpbench.evaluate import run_method
from circuitlasso.solve import block_lasso, lam_max, upper_triangular_parents
from circuitlasso.timing import Stopwatch

SIZES = ("M", "L", "d")


def planted_block_sem(
    M: int, n_blocks: int, width: int, *, density: float = 0.1, noise: float = 0.5, seed: int = 0
) -> torch.Tensor:
    """(M, n_blocks * width) float32 activations of a planted block-triangular linear SEM.

    Block 0 is standard normal; block j is X_<j A_j + noise * N(0, 1) with A_j of the given
    density and weights +-U(0.5, 1); every block is then standardized (mean 0, std 1).
    """
    if min(M, n_blocks, width) < 1 or not 0 < density <= 1:
        raise ValueError(
            "need M, n_blocks, width >= 1 and 0 < density <= 1, "
            f"got {M}, {n_blocks}, {width}, {density}"
        )
    generator = torch.Generator().manual_seed(seed)
    x = torch.empty(M, n_blocks * width, dtype=torch.float64)
    for j in range(n_blocks):
        block = torch.randn(M, width, generator=generator, dtype=torch.float64)
        if j > 0:
            shape = (j * width, width)
            mask = torch.rand(shape, generator=generator, dtype=torch.float64) < density
            weight = 0.5 + 0.5 * torch.rand(shape, generator=generator, dtype=torch.float64)
            sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
            block = x[:, : j * width] @ (mask * weight * sign) + noise * block
        x[:, j * width : (j + 1) * width] = (block - block.mean(0)) / block.std(0)
    return x.float()


def time_block_lasso(
    configs: Iterable[tuple[int, int, int]],
    *,
    lam_ratio: float = 0.1,
    tol: float = 1e-6,
    repeats: int = 3,
    density: float = 0.1,
    seed: int = 0,
) -> pd.DataFrame:
    """Best-of-`repeats` certified `block_lasso` solves, one row per (M, L, d) in `configs`.

    Columns: M, L, d, seconds, iterations (most inner iterations of any output),
    seconds_per_iteration, max_gap (largest duality gap / (||y||^2 / M)) and bound
    (M L (L-1) d^2 / 2, Proposition 1 without its 1/sqrt(eps) factor). Each child column gets
    lam = lam_ratio x its lam_max on its parent blocks.
    """
    rows = []
    for M, L, d in configs:
        x = planted_block_sem(M, L, d, density=density, seed=seed)
        lams = torch.zeros(L * d, dtype=torch.float64)
        for j in range(1, L):
            lams[j * d : (j + 1) * d] = lam_ratio * lam_max(
                x[:, : j * d], x[:, j * d : (j + 1) * d]
            )
        parents = upper_triangular_parents(L)
        clock = Stopwatch()
        for repeat in range(max(1, repeats)):
            with clock.timed(f"solve {repeat}"):
                result = block_lasso(x, [d] * L, parents, lams, tol=tol)
        best = min(clock.laps.values())
        scale = (x.double() ** 2).sum(0) / M
        iterations = int(result.n_iter.max())
        rows.append(
            {
                "M": M,
                "L": L,
                "d": d,
                "seconds": best,
                "iterations": iterations,
                "seconds_per_iteration": best / max(iterations, 1),
                "max_gap": float((result.gap[d:] / scale[d:]).max()),
                "bound": M * L * (L - 1) * d**2 / 2,
            }
        )
    return pd.DataFrame(rows)


def vary_one_at_a_time(
    base: Sequence[int], grids: Sequence[Sequence[int]]
) -> list[tuple[int, ...]]:
    """Configurations equal to `base` but in one position, which takes each value of its grid:
    sorted, without repeats (`base` itself is among them when a grid holds its value)."""
    if len(base) != len(grids):
        raise ValueError(f"base has {len(base)} sizes but there are {len(grids)} grids")
    return sorted(
        {
            tuple(base[:k]) + (value,) + tuple(base[k + 1 :])
            for k, grid in enumerate(grids)
            for value in grid
        }
    )


def rows_varying(timings: pd.DataFrame, column: str, varied: Sequence[str] = SIZES) -> pd.DataFrame:
    """Rows of `timings` where every size in `varied` but `column` sits at its base (most
    frequent) value, sorted by `column`."""
    held = timings
    for other in varied:
        if other != column:
            held = held[held[other] == timings[other].mode().iloc[0]]
    return held.sort_values(column)


def loglog_slopes(timings: pd.DataFrame, column: str = "seconds") -> pd.DataFrame:
    """Exponent of `column` in each size, fitted on `rows_varying` (the other two sizes held at
    their base values): least squares of log(column) on log(size). The same fit of the `bound`
    column gives the slope Proposition 1 predicts on that grid. One row per size."""
    rows = []
    for size in SIZES:
        held = rows_varying(timings, size)
        if held[size].nunique() < 2:
            raise ValueError(f"cannot fit a slope for {size!r} over fewer than 2 values")
        x = np.log(held[size].to_numpy(float))
        rows.append(
            {
                "size": size,
                "measured_slope": np.polyfit(x, np.log(held[column].to_numpy(float)), 1)[0],
                "proposition_1_slope": np.polyfit(x, np.log(held["bound"].to_numpy(float)), 1)[0],
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class ModelShape:
    """Transformer size in Proposition 2's terms: S blocks, width d, h heads, MLP factor f."""

    name: str
    S: int
    d: int
    h: int
    f: float
    source: str


GPT2_SMALL = ModelShape(
    "GPT-2 small",
    S=12,
    d=768,
    h=12,
    f=4.0,
    source="Radford et al. 2019; gpt2 config: n_layer=12, n_embd=768, n_head=12, n_inner=4*768",
)
PYTHIA_70M = ModelShape(
    "Pythia-70M",
    S=6,
    d=512,
    h=8,
    f=4.0,
    source="Biderman et al. 2023, Table 1; pythia-70m(-deduped) config: num_hidden_layers=6, "
    "hidden_size=512, num_attention_heads=8, intermediate_size=2048",
)
GEMMA_2_2B = ModelShape(
    "Gemma-2-2B",
    S=26,
    d=2304,
    h=8,
    f=4.0,
    source="Gemma Team 2024, Table 1; gemma-2-2b config: num_hidden_layers=26, hidden_size=2304, "
    "num_attention_heads=8, intermediate_size=9216",
)
MODEL_SHAPES: dict[str, ModelShape] = {
    "gpt2": GPT2_SMALL,
    "pythia-70m": PYTHIA_70M,
    "pythia-70m-deduped": PYTHIA_70M,
    "gemma-2-2b": GEMMA_2_2B,
}


def eap_ig_additional_count(shape: ModelShape, n_locations: int, n_tokens: int) -> float:
    """Proposition 2's count of EAP-ig's cost beyond the shared forward pass, per observation:
    ``12 S n d^2 (2+f) + 12 S n^2 d + L d``."""
    S, d, n = shape.S, shape.d, n_tokens
    return 12 * S * n * d**2 * (2 + shape.f) + 12 * S * n**2 * d + n_locations * d


def proposition2(
    shape: ModelShape, n_locations: int, n_tokens: int, eps: float
) -> dict[str, object]:
    """Proposition 2 for L = n_locations locations and prompts of n_tokens tokens.

    regime "(1)" when n_token < d (the paper's n_token << d), condition
    n_token > L(L-1) / (24 S (2+f) sqrt(eps)); regime "(2)" otherwise, condition
    n_token > sqrt(L(L-1) d / (24 S sqrt(eps))). cost_ratio: EAP-ig's additional cost
    12 S n d^2 (2+f) + 12 S n^2 d + L d over CircuitLasso's L(L-1) d^2 / (2 sqrt(eps)).
    """
    if n_locations < 1 or n_tokens < 1 or not 0 < eps < 1:
        raise ValueError(
            "need n_locations >= 1, n_tokens >= 1 and 0 < eps < 1, "
            f"got {n_locations}, {n_tokens}, {eps}"
        )
    S, d, f, L, n = shape.S, shape.d, shape.f, n_locations, n_tokens
    root_eps = math.sqrt(eps)
    if n < d:
        regime, threshold = "(1) n_token < d", L * (L - 1) / (24 * S * (2 + f) * root_eps)
    else:
        regime, threshold = "(2) n_token >= d", math.sqrt(L * (L - 1) * d / (24 * S * root_eps))
    eap = eap_ig_additional_count(shape, L, n)
    ours = proposition1_count(1, L, d, eps)
    return {
        "model": shape.name,
        "S": S,
        "d": d,
        "h": shape.h,
        "f": f,
        "L": L,
        "n_token": n,
        "eps": eps,
        "regime": regime,
        "n_token_threshold": threshold,
        "condition_holds": n > threshold,
        "cost_ratio": eap / ours if ours > 0 else math.inf,
    }


def proposition2_table(
    models: Sequence[str], locations_per_block: Iterable[int], n_tokens: Iterable[int], eps: float
) -> pd.DataFrame:
    """`proposition2` for every model name x (L = locations_per_block x S) x n_token."""
    unknown = [m for m in models if m not in MODEL_SHAPES]
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r}; valid: {', '.join(MODEL_SHAPES)}")
    per_block, tokens = list(locations_per_block), list(n_tokens)
    rows = [
        proposition2(MODEL_SHAPES[m], k * MODEL_SHAPES[m].S, n, eps)
        for m in models
        for k in per_block
        for n in tokens
    ]
    return pd.DataFrame(rows)


HEAD_WIDTH = 64  # GPT-2's d_model / n_heads
CROSSOVER_METHODS = {"eap": "eap", "eap_ig": "eap-ig", "circuitlasso": "circuitlasso-linear"}


def gpt2_family(n_layers: int, d_model: int) -> ModelShape:
    """GPT-2's shape at another size: heads of width 64 (h = d_model / 64) and MLP factor 4."""
    if n_layers < 1 or d_model < HEAD_WIDTH or d_model % HEAD_WIDTH:
        raise ValueError(
            f"need n_layers >= 1 and d_model a positive multiple of {HEAD_WIDTH}, "
            f"got {n_layers}, {d_model}"
        )
    return ModelShape(
        f"GPT-2 family {n_layers}x{d_model}",
        S=n_layers,
        d=d_model,
        h=d_model // HEAD_WIDTH,
        f=4.0,
        source="GPT-2's config at n_layer, n_embd; n_head = n_embd / 64, n_inner = 4 n_embd",
    )


def build_model(
    shape: ModelShape, n_ctx: int, d_vocab: int | None = None, seed: int = 0
) -> HookedTransformer:
    """A GPT-2-style HookedTransformer of `shape` with seeded random weights, on the CPU.

    GELU (gelu_new) MLPs of width f d, LayerNorm, learned positions for `n_ctx` tokens and a
    vocabulary of `d_vocab` tokens (GPT-2's is 50257), by default d: the output node's
    activation is the logits, so every component location is then d wide, as in
    Proposition 2. The component graph's hooks are switched on.
    """
    d_vocab = shape.d if d_vocab is None else d_vocab
    if shape.d % shape.h or n_ctx < 1 or d_vocab < 2:
        raise ValueError(
            f"need d divisible by h, n_ctx >= 1 and d_vocab >= 2, "
            f"got d={shape.d}, h={shape.h}, n_ctx={n_ctx}, d_vocab={d_vocab}"
        )
    cfg = HookedTransformerConfig(
        n_layers=shape.S,
        d_model=shape.d,
        n_heads=shape.h,
        d_head=shape.d // shape.h,
        d_mlp=int(shape.f * shape.d),
        d_vocab=d_vocab,
        n_ctx=n_ctx,
        act_fn="gelu_new",
        normalization_type="LN",
        positional_embedding_type="standard",
        use_attn_result=True,
        use_split_qkv_input=True,
        use_hook_mlp_in=True,
        seed=seed,
        device="cpu",
    )
    return HookedTransformer(cfg).eval()


def random_prompt_pairs(n_prompts: int, n_tokens: int, d_vocab: int, seed: int = 0) -> PromptPairs:
    """`n_prompts` clean and corrupted prompts of `n_tokens` uniform random tokens: (M, P) each;
    every position counts."""
    if n_prompts < 1 or n_tokens < 1:
        raise ValueError(f"need n_prompts, n_tokens >= 1, got {n_prompts}, {n_tokens}")
    generator = torch.Generator().manual_seed(seed)
    clean, corrupted = torch.randint(d_vocab, (2, n_prompts, n_tokens), generator=generator)
    return PromptPairs(clean, corrupted, torch.ones(n_tokens, dtype=torch.bool))


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


def proposition1_count(n_obs: int, n_locations: int, d: int, eps: float) -> float:
    """Proposition 1's operation count of the solve, ``M L (L-1) d^2 / (2 sqrt(eps))``: the
    multiply-adds of one product of the data with the coefficients per FISTA iteration, for
    the ``1/sqrt(eps)`` iterations of its rate."""
    return n_obs * n_locations * (n_locations - 1) * d**2 / (2 * math.sqrt(eps))


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
    shape = gpt2_family(n_layers, d_model)
    model = build_model(shape, n_ctx=n_tokens, seed=seed)
    prompts = random_prompt_pairs(n_prompts, n_tokens, model.cfg.d_vocab, seed)
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
    shape = gpt2_family(n_layers, d_model)
    model = build_model(shape, n_ctx=n_tokens, seed=seed)
    prompts = random_prompt_pairs(n_prompts, n_tokens, model.cfg.d_vocab, seed)
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


def stored_row(
    store: str | Path, measure: Callable[[], dict[str, object]], **run: object
) -> dict[str, object]:
    """``measure()``'s row with the UTC time it ended (``measured_at``), saved in ``store`` under
    ``run``, this machine (:func:`machine_description`) and the library's version; or the row
    saved there by an earlier call with the same ones, read back without measuring."""
    key = cache_key(**run, machine=machine_description(), version=package_version("circuitlasso"))

    def timed() -> dict[str, object]:
        ended = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return {**measure(), "measured_at": ended}

    return load_or_compute(key, timed, root=store)


def machine_description() -> str:
    """The CPU's model name (where the OS says it), its logical cores and torch's threads."""
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        models = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        name = models[0] if models else name
    return f"{name}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


CROSSOVER_SIZES = ("layers", "d_model", "n_token")


def crossover_scaling(table: pd.DataFrame) -> pd.DataFrame:
    """How each method's cost beyond the shared passes grows along each size of a
    `crossover_grid` table, against Proposition 2's counts.

    For every number of prompt pairs and every size varied with the other two at their base
    (most frequent) values: the log-log exponent, on that size, of CircuitLasso's solve
    (``solve``) and of EAP-IG's gradient passes (``eap_ig``), next to the same fit of
    Proposition 1's count (``solve_count``) and of EAP-IG's count (``eap_ig_count``). A
    measured exponent below its count's means the count overstates how that cost grows.
    """
    rows = []
    for n_prompts, runs in table.groupby("n_prompts"):
        shapes = [gpt2_family(s, d) for s, d in zip(runs["layers"], runs["d_model"], strict=True)]
        runs = runs.assign(
            solve=runs["circuitlasso_solve_s"],
            eap_ig=runs["eap_ig_additional_ratio"] * runs["circuitlasso_solve_s"],
            solve_count=[
                proposition1_count(1, L, d, LINEAR_TOL)
                for L, d in zip(runs["L"], runs["d_model"], strict=True)
            ],
            eap_ig_count=[
                eap_ig_additional_count(shape, L, n)
                for shape, L, n in zip(shapes, runs["L"], runs["n_token"], strict=True)
            ],
        )
        for size in CROSSOVER_SIZES:
            held = rows_varying(runs, size, CROSSOVER_SIZES)
            if held[size].nunique() < 2:
                continue
            x = np.log(held[size].to_numpy(float))
            row: dict[str, object] = {"n_prompts": n_prompts, "size": size}
            for column in ("solve", "solve_count", "eap_ig", "eap_ig_count"):
                row[column] = float(np.polyfit(x, np.log(held[column].to_numpy(float)), 1)[0])
            rows.append(row)
    return pd.DataFrame(rows)


CROSSOVER_RATIOS = ("eap_ig_ratio", "eap_ratio", "eap_ig_additional_ratio", "eap_additional_ratio")


def crossover_fit(table: pd.DataFrame, measured: Sequence[str] = CROSSOVER_RATIOS) -> pd.DataFrame:
    """Where each measured ratio of `crossover_grid` crosses 1, against the predicted ratio.

    One row per column in `measured`: the slope of the least-squares line of log(measured) on
    log(predicted_ratio), the predicted ratio at which that line reaches a measured ratio of 1
    (the measured crossover; 1 if both agreed), the median of predicted / measured, and the
    share of rows where both ratios name the same cheaper method, and the largest measured ratio.
    """
    if table["predicted_ratio"].nunique() < 2:
        raise ValueError("cannot fit the crossover over fewer than 2 predicted ratios")
    x = np.log(table["predicted_ratio"].to_numpy(float))
    rows = {}
    for column in measured:
        y = np.log(table[column].to_numpy(float))
        slope, intercept = np.polyfit(x, y, 1)
        rows[column] = {
            "slope": float(slope),
            "predicted_ratio_at_crossover": float(np.exp(-intercept / slope)),
            "median_predicted_over_measured": float(np.median(np.exp(x - y))),
            "same_cheaper_method": float(np.mean((x > 0) == (y > 0))),
            "max_measured": float(np.exp(y.max())),
        }
    return pd.DataFrame.from_dict(rows, orient="index")
