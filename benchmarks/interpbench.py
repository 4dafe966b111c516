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
    python benchmarks/interpbench.py --suite heldout --quick   # all held-out tasks, M=200, 1 trial
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings

import pandas as pd
import torch

from circuitlasso.data.interpbench import CASE_IDS, HELDOUT_IDS, VARIANTS
from circuitlasso.evaluation.interpbench import METHODS, RunSettings
from circuitlasso.evaluation.interpbench.report import (
    ACCURACY_COLUMNS,
    TIME_COLUMNS,
    case_means,
    run_cases,
    summary,
)

QUICK_CASES = ("3", "13", "19", "29")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("interpbench", "heldout"), default="interpbench")
    parser.add_argument("--cases", help="comma-separated case ids (default: all of the suite)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--n-prompts", type=int, default=1000, help="M clean (and M corrupted)")
    parser.add_argument("--trials", type=int, default=3, help="timing runs per method (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for all methods")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"cases {QUICK_CASES} (heldout: all), M=200, 1 trial",
    )
    parser.add_argument("--csv", help="also write the per-case table to this CSV file")
    args = parser.parse_args(argv)
    all_ids = HELDOUT_IDS if args.suite == "heldout" else CASE_IDS
    quick_ids = all_ids if args.suite == "heldout" else QUICK_CASES
    if args.quick:
        args.cases, args.n_prompts, args.trials = ",".join(quick_ids), 200, 1
    elif args.cases is None:
        args.cases = ",".join(all_ids)
    return args


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
    settings = RunSettings(methods, args.n_prompts, args.seed, args.trials)
    table = run_cases(cases, variants, settings, suite=args.suite)
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(
            f"suite {args.suite}, M={args.n_prompts} prompts (x2 clean+corrupted), "
            f"{args.trials} trials, {args.threads} thread(s), seed {args.seed}"
        )
        print(table.round(4).to_string(index=False))
        columns = [c for c in ACCURACY_COLUMNS if not c.startswith("n_")] + list(TIME_COLUMNS)
        print("\nmeans over cases")
        print(case_means(table, columns).round(4).to_string())
    result = summary(table)
    if args.csv:
        write_csv(table, args.csv)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
