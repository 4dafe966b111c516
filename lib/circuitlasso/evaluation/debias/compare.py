"""Every method of the paper's Bias in Bios comparison (Tables 1 and 2), run on one task.

Each method builds a profession classifier from the ambiguous training set (ORACLE: from the
balanced one) and predicts the balanced test set. ``seconds`` is the time to build the
classifier from the training texts (activations or SAE features, fits, attribution, ranking,
edited activations for a retrain), without the choice of gender features and without the test
set; SHIFT's includes training the ORIGINAL probe it edits. SAE features are collected into a
fresh temporary cache, so no method is timed on cached work.

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

:func:`load_run` loads a model and the SAEs a comparison needs, :func:`compare_models` runs the
comparison on each model of the section. The section's tables come from the :class:`Comparison`:
the candidates as shown (:func:`candidate_table`), Table 2 (:func:`scores_table`), Table 1
(:func:`removal_table`), CircuitLasso with and without its removal step (:func:`ablation_table`),
the worst-group gap each method closes (:func:`gap_closed`), each table for several models side
by side (:func:`by_model`), the rule against the toy world's truth (:func:`rule_vs_toy_truth`)
and the summary (:func:`summary`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.cache import atomic_path
from circuitlasso.circuits.features import LabelFit, fit_label, label_lam_max
from circuitlasso.circuits.interpret import top_tokens
from circuitlasso.collect import collect_sae_features
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.evaluation.ablate import rank_features
from circuitlasso.evaluation.debias.data import accuracies, bottleneck, targets
from circuitlasso.evaluation.debias.gender import Node, rule_vs_truth, swap_effects
from circuitlasso.evaluation.debias.probes import (
    Probe,
    fit_concept_bottleneck,
    fit_probe,
    pooled_activations,
)
from circuitlasso.evaluation.debias.shift import ig_scores
from circuitlasso.evaluation.faithfulness import fresh_features

T = TypeVar("T")
# Every probe is fit to convergence: at scikit-learn's default tolerance the ORIGINAL probe's
# refit on edited activations (SHIFT-retrain) stopped short, and another machine's rounding moved
# its worst group by 8 points.
PROBE_TOL = 1e-8


def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """``fn(*args, **kwargs)`` and the seconds it took."""
    start = time.perf_counter()
    return fn(*args, **kwargs), time.perf_counter() - start


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
    seconds) and, for SHIFT and CircuitLasso, the ranked ``candidates`` (:func:`describe`, plus a
    column ``removed``) and the ``removed`` gender features."""

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
    return pd.DataFrame(
        {
            "node": [f"z{layer}.{feature}" for layer, feature in ranking],
            "layer": [layer for layer, _ in ranking],
            "feature": [feature for _, feature in ranking],
            "score": [float(scores[layer][feature]) for layer, feature in ranking],
            "tokens": [top_tokens(model, saes[s], f, prompts, Z[s]) for s, f in ranking],
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


METHODS = (
    "ORIGINAL", "CBP", "ORACLE", "LINEAR PROBING", "SHIFT", "SHIFT-retrain",
    "CircuitLasso-no-removal", "CircuitLasso", "CircuitLasso-retrain",
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

    def candidates(self, ranking: list[Node], scores: Mapping[int, np.ndarray]) -> pd.DataFrame:
        prompts = self.texts["ambiguous_train"][: self.label_prompts]
        return describe(
            self.model,
            self.saes,
            ranking,
            scores,
            prompts,
            threshold=self.threshold,
            batch_size=self.batch_size,
        )


def _probe_methods(
    task: _Task, X_test: np.ndarray, concepts: Mapping[str, Sequence[str]]
) -> tuple[list[Method], Probe, float]:
    """ORIGINAL, CBP (over ``concepts``) and ORACLE; the ORIGINAL probe and its seconds."""
    y = task.y["ambiguous_train"]
    X, t_pool = timed(task.pool, "ambiguous_train")
    original, t_fit = timed(fit_probe, X, y, C=task.C, tol=PROBE_TOL)
    cbp, t_cbp = timed(
        fit_concept_bottleneck,
        task.model,
        task.hook,
        X,
        y,
        concepts,
        C=task.C,
        tol=PROBE_TOL,
        batch_size=task.batch_size,
    )
    X_balanced, t_balanced = timed(task.pool, "balanced_train")
    oracle, t_oracle = timed(
        fit_probe, X_balanced, task.y["balanced_train"], C=task.C, tol=PROBE_TOL
    )
    methods = [
        Method("ORIGINAL", original.predict(X_test), None, t_pool + t_fit),
        Method("CBP", cbp.predict(X_test), None, t_pool + t_cbp),
        Method("ORACLE", oracle.predict(X_test), None, t_balanced + t_oracle),
    ]
    return methods, original, t_pool + t_fit


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
    saes = {s: task.saes[s] for s in range(task.layer + 1)}
    prompts = task.texts["ambiguous_train"][:attribution_prompts]
    scores, t_ig = timed(
        ig_scores,
        task.model,
        saes,
        original,
        task.hook,
        prompts,
        y[:attribution_prompts],
        steps=steps,
        batch_size=task.batch_size,
    )
    ranking, t_rank = timed(lambda: rank_features(scores)[:n_candidates])
    candidates = task.candidates(ranking, scores)
    removed = chosen_nodes(candidates, manual)
    candidates["removed"] = _marks(candidates, removed)
    X_test = task.pool("balanced_test", removed)
    X_edited, t_edit = timed(task.pool, "ambiguous_train", removed)
    retrained, t_refit = timed(fit_probe, X_edited, y, C=task.C, tol=PROBE_TOL)
    seconds = t_original + t_ig + t_rank
    seconds_retrain = seconds + t_edit + t_refit
    methods = [
        Method("SHIFT", original.predict(X_test), len(removed), seconds),
        Method("SHIFT-retrain", retrained.predict(X_test), len(removed), seconds_retrain),
    ]
    return methods, candidates, removed


def _lasso_methods(
    task: _Task, manual: Sequence[Sequence[int]] | None, *, lam_ratio: float, n_candidates: int
) -> tuple[list[Method], pd.DataFrame, list[Node]]:
    """LINEAR PROBING, CircuitLasso-no-removal, CircuitLasso and CircuitLasso-retrain; the
    candidates and removed features of CircuitLasso."""
    layer, y = task.layer, task.y["ambiguous_train"]

    def collect(split: str) -> sp.csr_matrix:
        saes = {layer: task.saes[layer]}
        return fresh_features(task.model, saes, task.texts[split], batch_size=task.batch_size)[
            layer
        ]

    Z, t_collect = timed(collect, "ambiguous_train")
    Z_test = collect("balanced_test")
    fit, t_l1 = timed(fit_label, Z, y, lam_ratio, layer=layer)
    support = np.flatnonzero(fit.coef)
    sparse_probe, t_sparse = timed(fit_probe, Z[:, support], y, C=task.C, tol=PROBE_TOL)
    coef = {layer: fit.coef}
    ranking, t_rank = timed(lambda: rank_features(coef)[:n_candidates])
    candidates = task.candidates(ranking, coef)
    removed = chosen_nodes(candidates, manual)
    candidates["removed"] = _marks(candidates, removed)
    outside = [node for node in removed if node[0] != layer]
    if outside:
        raise ValueError(f"CircuitLasso reads layer {layer} only; cannot remove {outside}")
    features = [feature for _, feature in removed]
    Z_zeroed, t_zero = timed(zero_columns, Z, features)
    refit, t_refit = timed(  # the same lam as the fit: its ratio of the zeroed lam_max
        lambda: fit_label(Z_zeroed, y, fit.lam / label_lam_max(Z_zeroed, y), layer=layer)
    )
    Z_test_zeroed = zero_columns(Z_test, features)
    seconds = t_collect + t_l1 + t_rank
    methods = [
        Method(
            "LINEAR PROBING",
            sparse_probe.predict(Z_test[:, support]),
            None,
            t_collect + t_l1 + t_sparse,
        ),
        Method("CircuitLasso-no-removal", _classes(fit, Z_test), 0, t_collect + t_l1),
        Method("CircuitLasso", _classes(fit, Z_test_zeroed), len(features), seconds),
        Method(
            "CircuitLasso-retrain",
            _classes(refit, Z_test_zeroed),
            len(features),
            seconds + t_zero + t_refit,
        ),
    ]
    return methods, candidates, removed


def load_run(
    model_name: str, layer: int, *, device: str = "cpu"
) -> tuple[HookedTransformer, dict[int, SAE]]:
    """The model ``model_name`` and its residual-stream SAEs of layers ``0..layer``, keyed by
    layer: what :func:`compare_methods` needs to probe ``blocks.<layer>.hook_resid_post`` (SHIFT
    reads every SAE up to it). Hub models and SAE releases as
    :func:`~circuitlasso.data.models.load_model` and :func:`~circuitlasso.data.models.load_saes`
    name them (Pythia-70M-deduped: Marks et al.'s; Gemma-2: Gemma Scope's canonical 16k); each
    SAE is checked to fit the model."""
    if layer < 0:
        raise ValueError(f"layer must be >= 0, got {layer}")
    model = load_model(model_name, device=device)
    if not isinstance(model, HookedTransformer):
        raise ValueError(f"{model_name} is not a HookedTransformer, which compare_methods needs")
    if layer >= model.cfg.n_layers:
        raise ValueError(
            f"{model_name} has layers 0..{model.cfg.n_layers - 1}; cannot probe layer {layer}"
        )
    saes = load_saes(model_name, range(layer + 1), "resid_post", device=device, model=model)
    return model, saes


def compare_methods(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    layer: int,
    splits: Mapping[str, pd.DataFrame],
    professions: Sequence[str],
    concepts: Mapping[str, Sequence[str]],
    *,
    gender_concepts: Sequence[str] = ("male", "female"),
    C: float = 1.0,
    lam_ratio: float = 0.09,
    n_candidates: int = 100,
    attribution_prompts: int = 200,
    steps: int = 10,
    label_prompts: int = 200,
    swap_threshold: float = 0.25,
    shift_gender: Sequence[Sequence[int]] | None = None,
    circuitlasso_gender: Sequence[Sequence[int]] | None = None,
    batch_size: int = 64,
) -> Comparison:
    """Run every method on the ``splits``
    (:func:`~circuitlasso.evaluation.debias.data.load_splits`).

    ``saes[l]`` are the residual-stream SAEs of layers ``0..layer``; the probes read the hook of
    ``saes[layer]``. ``concepts`` maps concept names to short texts; CBP leaves out the
    ``gender_concepts``. ``C``: inverse l2 penalty of the probes; ``lam_ratio``: l1 penalty of
    ``A_{s,y}``, a fraction of its ``lam_max`` (the retrained one keeps the same ``lam``). Gender
    features: the manual lists ``shift_gender`` / ``circuitlasso_gender`` of
    ``[layer, feature]`` pairs, or (None) the automatic rule (``swap_threshold``) on the top
    ``n_candidates``. The attribution (``steps`` IG steps) reads the first
    ``attribution_prompts`` ambiguous training texts, the rule and the top tokens the first
    ``label_prompts``.
    """
    missing = [s for s in range(layer + 1) if s not in saes]
    if layer < 0 or missing:
        raise ValueError(f"SHIFT needs the SAEs of layers 0..{layer}; missing {missing}")
    kept = bottleneck(concepts, gender_concepts)
    task = _Task(
        model,
        saes,
        layer,
        texts={name: frame["text"].tolist() for name, frame in splits.items()},
        y={name: targets(frame, professions) for name, frame in splits.items()},
        C=C,
        label_prompts=label_prompts,
        threshold=swap_threshold,
        batch_size=batch_size,
    )
    X_test = task.pool("balanced_test")
    probes, original, t_original = _probe_methods(task, X_test, kept)
    shift, shift_candidates, shift_removed = _shift_methods(
        task,
        original,
        t_original,
        shift_gender,
        n_candidates=n_candidates,
        attribution_prompts=attribution_prompts,
        steps=steps,
    )
    lasso, lasso_candidates, lasso_removed = _lasso_methods(
        task, circuitlasso_gender, lam_ratio=lam_ratio, n_candidates=n_candidates
    )
    by_name = {m.name: m for m in (*probes, *shift, *lasso)}
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
        {"SHIFT": shift_removed, "CircuitLasso": lasso_removed},
    )


def compare_models(
    runs: Mapping[str, int],
    splits: Mapping[str, pd.DataFrame],
    professions: Sequence[str],
    concepts: Mapping[str, Sequence[str]],
    *,
    device: str = "cpu",
    shift_gender: Mapping[str, Sequence[Sequence[int]]] | None = None,
    circuitlasso_gender: Mapping[str, Sequence[Sequence[int]]] | None = None,
    **options: Any,
) -> tuple[dict[str, Comparison], dict[str, pd.DataFrame]]:
    """:func:`compare_methods` on each model of ``runs`` (model name -> the layer its probes
    read), the model and its SAEs loaded by :func:`load_run` one at a time; the comparisons, and
    for the toy world the rule against its ground truth (:func:`rule_vs_toy_truth`), by model.

    ``shift_gender`` / ``circuitlasso_gender``: manual gender features of each model, model name
    -> ``[layer, feature]`` pairs (a model not named: the automatic rule); ``options``: the other
    keyword arguments of :func:`compare_methods`.
    """
    if not runs:
        raise ValueError("runs names no model; give at least one model name -> layer")
    comparisons, truths = {}, {}
    for name, layer in runs.items():
        model, saes = load_run(name, int(layer), device=device)
        comparisons[name] = compare_methods(
            model,
            saes,
            int(layer),
            splits,
            professions,
            concepts,
            shift_gender=(shift_gender or {}).get(name),
            circuitlasso_gender=(circuitlasso_gender or {}).get(name),
            **options,
        )
        if name == "toy":
            batch_size = options.get("batch_size", 64)
            truths[name] = rule_vs_toy_truth(
                model, saes, comparisons[name], splits, batch_size=batch_size
            )
        del model, saes  # before the next model loads
    return comparisons, truths


# ---------------------------------------------------------------- the tables of the section

SCORES = ["profession", "gender", "worst_group"]  # Table 2's columns
REMOVALS = ["SHIFT", "SHIFT-retrain", "CircuitLasso", "CircuitLasso-retrain"]  # Table 1's rows
ABLATION = ["CircuitLasso-no-removal", "CircuitLasso", "CircuitLasso-retrain"]


def candidate_table(candidates: pd.DataFrame, n_tokens: int = 4) -> pd.DataFrame:
    """Ranked candidates (:func:`describe` plus ``removed``) as shown: ``node``, ``score``, ``top
    tokens`` (the ``n_tokens`` most frequent as ``word xcount``), ``swap_effect``, the ``rule``'s
    call and ``removed``; numbers to 3 decimals."""
    tokens = [
        ", ".join(f"{w} x{n}" for w, n in t.most_common(n_tokens)) for t in candidates["tokens"]
    ]
    return (
        candidates.assign(tokens=tokens)
        .drop(columns=["layer", "feature"])
        .rename(columns={"tokens": "top tokens", "gendered": "rule"})
        .round(3)
    )


def scores_table(table: pd.DataFrame) -> pd.DataFrame:
    """Table 2 from a :class:`Comparison` ``table``: ``profession``, ``gender`` and
    ``worst_group`` of every method, to 0.1."""
    return table[SCORES].round(1)


def by_model(
    comparisons: Mapping[str, Comparison], table: Callable[[pd.DataFrame], pd.DataFrame]
) -> pd.DataFrame:
    """One of the section's tables (``table``, e.g. :func:`scores_table` or
    :func:`removal_table`, of a :class:`Comparison` table) for every model of ``comparisons``
    side by side, as the paper sets its models: columns ``(model, column)``."""
    return pd.concat(
        {name: table(found.table) for name, found in comparisons.items()},
        axis=1,
        names=["model", None],
    )


def removal_table(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 from a :class:`Comparison` ``table``: the feature-removal methods' ``features``
    (int) and ``seconds`` (to 0.1 s)."""
    return table.loc[REMOVALS, ["features", "seconds"]].astype({"features": int}).round(1)


def ablation_table(table: pd.DataFrame) -> pd.DataFrame:
    """CircuitLasso without and with its removal step, from a :class:`Comparison` ``table``:
    ``worst_group``, ``gender`` and ``profession`` (to 0.1) and the ``features`` removed (int)."""
    columns = ["worst_group", "gender", "profession", "features"]
    return table.loc[ABLATION, columns].astype({"features": int}).round(1)


def gap_closed(table: pd.DataFrame) -> pd.DataFrame:
    """Per method but ORIGINAL and ORACLE, from a :class:`Comparison` ``table``: the share of the
    worst-group gap between ORIGINAL and ORACLE it closes, ``(w - w_ORIGINAL) / (w_ORACLE -
    w_ORIGINAL)`` (to 3 decimals; 1: as good as ORACLE, below 0: worse than ORIGINAL), and
    ``|gender - 50|`` (to 0.1)."""
    worst = table["worst_group"]
    closed = (worst - worst["ORIGINAL"]) / (worst["ORACLE"] - worst["ORIGINAL"])
    return pd.DataFrame(
        {
            "worst-group gap closed": closed.round(3),
            "|gender - 50|": (table["gender"] - 50).abs().round(1),
        }
    ).drop(index=["ORIGINAL", "ORACLE"])


def write_results(table: pd.DataFrame, path: str | Path) -> None:
    """Write a :class:`Comparison` ``table`` (or several, stacked under an index level
    ``model``) to the CSV ``path``, to 3 decimals; the file appears complete or not at all."""
    with atomic_path(path) as tmp:
        table.round(3).to_csv(tmp)


def rule_vs_toy_truth(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    comparison: Comparison,
    splits: Mapping[str, pd.DataFrame],
    *,
    batch_size: int = 64,
) -> pd.DataFrame:
    """:func:`~circuitlasso.evaluation.debias.gender.rule_vs_truth` for the comparison's
    candidates, the ground truth read on the balanced training split of ``splits`` (gender and
    profession independent) with the features of ``saes`` collected here."""
    balanced = splits["balanced_train"]
    layers = sorted({int(s) for found in comparison.candidates.values() for s in found["layer"]})
    Z: Mapping[int, sp.csr_matrix] = {}
    if layers:
        texts = balanced["text"].tolist()
        chosen = {s: saes[s] for s in layers}
        Z = collect_sae_features(model, chosen, texts, batch_size=batch_size, progress=False)
    male = (balanced["gender"] == "male").to_numpy()
    return rule_vs_truth(comparison.candidates, Z, male)


def summary(comparison: Comparison, truth: pd.DataFrame | None = None) -> dict[str, Any]:
    """The section's summary: each method's ``scores`` (Table 2, to 0.01), the number of
    ``candidates`` and ``removed`` features of SHIFT and CircuitLasso, each method's ``seconds``
    (to 0.1 s) and, given the rule's ``truth`` table (:func:`rule_vs_toy_truth`), its precision
    and recall against each ground truth."""
    table = comparison.table
    found: dict[str, Any] = {
        "scores": table[SCORES].round(2).to_dict(orient="index"),
        "candidates": {method: len(rows) for method, rows in comparison.candidates.items()},
        "removed": {method: len(nodes) for method, nodes in comparison.removed.items()},
        "seconds": table["seconds"].dropna().round(1).to_dict(),
    }
    if truth is not None:
        found["rule_vs_toy_truth"] = {
            f"{row['method']} {row['ground truth']}": {k: row[k] for k in ("precision", "recall")}
            for row in truth.to_dict(orient="records")
        }
    return found
