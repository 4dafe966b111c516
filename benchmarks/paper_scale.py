"""Paper-scale benchmark: the CoLA feature-circuit run at full size on a random-weight stand-in.

The paper's CoLA experiment (Sec. 4.2) end to end, with nothing to download but the data already
mirrored: GPT-2 small's architecture (12 layers, d_model=768, 12 heads, d_mlp=3072, n_ctx=1024,
GPT-2's vocabulary) built by ``circuitlasso.data.models.tiny_gpt2`` with seeded random weights,
one random TopK SAE (width 24576, k=32) per layer on ``blocks.{l}.hook_resid_post``, and the
8,551 real CoLA training sentences. The stages are the library calls the CoLA section makes
(``notebooks/cola_circuits.ipynb`` on the ``paper`` profile):
  load      the model and the 12 SAEs (SAE decoder rows unit-norm Gaussian, encoder = decoder^T,
            zero biases, each layer seeded)
  collect   ``collect_sae_features`` for every layer: Z = {layer: (M, width)} token-averaged
            features, into a fresh temporary cache (a cold collection)
  label     ``fit_label`` on the last layer against the CoLA labels, at ``--label-lam-ratio``
            (``CircuitLasso``'s default; the section picks it by ``GridSearchCV``, not run here)
  pair l    ``LayerRegressions.fit_pair(l)``: ``fit_layer_pair(Z[l-1], Z[l])`` over every child
            column (as ``CircuitLasso`` with ``layer_pairs="all"``), within ``--memory-gib``
  trace     ``trace_circuit`` through the fitted pairs (``LayerRegressions``, as ``CircuitLasso``
            with ``layer_pairs="all"``); with ``--pairs`` a subset it goes down only through
            the pairs fit from the last layer down without a gap (none: the roots alone)
The other defaults are the section's (its notebook's, which the ``paper`` profile keeps): layer-pair
``lam_ratio`` 0.1, ``min_prompts`` 10, 5 roots, 2 parents per node, standardized ranking.
Per stage: seconds (``circuitlasso.timing.Stopwatch``), the stage's peak resident memory
(``circuitlasso.timing.PeakMemory``: this process's RSS sampled every 0.05 s, reset at each
stage; it can miss a spike shorter than that) and the process's peak so far (``ru_maxrss``, exact),
active features per sentence (nonzeros per row of Z: every layer's mean for collect, the last
layer for label, the child layer for a pair) and outputs per second (sentences for collect, child
columns for a pair). With a subset of pairs the full 11-pair time is projected from the median
measured pair, labelled as a projection. Random weights and SAEs measure scale only: the circuit
says nothing about grammar.

On a real model (``--model smollm2-135m``: the decoder SmolLM2-135M with its shipped SAEs, on
every layer that has one unless ``--sae-layers`` says otherwise) the same stages run on the real
weights and SAEs; a pair then links each SAE layer to the one below it.

Run: python benchmarks/paper_scale.py [--sentences N] [--width 24576] [--k 32] [--pairs 1 6 11]
     [--batch-size 64] [--device cpu] [--threads 2] [--memory-gib 8]
     [--model smollm2-135m [--sae-layers 4 9 14 19 24 29]]
Prints the stage table, then one JSON line: total_seconds, peak_gib, stage_seconds,
layer_pair_seconds_median, pairs_measured (and projected_total_seconds_all_pairs for a subset).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sae_lens import TopKSAE, TopKSAEConfig
from sae_lens.saes.sae import SAEMetadata

from circuitlasso.circuits import trace as tr
from circuitlasso.circuits.features import Features, fit_label
from circuitlasso.collect import collect_sae_features
from circuitlasso.data.cola import load_cola
from circuitlasso.data.models import DECODER_NAME, gpt2_tokenizer, load_model, load_saes, tiny_gpt2
from circuitlasso.data.smollm2_saes import SAE_LAYERS
from circuitlasso.timing import PeakMemory, Stopwatch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TOKENIZER = ROOT.parent / "shared" / "data" / "gpt2-tokenizer"
DEFAULT_DATA = ROOT.parent / "shared" / "data"
STAND_IN = (
    "The stand-in measures scale (time, memory), not interpretability: "
    "its weights and SAEs are random."
)


class Stages:
    """Timed stages, one table row each: ``stage(name)`` yields the row for the body to fill
    (``active``, ``outputs``, ...) and adds seconds and memory when the body ends."""

    def __init__(self) -> None:
        self.clock = Stopwatch()
        self.memory = PeakMemory(interval=0.05)
        self.rows: dict[str, dict[str, float]] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, float]]:
        row: dict[str, float] = {}
        self.memory.reset()
        with self.clock.timed(name):
            yield row
        seconds = self.clock.laps[name]
        row.update(
            seconds=seconds,
            peak_gib=self.memory.peak_gib(),
            process_peak_gib=PeakMemory.process_peak_gib(),
            outputs_per_s=row["outputs"] / seconds if "outputs" in row else float("nan"),
        )
        self.rows[name] = row

    def table(self) -> pd.DataFrame:
        columns = {
            "seconds": "seconds",
            "peak_gib": "stage peak GiB",
            "process_peak_gib": "process peak GiB",
            "active": "active features/sentence",
            "outputs": "outputs",
            "outputs_per_s": "outputs/s",
            "nonzero": "nonzero coefs",
            "converged": "share converged",
        }
        table = pd.DataFrame.from_dict(self.rows, orient="index").reindex(columns=list(columns))
        return table.rename(columns=columns).rename_axis("stage")


def make_saes(
    n_layers: int, d_model: int, width: int, k: int, seed: int, device: str = "cpu"
) -> dict[int, TopKSAE]:
    """One random TopK SAE per layer on ``blocks.{l}.hook_resid_post``, keyed by layer.

    ``W_dec: (width, d_model)`` has unit-norm Gaussian rows (seed ``seed + layer``),
    ``W_enc = W_dec^T``, both biases zero.
    """
    saes = {}
    for layer in range(n_layers):
        hook = f"blocks.{layer}.hook_resid_post"
        cfg = TopKSAEConfig(
            d_in=d_model, d_sae=width, k=k, device=device, metadata=SAEMetadata(hook_name=hook)
        )
        sae = TopKSAE(cfg)
        generator = torch.Generator().manual_seed(seed + layer)
        decoder = torch.randn(width, d_model, generator=generator)
        decoder /= decoder.norm(dim=1, keepdim=True)
        with torch.no_grad():
            sae.W_dec.copy_(decoder)
            sae.W_enc.copy_(decoder.T)
            sae.b_enc.zero_()
            sae.b_dec.zero_()
        saes[layer] = sae.eval()
    return saes


def load_sentences(data: Path, n: int | None, seed: int) -> pd.DataFrame:
    """CoLA's training split (``sentence``, ``label``) from the mirror folder ``data``, or a
    seeded sample of ``n`` rows (the sample the CoLA section's ``max_prompts`` takes)."""
    train = load_cola("train", mirror=data)
    if n is not None and n < len(train):
        train = train.sample(n=n, random_state=seed)
    return train


def active_per_sentence(Z: Features) -> float:
    """Mean nonzeros per row of ``Z: (M, D)``."""
    return Z.nnz / Z.shape[0]


def load_run(args: argparse.Namespace) -> tuple[Any, dict[int, Any], str]:
    """The model and its SAEs keyed by layer, and a line saying what they are: the random
    stand-in, or (``--model``) a model the library loads with the SAEs it has for it
    (``--sae-layers``; the SmolLM2 decoder's default: every layer with a shipped SAE)."""
    device = args.device
    if args.model is not None:
        model = load_model(args.model, device=device)
        layers = args.sae_layers or (list(SAE_LAYERS) if args.model == DECODER_NAME else None)
        if not layers:
            raise ValueError(f"--sae-layers: which layers of {args.model} have an SAE")
        saes = load_saes(args.model, layers, device=device, model=model)
        sae = next(iter(saes.values()))
        return (
            model,
            saes,
            (
                f"{args.model}: {model.cfg.n_layers} layers, d_model={model.cfg.d_model}; SAEs on "
                f"layers {sorted(saes)}, width {sae.cfg.d_sae}"
            ),
        )
    tokenizer_dir = args.tokenizer if args.tokenizer.is_dir() else None
    model = tiny_gpt2(
        n_layers=args.layers,
        d_model=args.d_model,
        n_heads=args.n_heads,
        n_ctx=args.n_ctx,
        seed=args.seed,
        tokenizer=gpt2_tokenizer(tokenizer_dir),
        device=device,
    )
    saes = make_saes(args.layers, args.d_model, args.width, args.k, args.seed, device)
    return (
        model,
        saes,
        (
            f"stand-in: {args.layers} layers, d_model={args.d_model}, {args.n_heads} heads, "
            f"d_mlp={model.cfg.d_mlp}, vocabulary {model.cfg.d_vocab}; TopK SAEs of width "
            f"{args.width}, k={args.k}; tokenizer {tokenizer_dir or 'fetched from the hub'}"
        ),
    )


def run(args: argparse.Namespace) -> tuple[Stages, dict[str, Any]]:
    """Every stage of the run; returns the stages and the JSON summary."""
    stages = Stages()
    device = args.device
    with stages.stage("load model + SAEs"):
        model, saes, described = load_run(args)
    layers = sorted(saes)
    pairs = sorted(set(args.pairs)) if args.pairs else layers[1:]
    if any(child not in layers[1:] for child in pairs):
        raise ValueError(f"--pairs are child layers among {layers[1:]}, got {pairs}")
    train = load_sentences(args.data, args.sentences, args.seed)
    print(
        f"{described}; {len(train)} CoLA sentences; device {device}, "
        f"{torch.get_num_threads()} torch threads"
    )

    with tempfile.TemporaryDirectory() as cache_dir, stages.stage("collect") as row:
        Z = collect_sae_features(
            model,
            saes,
            train["sentence"].tolist(),
            batch_size=args.batch_size,
            cache_dir=cache_dir,
            progress=True,
        )
        row.update(active=np.mean([active_per_sentence(z) for z in Z.values()]), outputs=len(train))
    del model, saes
    last = layers[-1]

    with stages.stage("label fit") as row:
        label_fit = fit_label(Z[last], train["label"].to_numpy(), args.label_lam_ratio,
                              layer=last, min_prompts=args.min_prompts, device=device)  # fmt: skip
        row.update(
            active=active_per_sentence(Z[last]),
            nonzero=np.count_nonzero(label_fit.coef),
            converged=float(label_fit.converged),
        )

    pair_cache = tempfile.TemporaryDirectory()  # every pair fitted, none read from a cache
    regressions = tr.LayerRegressions(Z, args.lam_ratio, min_prompts=args.min_prompts,
                                      device=device, memory_gib=args.memory_gib,
                                      progress=True, cache_dir=pair_cache.name)  # fmt: skip
    pair_seconds = []
    for child in pairs:
        with stages.stage(f"pair {layers[layers.index(child) - 1]}->{child}") as row:
            regressions.fit_pair(child)
            coef = regressions.coef(child)
            fits = {id(f): f for f in regressions.parents(child, range(coef.shape[1])).values()}
            row.update(
                active=active_per_sentence(Z[child]),
                outputs=coef.shape[1],
                nonzero=coef.nnz,
                converged=float(np.concatenate([f.converged for f in fits.values()]).mean()),
            )
        pair_seconds.append(stages.clock.laps[f"pair {layers[layers.index(child) - 1]}->{child}"])
    pair_cache.cleanup()

    # fitted from the top down without a gap
    depth = next(i for i, child in enumerate(reversed(layers)) if child not in pairs)
    with stages.stage("trace"):
        circuit = tr.trace_circuit(label_fit, regressions, roots=args.roots, k=args.parents,
                                   depth=depth, standardized=True)  # fmt: skip
    stages.memory.close()

    print(stages.table().to_string(float_format=lambda v: f"{v:.3g}"))
    if args.model is None:
        print(STAND_IN)
    missing = [child for child in layers[1:] if child not in pairs]
    n_pairs = len(layers) - 1
    print(
        f"label fit: lam_ratio {args.label_lam_ratio:g}, train accuracy "
        f"{np.mean(label_fit.predict(Z[last]) == train['label'].to_numpy()):.3f}; circuit: "
        f"{circuit.number_of_nodes()} nodes, {circuit.number_of_edges()} edges"
    )
    summary: dict[str, Any] = {
        "total_seconds": stages.clock.total,
        "peak_gib": PeakMemory.process_peak_gib(),
        "stage_seconds": dict(stages.clock.laps),
        "layer_pair_seconds_median": float(np.median(pair_seconds)),
        "pairs_measured": pairs,
    }
    if missing:
        projected_pairs = n_pairs * summary["layer_pair_seconds_median"]
        projected = stages.clock.total - sum(pair_seconds) + projected_pairs
        summary["projected_total_seconds_all_pairs"] = projected
        print(
            f"trace: pairs with child layers {missing} were not fit, so the trace went down "
            f"{depth} of {n_pairs} layers (through the fitted pairs from the top); its time "
            "is that partial trace's"
        )
        print(
            f"projected, not measured: all {n_pairs} layer pairs "
            f"{projected_pairs:.1f} s, whole run {projected:.1f} s "
            f"({n_pairs} x the median of the {len(pairs)} measured pairs)"
        )
    return stages, summary


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=None, help="seeded subset (None: all)")
    parser.add_argument("--width", type=int, default=24576, help="SAE width D")
    parser.add_argument("--k", type=int, default=32, help="TopK SAE: active features per token")
    parser.add_argument(
        "--pairs", type=int, nargs="*", default=None, help="child layers of the pairs (all)"
    )
    parser.add_argument(
        "--lam-ratio", type=float, default=0.1, help="layer-pair lam / lam_max (paper profile)"
    )
    parser.add_argument(
        "--label-lam-ratio", type=float, default=0.01, help="label fit lam / lam_max"
    )
    parser.add_argument("--min-prompts", type=int, default=10, help="predictors' min. prompts")
    parser.add_argument("--roots", type=int, default=5, help="last-layer features traced from")
    parser.add_argument("--parents", type=int, default=2, help="parents kept per traced node")
    parser.add_argument("--batch-size", type=int, default=64, help="collection batch")
    parser.add_argument(
        "--device", default="cpu", help="model and SAEs (the collector runs there), solvers"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--memory-gib", type=float, default=8.0, help="solver memory budget")
    parser.add_argument(
        "--model",
        default=None,
        help="a model the library loads (e.g. smollm2-135m) with its "
        "SAEs, instead of the random stand-in",
    )
    parser.add_argument(
        "--sae-layers",
        type=int,
        nargs="*",
        default=None,
        help="--model's layers with an SAE (smollm2-135m: every shipped one)",
    )
    parser.add_argument("--layers", type=int, default=12, help="model layers (GPT-2 small: 12)")
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--n-heads", type=int, default=12)
    parser.add_argument("--n-ctx", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER,
                        help="GPT-2 tokenizer folder (missing: fetched from the hub)")  # fmt: skip
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="folder holding cola_public_1.1.zip"
    )
    return parser.parse_args(argv)


def rounded(value: Any) -> Any:
    """``value`` with every float (in dicts too) to 6 significant digits."""
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    return float(f"{value:.6g}") if isinstance(value, float) else value


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    _, summary = run(args)
    print(json.dumps(rounded(summary)))
    return summary


if __name__ == "__main__":
    main()
