"""The faithfulness experiment (paper App. C.5, Fig. 4): its evaluation sets, the rankings it
compares, the sweeps over circuit sizes, and the tables, curve points and summary it reports.

Everything is measured with :mod:`circuitlasso.evaluation.ablate` (node ablation in the model),
:mod:`circuitlasso.evaluation.surrogate` (edge ablation in the linear surrogate) and
:func:`circuitlasso.evaluation.attribution.attribution_scores` (the attribution baseline); this
module chooses what is compared and how it is tabulated.

- Sentences: a class-balanced evaluation set of test sentences and a reference set of training
  sentences for the ablation means (:func:`evaluation_sentences`).
- The metric of node ablation and the attribution baseline (:func:`evaluation_metric`, by name,
  :data:`METRICS`): the label readout on the evaluation sentences signed by their labels, or a
  decoder's own judgement of minimal pairs, the mean over pairs of ``log p(good) - log p(bad)``
  (:mod:`circuitlasso.evaluation.metrics`), the ablation means still over the reference
  sentences. Edge ablation in the surrogate always reads the readout: it is linear in the
  features and has no logits.
- Runtime: a first run's feature collection (``LayerFeatures.compute_seconds``, the seconds
  recorded when the cached batches were computed) and named consecutive stages
  (:class:`Stopwatch`).
- Node rankings (:func:`node_rankings`): CircuitLasso's, the features of a traced circuit's
  surrogate by their effect on the readout (:func:`trace_surrogate`); the attribution
  baseline's, every feature by ``|IG score|`` (:func:`attribution_baseline`); those of one
  forward pass, the direct effect and the deviation control
  (:func:`~circuitlasso.evaluation.attribution.forward_scores`); and a seeded random order of
  every feature. Edge rankings (:func:`edge_rankings`): the surrogate's and a random one.
- Sweeps (:func:`node_sweep`, :func:`edge_sweep`): faithfulness and completeness of the top
  ``n`` of each ranking for ``n`` in :func:`sweep_sizes`, one table with a column ``method``
  (columns ``n, faithfulness, completeness, m_circuit, m_complement, m_full, m_empty, method``).
- Reports: :func:`curve_table`, :func:`runtime_table`, :func:`write_curves`, :func:`size_for`,
  :func:`curve_points` and the section's :func:`summary`.

:class:`~circuitlasso.evaluation.faithfulness_run.FaithfulnessRun` calls these steps in the
section's order on one loaded study.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.cache import atomic_path
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import Features, LabelFit, fit_label
from circuitlasso.collect import collect_sae_features
from circuitlasso.data.graph import Edge
from circuitlasso.data.minimal_pairs import MinimalPair, load_minimal_pairs
from circuitlasso.estimator import CircuitLasso
from circuitlasso.evaluation.ablate import (
    FeatureSet,
    Node,
    feature_means,
    metric_with_ablation,
    node_ablation_sweep,
    random_ranking,
    rank_features,
)
from circuitlasso.evaluation.acceptability import sentence_log_probs
from circuitlasso.evaluation.attribution import ForwardScores, attribution_scores
from circuitlasso.evaluation.metrics import (
    Metric,
    MinimalPairMargin,
    Readout,
    as_metric,
    check_saes,
)
from circuitlasso.evaluation.surrogate import Surrogate, edge_ablation_sweep
from circuitlasso.timing import Stopwatch

CURVE_POINTS = (4, 64, 1024, 4096, 8192)  # circuit sizes the summary reports
METRICS = ("readout", "minimal_pairs")  # the metrics evaluation_metric knows by name
ANCHORED = "CircuitLasso (anchored)"  # the surrogate's ranking anchored on the evaluation sentences
ANCHOR_TOPS = ("readout", "log_prob")  # the tops FaithfulnessRun.anchor knows by name


# ---------------------------------------------------------------- sentences


@dataclass(frozen=True)
class Sentences:
    """``prompts: (n,)`` evaluation sentences with ``labels: (n,)`` in {0, 1}, and the
    ``reference`` sentences the ablation means are taken over."""

    prompts: list[str]
    labels: list[int]
    reference: list[str]

    def __str__(self) -> str:
        return (
            f"{len(self.prompts)} evaluation sentences ({len(self.prompts) // 2} per class), "
            f"means over {len(self.reference)} training sentences"
        )


def evaluation_sentences(
    train: pd.DataFrame, test: pd.DataFrame, n_per_class: int, n_reference: int, seed: int
) -> Sentences:
    """``n_per_class`` seeded samples of each class of ``test`` (label 0 first) and
    ``min(n_reference, len(train))`` seeded samples of ``train``; both frames have columns
    ``sentence`` and ``label`` (0 or 1)."""
    for name, frame in (("train", train), ("test", test)):
        missing = sorted({"sentence", "label"} - set(frame.columns))
        if missing:
            raise ValueError(f"the {name} frame lacks columns {missing}")
    counts = test["label"].value_counts()
    short = [label for label in (0, 1) if counts.get(label, 0) < n_per_class]
    if short:
        raise ValueError(f"test has fewer than {n_per_class} sentences of label(s) {short}")
    chosen = pd.concat(
        [test[test["label"] == label].sample(n=n_per_class, random_state=seed) for label in (0, 1)]
    )
    reference = train["sentence"].sample(n=min(n_reference, len(train)), random_state=seed)
    labels = chosen["label"].astype(int).tolist()
    return Sentences(chosen["sentence"].tolist(), labels, reference.tolist())


def evaluation_metric(
    name: str,
    lasso: CircuitLasso,
    sentences: Sentences,
    *,
    pairs: Sequence[MinimalPair] | None = None,
) -> tuple[Metric, Sentences]:
    """The metric named ``name`` (one of :data:`METRICS`) that node ablation and the attribution
    baseline measure, and the sentences they measure it on.

    ``"readout"``: the :class:`~circuitlasso.evaluation.metrics.Readout` of the fitted ``lasso`` on
    ``sentences`` as they are. ``"minimal_pairs"``: a decoder's own judgement,
    :class:`~circuitlasso.evaluation.metrics.MinimalPairMargin`, on the good sentences of
    ``pairs`` (default: :func:`~circuitlasso.data.minimal_pairs.load_minimal_pairs`, all 48)
    labelled 1, then their bad ones labelled 0; the ablation means still over
    ``sentences.reference``.
    """
    if name == "readout":
        return Readout.of(lasso), sentences
    if name == "minimal_pairs":
        pairs = load_minimal_pairs() if pairs is None else list(pairs)
        if not pairs:
            raise ValueError("no minimal pairs given")
        prompts = [p.good for p in pairs] + [p.bad for p in pairs]
        labels = [1] * len(pairs) + [0] * len(pairs)
        return MinimalPairMargin(), Sentences(prompts, labels, sentences.reference)
    raise ValueError(f"unknown metric {name!r}; the metrics are {', '.join(METRICS)}")


# ---------------------------------------------------------------- rankings


@dataclass(frozen=True)
class TracedSurrogate:
    """A traced ``circuit`` (see :func:`~circuitlasso.circuits.trace.trace_circuit`), its linear
    ``surrogate`` and the surrogate's node ``ranking`` (largest effect on the readout first)."""

    circuit: Circuit
    surrogate: Surrogate
    ranking: list[Node]

    def __str__(self) -> str:
        return (
            f"circuit: {self.circuit.number_of_nodes()} nodes, {self.circuit.number_of_edges()} "
            f"edges; surrogate: {len(self.ranking)} ranked features, "
            f"{len(self.surrogate.edges())} edges"
        )

    def by_layer(self) -> pd.DataFrame:
        """``(1, layers)``: how many ranked features each layer has."""
        layers = pd.Series([layer for layer, _ in self.ranking], name="layer", dtype=int)
        return layers.value_counts().sort_index().rename("ranked features").to_frame().T


