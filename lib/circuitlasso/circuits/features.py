"""CircuitLasso on SAE features (paper Sec. 3.3): layer-pair regressions and a label regression.

Inputs are the token-averaged SAE features of :func:`circuitlasso.collect.collect_sae_features`,
``Z[l]: (M, D_l)`` sparse, one row per prompt.

- Layer pairs (paper Eq. 4): ``Z[child] ~ Z[parent] A`` by a multi-output Lasso. Each child
  feature is its own Lasso problem, so :func:`fit_layer_pair` can fit just the child features a
  trace needs (``children=``) and get exactly the columns the full ``A`` would hold. The penalty is
  ``lam_ratio`` times each child's ``lam_max`` (the smallest penalty that zeroes it), so one ratio
  means the same relative sparsity for every child and every layer.
- The label (paper Eq. 5): ``y ~ Z[L] a`` by l1-penalized logistic regression (mean cross-entropy
  plus ``lam * ||a||_1``; the paper's summed loss has ``lambda = M * lam``).
  :func:`lam_ablation` reproduces the paper's table of train/test loss, l1 norm and accuracy over
  a grid of ``lam`` (``lam = 0``: unpenalized logistic regression by scikit-learn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from sklearn.linear_model import LogisticRegression

from circuitlasso.data.targets import binary_labels
from circuitlasso.solve import lam_max, lasso, logistic_lasso

Features: TypeAlias = sp.csr_matrix  # (M, D) token-averaged SAE features, one row per prompt


@dataclass(frozen=True)
class LayerPairFit:
    """Coefficients from ``parent`` features to some ``child`` features.

    ``coef: (D_parent, len(children))`` sparse CSC, column ``j`` for child feature
    ``children[j]``; ``lam: (len(children),)`` the penalty each child got; ``converged`` per child.
    """

    parent: int
    child: int
    children: np.ndarray
    coef: sp.csc_matrix
    lam: np.ndarray
    converged: np.ndarray

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
    lam_ratio: float,
    *,
    parent: int,
    child: int,
    children: Sequence[int] | None = None,
    min_prompts: int = 1,
    tol: float = 1e-4,
    progress: bool = False,
    device: torch.device | str | None = None,
) -> LayerPairFit:
    """Lasso of child features ``Z_child[:, children]: (M, k)`` on ``Z_parent: (M, D_parent)``
    (all child features if ``children`` is None), each with ``lam = lam_ratio * lam_max``.

    Only parents active on at least ``min_prompts`` prompts are predictors (see
    :func:`frequent_features`). A child that never varies has nothing to explain: its column is
    zero and it counts as converged. ``device``: where the solver runs (default the CPU); the
    result is on the CPU either way.
    """
    if not 0 < lam_ratio < 1:
        raise ValueError(f"lam_ratio must be in (0, 1), got {lam_ratio}")
    _check_pair(Z_parent, Z_child)
    chosen = np.arange(Z_child.shape[1]) if children is None else np.asarray(children, dtype=int)
    bad = chosen[(chosen < 0) | (chosen >= Z_child.shape[1])]
    if len(bad):
        raise ValueError(f"child features {bad.tolist()} out of range 0..{Z_child.shape[1] - 1}")
    targets = sp.csc_matrix(Z_child)[:, chosen]
    squares = np.asarray(targets.power(2).sum(0)).ravel()
    spread = squares - np.asarray(targets.sum(0)).ravel() ** 2 / targets.shape[0]
    varies = np.flatnonzero(spread > 1e-12 * np.maximum(squares, 1e-30))
    lam = np.zeros(len(chosen))
    converged = np.ones(len(chosen), dtype=bool)
    rows, cols, values = np.zeros(0, int), np.zeros(0, int), np.zeros(0, np.float32)
    predictors = frequent_features(Z_parent, min_prompts)
    if len(varies) and len(predictors):
        design = sp.csr_matrix(Z_parent)[:, predictors]
        top = lam_max(design, targets[:, varies], fit_intercept=True, device=device).cpu().numpy()
        usable = varies[top > 0]
        lam[usable] = lam_ratio * top[top > 0]
        result = lasso(
            design,
            targets[:, usable],
            lam[usable],
            fit_intercept=True,
            tol=tol,
            device=device,
            progress=progress,
        )
        fitted = _scipy(result.coef.cpu())
        rows, cols = predictors[fitted.row], usable[fitted.col]
        values = fitted.data.astype(np.float32)
        converged[usable] = result.converged.cpu().numpy()
    shape = (Z_parent.shape[1], len(chosen))
    coef = sp.csc_matrix((values, (rows, cols)), shape=shape)
    return LayerPairFit(parent, child, chosen, coef, lam, converged)


def _scipy(coef: torch.Tensor) -> sp.coo_matrix:
    """A (sparse COO or dense) CPU torch coefficient matrix as scipy COO."""
    if coef.layout == torch.strided:
        return sp.coo_matrix(coef.numpy())
    coef = coef.coalesce()
    rows, cols = coef.indices().numpy()
    return sp.coo_matrix((coef.values().numpy(), (rows, cols)), shape=tuple(coef.shape))


@dataclass(frozen=True)
class LabelFit:
    """``y ~ sigmoid(Z[layer] @ coef + intercept)``; ``coef: (D,)`` (the paper's ``A_{L,y}``)."""

    layer: int
    coef: np.ndarray
    intercept: float
    lam: float
    converged: bool

    def predict_proba(self, Z: Features) -> np.ndarray:
        """``(M,)`` probability of class 1 for features ``Z: (M, D)``."""
        return 1 / (1 + np.exp(-(np.asarray(Z @ self.coef).ravel() + self.intercept)))


def fit_label(
    Z: Features,
    y: Sequence | np.ndarray,
    lam: float,
    *,
    layer: int,
    min_prompts: int = 1,
    device: torch.device | str | None = None,
) -> LabelFit:
    """l1-logistic regression of binary ``y: (M,)`` on the features of ``Z: (M, D)`` active on
    at least ``min_prompts`` prompts (``lam = 0``: unpenalized, by scikit-learn, since an l1
    solver has nothing to do there); the other features get coefficient 0. ``device``: where
    the l1 solver runs (default the CPU)."""
    labels = binary_labels(y)
    if Z.shape[0] != len(labels):
        raise ValueError(f"features have {Z.shape[0]} prompts but there are {len(labels)} labels")
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    keep = frequent_features(Z, min_prompts)
    if len(keep) == 0:
        raise ValueError(f"no feature is active on at least {min_prompts} prompts")
    design = sp.csr_matrix(Z)[:, keep]
    coef = np.zeros(Z.shape[1])
    if lam == 0:
        model = LogisticRegression(C=np.inf, max_iter=10_000).fit(design, labels)
        coef[keep] = model.coef_[0]
        return LabelFit(layer, coef, float(model.intercept_[0]), 0.0, True)
    result = logistic_lasso(design, labels, lam, dtype=torch.float64, device=device)
    coef[keep] = result.coef.cpu().numpy()
    return LabelFit(layer, coef, float(result.intercept), lam, bool(result.converged))


def _scores(fit: LabelFit, Z: Features, y: np.ndarray) -> dict[str, float]:
    p = np.clip(fit.predict_proba(Z), 1e-12, 1 - 1e-12)
    loss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return {"loss": float(loss), "accuracy": float(np.mean((p > 0.5) == y))}


def lam_ablation(
    Z_train: Features,
    y_train: Sequence | np.ndarray,
    Z_test: Features,
    y_test: Sequence | np.ndarray,
    lams: Sequence[float],
    *,
    layer: int,
    min_prompts: int = 1,
    validation_fraction: float = 0.2,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> tuple[pd.DataFrame, float]:
    """The paper's lam ablation (App. C.2) and a choice of lam that never sees the test set.

    Per ``lam``: train loss (mean cross-entropy), l1 norm of the coefficients, nonzero
    coefficients, train accuracy, accuracy on a seeded ``validation_fraction`` of the training
    prompts when fit on the rest, test loss and accuracy. The chosen lam has the best validation
    accuracy (ties: the larger lam, i.e. the sparser circuit). ``min_prompts`` and ``device`` as
    in :func:`fit_label`. Returns the table and the choice.
    """
    y_tr, y_te = binary_labels(y_train), binary_labels(y_test)
    Z_train, Z_test = sp.csr_matrix(Z_train), sp.csr_matrix(Z_test)
    order = np.random.default_rng(seed).permutation(len(y_tr))
    n_val = max(1, round(validation_fraction * len(y_tr)))
    val, fit_rows = order[:n_val], order[n_val:]
    rows = []
    for lam in lams:
        fit = fit_label(Z_train, y_tr, lam, layer=layer, min_prompts=min_prompts, device=device)
        held = fit_label(Z_train[fit_rows], y_tr[fit_rows], lam, layer=layer,
                         min_prompts=min_prompts, device=device)  # fmt: skip
        train, test = _scores(fit, Z_train, y_tr), _scores(fit, Z_test, y_te)
        rows.append(
            {
                "lam": lam,
                "train_loss": train["loss"],
                "l1_norm": float(np.abs(fit.coef).sum()),
                "nonzero": int(np.count_nonzero(fit.coef)),
                "train_accuracy": train["accuracy"],
                "validation_accuracy": _scores(held, Z_train[val], y_tr[val])["accuracy"],
                "test_loss": test["loss"],
                "test_accuracy": test["accuracy"],
            }
        )
    table = pd.DataFrame(rows)
    best = table.sort_values(["validation_accuracy", "lam"], ascending=False).iloc[0]
    return table, float(best["lam"])
