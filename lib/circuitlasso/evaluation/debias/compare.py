"""Every method of the paper's Bias in Bios comparison (Tables 1 and 2), run on one task.

Each method builds a profession classifier from the ambiguous training set (ORACLE: from the
balanced one) and predicts the balanced test set. ``seconds`` is the time to build the
classifier from the training texts (activations or SAE features, fits, attribution, ranking,
edited activations for a retrain), without the choice of gender features and without the test
set; SHIFT's includes training the ORIGINAL probe it edits. SAE features come from the on-disk
cache when a run collected them before, timed as that first collection took
(``LayerFeatures.compute_seconds``), so no method is timed on cached work.

- ORIGINAL / ORACLE: :func:`~circuitlasso.evaluation.debias.probes.fit_probe` on pooled
  activations, fit to convergence (:data:`PROBE_TOL`, as every probe here).
- CBP: the same probe on concept-similarity scores, gender concepts left out.
- LINEAR PROBING: the support of the l1 fit on the layer's pooled SAE features (the fit
  CircuitLasso starts from), every other feature zeroed, an l2 probe refit on that support.
- SHIFT: integrated-gradient scores of every SAE feature up to the probe's layer
  (:func:`~circuitlasso.evaluation.debias.shift.ig_scores`), the top ``n_candidates`` ranked by
  ``|score|``,
  the gender features among them zeroed in the model (SAE error terms kept), the ORIGINAL probe
  reading the edited activations; -retrain refits the probe on the edited ambiguous set.
- CircuitLasso: ``A_{s,y}`` by l1-logistic regression on the layer's pooled SAE features
  (:func:`~circuitlasso.circuits.features.fit_label`), the top ``n_candidates`` by ``|A_{s,y}|``,
  the gender features among them zeroed in the features fed to the same classifier; -retrain
  refits ``A_{s,y}`` with those features zeroed. CircuitLasso-no-removal, the ablation, is the
  same classifier with nothing zeroed: what the removal step changes.
- Two controls. *Random features*: CircuitLasso's classifier with as many features zeroed as
  it removes, drawn at random (seeded) from its candidates. *Gender rule alone*: no circuit and
  no attribution ranks the features; every feature of the probes' layer that the gender rule
  flags (its swap effect over the same texts at the same threshold) is zeroed in the model, as
  SHIFT zeroes its choice, and the ORIGINAL probe reads the edited activations.

:func:`compare_methods` runs them all into a :class:`Comparison`: one row per method, and the
candidates each feature-removal method ranked (:func:`describe`) and removed
(:func:`chosen_nodes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.circuits.features import LabelFit, fit_label, label_lam_max
from circuitlasso.circuits.interpret import nodes_top_tokens
from circuitlasso.collect import LayerFeatures, collect_sae_features
from circuitlasso.evaluation.ablate import rank_features
from circuitlasso.evaluation.debias.data import accuracies, bottleneck, targets
from circuitlasso.evaluation.debias.gender import Node, swap_effects
from circuitlasso.evaluation.debias.probes import (
    Probe,
    fit_concept_bottleneck,
    fit_probe,
    pooled_activations,
)
from circuitlasso.evaluation.debias.shift import ig_scores
from circuitlasso.timing import Stopwatch

# Every probe is fit to convergence: at scikit-learn's default tolerance the ORIGINAL probe's
# refit on edited activations (SHIFT-retrain) stopped short, and another machine's rounding moved
# its worst group by 8 points.
PROBE_TOL = 1e-8


@dataclass(frozen=True)
class Method:
    """One method's balanced-test predictions ``(M,)`` (1 = first profession), the number of
    SAE features it removed (None: not a feature-removal method) and its seconds."""

    name: str
    predictions: np.ndarray
    features: int | None
    seconds: float


@dataclass(frozen=True)
class Comparison:
    """The results ``table`` (one row per method: Table 2's accuracies, Table 1's features and
    seconds); for SHIFT and CircuitLasso, the ranked ``candidates`` (:func:`describe`, plus a
    column ``removed``); and the features each of them and each control ``removed``."""

    table: pd.DataFrame
    candidates: dict[str, pd.DataFrame]
    removed: dict[str, list[Node]]


def zero_columns(Z: sp.csr_matrix, features: Sequence[int]) -> sp.csr_matrix:
    """A copy of ``Z: (M, D)`` with the columns ``features`` set to 0."""
    keep = np.ones(Z.shape[1])
    keep[list(features)] = 0.0
    zeroed = sp.csr_matrix(Z @ sp.diags(keep))
    zeroed.eliminate_zeros()
    return zeroed


def describe(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    ranking: Sequence[Node],
    scores: Mapping[int, np.ndarray],
    prompts: Sequence[str],
    *,
    threshold: float,
    batch_size: int = 64,
) -> pd.DataFrame:
    """One row per ranked candidate: ``node``, ``layer``, ``feature``, ``score``, its top
    ``tokens`` over ``prompts`` (a Counter), its ``swap_effect`` and the automatic rule's call
    ``gendered`` (effect >= ``threshold``; see :mod:`circuitlasso.evaluation.debias.gender`)."""
    layers = {layer: saes[layer] for layer in sorted({layer for layer, _ in ranking})}
    Z = collect_sae_features(model, layers, prompts, batch_size=batch_size, progress=False)
    effects = swap_effects(model, saes, ranking, prompts, batch_size=batch_size)
    tokens = nodes_top_tokens(model, saes, ranking, prompts, Z)
    return pd.DataFrame(
        {
            "node": [f"z{layer}.{feature}" for layer, feature in ranking],
            "layer": [layer for layer, _ in ranking],
            "feature": [feature for _, feature in ranking],
            "score": [float(scores[layer][feature]) for layer, feature in ranking],
            "tokens": [tokens[(layer, feature)] for layer, feature in ranking],
            "swap_effect": effects,
            "gendered": effects >= threshold,
        }
    )


def _classes(fit: LabelFit, Z: sp.csr_matrix) -> np.ndarray:
    return (fit.predict_proba(Z) > 0.5).astype(int)


def chosen_nodes(candidates: pd.DataFrame, manual: Sequence[Sequence[int]] | None) -> list[Node]:
    """The ``manual`` ``[layer, feature]`` pairs, or (None) the candidates the rule calls
    gendered."""
    if manual is not None:
        return [(int(layer), int(feature)) for layer, feature in manual]
    flagged = candidates[candidates["gendered"]]
    return list(zip(flagged["layer"].tolist(), flagged["feature"].tolist(), strict=True))


def _marks(candidates: pd.DataFrame, nodes: Sequence[Node]) -> list[bool]:
    pairs = zip(candidates["layer"], candidates["feature"], strict=True)
    return [node in set(nodes) for node in pairs]


RANDOM_CONTROL = "control: random features"
RULE_CONTROL = "control: gender rule alone"
METHODS = (
    "ORIGINAL", "CBP", "ORACLE", "LINEAR PROBING", "SHIFT", "SHIFT-retrain",
    "CircuitLasso-no-removal", "CircuitLasso", "CircuitLasso-retrain", RANDOM_CONTROL,
    RULE_CONTROL,
)  # fmt: skip


@dataclass(frozen=True)
class _Task:
    """What every method shares: the model and SAEs, the probes' hook, the texts and labels."""

    model: HookedTransformer
    saes: Mapping[int, SAE]
    layer: int
    texts: dict[str, list[str]]
    y: dict[str, np.ndarray]
    C: float
    label_prompts: int
    threshold: float
    batch_size: int

    @property
    def hook(self) -> str:
        return str(self.saes[self.layer].cfg.metadata.hook_name)

    def pool(self, split: str, zeroed: Sequence[Node] = ()) -> np.ndarray:
        return pooled_activations(
            self.model,
            self.hook,
            self.texts[split],
            saes=self.saes,
            zeroed=zeroed,
            batch_size=self.batch_size,
        )

    @property
    def label_texts(self) -> list[str]:
        return self.texts["ambiguous_train"][: self.label_prompts]

    def candidates(self, ranking: list[Node], scores: Mapping[int, np.ndarray]) -> pd.DataFrame:
        return describe(
            self.model,
            self.saes,
            ranking,
            scores,
            self.label_texts,
            threshold=self.threshold,
            batch_size=self.batch_size,
        )

    def flagged_alone(self) -> list[Node]:
        """The layer's features the gender rule flags with no ranking before it."""
        every = [(self.layer, f) for f in range(self.saes[self.layer].cfg.d_sae)]
        effects = swap_effects(self.model, self.saes, every, self.label_texts,
                               batch_size=self.batch_size)  # fmt: skip
        return [
            node for node, effect in zip(every, effects, strict=True) if effect >= self.threshold
        ]


