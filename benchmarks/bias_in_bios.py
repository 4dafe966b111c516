"""Bias in Bios debiasing: the paper's Tables 1 and 2 for every method, over several data seeds.

Runs :func:`circuitlasso.evaluation.debias.compare_methods` once per seed on a model and its SAEs
(:func:`circuitlasso.evaluation.debias.load_run`: every SAE the model has up to the probes'
layer): by default the toy world (probes on ``blocks.3.hook_resid_post``) on toy Bias in Bios;
``--model smollm2-135m`` the real decoder on the biographies generated here
(``synthetic_bios``; probes on block 19's output, the paper's relative depth: Pythia-70M's
layer 4 of 6; SHIFT over the SAEs of blocks 4, 9, 14 and 19), with the automatic gender-feature
rule. Each seed draws the splits' rows (``--max-prompts`` per split) and the random control.
On the toy world ``--sae-seeds`` repeats every data seed on each SAE build it names: the shipped
SAEs (the build seed, 0) and SAEs trained again on the same model and texts by another seed
(:func:`circuitlasso.data.toyworld.build.retrained_toy_saes`, cached; minutes on one core each),
so that the spread covers the SAEs as well as the data.

Prints each seed's Table 2 (profession, gender and worst-group accuracy on the balanced test set,
percent), then every method's mean and standard deviation over the seeds, Table 1 (SAE features
removed and seconds), the share of the worst-group gap between ORIGINAL and ORACLE each method
closes, on the toy world the rule against its ground truth (first seed), and, as its last line,
one JSON object: per method the mean and standard deviation of ``profession``, ``gender``,
``worst_group``, ``features`` (null where none are removed) and ``seconds``, and the seeds;
``--save`` also writes it to a file with each seed's table, the command, the commit and the
machine (:func:`circuitlasso.evaluation.debias.stored_comparison_table` reads it).

    python benchmarks/bias_in_bios.py                                 # about 2 minutes a seed
    python benchmarks/bias_in_bios.py --seeds 0 1 2
    python benchmarks/bias_in_bios.py --seeds 0 1 2 --sae-seeds 0 1000   # two SAE builds
    python benchmarks/bias_in_bios.py --model smollm2-135m --seeds 0 1 2   # minutes a seed
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import pandas as pd
import torch
from sae_lens import SAE

from circuitlasso.data.artifacts import MANIFEST_FILE, write_json
from circuitlasso.data.toyworld.artifacts import default_toy_dir, load_toy_saes
from circuitlasso.data.toyworld.build import retrained_toy_saes
from circuitlasso.evaluation.cost.store import provenance
from circuitlasso.evaluation.debias import (
    TOY_CONCEPTS,
    ComparisonOptions,
    compare_methods,
    gap_closed,
    load_run,
    load_splits,
    rule_vs_toy_truth,
)
from circuitlasso.evaluation.debias.tables import SCORES

# model -> (layer, data set, options): the toy world's as the toy section runs it; the decoder's
# at the sizes of one CPU core (fewer texts and integration steps than the paper's GPUs ran)
SETTINGS = {
    "toy": (3, "toy_bias_in_bios", {}),
    "smollm2-135m": (
        19,
        "synthetic_bios",
        {"lam_ratio": 0.01, "attribution_prompts": 100, "steps": 5, "label_prompts": 100},
    ),
}
# The decoder's biographies with half their profession cues drawn from either profession of the
# pair: with every cue its own (1.0), the probe on the ambiguous set reads the profession and is
# right on every group, so there is no gender bias to remove. On the dev rows (never the test
# split; 200 per set, block 19), ORIGINAL's / ORACLE's worst-group accuracy was 100 / 100 at 1.0,
# 62 / 86 at 0.7, 14 / 78 at 0.5, 4 / 56 at 0.3 and 0 / 56 at 0.15: 0.5 leaves the largest gap.
PROFESSION_SIGNAL = {"smollm2-135m": 0.5}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SETTINGS), default="toy")
    parser.add_argument("--layer", type=int, help="the layer the probes read (default: above)")
    parser.add_argument("--professions", nargs=2, default=["professor", "nurse"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--sae-seeds",
        type=int,
        nargs="+",
        help="toy world only: the SAE builds to run each seed on (the shipped build's seed: its "
        "own SAEs; another: SAEs trained again by it); default: the shipped SAEs alone",
    )
    parser.add_argument("--max-prompts", type=int, help="rows per split (default: every row)")
    parser.add_argument(
        "--profession-signal",
        type=float,
        help="generated biographies only: the chance a profession cue is the profession's own "
        "(default: PROFESSION_SIGNAL's, else 1)",
    )
    parser.add_argument("--n-candidates", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--save",
        type=Path,
        help="also write the JSON object, each seed's table, the command, the commit and the "
        "machine to this file",
    )
    return parser.parse_args(argv)


def build_saes(sae_seed: int, layers: list[int]) -> dict[int, SAE]:
    """The toy world's SAEs of ``layers`` from the SAE build ``sae_seed``: the shipped ones for
    the shipped build's seed, else those trained again by it (cached)."""
    shipped = json.loads((default_toy_dir() / MANIFEST_FILE).read_text())["seed"]
    path = None if sae_seed == shipped else retrained_toy_saes(sae_seed)
    return load_toy_saes(layers, path=path)