def trace_surrogate(
    lasso: CircuitLasso,
    labels: Sequence[int],
    *,
    roots: int | None = None,
    k: int = 4,
    readout: LabelFit | None = None,
) -> TracedSurrogate:
    """Trace the circuit of the fitted binary ``lasso`` from ``roots`` last-layer features
    (None: every feature the readout uses) keeping ``k`` parents per node, scores weighted by
    each feature's standard deviation; its surrogate, with the metric signed by the training
    ``labels: (M,)`` ``lasso`` was fitted on; the surrogate's node ranking. ``readout``: trace
    from another fit of the last layer instead (a regression of the model's own output, see
    :func:`output_surrogate`), sharing ``lasso``'s layer-pair fits; the surrogate then has it
    as its linear top."""
    top = (
        Readout.of(lasso)
        if readout is None
        else Readout(
            readout.layer, np.asarray(readout.coef, dtype=np.float64), float(readout.intercept)
        )
    )
    roots = int(np.count_nonzero(top.coef)) if roots is None else roots
    if roots < 1:
        raise ValueError("nothing to trace: the label fit uses no feature and roots is not given")
    circuit = lasso.trace(readout, roots=roots, k=k, standardized=True)
    surrogate = Surrogate(lasso.X_fit_, lasso.parent_fits(circuit), top, labels)
    return TracedSurrogate(circuit, surrogate, surrogate.rank_nodes())