def _probe_methods(
    task: _Task, X_test: np.ndarray, concepts: Mapping[str, Sequence[str]]
) -> tuple[list[Method], Probe, float]:
    """ORIGINAL, CBP (over ``concepts``) and ORACLE; the ORIGINAL probe and its seconds."""
    y = task.y["ambiguous_train"]
    clock = Stopwatch()
    with clock.timed("pool"):
        X = task.pool("ambiguous_train")
    with clock.timed("fit"):
        original = fit_probe(X, y, C=task.C, tol=PROBE_TOL)
    with clock.timed("cbp"):
        cbp = fit_concept_bottleneck(
            task.model,
            task.hook,
            X,
            y,
            concepts,
            C=task.C,
            tol=PROBE_TOL,
            batch_size=task.batch_size,
        )
    with clock.timed("pool balanced"):
        X_balanced = task.pool("balanced_train")
    with clock.timed("oracle"):
        oracle = fit_probe(X_balanced, task.y["balanced_train"], C=task.C, tol=PROBE_TOL)
    t = clock.laps
    methods = [
        Method("ORIGINAL", original.predict(X_test), None, t["pool"] + t["fit"]),
        Method("CBP", cbp.predict(X_test), None, t["pool"] + t["cbp"]),
        Method("ORACLE", oracle.predict(X_test), None, t["pool balanced"] + t["oracle"]),
    ]
    return methods, original, t["pool"] + t["fit"]


