"""The faithfulness experiment (paper App. C.5, Fig. 4) as one object whose methods are its steps,
in the order the section runs them.

:class:`FaithfulnessRun` holds a loaded :class:`~circuitlasso.study.FeatureStudy`, its
evaluation :class:`~circuitlasso.evaluation.faithfulness.Sentences`, the clock of CircuitLasso's
stages and each step's result; every step is the function of
:mod:`circuitlasso.evaluation.faithfulness` of the same name, called on what the earlier steps
left:

1. :meth:`~FaithfulnessRun.fit_circuit`: the label regression, then the layer-pair regressions,
   the trace and the surrogate's ranking (``trace_surrogate``), timed stage by stage;
2. :meth:`~FaithfulnessRun.attribution`: the metric by name (``evaluation_metric``), the
   attribution baseline (``attribution_baseline``) and the rankings of one forward pass
   (``forward_scores``); :meth:`~FaithfulnessRun.anchor`: the
   surrogate's ranking anchored on the evaluation sentences (``anchored_baseline``, optional);
   :meth:`~FaithfulnessRun.runtime_table`;
3. :meth:`~FaithfulnessRun.node_sweep` (``node_rankings``, then ``node_sweep``) and
   :meth:`~FaithfulnessRun.edge_sweep` (``edge_rankings``, then ``edge_sweep``);
4. :meth:`~FaithfulnessRun.write_curves` and :meth:`~FaithfulnessRun.summary`.

A step whose inputs are missing raises ``RuntimeError`` naming the step to run first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

import pandas as pd
from transformer_lens import HookedTransformer

from circuitlasso.data.minimal_pairs import PHENOMENA, MinimalPair, load_minimal_pairs
from circuitlasso.estimator import CircuitLasso
from circuitlasso.evaluation import faithfulness as fa
from circuitlasso.evaluation.attribution import ForwardScores, forward_scores
from circuitlasso.evaluation.metrics import Metric
from circuitlasso.study import FeatureStudy
from circuitlasso.timing import Stopwatch

T = TypeVar("T")


def _need(value: T | None, step: str) -> T:
    """``value``, or a ``RuntimeError`` naming the ``step`` that sets it."""
    if value is None:
        raise RuntimeError(f"run {step} first")
    return value


@dataclass
class FaithfulnessRun:
    """A ``study``, its evaluation ``sentences`` and, once their steps have run, the fitted
    ``estimator``, the ``traced`` circuit and surrogate, the ``measure`` of node ablation and the
    ``evaluated`` sentences it is measured on, the attribution ``baseline``, the ``anchored``
    ranking's scores (where :meth:`anchor` ran) and the ``node`` and ``edge`` sweeps; ``clock``
    times CircuitLasso's stages. ``seed`` seeds the random rankings, ``batch_size`` every
    forward pass; ``k``: the parents per node :meth:`fit_circuit` traced with."""

    study: FeatureStudy
    sentences: fa.Sentences
    seed: int = 0
    batch_size: int = 64
    k: int = 4
    clock: Stopwatch = field(default_factory=Stopwatch)
    estimator: CircuitLasso | None = None
    traced: fa.TracedSurrogate | None = None
    measure: Metric | None = None
    evaluated: fa.Sentences | None = None
    baseline: fa.Baseline | None = None
    anchored: fa.Anchored | None = None
    forward: ForwardScores | None = None
    node: pd.DataFrame | None = None
    edge: pd.DataFrame | None = None

    @classmethod
    def load(
        cls,
        *study_args: Any,
        n_eval: int = 50,
        n_reference: int = 500,
        seed: int = 0,
        batch_size: int = 64,
        **study_options: Any,
    ) -> FaithfulnessRun:
        """:meth:`FeatureStudy.load <circuitlasso.study.FeatureStudy.load>` of
        ``study_args`` and ``study_options`` (model name, layers, hook, data set, splits,
        ``max_prompts``, ``device``, ...; its features collected) with ``seed`` and
        ``batch_size``, which the run keeps too, and
        :func:`~circuitlasso.evaluation.faithfulness.evaluation_sentences` of its frames:
        ``n_eval`` test sentences per class, ``n_reference`` training ones."""
        study = FeatureStudy.load(*study_args, seed=seed, batch_size=batch_size, **study_options)
        sentences = fa.evaluation_sentences(study.train, study.test, n_eval, n_reference, seed)
        return cls(study, sentences, seed=seed, batch_size=batch_size)

    def __str__(self) -> str:
        return f"{self.sentences}, SAEs on layers {self.study.layers}"

    @property
    def _model(self) -> HookedTransformer:
        # the ablation and attribution functions are typed for a decoder; an encoder (the
        # study's HookedEncoder) runs through them the same way
        return cast(HookedTransformer, self.study.model)

    def fit_circuit(
        self,
        lam: float,
        lam_ratio: float = 0.1,
        min_prompts: int = 10,
        *,
        roots: int | None = None,
        k: int = 4,
    ) -> fa.TracedSurrogate:
        """Fit ``CircuitLasso(label_lam=lam, lam_ratio, min_prompts)`` to the study's features
        ``{layer: (M, D)}`` and labels ``(M,)``, then
        :func:`~circuitlasso.evaluation.faithfulness.trace_surrogate` (``roots``, ``k``). A fresh
        ``clock`` records the features' first collection (their ``compute_seconds``), then times
        the label regression and the rest."""
        self.clock = Stopwatch()
        # LayerFeatures know the seconds of their first collection; a plain mapping does not
        seconds = getattr(self.study.Z, "compute_seconds", None)
        self.clock.record("collect SAE features", seconds)
        estimator = CircuitLasso(label_lam=lam, lam_ratio=lam_ratio, min_prompts=min_prompts)
        self.estimator = estimator.fit(self.study.Z, self.study.y)
        self.clock.lap("label regression")
        self.k = k
        self.traced = fa.trace_surrogate(self.estimator, self.study.y.tolist(), roots=roots, k=k)
        self.clock.lap("layer-pair regressions, trace, ranking")
        return self.traced

    def attribution(
        self,
        metric: str = "readout",
        *,
        steps: int = 10,
        pairs: Sequence[MinimalPair] | None = None,
        anchor: Mapping[str, Any] | None = None,
    ) -> fa.Baseline:
        """Choose the ``metric`` of node ablation by name
        (:func:`~circuitlasso.evaluation.faithfulness.evaluation_metric`; ``"minimal_pairs"``
        reads ``pairs``, default the first ``n // 4`` of each phenomenon, ``n`` the evaluation
        sentences per class: at least one, all 12 from ``n`` 48) and compute the attribution
        baseline of it (``steps`` IG steps;
        :func:`~circuitlasso.evaluation.faithfulness.attribution_baseline`), then the rankings
        of one forward pass on the same sentences and means
        (:func:`~circuitlasso.evaluation.attribution.forward_scores`: the direct effect where the
        metric reads logits, and the deviation control); with ``anchor`` (:meth:`anchor`'s
        options), then the anchored ranking on them too."""
        if pairs is None:
            per_class = len(self.sentences.prompts) // 2
            pairs = load_minimal_pairs(per_phenomenon=max(1, per_class // len(PHENOMENA)))
        self.measure, self.evaluated = fa.evaluation_metric(
            metric, _need(self.estimator, "fit_circuit"), self.sentences, pairs=pairs
        )
        self.baseline = fa.attribution_baseline(
            self._model,
            self.study.saes,
            self.measure,
            self.evaluated,
            steps=steps,
            batch_size=self.batch_size,
        )
        self.forward = forward_scores(
            self._model,
            self.study.saes,
            self.measure,
            self.evaluated.prompts,
            self.evaluated.labels,
            self.baseline.means,
            batch_size=self.batch_size,
        )
        if anchor is not None:
            self.anchor(**anchor)
        return self.baseline

    def anchor(
        self, top: str = "readout", *, signed: bool = True, lam_ratio: float = 0.01
    ) -> fa.Anchored:
        """CircuitLasso's ranking anchored on the evaluated sentences: each feature's contrast
        with its ablation mean times its total effect through the surrogate, ranked by score
        (``signed``) or ``|score|``
        (:func:`~circuitlasso.evaluation.faithfulness.anchored_baseline`); node sweeps then
        compare it too. ``top`` (one of :data:`~circuitlasso.evaluation.faithfulness.ANCHOR_TOPS`):
        the traced circuit's surrogate (``"readout"``), or one with the decoder's own
        log-probability of each training sentence on top (``"log_prob"``,
        :func:`~circuitlasso.evaluation.faithfulness.output_surrogate` at ``lam_ratio``, as many
        parents per node as :meth:`fit_circuit` kept), its seconds counted in the ranking's."""
        traced = _need(self.traced, "fit_circuit")
        if top not in fa.ANCHOR_TOPS:
            raise ValueError(f"unknown top {top!r}; the tops are {', '.join(fa.ANCHOR_TOPS)}")
        clock = Stopwatch()
        if top == "log_prob":
            traced = fa.output_surrogate(
                self._model,
                _need(self.estimator, "fit_circuit"),
                self.study.prompts,
                self.study.y.tolist(),
                lam_ratio=lam_ratio,
                k=self.k,
                batch_size=self.batch_size,
            )
        clock.lap("top")
        anchored = fa.anchored_baseline(
            self._model,
            self.study.saes,
            _need(self.measure, "attribution"),
            _need(self.evaluated, "attribution"),
            traced,
            _need(self.baseline, "attribution").means,
            signed=signed,
            batch_size=self.batch_size,
        )
        self.anchored = replace(anchored, seconds=anchored.seconds + clock.total)
        return self.anchored

    def runtime_table(self) -> pd.DataFrame:
        """CircuitLasso's stages and each method's seconds
        (:func:`~circuitlasso.evaluation.faithfulness.runtime_table`)."""
        baseline = _need(self.baseline, "attribution")
        return fa.runtime_table(self.clock, baseline, self.anchored, self.forward)

    def node_sweep(self, sizes: Sequence[int] | None = None) -> pd.DataFrame:
        """Node ablation of the rankings
        (:func:`~circuitlasso.evaluation.faithfulness.node_rankings`: those of the forward pass,
        and the anchored one where :meth:`anchor` ran) at ``sizes`` (None: powers of two):
        :func:`~circuitlasso.evaluation.faithfulness.node_sweep`'s table."""
        baseline = _need(self.baseline, "attribution")
        saes = self.study.saes
        traced = _need(self.traced, "fit_circuit")
        rankings = fa.node_rankings(traced, baseline, saes, self.seed, self.anchored, self.forward)
        self.node = fa.node_sweep(
            self._model,
            saes,
            _need(self.measure, "attribution"),
            _need(self.evaluated, "attribution"),
            rankings,
            baseline.means,
            sizes=sizes,
            batch_size=self.batch_size,
        )
        return self.node

    def edge_sweep(self, sizes: Sequence[int] | None = None) -> pd.DataFrame:
        """Edge ablation of the surrogate's and a random ranking
        (:func:`~circuitlasso.evaluation.faithfulness.edge_rankings`) at ``sizes`` (None: powers
        of two): :func:`~circuitlasso.evaluation.faithfulness.edge_sweep`'s table."""
        surrogate = _need(self.traced, "fit_circuit").surrogate
        self.edge = fa.edge_sweep(surrogate, fa.edge_rankings(surrogate, self.seed), sizes)
        return self.edge

    def write_curves(self, path: str | Path) -> None:
        """Both sweeps to one CSV (:func:`~circuitlasso.evaluation.faithfulness.write_curves`)."""
        fa.write_curves(_need(self.node, "node_sweep"), _need(self.edge, "edge_sweep"), path)

    def summary(self, target: float) -> dict[str, Any]:
        """The section's summary (:func:`~circuitlasso.evaluation.faithfulness.summary`), sizes
        for faithfulness ``target``."""
        return fa.summary(
            _need(self.traced, "fit_circuit"),
            _need(self.node, "node_sweep"),
            _need(self.edge, "edge_sweep"),
            self.clock,
            _need(self.baseline, "attribution"),
            target,
            metric=_need(self.measure, "attribution"),
            anchored=self.anchored,
            forward=self.forward,
        )
