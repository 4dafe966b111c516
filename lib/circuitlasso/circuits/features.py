"""CircuitLasso on SAE features (paper Sec. 3.3): layer-pair regressions and a label regression.

Inputs are the token-averaged SAE features of :func:`circuitlasso.collect.collect_sae_features`,
``Z[l]: (M, D_l)`` sparse, one row per prompt. Every fit here takes its penalty either as
``lam_ratio``, a fraction of that regression's ``lam_max``, or as an absolute ``lam`` (a
:class:`Penalty`; both conventions and their conversion to the paper's lambda are in
:mod:`circuitlasso.solve`); defaults are in :mod:`circuitlasso.circuits.defaults`.

- Layer pairs (paper Eq. 4): ``Z[child] ~ Z[parent] A`` by a multi-output Lasso. Each child
  feature is its own Lasso problem, so :func:`fit_layer_pair` can fit just the child features a
  trace needs (``children=``) and get exactly the columns the full ``A`` would hold; each child
  gets ``lam_ratio`` times its own ``lam_max`` (or the one absolute ``lam``).
- The label (paper Eq. 5): ``y ~ Z[L] A_{L,y}`` with the loss of the target's kind
  (:mod:`circuitlasso.data.targets`): l1-penalized logistic regression for a binary target,
  multinomial (softmax) for a multi-class one, the Lasso (squared error) for a real-valued one.
  :func:`readout_scores` gives its loss and accuracy (or R^2) on any prompts; the paper's table
  over a grid of penalties is :func:`circuitlasso.estimator.penalty_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import scipy.sparse as sp
import torch

from circuitlasso.circuits import defaults
from circuitlasso.data.targets import Target, TargetKind, make_target
from circuitlasso.solve import lam_max, lasso, logistic_lam_max, logistic_lasso, multinomial_lasso
from circuitlasso.solve.memory import DEFAULT_MEMORY_GIB

Features: TypeAlias = sp.csr_matrix  # (M, D) token-averaged SAE features, one row per prompt


@dataclass(frozen=True)
class LayerPairFit:
    """Coefficients from ``parent`` features to some ``child`` features.

    ``coef: (D_parent, len(children))`` sparse CSC, column ``j`` for child feature
    ``children[j]``; ``lam: (len(children),)`` the penalty each child got; ``converged`` per child;
    ``gap``: each child's certified duality gap (objective units, 0 for a zero column).
    """

    parent: int
    child: int
    children: np.ndarray
    coef: sp.csc_matrix
    lam: np.ndarray
    converged: np.ndarray
    gap: np.ndarray

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """The fit as tensors (what the chunk cache stores); :meth:`from_tensors` reads it back."""
        coef = self.coef.tocoo()
        return {
            "pair": torch.tensor([self.parent, self.child, *coef.shape]),
            "children": torch.from_numpy(np.asarray(self.children, dtype=np.int64)),
            "rows": torch.from_numpy(coef.row.astype(np.int64)),
            "cols": torch.from_numpy(coef.col.astype(np.int64)),
            "values": torch.from_numpy(coef.data.astype(np.float32)),
            "lam": torch.from_numpy(np.asarray(self.lam, dtype=np.float64)),
            "converged": torch.from_numpy(np.asarray(self.converged, dtype=bool)),
            "gap": torch.from_numpy(np.asarray(self.gap, dtype=np.float64)),
        }

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor]) -> LayerPairFit:
        parent, child, n_rows, n_cols = (int(v) for v in t["pair"])
        coef = sp.csc_matrix(
            (t["values"].numpy(), (t["rows"].numpy(), t["cols"].numpy())), shape=(n_rows, n_cols)
        )
        return cls(parent, child, t["children"].numpy(), coef, t["lam"].numpy(),
                   t["converged"].numpy(), t["gap"].numpy())  # fmt: skip

    def column(self, feature: int) -> sp.csc_matrix:
        """``(D_parent, 1)`` coefficients of child ``feature`` (a KeyError if it was not fit)."""
        where = np.flatnonzero(self.children == feature)
        if len(where) == 0:
            raise KeyError(f"child feature {feature} of layer {self.child} was not fit")
        return self.coef[:, int(where[0])]


def frequent_features(Z: Features, min_prompts: int) -> np.ndarray:
    """Indices of the features of ``Z: (M, D)`` active (nonzero) on at least ``min_prompts``
    prompts. A feature seen on a handful of prompts can fit those prompts' residuals exactly,
    so its coefficient says more about the prompts than about the model."""
    if min_prompts < 1:
        raise ValueError(f"min_prompts must be >= 1, got {min_prompts}")
    Z = sp.csr_matrix(Z)
    if not Z.has_canonical_format:  # duplicate entries: count their sum once
        Z = Z.copy()
        Z.sum_duplicates()
    counts = np.bincount(Z.indices[Z.data != 0], minlength=Z.shape[1])  # stored zeros are inactive
    return np.flatnonzero(counts >= min_prompts)


@dataclass(frozen=True)
class Penalty:
    """A regression's l1 penalty: ``ratio`` times its ``lam_max``, or the absolute ``lam`` (on
    the solvers' mean scale; see :mod:`circuitlasso.solve` for both and for the paper's lambda).
    Exactly one is set."""

    ratio: float | None = None
    lam: float | None = None

    @classmethod
    def of(cls, lam_ratio: float | None, lam: float | None, default_ratio: float) -> Penalty:
        """The penalty asked for by ``lam_ratio`` or ``lam`` (at most one of them; neither:
        ``default_ratio``), each checked to be a positive number."""
        if lam_ratio is not None and lam is not None:
            raise ValueError(
                f"give the penalty as lam_ratio or as lam, not both (got {lam_ratio}, {lam})"
            )
        if lam is not None:
            if not (np.isfinite(lam) and lam > 0):
                raise ValueError(f"lam must be > 0 (an absolute penalty), got {lam}")
            return cls(lam=float(lam))
        ratio = default_ratio if lam_ratio is None else lam_ratio
        if not (np.isfinite(ratio) and ratio > 0):
            raise ValueError(f"lam_ratio must be > 0 (a fraction of lam_max), got {ratio}")
        return cls(ratio=float(ratio))

    def lam_for(self, top: float | np.ndarray) -> float | np.ndarray:
        """The absolute penalty for a regression (or each of several) whose ``lam_max`` is
        ``top``."""
        return self.lam if self.lam is not None else self.ratio * top  # type: ignore[operator]


def _check_pair(parent: Features, child: Features) -> None:
    if parent.shape[0] != child.shape[0]:
        raise ValueError(
            f"parent features have {parent.shape[0]} prompts but child features {child.shape[0]}"
        )
    if parent.shape[0] < 2:
        raise ValueError(f"need at least 2 prompts, got {parent.shape[0]}")


def fit_layer_pair(
    Z_parent: Features,
    Z_child: Features,
    lam_ratio: float | None = None,
    *,
    lam: float | None = None,
    parent: int,
    child: int,
    children: Sequence[int] | None = None,
    min_prompts: int = defaults.MIN_PROMPTS,
    tol: float = defaults.PAIR_TOL,
    progress: bool = False,
    device: torch.device | str | None = None,
    memory_gib: float = DEFAULT_MEMORY_GIB,
) -> LayerPairFit:
    """Lasso of child features ``Z_child[:, children]: (M, k)`` on ``Z_parent: (M, D_parent)``
    (all child features if ``children`` is None), each with ``lam = lam_ratio * lam_max`` (ratios
    >= 1 give zero columns; default :data:`~circuitlasso.circuits.defaults.LAM_RATIO`), or with
    the one absolute ``lam`` given instead (:class:`Penalty`).

    Only parents active on at least ``min_prompts`` prompts are predictors (see
    :func:`frequent_features`). A child that never varies has nothing to explain: its column is
    zero and it counts as converged. ``device``: where the solver runs (default the CPU); the
    result is on the CPU either way. ``memory_gib``: the solver's memory budget (see
    :mod:`circuitlasso.solve.memory`).
    """
    penalty = Penalty.of(lam_ratio, lam, defaults.LAM_RATIO)
    _check_pair(Z_parent, Z_child)
    chosen = np.arange(Z_child.shape[1]) if children is None else np.asarray(children, dtype=int)
    bad = chosen[(chosen < 0) | (chosen >= Z_child.shape[1])]
    if len(bad):
        raise ValueError(f"child features {bad.tolist()} out of range 0..{Z_child.shape[1] - 1}")
    targets = sp.csc_matrix(Z_child)[:, chosen]
    squares = np.asarray(targets.power(2).sum(0)).ravel()
    spread = squares - np.asarray(targets.sum(0)).ravel() ** 2 / targets.shape[0]
    varies = np.flatnonzero(spread > 1e-12 * np.maximum(squares, 1e-30))
    lams = np.zeros(len(chosen))
    converged = np.ones(len(chosen), dtype=bool)
    gap = np.zeros(len(chosen))
    rows, cols, values = np.zeros(0, int), np.zeros(0, int), np.zeros(0, np.float32)
    predictors = frequent_features(Z_parent, min_prompts)
    if len(varies) and len(predictors):
        design = sp.csr_matrix(Z_parent)[:, predictors]
        top = lam_max(design, targets[:, varies], fit_intercept=True, device=device).cpu().numpy()
        usable = varies[top > 0]
        lams[usable] = penalty.lam_for(top[top > 0])
        result = lasso(
            design,
            targets[:, usable],
            lams[usable],
            fit_intercept=True,
            tol=tol,
            device=device,
            memory_gib=memory_gib,
            progress=progress,
        )
        fitted = _scipy(result.coef.cpu())
        rows, cols = predictors[fitted.row], usable[fitted.col]
        values = fitted.data.astype(np.float32)
        converged[usable] = result.converged.cpu().numpy()
        gap[usable] = result.gap.cpu().numpy()
    shape = (Z_parent.shape[1], len(chosen))
    coef = sp.csc_matrix((values, (rows, cols)), shape=shape)
    return LayerPairFit(parent, child, chosen, coef, lams, converged, gap)


def _scipy(coef: torch.Tensor) -> sp.coo_matrix:
    """A (sparse COO or dense) CPU torch coefficient matrix as scipy COO."""
    if coef.layout == torch.strided:
        return sp.coo_matrix(coef.numpy())
    coef = coef.coalesce()
    rows, cols = coef.indices().numpy()
    return sp.coo_matrix((coef.values().numpy(), (rows, cols)), shape=tuple(coef.shape))


@dataclass(frozen=True)
class LabelFit:
    """The readout ``A_{L,y}`` of layer ``layer``: ``coef: (D,)`` (binary, regression) or
    ``(D, K)`` (multiclass, one column per class), ``intercept`` a float or ``(K,)``.

    ``lam``: the penalty, on the mean scale of :mod:`circuitlasso.solve`; ``converged``: the
    solver reached its tolerance; ``kind``: the target's kind; ``classes``: the label of each
    class (binary: ``(2,)``, the second the positive class; ``(K,)`` multiclass; empty for
    regression); ``lam_ratio``: the ratio :func:`fit_label` was given, or the fraction of its
    ``lam_max`` that the absolute ``lam`` it was given amounts to (None for a readout written by
    hand).
    """

    layer: int
    coef: np.ndarray
    intercept: float | np.ndarray
    lam: float
    converged: bool
    kind: TargetKind = "binary"
    classes: np.ndarray = field(default_factory=lambda: np.array([0, 1]))
    lam_ratio: float | None = None

    def decision_function(self, Z: Features) -> np.ndarray:
        """Linear predictor of features ``Z: (M, D)``: ``(M,)`` logits (binary), ``(M, K)``
        logits (multiclass), ``(M,)`` predictions (regression)."""
        scores = np.asarray(Z @ self.coef, dtype=np.float64)
        return scores.reshape(Z.shape[0], *self.coef.shape[1:]) + self.intercept

    def predict_proba(self, Z: Features) -> np.ndarray:
        """``(M,)`` probability of the positive class ``classes[1]`` (binary) or ``(M, K)``
        probability of each class (multiclass) for features ``Z: (M, D)``."""
        scores = self.decision_function(Z)
        if self.kind == "binary":
            return 1 / (1 + np.exp(-scores))
        if self.kind == "multiclass":
            exp = np.exp(scores - scores.max(1, keepdims=True))
            return exp / exp.sum(1, keepdims=True)
        raise ValueError("a regression readout has no class probabilities; use predict")

    def predict(self, Z: Features) -> np.ndarray:
        """``(M,)`` predicted labels (classification) or values (regression) for ``Z: (M, D)``."""
        if self.kind == "regression":
            return self.decision_function(Z)
        proba = self.predict_proba(Z)
        codes = (proba > 0.5).astype(int) if self.kind == "binary" else proba.argmax(1)
        return self.classes[codes]


def _design(Z: Features, min_prompts: int) -> tuple[np.ndarray, sp.csr_matrix]:
    """The features active on at least ``min_prompts`` prompts and their columns of ``Z``."""
    keep = frequent_features(Z, min_prompts)
    if len(keep) == 0:
        raise ValueError(f"no feature is active on at least {min_prompts} prompts")
    return keep, sp.csr_matrix(Z)[:, keep]


def _target(Z: Features, y: Sequence | np.ndarray | Target, kind: str | None) -> Target:
    target = make_target(y, kind=kind)
    if Z.shape[0] != len(target):
        raise ValueError(f"features have {Z.shape[0]} prompts but there are {len(target)} labels")
    return target


def _lam_max(design: sp.csr_matrix, target: Target, device: torch.device | str | None) -> float:
    if target.kind == "regression":
        return float(lam_max(design, target.values, fit_intercept=True, device=device))
    return logistic_lam_max(design, target.values, device=device)


def label_lam_max(
    Z: Features,
    y: Sequence | np.ndarray | Target,
    *,
    kind: str | None = None,
    min_prompts: int = defaults.MIN_PROMPTS,
    device: torch.device | str | None = None,
) -> float:
    """``lam_max`` of the label fit of ``y: (M,)`` on ``Z: (M, D)`` (arguments as in
    :func:`fit_label`): ``lam_ratio = lam / label_lam_max(...)`` turns a penalty ``lam`` into a
    ratio (or pass ``lam=`` to :func:`fit_label`)."""
    target = _target(Z, y, kind)
    return _lam_max(_design(Z, min_prompts)[1], target, device)


def fit_label(
    Z: Features,
    y: Sequence | np.ndarray | Target,
    lam_ratio: float | None = None,
    *,
    lam: float | None = None,
    layer: int,
    kind: str | None = None,
    min_prompts: int = defaults.MIN_PROMPTS,
    tol: float = defaults.LABEL_TOL,
    device: torch.device | str | None = None,
) -> LabelFit:
    """The readout ``A_{L,y}``: ``y: (M,)`` labels (or a :class:`~circuitlasso.data.targets.Target`)
    regressed on the features of ``Z: (M, D)`` active on at least ``min_prompts`` prompts, with
    ``lam = lam_ratio * lam_max`` (ratios >= 1 give the intercept-only model; default
    :data:`~circuitlasso.circuits.defaults.LABEL_LAM_RATIO`) or the absolute ``lam`` given instead
    (:class:`Penalty`); the other features get coefficient 0.

    ``kind``: ``"binary"``, ``"multiclass"`` or ``"regression"`` (None: read from ``y``, see
    :func:`~circuitlasso.data.targets.make_target`); it picks the solver:
    :func:`~circuitlasso.solve.logistic_lasso`, :func:`~circuitlasso.solve.multinomial_lasso` or
    :func:`~circuitlasso.solve.lasso`, each to the certified tolerance ``tol``. This l1 circuit
    fit is not the l2 probe of :func:`circuitlasso.evaluation.debias.probes.fit_probe`, which
    reads every dense activation. ``device``: where the solver runs (default the CPU).
    """
    penalty = Penalty.of(lam_ratio, lam, defaults.LABEL_LAM_RATIO)
    target = _target(Z, y, kind)
    keep, design = _design(Z, min_prompts)
    top = _lam_max(design, target, device)
    if not top > 0:
        raise ValueError("no feature is correlated with the target (lam_max = 0)")
    lam = float(penalty.lam_for(top))
    coef = np.zeros(
        (Z.shape[1], len(target.classes)) if target.kind == "multiclass" else Z.shape[1]
    )
    if target.kind == "regression":
        fitted = lasso(design, target.values, lam, fit_intercept=True, tol=tol,
                       dtype=torch.float64, device=device)  # fmt: skip
        solution, converged = fitted.coef, bool(fitted.converged)
        intercept = fitted.intercept.cpu().numpy()
    else:
        solver = logistic_lasso if target.kind == "binary" else multinomial_lasso
        result = solver(design, target.values, lam, tol=tol, dtype=torch.float64, device=device)
        solution, converged = result.coef, result.converged
        intercept = result.intercept.cpu().numpy()
    coef[keep] = solution.cpu().numpy()
    return LabelFit(
        layer,
        coef,
        float(intercept) if intercept.ndim == 0 else intercept,
        float(lam),
        converged,
        kind=target.kind,
        classes=target.classes,
        lam_ratio=penalty.ratio if penalty.ratio is not None else lam / top,
    )


def readout_scores(fit: LabelFit, Z: Features, labels: Sequence | np.ndarray) -> dict[str, float]:
    """The readout on ``Z: (M, D)`` against ``labels: (M,)`` (read with the fit's classes): mean
    loss (cross-entropy, or squared error for a real-valued target) and accuracy (or ``r2``)."""
    values = Target(fit.kind, np.zeros(0), fit.classes).encode(labels)
    if fit.kind == "regression":
        residual = values - fit.predict(Z)
        total = np.sum((values - values.mean()) ** 2)
        return {"loss": float(np.mean(residual**2)), "r2": float(1 - residual @ residual / total)}
    p = fit.predict_proba(Z)
    if fit.kind == "binary":
        p = np.clip(p, 1e-12, 1 - 1e-12)
        loss = -np.mean(values * np.log(p) + (1 - values) * np.log(1 - p))
        return {"loss": float(loss), "accuracy": float(np.mean((p > 0.5) == values))}
    codes = values.astype(int)
    chosen = np.clip(p[np.arange(len(codes)), codes], 1e-12, 1.0)
    return {
        "loss": float(-np.mean(np.log(chosen))),
        "accuracy": float(np.mean(p.argmax(1) == codes)),
    }
