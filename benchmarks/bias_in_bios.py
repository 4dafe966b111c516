"""Bias in Bios debiasing on the toy world: the paper's Tables 1 and 2 for every method.

Runs :func:`circuitlasso.evaluation.debias.compare_methods` on the toy world's language model
and SAEs (probes on ``blocks.3.hook_resid_post``, SHIFT over the SAEs of layers 0-3, CircuitLasso on
layer 3) and toy Bias in Bios, with the automatic gender-feature rule. Prints Table 2 (profession,
gender and worst-group accuracy on the balanced test set, percent), Table 1 (SAE features removed
and seconds to build the classifier), the ablation (CircuitLasso's classifier without and with
the removal of gender features), the automatic gender-feature rule against the toy world's ground
truth (precision and recall of its calls among SHIFT's and CircuitLasso's candidates) and, as its
last line, one JSON object: per method ``profession``, ``gender``, ``worst_group``, ``features``
(null where none are removed) and ``seconds``.

    python benchmarks/bias_in_bios.py               # about a minute and a half on one core
    python benchmarks/bias_in_bios.py --layer 2 --threads 2
"""

from __future__ import annotations

import argparse
import json
import warnings

import pandas as pd
import torch

from circuitlasso.data.models import load_model, load_saes
from circuitlasso.evaluation.debias import (
    TOY_CONCEPTS,
    ComparisonOptions,
    ablation_table,
    compare_methods,
    load_splits,
    removal_table,
    rule_vs_toy_truth,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", type=int, default=3, help="the layer the probes read")
    parser.add_argument("--n-candidates", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    model = load_model("toy")
    saes = load_saes("toy", range(args.layer + 1), model=model)
    splits = load_splits("toy_bias_in_bios", ("professor", "nurse"), seed=args.seed)
    options = ComparisonOptions(n_candidates=args.n_candidates)
    result = compare_methods(model, saes, args.layer, splits, ("professor", "nurse"),
                             TOY_CONCEPTS, options)  # fmt: skip
    table = result.table
    with pd.option_context("display.width", 120):
        print("Table 2: accuracy on the balanced test set (%)")
        print(table[["profession", "gender", "worst_group"]].round(1).to_string())
        print("\nTable 1: SAE features removed and seconds to build the classifier")
        print(removal_table(table).to_string())
        print("\nAblation: CircuitLasso without and with the removal step")
        print(ablation_table(table).to_string())
        print("\nThe automatic gender-feature rule against the toy world's ground truth")
        truth = rule_vs_toy_truth(model, saes, result, splits)
        print(truth.round(3).to_string(index=False))
    summary = {
        method: {
            "profession": round(float(row["profession"]), 2),
            "gender": round(float(row["gender"]), 2),
            "worst_group": round(float(row["worst_group"]), 2),
            "features": None if pd.isna(row["features"]) else int(row["features"]),
            "seconds": round(float(row["seconds"]), 2),
        }
        for method, row in table.iterrows()
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
