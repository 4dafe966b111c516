"""``CircuitLasso``: the feature-circuit pipeline as one scikit-learn style estimator.

``fit`` takes the token-averaged SAE features of every layer (:func:`collect_sae_features`) and
the prompts' targets (binary, multi-class or real-valued); it fits the label regression
``A_{L,y}`` on the last layer, then traces backward through layer-pair regressions fitted only
for the features the trace visits.
``trace`` returns the circuit; ``interpret`` returns it with each node named by its top tokens
and each edge typed. Circuits are returned, never kept among the fitted attributes.
"""

from __future__ import annotations

import copy
import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import GridSearchCV
from sklearn.utils import ClassifierTags, RegressorTags, Tags, check_array
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import column_or_1d

from circuitlasso.cache import digest_arrays
from circuitlasso.circuits import defaults, interpret
from circuitlasso.circuits import trace as tr
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import (
    Features,
    LabelFit,
    LayerPairFit,
    fit_label,
    readout_scores,
)
from circuitlasso.collect.layers import LayerFeatures
from circuitlasso.data.models import check_sae_fits
from circuitlasso.data.targets import Target, make_target
from circuitlasso.executor import Executor
from circuitlasso.forward import Model, SAEMap, check_prompts, sae_layers


def as_layer_features(
    X: Mapping[int, Features] | Features, *, min_rows: int = 1, copy: bool = False
) -> LayerFeatures:
    """``X`` as :class:`LayerFeatures` of float CSR matrices: a mapping ``{layer: (M, D)}``, or
    one ``(M, D)`` matrix as the features of layer 0; each checked by scikit-learn's
    ``check_array`` (2-D, numbers, finite, at least ``min_rows`` rows (prompts) and one feature,
    or a ``ValueError`` saying what is wrong). ``copy``: never share an array with ``X``."""
    layers = X if isinstance(X, Mapping) and not sp.issparse(X) else {0: X}  # DOK is a dict
    checked = {
        key: sp.csr_matrix(check_array(z, accept_sparse="csr", dtype=[np.float32, np.float64],
                                       ensure_min_samples=min_rows, input_name=f"X[{key}]",
                                       copy=copy))
        for key, z in layers.items()
    }  # fmt: skip
    return LayerFeatures(checked)


class NotFittedError(SklearnNotFittedError, RuntimeError):
    """A :class:`CircuitLasso` used before ``fit``: scikit-learn's ``NotFittedError`` (an
    ``AttributeError`` and a ``ValueError``, so ``hasattr(estimator, "coef_")`` is False before
    ``fit``), and the ``RuntimeError`` the estimator raised before."""


def features_digest(Z: Mapping[int, Features]) -> str:
    """Hex sha256 of the features ``{layer: (M, D)}``: each layer, its shape and the arrays
    holding it (a sparse matrix's CSR ``indptr``, ``indices`` and ``data``, a dense one's values).

    One pass over the stored values, no model run: a content hash of what a fit read.
    """
    parts = []
    for layer in sorted(Z):
        z = Z[layer]
        if sp.issparse(z):
            csr = sp.csr_matrix(z)  # no copy of a CSR matrix
            arrays: tuple[np.ndarray, ...] = (csr.indptr, csr.indices, csr.data)
        else:
            arrays = (np.asarray(z),)
        parts.append(digest_arrays(np.asarray([layer, *np.shape(z)]), *arrays))
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()


KINDS = ("classification", "binary", "multiclass", "regression")


