"""A feature-circuit study: a model, its SAEs and a labelled data set, loaded and collected once.

:meth:`FeatureStudy.load` loads the model, the SAEs of ``layers`` and the train and test splits
(columns ``sentence`` and ``label``) and collects their token-averaged SAE features ``Z`` and
``Z_test`` (``{layer: (prompts, d_sae)}`` sparse, :meth:`FeatureStudy.collect`, see
:func:`circuitlasso.collect.collect_sae_features`). The study then answers what a feature stands
for, over the training sentences (:mod:`circuitlasso.circuits.interpret`): its top tokens
(computed once per feature and kept), its top prompts, and how its activation changes when the
most active token of its top prompt is replaced. Two steps of a run are one call each: the label
regression with its penalty chosen by cross-validation (:meth:`FeatureStudy.search_label_lam`)
and the circuit traced and labelled (:meth:`FeatureStudy.trace_circuit`). Its ``clock``
(:class:`~circuitlasso.timing.Stopwatch`) holds the wall time of each stage: the study's own
(loading, collecting, labelling) and those a run adds with ``clock.lap`` or ``clock.timed``.

:func:`feature_activity` describes the collected features and :func:`run_summary` is the JSON
summary of a run: the label regression, its lam ablation and the traced circuit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sae_lens import SAE
from sklearn.model_selection import GridSearchCV

from circuitlasso.circuits import defaults, interpret
from circuitlasso.circuits import trace as tr
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import Features, frequent_features
from circuitlasso.collect import LayerFeatures, collect_sae_features
from circuitlasso.data import load_dataset
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.estimator import CircuitLasso, penalty_table
from circuitlasso.forward import Model
from circuitlasso.timing import Stopwatch

ABLATION_COLUMNS = ("train_loss", "nonzero", "validation_accuracy", "test_accuracy")


@dataclass
class FeatureStudy:
    """A model (``name``), its SAEs by layer (on ``blocks.<layer>.<hook>``), the ``train`` and
    ``test`` frames (``sentence``, binary ``label``), their features once collected, and the
    ``label_prompts`` top prompts a feature's top tokens are counted over."""

    name: str
    hook: str
    model: Model
    saes: dict[int, SAE]
    train: pd.DataFrame
    test: pd.DataFrame
    label_prompts: int = 50
    Z: Mapping[int, Features] = field(default_factory=dict)
    Z_test: Mapping[int, Features] = field(default_factory=dict)
    clock: Stopwatch = field(default_factory=Stopwatch, repr=False)
    _tokens: dict[tuple[int, int], Counter[str]] = field(default_factory=dict, repr=False)

    @classmethod
    def load(
        cls,
        name: str,
        layers: Sequence[int] | None,
        hook: str,
        dataset: str,
        splits: tuple[str, str] = ("train", "test"),
        *,
        max_prompts: int | None = None,
        label_prompts: int = 50,
        seed: int = 0,
        device: str = "cpu",
        batch_size: int = 64,
        progress: bool = False,
    ) -> FeatureStudy:
        """Load model ``name`` (see :func:`~circuitlasso.data.models.load_model`), its SAEs at
        ``hook`` on ``layers`` (None: every layer) and the ``splits`` (train, test) of
        ``dataset``, keeping a seeded sample of ``max_prompts`` training sentences (None: all) in
        a seeded random order (so folds of consecutive rows, as scikit-learn's ``cv=3`` takes
        them, are random samples); then :meth:`collect` their features in batches of
        ``batch_size``."""
        clock = Stopwatch()
        model = load_model(name, device=device)
        chosen = range(model.cfg.n_layers) if layers is None else layers
        saes = load_saes(name, list(chosen), hook, device=device, model=model)
        train, test = (load_dataset(dataset, split=split) for split in splits)
        for split, frame in zip(splits, (train, test), strict=True):
            missing = {"sentence", "label"} - set(frame.columns)
            if missing:
                raise ValueError(f"{dataset} [{split}] lacks the columns {sorted(missing)}")
        size = len(train) if max_prompts is None else min(max_prompts, len(train))
        train = train.sample(n=size, random_state=seed)  # so consecutive rows are a random sample
        study = cls(name, hook, model, saes, train, test, label_prompts, clock=clock)
        clock.lap("load model, SAEs and data")
        study.collect(batch_size=batch_size, progress=progress)
        return study

    def __str__(self) -> str:
        cfg = self.model.cfg
        return (
            f"{self.name}: {cfg.n_layers} layers, d_model={cfg.d_model}; SAEs on layers "
            f"{self.layers} ({self.hook}), D={self.saes[self.last].cfg.d_sae}; "
            f"{len(self.train)} training and {len(self.test)} test sentences"
        )

    @property
    def layers(self) -> list[int]:
        """The layers with an SAE, in order."""
        return sorted(self.saes)

    @property
    def last(self) -> int:
        """The last layer with an SAE: the one the label regression reads."""
        return self.layers[-1]

    @property
    def prompts(self) -> list[str]:
        """The training sentences, the rows of ``Z``."""
        return self.train["sentence"].tolist()

    @property
    def y(self) -> np.ndarray:
        """``(M,)`` training labels."""
        return self.train["label"].to_numpy()

    @property
    def y_test(self) -> np.ndarray:
        """``(M_test,)`` test labels."""
        return self.test["label"].to_numpy()

    # ------------------------------------------------------------------ features

    def collect(
        self, *, batch_size: int = 64, progress: bool = False
    ) -> tuple[LayerFeatures, LayerFeatures]:
        """Collect (or load from the on-disk cache) ``Z`` and ``Z_test``
        (:class:`~circuitlasso.collect.LayerFeatures`, which scikit-learn splits by prompts),
        with the token-averaged activation the last layer's SAE reads (``pooled``, for a dense
        probe); return both."""
        with self.clock.timed("collect SAE features"):
            self.Z, self.Z_test = (
                collect_sae_features(
                    self.model,
                    self.saes,
                    frame["sentence"].tolist(),
                    batch_size=batch_size,
                    progress=progress,
                    pooled=[self.last],
                )
                for frame in (self.train, self.test)
            )
        return self.Z, self.Z_test

    def _features(self, layer: int) -> Features:
        if not self.Z:
            raise ValueError("no features yet: call collect() first")
        if layer not in self.Z:
            raise ValueError(f"layer {layer} has no SAE; the layers are {self.layers}")
        return self.Z[layer]

    def top_tokens(self, layer: int, feature: int) -> Counter[str]:
        """How often each token is among the feature's largest activations over its
        ``label_prompts`` top training prompts, computed once
        (:func:`~circuitlasso.circuits.interpret.top_tokens`)."""
        key = (int(layer), int(feature))
        if key not in self._tokens:
            self._tokens[key] = interpret.top_tokens(
                self.model,
                self.saes[key[0]],
                key[1],
                self.prompts,
                self._features(key[0]),
                n_prompts=self.label_prompts,
            )
        return self._tokens[key]

    def interpret_circuit(self, circuit: Circuit) -> dict[str, Counter[str]]:
        """:func:`~circuitlasso.circuits.trace.interpret_circuit` with :meth:`top_tokens`, timed as
        ``labels`` (every call's seconds added): every node's top tokens and every edge's type."""
        with self.clock.timed("labels", add=True):
            nodes = {(int(d["layer"]), int(d["feature"])) for _, d in circuit.nodes(data=True)}
            missing = sorted(nodes - self._tokens.keys())
            layers = {layer for layer, _ in missing}
            self._tokens.update(
                interpret.nodes_top_tokens(
                    self.model, self.saes, missing, self.prompts,
                    {layer: self._features(layer) for layer in layers},
                    n_prompts=self.label_prompts,
                )
            )  # fmt: skip
            return tr.interpret_circuit(circuit, self.top_tokens)

    def top_prompts(self, layer: int, feature: int, n: int = 8) -> pd.DataFrame:
        """The feature's ``n`` top training prompts with per-token values
        (:func:`~circuitlasso.circuits.interpret.activation_table`)."""
        return interpret.activation_table(self.top_activations(layer, feature, n))

    def top_activations(self, layer: int, feature: int, n: int = 8) -> list[interpret.Activation]:
        """The feature's ``n`` top training prompts, each with its tokens and per-token values
        (:func:`~circuitlasso.circuits.interpret.top_activations`)."""
        Z = self._features(layer)
        return interpret.top_activations(
            self.model, self.saes[layer], int(feature), self.prompts, Z, n=n
        )

    def root_prompts(
        self, lasso: CircuitLasso, circuit: Circuit, roots: int = 2, n: int = 6
    ) -> list[pd.DataFrame]:
        """:meth:`top_prompts` of the ``roots`` most important roots of ``circuit``, traced by the
        fitted binary or real-valued ``lasso``, each table's index named after its feature and the
        feature's readout coefficient ``A_{L,y}`` to one decimal (the readout is certified by its
        duality gap, not to the last digits: two machines' fits differ in the third)."""
        layer, coef = lasso.readout_layer_, np.ravel(lasso.coef_)  # (D,)
        return [
            self.top_prompts(layer, feature, n).rename_axis(
                f"z{layer}.{feature}  (A_L,y = {coef[feature]:+.1f})"
            )
            for feature in tr.root_features(circuit)[:roots]
        ]

    def perturb_top_prompt(
        self, layer: int, feature: int, circuit: Circuit, alternatives: int = 4
    ) -> pd.DataFrame:
        """The single-prompt test (:func:`~circuitlasso.circuits.interpret.perturb`): the
        feature's top training prompt with its most active token replaced by each of the
        ``alternatives`` tokens that are top tokens of the most nodes of ``circuit`` (those
        that fit there as one token,
        :func:`~circuitlasso.circuits.interpret.single_token_replacements`)."""
        top = self.top_prompts(layer, feature, n=1)
        if top.empty:
            raise ValueError(f"feature {feature} of layer {layer} is never active")
        position = int(np.argmax(top["per_token"].iloc[0]))
        pool = Counter(
            word
            for _, data in circuit.nodes(data=True)
            for word in self.top_tokens(data["layer"], data["feature"])
        )
        words = [w for w, _ in pool.most_common() if w != top["top_token"].iloc[0]]
        column = np.asarray(self._features(layer)[:, feature].toarray()).ravel()
        sentence = self.prompts[int(np.argmax(column))]
        fitting = interpret.single_token_replacements(self.model, sentence, position, words)
        return interpret.perturb(
            self.model, self.saes[layer], int(feature), sentence, position, fitting[:alternatives]
        )

    # ------------------------------------------------------------------ a run's steps

    def search_label_lam(
        self,
        lams: Sequence[float],
        lam_ratio: float = defaults.LAM_RATIO,
        roots: int = defaults.ROOTS,
        k: int = defaults.K,
        min_prompts: int = defaults.MIN_PROMPTS,
        standardized: bool = defaults.STANDARDIZED,
        *,
        cv: int = 3,
    ) -> tuple[CircuitLasso, pd.DataFrame]:
        """The readout ``A_{L,y}`` with its penalty chosen by cross-validation, timed as ``label
        regression (search + fit)``: ``GridSearchCV`` over the absolute penalties ``label_lam`` in
        ``lams`` of a :class:`~circuitlasso.estimator.CircuitLasso` with the other arguments,
        scored by mean accuracy over ``cv`` folds of ``Z`` (``{layer: (M, D)}``) and ``y``
        (``(M,)``). Returns the best estimator, refit on all ``M`` sentences, and
        :func:`~circuitlasso.estimator.penalty_table` (a row per ``label_lam``, tested on
        ``Z_test``, ``y_test``)."""
        with self.clock.timed("label regression (search + fit)"):
            estimator = CircuitLasso(
                lam_ratio=lam_ratio,
                roots=roots,
                k=k,
                min_prompts=min_prompts,
                standardized=standardized,
            )
            search = GridSearchCV(estimator, {"label_lam": list(lams)}, cv=cv)
            search.fit(self.Z, self.y)
            ablation = penalty_table(search, self.Z, self.y, self.Z_test, self.y_test)
        return search.best_estimator_, ablation

    def trace_circuit(self, lasso: CircuitLasso) -> Circuit:
        """The circuit the fitted ``lasso`` traces (``lasso.trace()``: the layer-pair regressions
        of the features it visits and the trace, timed as ``layer-pair regressions + trace``),
        labelled as :meth:`interpret_circuit` labels it (timed as ``labels``), its nodes' top
        tokens from :meth:`~circuitlasso.estimator.CircuitLasso.top_tokens`, which checks that
        the study's prompts are those the features ``lasso`` was fitted on were collected on."""
        with self.clock.timed("layer-pair regressions + trace"):
            circuit = lasso.trace()
        nodes = [(int(d["layer"]), int(d["feature"])) for _, d in circuit.nodes(data=True)]
        with self.clock.timed("labels"):
            self._tokens.update(
                lasso.top_tokens(
                    self.model, self.saes, self.prompts, nodes, n_prompts=self.label_prompts
                )
            )
            tr.interpret_circuit(circuit, self.top_tokens)
        return circuit


