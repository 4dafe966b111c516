"""The paper's real-model row: CircuitLasso vs EAP and EAP-IG on counterfactual next-token tasks,
scored as MIB scores circuit localization (CPR, CMD), with each method's wall time, beside
seeded random edge scores (MIB's random baseline).

On a model (default ``smollm2-135m``), every method finds a circuit on each task's train split
and is scored on its test split: :func:`circuitlasso.evaluation.localization.compare_methods`
(its module docstring says how each method runs). The development tasks (IOI, subject-verb
agreement), on which CircuitLasso's variants and settings were chosen, and the held-out tasks
(gendered pronouns, capitals), scored once, are printed in separate blocks. CPR is MIB's, from
the signed ranking (f may exceed 1), CMD from the absolute ranking, and ``cpr_abs`` the absolute
ranking's CPR. A method's seconds are the wall time of
finding its scores, not of scoring them. Each (task, method) row is kept in ``--store`` as it
ends, so a stopped run resumes (``--fresh`` measures all). Prints a table and one JSON line
(``model``, ``tasks``, ``heldout_tasks``, ``cpr``, ``cmd``, ``cpr_abs``, ``seconds`` and
``faithfulness`` per task and method, ``model_logit_diff`` and ``model_accuracy`` per task,
``edges`` as MIB counts them, ``n_prompts``, ``device``); ``--save`` also writes it to a file
with the command, the commit and the machine it ran at and when each row was measured
(:class:`circuitlasso.evaluation.saved_localization.StoredBenchmarks` reads it).

The component graph covers every layer: there is no option for a window of layers.

    python benchmarks/ioi.py --n-train 8 --n-test 8 --fractions 0.01 0.1 1.0
    python benchmarks/ioi.py --device cuda --n-train 64 --n-test 64
    python benchmarks/ioi.py --model gemma3-270m --save benchmarks/results/ioi_gemma3-270m.json
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformer_lens import HookedTransformer

from circuitlasso.cache import cache_root
from circuitlasso.data.artifacts import write_json
from circuitlasso.data.counterfactual_tasks import ALL_TASKS, HELDOUT_TASKS
from circuitlasso.data.graph import DEFAULT_PASS_GIB
from circuitlasso.data.models import DECODER_NAME, load_model
from circuitlasso.evaluation.cost.store import provenance
from circuitlasso.evaluation.interpbench.evaluate import EAP_IG_STEPS
from circuitlasso.evaluation.localization import (
    DEFAULT_METHODS,
    LOCALIZATION_METHODS,
    LocalizationSettings,
    compare_methods,
)
from circuitlasso.evaluation.mib import MIB_FRACTIONS
from circuitlasso.evaluation.patched import PATCHED_ROWS
from circuitlasso.timing import Stopwatch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DECODER_NAME, help="a name load_model knows")
    parser.add_argument("--tasks", nargs="+", choices=ALL_TASKS, default=list(ALL_TASKS))
    parser.add_argument(
        "--methods", nargs="+", choices=LOCALIZATION_METHODS, default=list(DEFAULT_METHODS)
    )
    parser.add_argument("--n-train", type=int, default=64, help="items to find circuits on")
    parser.add_argument("--n-test", type=int, default=64, help="items to score circuits on")
    parser.add_argument("--fractions", nargs="+", type=float, default=list(MIB_FRACTIONS))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--ig-steps", type=int, default=EAP_IG_STEPS, help="EAP-IG's steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--lasso-positions",
        choices=("real", "last"),
        default="real",
        help="CircuitLasso's activations averaged over every real token (the paper's App. B.2) "
        "or over the last one, where the metric reads the logits",
    )
    parser.add_argument(
        "--patched-rows",
        type=int,
        default=PATCHED_ROWS,
        help="patched passes (prompt rows) of circuitlasso-patched",
    )
    parser.add_argument(
        "--memory-gib", type=float, default=DEFAULT_PASS_GIB, help="budget of one batch's passes"
    )
    parser.add_argument(
        "--store",
        default=str(cache_root() / "ioi_benchmark"),
        help="folder keeping each (task, method) row as it ends, so that a stopped run resumes",
    )
    parser.add_argument("--fresh", action="store_true", help="measure every row, keep nothing")
    parser.add_argument(
        "--save",
        type=Path,
        help="also write the JSON result to this file, with the command, the commit and the "
        "machine it ran at and when each row was measured",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, model: HookedTransformer | None = None) -> dict:
    """Run the benchmark; ``model`` (hook flags set here) replaces ``--model``'s."""
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    torch.manual_seed(args.seed)
    name = args.model if model is None else "the model given"
    if model is None:
        loaded = load_model(args.model, device=args.device)
        if not isinstance(loaded, HookedTransformer):
            raise SystemExit(f"{args.model} is not a decoder (HookedTransformer)")
        model = loaded
    settings = LocalizationSettings(
        methods=args.methods,
        n_train=args.n_train,
        n_test=args.n_test,
        fractions=args.fractions,
        seed=args.seed,
        ig_steps=args.ig_steps,
        lasso_positions=args.lasso_positions,
        memory_gib=args.memory_gib,
        patched_rows=args.patched_rows,
    )
    # where the result comes from, taken before the run: the commit of the code that runs
    source = provenance(__file__, sys.argv[1:] if argv is None else argv)
    clock = Stopwatch()
    run = compare_methods(model, args.tasks, settings, store=None if args.fresh else args.store)
    test_diffs = {task: s["test"].mean_logit_diff for task, s in run.model_scores.items()}
    test_accuracy = {task: s["test"].accuracy for task, s in run.model_scores.items()}
    with pd.option_context("display.width", 250, "display.max_rows", None):
        print(
            f"{name}: {run.n_edges} edges (MIB), "
            f"{args.n_train} train / {args.n_test} test items, device {model.cfg.device}, "
            f"CircuitLasso over the {args.lasso_positions} token(s), "
            f"{clock.lap('run'):.0f} s"
        )
        if not args.fresh and "measured_at" in run.table:
            print(f"rows kept in {args.store} (--fresh measures every row)")
        print(
            "model's own accuracy and mean logit difference on the test split: "
            + ", ".join(f"{t} {test_accuracy[t]:.3f} / {v:.3f}" for t, v in test_diffs.items())
        )
        table = run.summary_table().round(4)
        for title, held_out in (("development tasks", False), ("held-out tasks", True)):
            block = table[table["task"].isin(HELDOUT_TASKS) == held_out]
            if len(block):
                print(f"\n{title}:")
                print(block.to_string(index=False))
    rows = run.table.to_dict("records")

    def by_task(column: str) -> dict[str, dict[str, object]]:
        return {
            task: {r["method"]: r[column] for r in rows if r["task"] == task} for task in args.tasks
        }

    result = {
        "model": name,
        "tasks": list(args.tasks),
        "heldout_tasks": [task for task in args.tasks if task in HELDOUT_TASKS],
        "methods": list(args.methods),
        "fractions": list(args.fractions),
        "cpr": by_task("cpr"),
        "cmd": by_task("cmd"),
        "cpr_abs": by_task("cpr_abs"),
        "seconds": by_task("seconds"),
        "faithfulness": by_task("faithfulness"),
        "model_logit_diff": test_diffs,
        "model_accuracy": test_accuracy,
        "edges": run.n_edges,
        "n_prompts": {"train": args.n_train, "test": args.n_test},
        "lasso_positions": args.lasso_positions,
        "device": str(model.cfg.device),
    }
    print(json.dumps(_plain(result)))
    if args.save is not None:
        given: dict[str, object] = {**source}
        if "measured_at" in run.table:  # the rows read back from the store ran earlier
            given["measured_at"] = by_task("measured_at")
        write_json(args.save, _plain({**result, **given}))
    return result


def _plain(value: object) -> object:
    """``value`` with numpy and torch scalars as Python numbers (for ``json.dumps``)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic | torch.Tensor):
        return value.item()
    return value


if __name__ == "__main__":
    main()
