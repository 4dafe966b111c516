"""CircuitLasso vs EAP and EAP-IG on tracr-compiled InterpBench cases: SHD, AUROC, wall time.

For every case x variant x method it prints the edge and node SHD of the circuit at the method's
own ground-truth-free threshold, the best edge SHD over all thresholds (hindsight), the edge AUROC
and the median wall time of ``--trials`` runs split into collection and solve; then the means over
cases and the median speedups of the CircuitLasso methods over EAP-IG and EAP (same device, same
prompts). The last line is one JSON object with ``mean_edge_shd``, ``mean_edge_auroc``,
``median_speedup_vs_eap_ig``, ``median_speedup_vs_eap`` and ``cases``.

    python benchmarks/interpbench.py                 # 16 cases, both variants, M=1000, 3 trials
    python benchmarks/interpbench.py --quick         # 4 cases, M=200, 1 trial
    python benchmarks/interpbench.py --cases 3,13 --methods eap-ig,circuitlasso-linear
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import warnings

import pandas as pd
import torch
from tqdm import tqdm

from circuitlasso.datasets.interpbench import CASE_IDS, METHODS, VARIANTS, evaluate_case

QUICK_CASES = ("3", "13", "19", "29")
LASSO_METHODS = tuple(m for m in METHODS if m.startswith("circuitlasso"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASE_IDS), help="comma-separated case ids")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--n-prompts", type=int, default=1000, help="M clean (and M corrupted)")
    parser.add_argument("--trials", type=int, default=3, help="timing runs per method (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for all methods")
    parser.add_argument("--quick", action="store_true", help=f"cases {QUICK_CASES}, M=200, 1 trial")
    parser.add_argument("--csv", help="also write the per-case table to this CSV file")
    args = parser.parse_args(argv)
    if args.quick:
        args.cases, args.n_prompts, args.trials = ",".join(QUICK_CASES), 200, 1
    return args


def median_speedups(table: pd.DataFrame, baseline: str) -> dict[str, float]:
    """Per CircuitLasso method: median over case x variant of baseline time / method time."""
    wide = table.pivot_table(index=["case", "variant"], columns="method", values="total_s")
    if baseline not in wide:
        return {}
    return {
        method: float(statistics.median(wide[baseline] / wide[method]))
        for method in LASSO_METHODS
        if method in wide
    }


def nested_means(table: pd.DataFrame, column: str) -> dict[str, dict[str, float]]:
    means = table.groupby(["method", "variant"])[column].mean()
    out: dict[str, dict[str, float]] = {}
    for (method, variant), value in means.items():
        out.setdefault(method, {})[variant] = round(float(value), 4)
    return out


def write_csv(table: pd.DataFrame, path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        table.to_csv(f, index=False)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    tables = []
    jobs = [(case, variant) for case in cases for variant in variants]
    for case, variant in tqdm(jobs, desc="cases"):
        tables.append(evaluate_case(case, variant, methods, args.n_prompts, args.seed, args.trials))
    table = pd.concat(tables, ignore_index=True)
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(
            f"M={args.n_prompts} prompts (x2 clean+corrupted), {args.trials} trials, "
            f"{args.threads} thread(s), seed {args.seed}"
        )
        print(table.round(4).to_string(index=False))
        columns = [
            "edge_shd",
            "node_shd",
            "best_edge_shd",
            "edge_auroc",
            "collect_s",
            "solve_s",
            "total_s",
        ]
        print("\nmeans over cases")
        print(table.groupby(["variant", "method"])[columns].mean().round(4).to_string())
    summary = {
        "mean_edge_shd": nested_means(table, "edge_shd"),
        "mean_edge_auroc": nested_means(table, "edge_auroc"),
        "median_speedup_vs_eap_ig": median_speedups(table, "eap-ig"),
        "median_speedup_vs_eap": median_speedups(table, "eap"),
        "cases": cases,
    }
    if args.csv:
        write_csv(table, args.csv)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