class CircuitLasso(BaseEstimator):
    """A feature circuit learned by sparse regression, as a scikit-learn estimator.

    ``X`` is the features of every layer, ``{layer: (M, D_layer)}`` (what
    :func:`~circuitlasso.collect.collect_sae_features` returns, a
    :class:`~circuitlasso.collect.layers.LayerFeatures`); a plain ``(M, D)`` matrix is read as
    the features of one layer, whose circuit is the readout's roots. ``clone``, ``get_params``,
    ``set_params``, ``GridSearchCV`` and ``cross_val_score`` work as for any estimator: choose
    ``label_lam_ratio`` on validation folds with ``GridSearchCV(CircuitLasso(),
    {"label_lam_ratio": [...]})`` (``score`` is the accuracy, or R^2 for a real-valued target).

    Each penalty is a ratio of its regression's ``lam_max`` or an absolute lambda (both are
    defined in :mod:`circuitlasso.solve`): ``label_lam_ratio`` or ``label_lam`` for the label
    regression, ``lam_ratio`` or ``lam`` for each layer-pair regression (at most one of each
    pair; neither: the ratio of :mod:`circuitlasso.circuits.defaults`, where every default lives).
    ``kind``: the task, which makes the estimator a classifier or a regressor before it sees
    ``y`` (so ``is_classifier`` holds and ``GridSearchCV(cv=3)`` stratifies its folds):
    ``"classification"`` (binary or multi-class, as the labels have two classes or more),
    ``"binary"``, ``"multiclass"`` or ``"regression"`` (a real-valued target; integer-valued
    ones such as counts too, see :func:`circuitlasso.data.targets.make_target`). ``roots``: how
    many last-layer features the trace starts from; ``k``: parents kept per node.
    ``min_prompts``: features active on fewer prompts are not used as predictors.
    ``standardized``: rank by ``|A| * std(z)`` (True) or by ``|A|`` as in the paper.
    ``layer_pairs``: ``"traced"`` fits the layer-pair regressions only for the features a trace
    visits (when it visits them, kept for later traces of the same fit), ``"all"`` fits every
    column of every layer pair in ``fit`` (as the paper does; the circuit is the same).
    ``device``: where the solvers run. ``executor``: where the layer pairs of
    ``layer_pairs="all"`` run, as cached chunks (``"serial"``, ``"ray"`` or a configured
    :class:`~circuitlasso.executor.RayExecutor`; see
    :class:`~circuitlasso.circuits.trace.LayerRegressions`).

    Fitted attributes, all set by ``fit`` and read without computing: ``coef_`` (``(1, D)`` for
    a binary target, ``(K, D)`` for K classes, ``(D,)`` for a real-valued one, over the
    features of the readout layer), ``intercept_`` (``(1,)``, ``(K,)`` or a float),
    ``classes_`` (``(K,)`` class labels; classification only), ``kind_`` (the target's kind:
    ``"binary"``, ``"multiclass"`` or ``"regression"``), ``n_features_in_`` (``D``, the
    features ``predict`` reads), ``lam_`` (the label penalty ``lam`` it came to),
    ``readout_layer_`` (the layer the readout reads), ``X_fit_`` (a copy of the features it
    was fitted on, ``{layer: (M, D_layer)}`` CSR), ``label_fit_`` (the readout, a
    :class:`~circuitlasso.circuits.features.LabelFit`), ``features_digest_``
    (:func:`features_digest` of ``X_fit_``). Before ``fit`` they raise :class:`NotFittedError`,
    so ``hasattr`` is False. Circuits are returned by methods: ``trace`` (the estimator's
    circuit, or one by another rule: a :class:`~circuitlasso.circuits.circuit.Circuit` with
    nodes ``z{layer}.{feature}`` and edges parent -> child carrying ``coef``),
    ``prompt_circuit`` (one prompt's) and ``interpret`` (labelled); what the evaluations read
    of a fit is given by ``readout_importance`` (the score the roots are picked by),
    ``prompt_importance`` (each node's importance on each prompt), ``parent_fits`` (the
    layer-pair fits of a circuit's nodes) and ``top_tokens`` (nodes' top tokens, with the
    prompts checked).
    """

    def __init__(
        self,
        *,
        label_lam_ratio: float | None = None,
        label_lam: float | None = None,
        lam_ratio: float | None = None,
        lam: float | None = None,
        kind: str = "classification",
        roots: int = defaults.ROOTS,
        k: int = defaults.K,
        min_prompts: int = defaults.MIN_PROMPTS,
        standardized: bool = defaults.STANDARDIZED,
        layer_pairs: str = "traced",
        device: torch.device | str | None = None,
        executor: str | Executor | None = None,
    ) -> None:
        self.label_lam_ratio, self.label_lam = label_lam_ratio, label_lam
        self.lam_ratio, self.lam, self.kind = lam_ratio, lam, kind
        self.roots, self.k, self.min_prompts = roots, k, min_prompts
        self.standardized, self.layer_pairs, self.device = standardized, layer_pairs, device
        self.executor = executor

    def fit(self, X: Mapping[int, Features] | Features, y: Sequence | np.ndarray) -> CircuitLasso:
        """Fit the readout on the last layer of ``X`` (``{layer: (M, D)}`` features, or one
        ``(M, D)`` matrix, copied) against ``y: (M,)``; with ``layer_pairs="all"`` every
        layer-pair regression too. Replaces everything an earlier fit left."""
        if self.layer_pairs not in ("traced", "all"):
            raise ValueError(f"layer_pairs is 'traced' or 'all', got {self.layer_pairs!r}")
        Z = as_layer_features(X, min_rows=2, copy=True)
        target = self._target(y)
        last = max(Z)
        self.X_fit_ = Z
        self.features_digest_ = features_digest(Z)
        self.n_features_in_ = Z[last].shape[1]
        self.label_fit_ = fit_label(
            Z[last], target, self.label_lam_ratio, lam=self.label_lam, layer=last,
            min_prompts=self.min_prompts, device=self.device,
        )  # fmt: skip
        # the layer-pair fits traces share: a cache of this fit, not a fitted attribute
        self._regressions = tr.LayerRegressions(
            dict(Z), self.lam_ratio, lam=self.lam, min_prompts=self.min_prompts,
            device=self.device, executor=self.executor,
        )  # fmt: skip
        if self.layer_pairs == "all":
            self._regressions.fit_all()
        return self

    def _target(self, y: Sequence | np.ndarray) -> Target:
        """``y: (M,)`` (or ``(M, 1)``, with scikit-learn's warning) as the
        :class:`~circuitlasso.data.targets.Target` of ``kind``; a classifier refuses real-valued
        labels."""
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}, got {self.kind!r}")
        if y is None:
            raise ValueError("CircuitLasso requires y to be passed, but the target y is None")
        shape: tuple[int, ...] = getattr(y, "shape", ())  # arrays, tensors, frames
        if len(shape) == 2 and shape[1] == 1:
            y = column_or_1d(y, warn=True)
        target = make_target(y, kind=None if self.kind == "classification" else self.kind)
        if self.kind != "regression" and target.kind == "regression":
            raise ValueError(
                "Unknown label type: continuous (real numbers with fractional parts) for a "
                "classifier; fit CircuitLasso(kind='regression') to a real-valued target"
            )
        return target

    @property
    def coef_(self) -> np.ndarray:
        """The readout ``A_{L,y}``: ``(1, D)`` (binary), ``(K, D)`` (K classes) or ``(D,)``
        (real-valued target) coefficients of the readout layer's features."""
        fit = self._fitted()
        if fit.kind == "binary":
            return fit.coef[np.newaxis, :]
        return fit.coef.T if fit.kind == "multiclass" else fit.coef

    @property
    def intercept_(self) -> float | np.ndarray:
        """The readout's intercept: ``(1,)`` (binary), ``(K,)`` (K classes) or a float."""
        fit = self._fitted()
        return np.atleast_1d(fit.intercept) if fit.kind == "binary" else fit.intercept

    @property
    def classes_(self) -> np.ndarray:
        """``(K,)`` class labels, in the order of ``predict_proba``'s columns."""
        fit = self._fitted()
        if fit.kind == "regression":
            raise AttributeError("a CircuitLasso fit on a regression target has no classes_")
        return fit.classes

    @property
    def lam_(self) -> float:
        """The label penalty ``lam = label_lam_ratio * lam_max`` on the mean scale."""
        return self._fitted().lam

    @property
    def kind_(self) -> str:
        """The target's kind the readout was fitted to: ``"binary"``, ``"multiclass"`` or
        ``"regression"``."""
        return self._fitted().kind

    @property
    def readout_layer_(self) -> int:
        """The layer whose features the readout reads: the last layer of the features of ``fit``."""
        return self._fitted().layer

    def readout_importance(self, standardized: bool | None = None) -> np.ndarray:
        """``(D,)`` importance of each readout feature: ``|A_{L,y}|`` (summed over the classes
        of a multi-class readout), times its standard deviation over the prompts of ``fit`` if
        ``standardized`` (None: the estimator's ``standardized``), the score the trace picks its
        roots by."""
        fit = self._fitted()
        standardized = self.standardized if standardized is None else standardized
        weights = tr.feature_std(self.X_fit_[fit.layer]) if standardized else None
        return tr.label_importance(fit, weights)

    def prompt_importance(
        self,
        circuit: Circuit,
        X: Mapping[int, Features] | None = None,
        prompts: Sequence[int] | None = None,
    ) -> list[dict[str, float]]:
        """Per prompt (row of ``X``, ``{layer: (M, D)}``; None: the features of ``fit``), the
        importance on it of each node of ``circuit`` (zeros left out): ``|A_{L,y}| * |z_L|`` for a
        node of the readout layer, else the sum over its edges of ``|coef| * |z|``. ``prompts``:
        the rows (None: every row)."""
        fit = self._fitted()
        Z = self.X_fit_ if X is None else X
        rows = range(Z[fit.layer].shape[0]) if prompts is None else prompts
        return tr.prompt_importance(fit, circuit, Z, rows)

    def trace(self, readout: LabelFit | None = None, /, **rule: Any) -> Circuit:
        """A new circuit traced from the readout down to the first layer, fitting the
        layer-pair columns it visits (kept for later traces of this fit): ``rule`` is
        :func:`~circuitlasso.circuits.trace.trace_circuit`'s ``roots``, ``k``, ``mass``,
        ``depth``, ``prompt`` and ``standardized``, by default the estimator's ``roots``, ``k``
        and ``standardized`` (``trace()``: the estimator's circuit). ``readout`` (positional):
        another fit of the same last layer to trace from (such as a regression of the model's
        own output), instead of ``label_fit_``."""
        self._fitted()
        rule = {"roots": self.roots, "k": self.k, "standardized": self.standardized, **rule}
        fit = self.label_fit_ if readout is None else readout
        return tr.trace_circuit(fit, self._regressions, **rule)

    def parent_fits(self, circuit: Circuit) -> dict[int, dict[int, LayerPairFit]]:
        """The layer-pair fit holding the parent column of every node of ``circuit`` that has
        parents, ``{child layer: {child feature: fit}}`` (columns not fitted yet are fitted)."""
        self._fitted()
        children: dict[int, list[int]] = {}
        for name, data in circuit.nodes(data=True):
            if circuit.in_degree(name):
                children.setdefault(int(data["layer"]), []).append(int(data["feature"]))
        return {layer: self._regressions.parents(layer, f) for layer, f in children.items()}

    def predict(self, X: Mapping[int, Features] | Features) -> np.ndarray:
        """``(M,)`` predicted class labels (classification) or values (regression) from the
        features ``X`` (as for ``fit``; the readout's layer is read, and must have the
        ``n_features_in_`` features of the fit)."""
        fit = self._fitted()
        return fit.predict(self._readout_features(fit, X))

    def _classifies(self) -> bool:
        return self.kind != "regression"

    @available_if(_classifies)
    def predict_proba(self, X: Mapping[int, Features] | Features) -> np.ndarray:
        """``(M, K)`` probability of each class of ``classes_`` (``K = 2`` for a binary target)
        from the features ``X`` (as for ``predict``); a classifier's only."""
        fit = self._fitted()
        proba = fit.predict_proba(self._readout_features(fit, X))
        return np.column_stack([1 - proba, proba]) if fit.kind == "binary" else proba

    def score(self, X: Mapping[int, Features] | Features, y: Sequence | np.ndarray) -> float:
        """Accuracy of ``predict(X)`` against ``y: (M,)``; R^2 for a real-valued target."""
        fit = self._fitted()
        predicted = self.predict(X)
        if fit.kind == "regression":
            return float(r2_score(np.asarray(y, dtype=np.float64), predicted))
        return float(accuracy_score(np.asarray(y), predicted))

    def top_tokens(
        self,
        model: Model,
        saes: SAEMap,
        prompts: Sequence[str],
        nodes: Sequence[tuple[int, int]],
        *,
        n_prompts: int = 50,
    ) -> dict[tuple[int, int], Counter[str]]:
        """Each ``(layer, feature)`` node's top tokens (token -> count among its largest
        activations over its ``n_prompts`` top prompts of ``X_fit_``,
        :func:`~circuitlasso.circuits.interpret.nodes_top_tokens`), after checking the prompts.

        ``prompts`` must be those the features ``fit`` was given were collected on, in the same
        order: row ``i`` of ``X_fit_`` ranks ``prompts[i]``. Checked, with a ``ValueError``
        naming the problem: their number must be the number of rows of ``X_fit_``, ``X_fit_``
        must still be what ``fit`` read (its :func:`features_digest`), and ``saes`` must hold an
        SAE of each node's layer, keyed by its hook name or the layer of its hook
        (:func:`~circuitlasso.forward.sae_layers`) and as wide as that layer of ``X_fit_``.
        The prompts' content is checked where the labels read it, at no extra model run: each
        node's top prompts run through the model for their per-token values anyway, and those
        values averaged over a prompt's real tokens must give its ``X_fit_[i, feature]``, as the
        collector computed it (:func:`~circuitlasso.circuits.interpret.check_token_means`);
        prompts shuffled or replaced fail there, naming the prompt and both values.
        """
        self._fitted()
        prompts = check_prompts(prompts)
        Z = self.X_fit_
        rows = Z[self.label_fit_.layer].shape[0]
        if len(prompts) != rows:
            raise ValueError(
                f"got {len(prompts)} prompts but the features fit was given have "
                f"{rows} rows, one per prompt: pass the prompts they were collected on, in order"
            )
        if features_digest(Z) != self.features_digest_:
            raise ValueError("X_fit_ was changed since fit: fit again")
        layer_saes = sae_layers(saes)
        for layer in sorted({int(layer) for layer, _ in nodes}):
            if layer not in layer_saes:
                raise ValueError(
                    f"the circuit has layer {layer} but saes has layers {sorted(layer_saes)}"
                )
            check_sae_fits(model, layer_saes[layer])
            if layer_saes[layer].cfg.d_sae != Z[layer].shape[1]:
                raise ValueError(
                    f"the SAE of layer {layer} has {layer_saes[layer].cfg.d_sae} features but the "
                    f"features of layer {layer} have {Z[layer].shape[1]}"
                )
        return interpret.nodes_top_tokens(
            model, layer_saes, nodes, prompts, Z, n_prompts=n_prompts, verify=True
        )

    def interpret(
        self,
        model: Model,
        saes: SAEMap,
        prompts: Sequence[str],
        *,
        circuit: Circuit | None = None,
        n_prompts: int = 50,
    ) -> Circuit:
        """A labelled copy of ``circuit`` (left as it is; None: ``trace()``, the estimator's
        circuit): every node given its ``top_tokens`` (:meth:`top_tokens`, which checks that
        ``prompts`` are those the features were collected on) and every edge its ``type``
        (persistence, merging, dropping, other)."""
        labelled = self.trace() if circuit is None else copy.deepcopy(circuit)
        nodes = [(int(d["layer"]), int(d["feature"])) for _, d in labelled.nodes(data=True)]
        tokens = self.top_tokens(model, saes, prompts, nodes, n_prompts=n_prompts)
        tr.interpret_circuit(labelled, lambda layer, feature: tokens[(layer, feature)])
        return labelled

    def prompt_circuit(self, prompt: int, **trace: Any) -> Circuit:
        """The circuit of one prompt: row ``prompt`` of the features ``fit`` was given, every
        score weighted by that prompt's activations (``|A| * |z|``) instead of the data set's.
        ``trace``: :func:`~circuitlasso.circuits.trace.trace_circuit`'s rule (``roots``, ``k``,
        ``mass``, ``depth``; default the estimator's ``roots`` and ``k``)."""
        fit = self._fitted()
        rows = self.X_fit_[fit.layer].shape[0]
        if not 0 <= prompt < rows:
            raise IndexError(f"prompt {prompt} is not a row of the {rows} prompts fit was given")
        return self.trace(prompt=prompt, **trace)

    def _fitted(self) -> LabelFit:
        if not hasattr(self, "label_fit_"):
            raise NotFittedError("this CircuitLasso is not fitted yet: call fit(Z, y) first")
        return self.label_fit_

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # SAE features are sparse
        tags.target_tags.required = True
        if self.kind == "regression":
            tags.estimator_type, tags.regressor_tags = "regressor", RegressorTags()
        else:
            tags.estimator_type, tags.classifier_tags = "classifier", ClassifierTags()
        return tags

    @staticmethod
    def _readout_features(fit: LabelFit, X: Mapping[int, Features] | Features) -> Features:
        """``X``'s features of the readout's layer (only that layer is read and checked),
        checked to have the fit's width."""
        layers = X if isinstance(X, Mapping) and not sp.issparse(X) else {fit.layer: X}  # DOK
        if fit.layer not in layers:
            raise ValueError(f"the readout reads layer {fit.layer}; Z has layers {sorted(layers)}")
        z = as_layer_features({fit.layer: layers[fit.layer]})[fit.layer]
        shape, width = np.shape(z), len(fit.coef)
        if shape[1] != width:
            raise ValueError(
                f"X has {shape[1]} features, but CircuitLasso is expecting {width} features as "
                f"input: the features of layer {fit.layer} have shape {shape}, the fit read "
                f"{width} per prompt"
            )
        return z


