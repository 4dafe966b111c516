"""Targets from labels: kind detection as scikit-learn's ``type_of_target`` reads it, the values
each kind holds, and clear errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.utils.multiclass import type_of_target

from circuitlasso.data.targets import make_target

SKLEARN_NAME = {"binary": "binary", "multiclass": "multiclass", "regression": "continuous"}


@pytest.mark.parametrize(
    "labels",
    [
        [0, 1, 1, 0],
        np.array([True, False, True]),
        ["bad", "good", "good"],
        np.array([2.0, 5.0, 2.0]),
        [0, 1, 2, 2],
        ["a", "b", "c"],
        np.array([1.0, 2.0, 7.0]),
        [0.5, 1.25, 3.0],
        pd.Series([0.1, 0.2, 0.2]),
        torch.tensor([3, 1, 2]),
    ],
)
def test_kind_is_read_as_sklearn_reads_it(labels) -> None:
    expected = type_of_target(labels.numpy() if isinstance(labels, torch.Tensor) else labels)
    assert SKLEARN_NAME[make_target(labels).kind] == expected


def test_values_and_classes_of_each_kind() -> None:
    binary = make_target(["yes", "no", "yes"])
    np.testing.assert_array_equal(binary.values, [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(binary.classes, ["no", "yes"])
    flipped = make_target(["yes", "no", "yes"], positive="no")
    np.testing.assert_array_equal(flipped.values, [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(flipped.classes, ["yes", "no"])

    multi = make_target(["dog", "cat", "emu", "cat"])
    assert multi.kind == "multiclass" and multi.values.dtype == np.float64
    np.testing.assert_array_equal(multi.classes, ["cat", "dog", "emu"])
    np.testing.assert_array_equal(multi.classes[multi.values.astype(int)], multi_labels := [
        "dog", "cat", "emu", "cat"])  # fmt: skip
    np.testing.assert_array_equal(multi.encode(["emu", "dog"]), [2.0, 1.0])
    assert len(multi) == len(multi_labels)

    two_as_multi = make_target([4, 9, 9], kind="multiclass")
    np.testing.assert_array_equal(two_as_multi.values, [0.0, 1.0, 1.0])

    counts = make_target([0, 3, 5, 3], kind="regression")
    assert counts.kind == "regression" and len(counts.classes) == 0
    np.testing.assert_array_equal(counts.values, [0.0, 3.0, 5.0, 3.0])
    np.testing.assert_array_equal(counts.encode([1, 2]), [1.0, 2.0])
    assert make_target(counts) is counts


def test_rows_keep_the_classes_and_need_every_class() -> None:
    target = make_target(["a", "b", "c", "a", "b", "c"])
    part = target.rows(np.array([5, 0, 4]))
    np.testing.assert_array_equal(part.values, [2.0, 0.0, 1.0])
    np.testing.assert_array_equal(part.classes, ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"classes \['c'\] have no row among the 2 chosen"):
        target.rows(np.array([0, 1]))
    with pytest.raises(ValueError, match="chosen rows all hold the value 1.5"):
        make_target([1.5, 1.5, 2.5]).rows(np.array([0, 1]))


@pytest.mark.parametrize(
    ("labels", "options", "match"),
    [
        ([1, 1, 1], {}, r"at least two values, got 1: \[1\]"),
        ([1.5, 1.5], {"kind": "regression"}, "at least two values, got 1"),
        ([0, 1, 2], {"kind": "binary"}, r"exactly two values, got 3: \[0, 1, 2\]"),
        ([0.0, 1.0, float("nan")], {}, r"NaN at positions \[2\]"),
        ([0.5, float("inf"), 1.0], {}, r"inf at positions \[1\]"),
        (["a", None, "b"], {}, r"None or NaN at positions \[1\]"),
        ([0, "a"], {}, "mix types"),
        (["a", "b"], {"kind": "regression"}, "regression labels must be real numbers"),
        ([0, 1, 2], {"positive": 2}, "positive= is for binary targets"),
        ([0, 1], {"kind": "ordinal"}, "kind must be one of"),
        (np.zeros((2, 2)), {}, "1-D"),
        ([], {}, "empty"),
    ],
)
def test_bad_labels_raise_clear_errors(labels, options, match) -> None:
    with pytest.raises(ValueError, match=match):
        make_target(labels, **options)


def test_encode_rejects_labels_the_target_does_not_know() -> None:
    target = make_target([0, 1, 1])
    with pytest.raises(ValueError, match=r"labels \[2\] are not among the classes \[0, 1\]"):
        target.encode([0, 2])
    with pytest.raises(ValueError, match="the target is 'binary', not 'regression'"):
        make_target(target, kind="regression")
