"""Regression targets from labels: the ``y`` of the label fit (paper Eq. 5 and its footnote).

Three kinds of target, each with its loss in the label fit:

- ``"binary"``: two classes, cross-entropy (logistic regression); ``values`` are 0/1, 1 for
  ``classes[1]``.
- ``"multiclass"``: ``K >= 2`` classes, softmax cross-entropy; ``values`` are the class index
  ``0..K-1`` into ``classes``.
- ``"regression"``: real numbers, squared error; ``values`` are the numbers.

:func:`make_target` reads the kind from the labels unless it is given, as scikit-learn's
``type_of_target`` does: booleans, strings and integers (also floats with integer values) with two
distinct values are binary, with more multiclass; floats with a fractional part are a regression
target. Give ``kind="regression"`` for integer-valued real targets (counts, ratings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, get_args

import numpy as np
import torch

TargetKind: TypeAlias = Literal["binary", "multiclass", "regression"]
KINDS: tuple[str, ...] = get_args(TargetKind)


@dataclass(frozen=True)
class Target:
    """A checked target: ``kind``, ``values: (M,)`` float64 (0/1, class index or number, see the
    module) and ``classes: (K,)`` the label of each class index, in sort order (empty for
    ``"regression"``)."""

    kind: TargetKind
    values: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def encode(self, labels: Any) -> np.ndarray:
        """``(M,)`` float64 values of other ``labels`` (a test split) under this target's classes;
        ``ValueError`` for a label it does not know."""
        array = _checked_array(labels)
        if self.kind == "regression":
            return _numbers(array).astype(np.float64)
        known = np.isin(array, self.classes)
        if not known.all():
            unknown = np.unique(array[~known])[:5].tolist()
            raise ValueError(f"labels {unknown} are not among the classes {self.classes.tolist()}")
        if self.kind == "binary":
            return (array == self.classes[1]).astype(np.float64)
        return np.searchsorted(self.classes, array).astype(np.float64)

    def rows(self, index: np.ndarray) -> Target:
        """The target of the rows ``index``, with the same classes; ``ValueError`` if a class has
        no row among them."""
        values = self.values[index]
        if self.kind != "regression":
            codes = range(len(self.classes)) if self.kind == "multiclass" else (0, 1)
            missing = [self.classes[c].item() for c in codes if not (values == c).any()]
            if missing:
                raise ValueError(f"classes {missing} have no row among the {len(values)} chosen")
        elif np.ptp(values) == 0:
            raise ValueError(f"the {len(values)} chosen rows all hold the value {values[0]}")
        return Target(self.kind, values, self.classes)


def make_target(labels: Any, *, kind: str | None = None, positive: Any = None) -> Target:
    """The :class:`Target` of ``labels``: 1-D (list, array, tensor, Series) of numbers, booleans
    or strings, not mixed, with at least two distinct values.

    ``kind``: ``"binary"``, ``"multiclass"`` or ``"regression"``; None reads it from the labels
    (see the module). ``positive`` (binary only): the label mapped to 1; by default the larger of
    the two (``1`` of ``{0, 1}``, ``True``, the later string in sort order). A ``Target`` passes
    through (its kind must match ``kind``). NaN, None, inf, mixed types, a single value, or labels
    that do not fit ``kind`` raise ``ValueError`` naming the problem.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)} or None, got {kind!r}")
    if isinstance(labels, Target):
        if kind is not None and kind != labels.kind:
            raise ValueError(f"the target is {labels.kind!r}, not {kind!r}")
        return labels
    array = _checked_array(labels)
    values = np.unique(array)
    if kind is None:
        kind = _detect(array, values)
    if positive is not None and kind != "binary":
        raise ValueError(f"positive= is for binary targets, not {kind!r} ones")
    shown = f"{values[:5].tolist()}{' ...' if len(values) > 5 else ''}"
    if kind == "binary" and len(values) != 2:
        raise ValueError(f"labels must take exactly two values, got {len(values)}: {shown}")
    if len(values) < 2:
        single = "" if kind == "regression" else " (one class)"
        raise ValueError(
            f"labels must take at least two values, got {len(values)}: {shown}{single}"
        )
    if kind == "regression":
        numbers = _numbers(array)
        return Target("regression", numbers.astype(np.float64), np.zeros(0))
    if kind == "binary":
        if positive is None:
            positive = values[1]
        elif positive not in values.tolist():
            raise ValueError(
                f"positive={positive!r} is not one of the label values {values.tolist()}"
            )
        classes = values if positive == values[1] else values[::-1].copy()
        return Target("binary", (array == positive).astype(np.float64), classes)
    return Target("multiclass", np.searchsorted(values, array).astype(np.float64), values)


def binary_labels(labels: Any, *, positive: Any = None) -> np.ndarray:
    """The 0/1 ``values`` ``(M,)`` of ``make_target(labels, kind="binary", positive=positive)``."""
    return make_target(labels, kind="binary", positive=positive).values


def _checked_array(labels: Any) -> np.ndarray:
    """``labels`` as a 1-D numpy array without NaN, None or mixed types."""
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {array.shape}")
    if array.size == 0:
        raise ValueError("labels is empty")
    kind = array.dtype.kind
    if kind in "fc":
        nan = np.flatnonzero(np.isnan(array))
        if len(nan):
            raise ValueError(f"labels hold NaN at positions {nan[:5].tolist()}")
    elif kind in "OU":
        items = array.tolist() if kind == "O" or isinstance(labels, np.ndarray) else list(labels)
        missing = [i for i, v in enumerate(items) if v is None or (isinstance(v, float) and v != v)]
        if missing:
            raise ValueError(f"labels hold None or NaN at positions {missing[:5]}")
        types = sorted({type(v).__name__ for v in items})
        if len(types) > 1 and not set(types) <= {"bool", "int", "float"}:
            raise ValueError(f"labels mix types {types}; use one type (numbers or strings)")
        if kind == "O" and set(types) <= {"bool", "int", "float"}:
            array = np.asarray(items, dtype=np.float64)
    elif kind not in "biu":
        raise ValueError(f"labels have dtype {array.dtype}; use numbers, booleans or strings")
    return array


def _numbers(array: np.ndarray) -> np.ndarray:
    """The finite real numbers of a regression target."""
    if array.dtype.kind not in "iuf":
        raise ValueError(f"regression labels must be real numbers, got dtype {array.dtype}")
    infinite = np.flatnonzero(~np.isfinite(array))
    if len(infinite):
        raise ValueError(f"labels hold inf at positions {infinite[:5].tolist()}")
    return array


def _detect(array: np.ndarray, values: np.ndarray) -> TargetKind:
    """binary / multiclass for discrete labels, regression for floats with a fractional part."""
    if array.dtype.kind == "f" and not np.all(np.isfinite(values) & (values == np.round(values))):
        return "regression"
    return "binary" if len(values) == 2 else "multiclass"