def _shift_methods(
    task: _Task,
    original: Probe,
    t_original: float,
    manual: Sequence[Sequence[int]] | None,
    *,
    n_candidates: int,
    attribution_prompts: int,
    steps: int,
) -> tuple[list[Method], pd.DataFrame, list[Node]]:
    """SHIFT and SHIFT-retrain; their candidates and removed features."""
    y = task.y["ambiguous_train"]
    saes = {s: sae for s, sae in task.saes.items() if s <= task.layer}
    prompts = task.texts["ambiguous_train"][:attribution_prompts]
    clock = Stopwatch()
    with clock.timed("ig"):
        scores = ig_scores(
            task.model,
            saes,
            original,
            task.hook,
            prompts,
            y[:attribution_prompts],
            steps=steps,
            batch_size=task.batch_size,
        )
    with clock.timed("rank"):
        ranking = rank_features(scores)[:n_candidates]
    candidates = task.candidates(ranking, scores)
    removed = chosen_nodes(candidates, manual)
    candidates["removed"] = _marks(candidates, removed)
    X_test = task.pool("balanced_test", removed)
    with clock.timed("edit"):
        X_edited = task.pool("ambiguous_train", removed)
    with clock.timed("refit"):
        retrained = fit_probe(X_edited, y, C=task.C, tol=PROBE_TOL)
    t = clock.laps
    seconds = t_original + t["ig"] + t["rank"]
    seconds_retrain = seconds + t["edit"] + t["refit"]
    methods = [
        Method("SHIFT", original.predict(X_test), len(removed), seconds),
        Method("SHIFT-retrain", retrained.predict(X_test), len(removed), seconds_retrain),
    ]
    return methods, candidates, removed