@dataclass(frozen=True)
class Baseline:
    """The attribution baseline: feature ``means`` ``{layer: (D,)}`` over the reference sentences,
    IG ``scores`` ``{layer: (D,)}`` on the evaluation sentences, the ``seconds`` both took and
    ``means_seconds``, the means' share of them."""

    means: dict[int, torch.Tensor]
    scores: dict[int, np.ndarray]
    seconds: float
    means_seconds: float = 0.0


def attribution_baseline(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    metric: Metric | LabelFit,
    sentences: Sentences,
    *,
    steps: int = 10,
    batch_size: int = 64,
) -> Baseline:
    """:func:`~circuitlasso.evaluation.ablate.feature_means` over ``sentences.reference``, then
    :func:`~circuitlasso.evaluation.attribution.attribution_scores` (``steps`` IG steps) of
    ``metric`` (a label fit: its readout; see :func:`evaluation_metric`), weighted by the labels,
    on ``sentences.prompts``, timed together; the metric is checked against the model first."""
    metric = as_metric(metric)
    check_saes(model, saes, metric)
    clock = Stopwatch()
    means = feature_means(model, saes, sentences.reference, batch_size=batch_size)
    clock.lap("means")
    attribution = attribution_scores(
        model,
        saes,
        metric,
        sentences.prompts,
        means,
        labels=sentences.labels,
        steps=steps,
        batch_size=batch_size,
    )
    clock.lap("integrated gradients")
    return Baseline(means, attribution.scores, clock.total, clock.laps["means"])


def anchored_scores(
    surrogate: Surrogate,
    Z: Mapping[int, Features],
    means: Mapping[int, torch.Tensor],
    weights: np.ndarray,
) -> dict[int, np.ndarray]:
    """``{layer: (D,)}`` each feature's first-order effect on the metric of keeping it rather
    than mean-ablating it, the surrogate standing in for the gradient:
    ``score_f = T_f * mean over prompts i of weights_i * (Z[layer][i, f] - means[layer][f])``.

    ``T``: :meth:`Surrogate.total_effects` of a unit change of each feature on the surrogate's
    linear top (the readout's logit), zero off the surrogate; ``Z``: ``{layer: (n, D)}``
    token-averaged features of the evaluation prompts; ``means``: ``{layer: (D,)}`` the
    ablation means (what node ablation sets a feature to at every token, so its token average
    too); ``weights: (n,)`` each prompt's weight in the metric (``Metric.weights``)."""
    weights = np.asarray(weights, dtype=np.float64)
    scores = {}
    for layer, total in surrogate.total_effects().items():
        z = Z[layer]
        if z.shape[0] != len(weights):
            raise ValueError(f"layer {layer} has {z.shape[0]} prompts, weights {len(weights)}")
        contrast = np.asarray(z.T @ weights).ravel() - weights.sum() * means[layer].double().numpy()
        scores[layer] = total * contrast / len(weights)
    return scores


