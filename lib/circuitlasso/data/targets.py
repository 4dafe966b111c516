"""Regression targets from labels: the ``y`` of the label fit (paper Eq. 6 and its footnote)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def binary_labels(labels: Any, *, positive: Any = None) -> np.ndarray:
    """The 0/1 target ``y`` of the classification regression (Eq. 6), float64, shape ``(M,)``.

    ``labels`` is 1-D (list, array, tensor, Series) with exactly two distinct values, numbers or
    strings, not mixed. ``positive`` is the value mapped to 1; by default the larger of the two
    (``1`` of ``{0, 1}``, ``True``, the later string in sort order). Anything else (one or three
    or more values, NaN or None, mixed types) raises ``ValueError`` naming the problem.
    """
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
    elif kind not in "biu":
        raise ValueError(f"labels have dtype {array.dtype}; use numbers, booleans or strings")
    values = np.unique(array)
    if len(values) != 2:
        shown = values[:5].tolist()
        more = " ..." if len(values) > 5 else ""
        raise ValueError(f"labels must take exactly two values, got {len(values)}: {shown}{more}")
    if positive is None:
        positive = values[1]
    elif positive not in values.tolist():
        raise ValueError(f"positive={positive!r} is not one of the label values {values.tolist()}")
    return (array == positive).astype(np.float64)