def mean_and_spread(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Each method's mean and standard deviation (ddof 1; 0 for one seed) over ``tables``."""
    stacked = pd.concat(tables, keys=range(len(tables)), names=["seed", "method"])
    numbers = stacked[[*SCORES, "features", "seconds"]].astype(float)
    grouped = numbers.groupby(level="method", sort=False)
    return pd.concat({"mean": grouped.mean(), "std": grouped.std(ddof=1).fillna(0.0)}, axis=1)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    default_layer, dataset, settings = SETTINGS[args.model]
    layer = default_layer if args.layer is None else args.layer
    model, saes = load_run(args.model, layer)
    if args.sae_seeds is not None and args.model != "toy":
        raise SystemExit("--sae-seeds retrains the toy world's SAEs only")
    builds = {None: saes} if args.sae_seeds is None else {
        sae_seed: build_saes(sae_seed, sorted(saes)) for sae_seed in args.sae_seeds
    }  # fmt: skip
    signal = args.profession_signal
    if signal is None:
        signal = PROFESSION_SIGNAL.get(args.model, 1.0)
    data = dataset if signal == 1.0 else f"{dataset}, profession signal {signal}"
    print(f"{args.model}: probes on layer {layer}, SAEs of layers {sorted(saes)}; {data}")
    # where the result comes from, taken before the runs: the commit of the code that runs
    source = provenance(__file__, sys.argv[1:] if argv is None else argv)
    tables, runs = [], []
    for sae_seed, saes in builds.items():
        build = "" if sae_seed is None else f", SAE build {sae_seed}"
        for seed in args.seeds:
            splits = load_splits(
                dataset, args.professions, seed=seed, max_prompts=args.max_prompts,
                profession_signal=signal,
            )  # fmt: skip
            options = ComparisonOptions(n_candidates=args.n_candidates, seed=seed, **settings)
            result = compare_methods(model, saes, layer, splits, args.professions, TOY_CONCEPTS,
                                     options)  # fmt: skip
            tables.append(result.table)
            runs.append((sae_seed, seed))
            print(f"\nseed {seed}{build}: Table 2, accuracy on the balanced test set (%)")
            print(result.table[SCORES].round(1).to_string())
            if args.model == "toy" and seed == args.seeds[0]:
                print("\nThe automatic gender-feature rule against the toy world's ground truth")
                truth = rule_vs_toy_truth(model, saes, result, splits)
                print(truth.round(3).to_string(index=False))
    if len(builds) > 1:
        for sae_seed in builds:
            chosen = [t for t, (b, _) in zip(tables, runs, strict=True) if b == sae_seed]
            means = mean_and_spread(chosen)["mean"][SCORES].round(1)
            print(f"\nSAE build {sae_seed}: Table 2's means over seeds {args.seeds} (%)")
            print(means.to_string())
    spread = mean_and_spread(tables)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        over = "" if args.sae_seeds is None else f" and SAE builds {args.sae_seeds}"
        print(f"\nTable 2 over seeds {args.seeds}{over}: mean and standard deviation (%)")
        print(spread[[("mean", s) for s in SCORES] + [("std", s) for s in SCORES]].round(1))
        print("\nTable 1: SAE features removed and seconds (means over the seeds)")
        print(spread["mean"][["features", "seconds"]].dropna().round(1).to_string())
        worst = spread["mean"]["worst_group"]
        if worst["ORACLE"] > worst["ORIGINAL"]:
            print("\nWorst-group gap between ORIGINAL and ORACLE closed (means over the seeds)")
            print(gap_closed(spread["mean"]).to_string())
        else:
            print(f"\nNo worst-group gap to close: ORIGINAL {worst['ORIGINAL']:.1f}, "
                  f"ORACLE {worst['ORACLE']:.1f}")  # fmt: skip
    summary = {
        method: {
            f"{stat}_{column}": None if pd.isna(value) else round(float(value), 2)
            for stat in ("mean", "std")
            for column in [*SCORES, "features", "seconds"]
            for value in [spread.loc[method, (stat, column)]]
        }
        for method in spread.index
    }
    line = {"model": args.model, "layer": layer, "seeds": args.seeds,
            "profession_signal": signal, **summary}  # fmt: skip
    if args.sae_seeds is not None:
        line["sae_seeds"] = args.sae_seeds
    print(json.dumps(line))
    if args.save is not None:
        per_seed = {
            str(seed) if sae_seed is None else f"SAE build {sae_seed}, seed {seed}": {
                method: {k: None if math.isnan(v) else v for k, v in row.items()}
                for method, row in table[[*SCORES, "features", "seconds"]]
                .astype(float)
                .to_dict("index")
                .items()
            }
            for (sae_seed, seed), table in zip(runs, tables, strict=True)
        }
        write_json(args.save, {**line, "per_seed": per_seed, **source})


if __name__ == "__main__":
    main()