def penalty_table(
    search: GridSearchCV,
    X: Mapping[int, Features] | Features,
    y: Sequence | np.ndarray,
    X_test: Mapping[int, Features] | Features,
    y_test: Sequence | np.ndarray,
) -> pd.DataFrame:
    """The paper's penalty ablation (App. C.2) from ``search``, a ``GridSearchCV`` over a
    :class:`CircuitLasso`'s penalty fitted on ``X``, ``y``: one row per candidate, with its
    parameters, ``lam`` (the readout's penalty on all of ``X``), the train loss, l1 norm and
    nonzero coefficients of that readout, its train score, the validation score (the search's
    mean over its folds, on which it chose), and the test loss and score on ``X_test``,
    ``y_test``. The score is the accuracy (columns ``*_accuracy``) or R^2 (``*_r2``) and the
    loss the mean cross-entropy or squared error (:func:`~circuitlasso.circuits.features.
    readout_scores`). Each candidate's readout is refit on ``X``; no circuit is traced."""
    results = search.cv_results_
    rows = []
    for params, validation in zip(results["params"], results["mean_test_score"], strict=True):
        fitted = clone(search.estimator).set_params(**params).fit(X, y)
        fit = fitted.label_fit_
        train = readout_scores(fit, fitted._readout_features(fit, X), y)
        test = readout_scores(fit, fitted._readout_features(fit, X_test), y_test)
        metric = "r2" if fit.kind == "regression" else "accuracy"
        rows.append(
            {
                **params,
                "lam": fit.lam,
                "train_loss": train["loss"],
                "l1_norm": float(np.abs(fit.coef).sum()),
                "nonzero": int(np.count_nonzero(fit.coef)),
                f"train_{metric}": train[metric],
                f"validation_{metric}": float(validation),
                "test_loss": test["loss"],
                f"test_{metric}": test[metric],
            }
        )
    return pd.DataFrame(rows)