def _lasso_methods(
    task: _Task,
    manual: Sequence[Sequence[int]] | None,
    *,
    lam_ratio: float,
    n_candidates: int,
    seed: int,
) -> tuple[list[Method], pd.DataFrame, dict[str, list[Node]]]:
    """LINEAR PROBING, CircuitLasso-no-removal, CircuitLasso, CircuitLasso-retrain and the
    random control (module docstring; drawn with ``seed``); CircuitLasso's candidates; the
    features CircuitLasso and the control removed."""
    layer, y = task.layer, task.y["ambiguous_train"]

    def collect(split: str) -> LayerFeatures:
        saes = {layer: task.saes[layer]}
        texts = task.texts[split]
        return collect_sae_features(task.model, saes, texts, batch_size=task.batch_size,
                                    progress=False)  # fmt: skip

    clock = Stopwatch()
    train = collect("ambiguous_train")
    clock.record("collect", train.compute_seconds)  # a first run's, when loaded from the cache
    Z, Z_test = train[layer], collect("balanced_test")[layer]
    with clock.timed("l1"):
        fit = fit_label(Z, y, lam_ratio, layer=layer)
    support = np.flatnonzero(fit.coef)
    with clock.timed("sparse probe"):
        sparse_probe = fit_probe(Z[:, support], y, C=task.C, tol=PROBE_TOL)
    coef = {layer: fit.coef}
    with clock.timed("rank"):
        ranking = rank_features(coef)[:n_candidates]
    candidates = task.candidates(ranking, coef)
    removed = chosen_nodes(candidates, manual)
    candidates["removed"] = _marks(candidates, removed)
    outside = [node for node in removed if node[0] != layer]
    if outside:
        raise ValueError(f"CircuitLasso reads layer {layer} only; cannot remove {outside}")
    features = [feature for _, feature in removed]
    with clock.timed("zero"):
        Z_zeroed = zero_columns(Z, features)
    with clock.timed("refit"):  # the same lam as the fit: its ratio of the zeroed lam_max
        refit = fit_label(Z_zeroed, y, fit.lam / label_lam_max(Z_zeroed, y), layer=layer)
    Z_test_zeroed = zero_columns(Z_test, features)
    ranked = [feature for _, feature in ranking]
    drawn = np.random.default_rng(seed).choice(ranked, size=min(len(features), len(ranked)),
                                               replace=False).tolist()  # fmt: skip
    t = clock.laps
    seconds = t["collect"] + t["l1"] + t["rank"]
    methods = [
        Method(
            "LINEAR PROBING",
            sparse_probe.predict(Z_test[:, support]),
            None,
            t["collect"] + t["l1"] + t["sparse probe"],
        ),
        Method("CircuitLasso-no-removal", _classes(fit, Z_test), 0, t["collect"] + t["l1"]),
        Method("CircuitLasso", _classes(fit, Z_test_zeroed), len(features), seconds),
        Method(
            "CircuitLasso-retrain",
            _classes(refit, Z_test_zeroed),
            len(features),
            seconds + t["zero"] + t["refit"],
        ),
        Method(RANDOM_CONTROL, _classes(fit, zero_columns(Z_test, drawn)), len(drawn), seconds),
    ]
    return (
        methods,
        candidates,
        {"CircuitLasso": removed, RANDOM_CONTROL: [(layer, f) for f in drawn]},
    )


def _rule_control(task: _Task, original: Probe, t_original: float) -> tuple[Method, list[Node]]:
    """The gender rule alone (module docstring) and the features it zeroed."""
    flagged = task.flagged_alone()
    X_test = task.pool("balanced_test", flagged)
    return Method(RULE_CONTROL, original.predict(X_test), len(flagged), t_original), flagged


