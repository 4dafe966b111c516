"""Crossover benchmark: measured EAP-IG / CircuitLasso wall-time ratio against Proposition 2's.

GPT-2-family models (heads of width 64, MLP factor 4, gelu_new, LayerNorm, learned positions, a
vocabulary of d_model tokens) with seeded random weights, built from their configs (no
downloads). On each (layers, d_model, n_token) EAP, EAP-IG (10 steps) and linear CircuitLasso run
as in the InterpBench harness on the same random prompt pairs, after one warm-up each; a time is
collection plus solve. Every ratio is against CircuitLasso in the same run. The predicted ratio
is Proposition 2's with L = the model's component nodes and eps = the linear fit's tolerance. The
proposition compares the costs beyond the forward passes both methods share (the collection), so
each run gives that ratio measured too: EAP-IG's gradient passes over CircuitLasso's solve
(`eap_ig_additional_ratio`); the whole-time ratio (`eap_ig_ratio`) adds the shared passes to both.

The default grid varies one size at a time around `--base` (2 layers, d_model 128, 64 tokens):
layers 2, 4, 8, 12; d_model 128, 256, 512, 768; n_token 16, 64, 256; each at 8, 64 and 512
prompt pairs (the largest take many minutes each on a CPU, the whole grid hours on 2 cores).
Each run's row is kept in ``--store`` (default under the cache) as soon as it ends, with the
time it was measured, so a stopped grid resumes where it stopped; rows timed on another CPU,
thread count or library version are measured again, and the output says how many rows it read
back and when they were measured (``--fresh`` measures all). CircuitLasso's solve is printed
next to its floor: Proposition 1's count over the measured throughput of a dense float64
product at the solve's shape, with the threads of the run. Prints the table, the fit of
measured on predicted ratio (`crossover_fit`), where Proposition 2 predicts a ratio of 2 or
more and CircuitLasso was not measured faster, how each method's cost beyond the shared passes
grows along each size against its count (`crossover_scaling`), and one JSON line.

GPT-2 small's shape (12 layers, d_model 768, 64 tokens, 64 pairs) does not run whole on a CPU:
its row solves 3 of its 157 children and runs EAP and EAP-IG on 4 of the pairs, projects the
rest (`projected_time_methods`) and is printed apart, labelled, and left out of the fit.

    python benchmarks/crossover.py --quick          # 4 small configs at 8 pairs, about a minute
    python benchmarks/crossover.py --layers 2,4 --d-model 128,256 --n-tokens 64 --n-prompts 8,64
"""

from __future__ import annotations

import argparse
import json
import warnings
from datetime import datetime, timezone
from functools import partial

import pandas as pd
import torch

from circuitlasso.cache import cache_root
from circuitlasso.evaluation.cost.crossover import crossover_grid, projected_time_methods
from circuitlasso.evaluation.cost.scaling import (
    crossover_fit,
    crossover_scaling,
    vary_one_at_a_time,
)
from circuitlasso.evaluation.cost.store import machine_description, stored_row
from circuitlasso.timing import Stopwatch

QUICK = [(2, 128, 16), (2, 128, 64), (2, 128, 256), (4, 128, 64)]


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=ints, default=[2, 128, 64], help="layers,d_model,n_token")
    parser.add_argument("--layers", type=ints, default=[2, 4, 8, 12])
    parser.add_argument("--d-model", type=ints, default=[128, 256, 512, 768])
    parser.add_argument("--n-tokens", type=ints, default=[16, 64, 256])
    parser.add_argument(
        "--n-prompts", type=ints, default=[8, 64, 512], help="prompt pairs (clean and corrupted)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per method (best)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help=f"the configs {QUICK}")
    parser.add_argument(
        "--no-gpt2-small", action="store_true", help="skip GPT-2 small's projected row"
    )
    parser.add_argument(
        "--store",
        default=str(cache_root() / "crossover"),
        help="folder keeping each run's row as it ends, so that a stopped grid resumes "
        "(rows of another CPU, thread count or library version are measured again)",
    )
    parser.add_argument("--fresh", action="store_true", help="measure every run, keep nothing")
    return parser.parse_args(argv)


def shown(table: pd.DataFrame) -> str:
    """``table`` as printed: 4 decimals, without the times its rows were measured at."""
    return table.drop(columns="measured_at", errors="ignore").round(4).to_string(index=False)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    grids = (args.layers, args.d_model, args.n_tokens)
    configs = QUICK if args.quick else vary_one_at_a_time(args.base, grids)
    pairs = [8] if args.quick else args.n_prompts
    clock = Stopwatch()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    store = None if args.fresh else args.store
    table = crossover_grid(
        configs, n_prompts=pairs, repeats=args.repeats, seed=args.seed, progress=True, store=store
    )
    fits = crossover_fit(table) if table["predicted_ratio"].nunique() >= 2 else None
    scaling = crossover_scaling(table)
    gpt2 = None
    if not (args.quick or args.no_gpt2_small):
        project = partial(projected_time_methods, 12, 768, 64, n_prompts=64, seed=args.seed)
        if store is None:
            gpt2 = pd.DataFrame([project()])
        else:
            gpt2 = pd.DataFrame([stored_row(store, project, kind="gpt2_small", seed=args.seed)])
    expected = table[table["predicted_ratio"] >= 2]
    not_faster = expected[expected["eap_ig_ratio"] <= 1]
    many = table[table["n_prompts"] >= 64]
    with pd.option_context("display.width", 250, "display.max_rows", None):
        print(
            f"prompt pairs {pairs}, best of {args.repeats}, {args.threads} thread(s), seed "
            f"{args.seed}; {len(table)} runs in {clock.lap('run'):.0f} s on "
            f"{machine_description()}"
        )
        if store is not None:
            when = pd.concat([t["measured_at"] for t in (table, gpt2) if t is not None])
            earlier = when[when < started]
            print(
                f"{len(earlier)} of {len(when)} runs read from {store}, as measured on this "
                f"machine before this call (UTC {earlier.min()} to {earlier.max()}); --fresh "
                "measures every run"
                if len(earlier)
                else f"every run measured now, each kept in {store} as it ended"
            )
        print(shown(table))
        print("\nlog(measured ratio) ~ log(predicted ratio)")
        if fits is None:
            print("not fitted: the grid has fewer than 2 predicted ratios")
        else:
            print(fits.round(4).to_string())
        if len(scaling):
            print(
                "\nlog-log exponent of each cost beyond the shared passes along each size "
                "(the others at their base), measured and counted"
            )
            print(scaling.round(3).to_string(index=False))
        print(
            f"\npredicted ratio >= 2: {len(expected)} runs, CircuitLasso not measured faster "
            f"than EAP-IG in {len(not_faster)}"
        )
        if len(not_faster):
            print(not_faster[list(table.columns[:5]) + ["eap_ig_ratio"]].to_string(index=False))
        if gpt2 is not None:
            print("\nGPT-2 small's shape, PROJECTED (" + gpt2.loc[0, "projected"] + ")")
            print(shown(gpt2.drop(columns="projected")))
    result = {
        "runs": len(table),
        "n_prompts": pairs,
        "largest_solve_over_floor_at_64_pairs_or_more": (
            float(many["solve_over_floor"].max()) if len(many) else None
        ),
        "predicted_at_least_2_not_faster": len(not_faster),
        "gpt2_small_projected": None if gpt2 is None else json.loads(gpt2.iloc[0].to_json()),
        "scaling": scaling.to_dict("records"),
        **({} if fits is None else fits.to_dict("index")),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