def output_surrogate(
    model: HookedTransformer,
    lasso: CircuitLasso,
    prompts: Sequence[str],
    labels: Sequence[int],
    *,
    lam_ratio: float = 0.01,
    k: int = 4,
    batch_size: int = 32,
) -> TracedSurrogate:
    """The surrogate with the decoder's own output on top instead of the label readout: each
    training sentence's log-probability (``prompts: (M,)``, the sentences ``lasso`` was fitted
    on; :func:`~circuitlasso.evaluation.acceptability.sentence_log_probs`) regressed on the last
    layer's features by the Lasso (``lam_ratio`` of its ``lam_max``, the features active on at
    least ``lasso.min_prompts`` prompts), then :func:`trace_surrogate` from every feature it uses
    through ``lasso``'s layer-pair fits (``k`` parents per node; ``labels: (M,)`` as there)."""
    target = sentence_log_probs(model, prompts, batch_size=batch_size)
    layer = lasso.readout_layer_
    fit = fit_label(lasso.X_fit_[layer], target, lam_ratio, layer=layer, kind="regression",
                    min_prompts=lasso.min_prompts, device=lasso.device)  # fmt: skip
    return trace_surrogate(lasso, labels, k=k, readout=fit)


@dataclass(frozen=True)
class Anchored:
    """CircuitLasso's ranking anchored on the evaluation sentences: :func:`anchored_scores`
    ``{layer: (D,)}``, ranked by score (``signed``) or by ``|score|``, and the ``seconds`` its
    own steps took (the evaluation sentences' features and the scores, and where the surrogate
    has another top than the readout, that top's fit and trace)."""

    scores: dict[int, np.ndarray]
    seconds: float
    signed: bool = True

    def ranking(self) -> list[Node]:
        """Features of nonzero score, largest score (``signed``) or ``|score|`` first."""
        return rank_features(self.scores, signed=self.signed)


def anchored_baseline(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    metric: Metric | LabelFit,
    sentences: Sentences,
    traced: TracedSurrogate,
    means: Mapping[int, torch.Tensor],
    *,
    signed: bool = True,
    batch_size: int = 64,
) -> Anchored:
    """:func:`anchored_scores` of ``traced``'s surrogate on ``sentences.prompts`` (their
    token-averaged features collected, :func:`~circuitlasso.collect.collect_sae_features`, not
    cached), weighted as ``metric`` weights their labels, against the ablation ``means``;
    timed; ranked by score (``signed``) or ``|score|``."""
    clock = Stopwatch()
    Z = collect_sae_features(model, saes, sentences.prompts, batch_size=batch_size, cache=False,
                             progress=False)  # fmt: skip
    clock.lap("evaluation features")
    weights = as_metric(metric).weights(sentences.labels, len(sentences.prompts))
    scores = anchored_scores(traced.surrogate, Z, means, weights)
    clock.lap("scores")
    return Anchored(scores, clock.total, signed)


def node_rankings(
    traced: TracedSurrogate,
    baseline: Baseline,
    saes: Mapping[int, SAE],
    seed: int,
    anchored: Anchored | None = None,
    forward: ForwardScores | None = None,
) -> dict[str, list[Node]]:
    """The node rankings compared: ``CircuitLasso`` (the surrogate's), with ``anchored`` given
    :data:`ANCHORED` (:meth:`Anchored.ranking`), with ``forward`` given its rankings
    (:meth:`ForwardScores.rankings`), ``IG attribution`` (nonzero scores by ``|score|``) and
    ``random`` (every feature of ``saes``, seeded)."""
    everything = [(layer, f) for layer, sae in saes.items() for f in range(sae.cfg.d_sae)]
    rankings = {"CircuitLasso": traced.ranking}
    if anchored is not None:
        rankings[ANCHORED] = anchored.ranking()
    if forward is not None:
        rankings.update(forward.rankings())
    return {
        **rankings,
        "IG attribution": rank_features(baseline.scores),
        "random": random_ranking(everything, seed),
    }