def feature_activity(Z: Mapping[int, Features], min_prompts: int) -> pd.DataFrame:
    """Per layer of ``Z`` (``{layer: (M, D)}``): ``D``, the mean number of active features per
    prompt (rounded to 0.1), the features never active, and those active on at least
    ``min_prompts`` prompts."""
    rows = {}
    for layer in sorted(Z):
        M, D = Z[layer].shape
        rows[layer] = {
            "D": D,
            "active features per sentence": round(Z[layer].nnz / M, 1),
            "features never active": D - len(frequent_features(Z[layer], 1)),
            f"features active on >= {min_prompts} sentences": len(
                frequent_features(Z[layer], min_prompts)
            ),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("layer")


def run_summary(
    lasso: CircuitLasso,
    ablation: pd.DataFrame,
    circuit: Circuit,
    violations: Mapping[str, bool] | None = None,
    concepts: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """The JSON summary of a feature-circuit run: the fitted ``lasso``'s label penalty ``lam_``
    and nonzero coefficients, per ``lam`` of the ablation
    (:func:`~circuitlasso.estimator.penalty_table`) its train loss, nonzero count and validation
    and test accuracy, the circuit's node and edge counts with its edges by type, and, when
    given, which planted violations it reaches and, per concept of ``concepts``
    (:func:`~circuitlasso.evaluation.findings.concept_table`), its roots and longest chain."""
    missing = [c for c in ("lam", *ABLATION_COLUMNS) if c not in ablation.columns]
    if missing:
        raise ValueError(f"the ablation table lacks columns {missing}")
    types = Counter(t for _, _, t in circuit.edges(data="type") if t is not None)
    summary: dict[str, Any] = {
        "lam": lasso.lam_,
        "label_nonzero": int(np.count_nonzero(lasso.coef_)),
        "lam_ablation": {
            f"{row['lam']:g}": {column: row[column] for column in ABLATION_COLUMNS}
            for row in ablation.to_dict("records")
        },
        "circuit": {
            "nodes": circuit.number_of_nodes(),
            "edges": circuit.number_of_edges(),
            **{str(t): n for t, n in types.most_common()},
        },
    }
    if violations is not None:
        summary["violation_categories_reached"] = {str(v): bool(r) for v, r in violations.items()}
    if concepts is not None:
        summary["concepts"] = {
            str(name): {"roots": int(row["roots"]), "longest_chain": int(row["longest chain"])}
            for name, row in concepts.iterrows()
        }
    return summary
