"""Layer pairs serially and on Ray, on this machine, and the paper's runs projected to a cluster.

Measured in one run, on the same data:
  startup   seconds for `ray.init` to start a local cluster of `--cpus` workers;
  overhead  seconds per empty task, serially and on Ray (scheduling and the round trip);
  pairs     one layer pair of SAE-like features (`--prompts` x `--width`, `--active` per row;
            `circuitlasso.evaluation.solver_check.sae_like_problem`) fitted in chunks of
            `--chunk` child columns, one after another and as Ray tasks, each from an empty
            cache: total seconds, seconds per task, Ray's speedup and its largest coefficient
            difference from the serial run;
  task      one task at the paper's shape (8551 prompts, 32768-wide SAEs, 200 active per row,
            `--chunk` columns), then `evaluation.cluster.projection`: that task's seconds times
            the number of tasks of each of the paper's runs, over `--workers` workers. The
            projection is stated as one, not measured.
Run: python benchmarks/cluster.py [--cpus 2] [--prompts 8551] [--width 8192] [--active 200]
     [--chunk 1024] [--workers 1 8 64]
Prints the tables, then one JSON line.
"""

from __future__ import annotations

import argparse
import json

import pandas as pd
import ray

from circuitlasso.evaluation import cluster
from circuitlasso.evaluation.solver_check import sae_like_problem
from circuitlasso.executor import RayExecutor, SerialExecutor
from circuitlasso.timing import Stopwatch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2, help="Ray workers (num_cpus)")
    parser.add_argument("--prompts", type=int, default=8551)
    parser.add_argument("--width", type=int, default=8192, help="SAE width of the measured pair")
    parser.add_argument("--active", type=int, default=200, help="active features per prompt")
    parser.add_argument("--chunk", type=int, default=1024, help="child columns per task")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 8, 64])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    clock = Stopwatch()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    startup = clock.lap("ray startup")
    executors = {"serial": SerialExecutor(), f"ray ({args.cpus} workers)": RayExecutor()}
    overhead = {name: cluster.task_overhead(e, 500) for name, e in executors.items()}

    X, Y, _ = sae_like_problem(M=args.prompts, p=args.width, d=args.width,
                               active_per_row=args.active, seed=args.seed)  # fmt: skip
    pairs = cluster.time_layer_pairs({0: X, 1: Y.tocsr()}, executors, chunk_size=args.chunk)
    pairs["empty task seconds"] = pd.Series(overhead)
    pairs["speedup vs serial"] = pairs["seconds"].iloc[0] / pairs["seconds"]
    per_row = X.nnz / X.shape[0]
    print(
        f"\n== one layer pair: {args.prompts} prompts, width {args.width}, {per_row:.0f} active "
        f"per row, {args.chunk} columns per task; Ray started in {startup:.1f} s =="
    )
    print(pairs.to_string(float_format=lambda v: f"{v:.4g}"))

    task_seconds = cluster.time_task(chunk=args.chunk, seed=args.seed)
    table = cluster.projection(task_seconds, args.chunk, workers=args.workers)
    print(
        f"\n== projection (not a measurement): one task of {args.chunk} columns at the "
        f"paper's shape took {task_seconds:.1f} s here; every task assumed to cost that =="
    )
    print(table.to_string(float_format=lambda v: f"{v:.3g}"))
    ray.shutdown()
    print(json.dumps({
        "ray_startup_seconds": round(startup, 3),
        "empty_task_seconds": {k: round(v, 6) for k, v in overhead.items()},
        "pair_seconds": {k: round(v, 3) for k, v in pairs["seconds"].items()},
        "ray_coef_diff_vs_serial": float(pairs["coef_diff_vs_first"].max()),
        "paper_task_seconds": round(task_seconds, 3),
        "projected_hours": {model: round(float(row.iloc[-1]), 4)
                            for model, row in table.iterrows()},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
