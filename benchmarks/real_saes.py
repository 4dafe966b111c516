"""Sweep of the real model's SAE settings: quality and training time per layer.

all-MiniLM-L6-v2's per-layer representation (or, with `--finetuned`, that of the model fine-tuned
on CoLA, `all-minilm-l6-v2-cola`) is collected once at the real tokens of CoLA's training
sentences (train) and in-domain dev sentences (scored). For each setting of the grid
(width, k, training tokens, rounds, learning rate; batch 512 tokens) and each chosen layer, one
TopK SAE is trained exactly as `circuitlasso real build` trains it
(`circuitlasso.data.sae_training.train_layer_sae`) and scored on dev: explained variance, share
of dead features, L0, seconds. The library's defaults are the cheapest setting that reaches an
explained variance of 0.8 with at most 10 % dead features on every layer.

Run: python benchmarks/real_saes.py [--finetuned] [--layers 0 3 5]
         [--grid WIDTH:K:TOKENS:ROUNDS:LR ...]
Prints the table, then one JSON line (the rows).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pandas as pd

from circuitlasso.data.cola import load_cola
from circuitlasso.data.minilm import LAYER_HOOK, load_minilm
from circuitlasso.data.minilm_cola import load_finetuned
from circuitlasso.data.minilm_saes import token_activations
from circuitlasso.data.sae_training import SAEConfig, sae_quality, train_layer_sae
from circuitlasso.timing import Stopwatch

DEFAULT_GRID = [
    "1536:32:300000:2:1e-3",
    "1536:32:600000:2:1e-3",
    "1536:32:600000:2:3e-3",
    "1536:32:600000:2:1e-2",
    "1536:16:600000:2:1e-2",
    "768:32:600000:2:1e-2",
    "1536:48:600000:2:1e-2",
    "1536:32:900000:3:1e-2",
]


def parse(spec: str) -> SAEConfig:
    width, k, tokens, rounds, lr = spec.split(":")
    return replace(
        SAEConfig(),
        width=int(width),
        k=int(k),
        training_tokens=int(tokens),
        rounds=int(rounds),
        lr=float(lr),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, nargs="*", default=[0, 3, 5])
    parser.add_argument("--grid", nargs="*", default=DEFAULT_GRID)
    parser.add_argument(
        "--finetuned", action="store_true", help="the model fine-tuned on CoLA (its shipped build)"
    )
    args = parser.parse_args()
    model = load_finetuned() if args.finetuned else load_minilm()
    train = token_activations(model, list(load_cola("train").sentence))
    dev = token_activations(model, list(load_cola("dev").sentence))
    print(f"tokens: train {len(train[0])}, dev {len(dev[0])}", flush=True)
    rows = []
    for spec in args.grid:
        cfg = parse(spec)
        for layer in args.layers:
            clock = Stopwatch()
            sae = train_layer_sae(train[layer], layer, cfg, LAYER_HOOK.format(layer=layer))
            seconds = clock.lap("run")
            quality = sae_quality(sae, dev[layer])
            rows.append({"setting": spec, "layer": layer, **quality, "seconds": seconds})
            print(json.dumps(rows[-1]), flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    worst = table.groupby("setting", sort=False).agg(
        ev_min=("explained_variance", "min"),
        dead_max=("dead_fraction", "max"),
        seconds_per_layer=("seconds", "mean"),
    )
    worst["meets 0.8 / 10 %"] = (worst.ev_min >= 0.8) & (worst.dead_max <= 0.1)
    print(worst.to_string(float_format=lambda v: f"{v:.3g}"))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