@dataclass(frozen=True)
class ComparisonOptions:
    """The knobs of :func:`compare_methods` that every model of a comparison shares."""

    gender_concepts: tuple[str, ...] = ("male", "female")
    """The concepts CBP leaves out of its bottleneck."""
    C: float = 1.0
    """Inverse l2 penalty of the probes."""
    lam_ratio: float = 0.09
    """l1 penalty of ``A_{s,y}``, a fraction of its ``lam_max`` (the retrained one keeps the same
    ``lam``)."""
    n_candidates: int = 100
    """The automatic gender rule looks at the top ``n_candidates`` features."""
    attribution_prompts: int = 200
    """The attribution reads the first ``attribution_prompts`` ambiguous training texts."""
    steps: int = 10
    """Integrated-gradient steps of the attribution."""
    label_prompts: int = 200
    """The gender rule and the top tokens read the first ``label_prompts`` training texts."""
    swap_threshold: float = 0.25
    """The gender rule flags the candidates whose swap effect reaches ``swap_threshold``."""
    batch_size: int = 64
    """Prompts per forward pass."""
    seed: int = 0
    """The random control's draw."""


def compare_methods(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    layer: int,
    splits: Mapping[str, pd.DataFrame],
    professions: Sequence[str],
    concepts: Mapping[str, Sequence[str]],
    options: ComparisonOptions | None = None,
    *,
    shift_gender: Sequence[Sequence[int]] | None = None,
    circuitlasso_gender: Sequence[Sequence[int]] | None = None,
) -> Comparison:
    """Run every method on the ``splits``
    (:func:`~circuitlasso.evaluation.debias.data.load_splits`) with ``options`` (default:
    :class:`ComparisonOptions`' own).

    ``saes[l]`` are residual-stream SAEs of layers up to ``layer`` (SHIFT attributes on every
    one; the paper's give every layer ``0..layer``); the probes read the hook of
    ``saes[layer]``. ``concepts`` maps concept names to short texts. Gender features: the
    manual lists ``shift_gender`` / ``circuitlasso_gender`` of ``[layer, feature]`` pairs, or
    (None) the automatic rule of ``options``.
    """
    options = options or ComparisonOptions()
    if layer < 0 or layer not in saes:
        raise ValueError(
            f"the probes read the SAE of layer {layer}, which saes lacks (layers {sorted(saes)})"
        )
    kept = bottleneck(concepts, options.gender_concepts)
    task = _Task(
        model,
        saes,
        layer,
        texts={name: frame["text"].tolist() for name, frame in splits.items()},
        y={name: targets(frame, professions) for name, frame in splits.items()},
        C=options.C,
        label_prompts=options.label_prompts,
        threshold=options.swap_threshold,
        batch_size=options.batch_size,
    )
    X_test = task.pool("balanced_test")
    probes, original, t_original = _probe_methods(task, X_test, kept)
    shift, shift_candidates, shift_removed = _shift_methods(
        task,
        original,
        t_original,
        shift_gender,
        n_candidates=options.n_candidates,
        attribution_prompts=options.attribution_prompts,
        steps=options.steps,
    )
    lasso, lasso_candidates, lasso_removed = _lasso_methods(
        task,
        circuitlasso_gender,
        lam_ratio=options.lam_ratio,
        n_candidates=options.n_candidates,
        seed=options.seed,
    )
    rule, rule_removed = _rule_control(task, original, t_original)
    by_name = {m.name: m for m in (*probes, *shift, *lasso, rule)}
    test = splits["balanced_test"]
    table = pd.DataFrame(
        [
            {
                "method": name,
                **accuracies(by_name[name].predictions, test, professions),
                "features": by_name[name].features,
                "seconds": by_name[name].seconds,
            }
            for name in METHODS
        ]
    ).set_index("method")
    return Comparison(
        table,
        {"SHIFT": shift_candidates, "CircuitLasso": lasso_candidates},
        {"SHIFT": shift_removed, **lasso_removed, RULE_CONTROL: rule_removed},
    )