def edge_rankings(surrogate: Surrogate, seed: int) -> dict[str, list[Edge]]:
    """The edge rankings compared: ``CircuitLasso`` (by share of the child's effect) and
    ``random`` (seeded); the attribution baseline has no edges."""
    return {
        "CircuitLasso": surrogate.rank_edges(),
        "random": random_ranking(surrogate.edges(), seed),
    }


# ---------------------------------------------------------------- sweeps


def sweep_sizes(limit: int, sizes: Sequence[int] | None = None) -> list[int]:
    """Circuit sizes to sweep for a ranking of ``limit`` items: the given ``sizes`` up to
    ``limit`` (None: the powers of two up to it), and ``limit`` itself, ascending."""
    if limit < 1:
        raise ValueError(f"nothing to sweep: the ranking has {limit} items")
    if sizes is None:
        sizes = [2**i for i in range(limit.bit_length())]
    return sorted({int(n) for n in sizes if n <= limit} | {limit})


def node_sweep(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    metric: Metric | LabelFit,
    sentences: Sentences,
    rankings: Mapping[str, Sequence[Node]],
    means: Mapping[int, torch.Tensor],
    *,
    sizes: Sequence[int] | None = None,
    batch_size: int = 64,
) -> pd.DataFrame:
    """:func:`~circuitlasso.evaluation.ablate.node_ablation_sweep` of each ranking on the
    evaluation sentences (``metric``, a label fit: its readout, weighted by their labels; see
    :func:`evaluation_metric`) at :func:`sweep_sizes`, stacked with a column ``method``; ``m(M)``
    and ``m(empty)`` are measured once for all of them."""

    def m(circuit: FeatureSet | None) -> float:
        return metric_with_ablation(model, saes, metric, sentences.prompts, circuit,
                                    labels=sentences.labels, means=means,
                                    batch_size=batch_size)  # fmt: skip

    ends = (m(None), m({}))
    return pd.concat(
        [
            node_ablation_sweep(
                model,
                saes,
                metric,
                sentences.prompts,
                ranking,
                sweep_sizes(len(ranking), sizes),
                means,
                labels=sentences.labels,
                batch_size=batch_size,
                ends=ends,
            ).assign(method=method)
            for method, ranking in rankings.items()
        ],
        ignore_index=True,
    )


def edge_sweep(
    surrogate: Surrogate,
    rankings: Mapping[str, Sequence[Edge]],
    sizes: Sequence[int] | None = None,
) -> pd.DataFrame:
    """:func:`~circuitlasso.evaluation.surrogate.edge_ablation_sweep` of each ranking at
    :func:`sweep_sizes`, stacked with a column ``method``."""
    return pd.concat(
        [
            edge_ablation_sweep(surrogate, ranking, sweep_sizes(len(ranking), sizes)).assign(
                method=method
            )
            for method, ranking in rankings.items()
        ],
        ignore_index=True,
    )


# ---------------------------------------------------------------- reports


def curve_table(sweep: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """``(sizes, 2 * methods)``: faithfulness and completeness of a sweep, one row per ``n``, one
    column per (quantity, method), rounded (and no signed zeros)."""
    table = sweep.pivot(index="n", columns="method", values=["faithfulness", "completeness"])
    return table.round(decimals) + 0.0


def method_seconds(
    clock: Stopwatch,
    baseline: Baseline,
    anchored: Anchored | None = None,
    forward: ForwardScores | None = None,
) -> dict[str, float]:
    """Each ranking method's seconds: ``CircuitLasso`` every stage of the ``clock``;
    :data:`ANCHORED` those, the ablation means (``baseline.means_seconds``) and its own
    (``anchored.seconds``); each of ``forward``'s rankings the means and its one pass;
    ``IG attribution`` the ``baseline``'s (the random ranking costs nothing)."""
    seconds = {"CircuitLasso": clock.total}
    if anchored is not None:
        seconds[ANCHORED] = clock.total + baseline.means_seconds + anchored.seconds
    if forward is not None:
        seconds.update(dict.fromkeys(forward.rankings(), baseline.means_seconds + forward.seconds))
    return {**seconds, "IG attribution": baseline.seconds}


def runtime_table(
    clock: Stopwatch,
    baseline: Baseline,
    anchored: Anchored | None = None,
    forward: ForwardScores | None = None,
) -> pd.DataFrame:
    """One column ``seconds``, to 0.1 s: CircuitLasso's stages (the ``clock``'s laps, named
    ``CircuitLasso: <stage>``), then the methods of :func:`method_seconds`."""
    stages = {f"CircuitLasso: {stage}": s for stage, s in clock.laps.items()}
    times = {**stages, **method_seconds(clock, baseline, anchored, forward)}
    return pd.Series(times, name="seconds").round(1).to_frame()


def write_curves(node: pd.DataFrame, edge: pd.DataFrame, path: str | Path) -> None:
    """Write both sweeps to one CSV, rows marked by a column ``ablation`` (``node`` or
    ``edge``); the file appears complete or not at all."""
    curves = pd.concat([node.assign(ablation="node"), edge.assign(ablation="edge")])
    with atomic_path(path) as tmp:
        curves.to_csv(tmp, index=False)


def size_for(sweep: pd.DataFrame, method: str, target: float) -> int | None:
    """The smallest swept size at which ``method`` reaches faithfulness ``target``; None if none
    does."""
    reached = sweep[(sweep["method"] == method) & (sweep["faithfulness"] >= target)]
    return int(reached["n"].min()) if len(reached) else None


def curve_points(
    sweep: pd.DataFrame, column: str, points: Sequence[int] = CURVE_POINTS
) -> dict[str, dict[str, float]]:
    """Per method (sorted by name), ``column`` at the swept sizes among ``points``, to 4 decimals,
    keyed by the size as a string."""
    return {
        method: {str(n): v for n, v in zip(t["n"], t[column].round(4), strict=True) if n in points}
        for method, t in sweep.groupby("method")
    }


def summary(
    traced: TracedSurrogate,
    node: pd.DataFrame,
    edge: pd.DataFrame,
    clock: Stopwatch,
    baseline: Baseline,
    target: float,
    *,
    metric: Metric | LabelFit,
    anchored: Anchored | None = None,
    forward: ForwardScores | None = None,
) -> dict[str, Any]:
    """The section's summary: the name of the ``metric`` node ablation measured (the edge
    sweep's is always the readout), circuit and surrogate sizes, ranked features per layer,
    ``m(M)`` and ``m(empty)``, each method's smallest size reaching faithfulness ``target``, the
    curves at :data:`CURVE_POINTS` and each method's seconds (:func:`method_seconds`, to
    0.01 s)."""

    def smallest(sweep: pd.DataFrame) -> dict[str, int | None]:
        return {m: size_for(sweep, m, target) for m in dict.fromkeys(sweep["method"])}

    by_layer = Counter(layer for layer, _ in traced.ranking)
    return {
        "metric": as_metric(metric).name,
        "circuit": {
            "nodes": traced.circuit.number_of_nodes(),
            "edges": traced.circuit.number_of_edges(),
        },
        "surrogate": {
            "ranked_features": len(traced.ranking),
            "edges": len(traced.surrogate.edges()),
        },
        "ranked_features_by_layer": {str(layer): n for layer, n in by_layer.items()},
        "m_full": node["m_full"].iloc[0],
        "m_empty": node["m_empty"].iloc[0],
        f"features_for_faithfulness_{target:g}": smallest(node),
        f"edges_for_faithfulness_{target:g}": smallest(edge),
        **{
            f"{kind}_{column}": curve_points(sweep, column)
            for kind, sweep in (("node", node), ("edge", edge))
            for column in ("faithfulness", "completeness")
        },
        "seconds": {
            m: round(s, 2) for m, s in method_seconds(clock, baseline, anchored, forward).items()
        },
    }
