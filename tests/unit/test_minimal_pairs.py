"""Tests for circuitlasso.data.minimal_pairs: the hand-written acceptability minimal pairs."""

from __future__ import annotations

import urllib.error
from collections import Counter
from pathlib import Path

import pytest

from circuitlasso import cache
from circuitlasso.data import load_dataset
from circuitlasso.data.minimal_pairs import (
    PHENOMENA,
    MinimalPair,
    changed_words,
    check_pair,
    load_minimal_pairs,
    minimal_pair_frame,
)


def _normalize(sentence: str) -> str:
    return " ".join(sentence.lower().split())


def test_twelve_pairs_of_each_phenomenon() -> None:
    counts = Counter(p.phenomenon for p in load_minimal_pairs())
    assert tuple(counts) == PHENOMENA
    assert min(counts.values()) >= 12


def test_every_pair_differs_in_one_word() -> None:
    for pair in load_minimal_pairs():
        good, bad = pair.changed
        assert good and good != bad
        assert pair.good.endswith(".") and pair.bad.endswith(".")
        words = _normalize(pair.good).rstrip(".").split()
        assert good in words
        if pair.phenomenon == "dropped_argument":
            assert bad == ""
        else:
            assert bad in _normalize(pair.bad).rstrip(".").split()


def test_changed_names_the_word() -> None:
    reflexive = MinimalPair("reflexive_agreement", "John hurt himself.", "John hurt herself.")
    assert reflexive.changed == ("himself", "herself")
    deletion = MinimalPair("dropped_argument", "She devoured it.", "She devoured.")
    assert deletion.changed == ("it", "")
    assert changed_words("Mary put it on the shelf.", "Mary put on the shelf.") == ("it", "")
    assert changed_words("These dogs bark loudly.", "This dogs bark loudly.") == ("these", "this")


@pytest.mark.parametrize(
    ("good", "bad"),
    [
        ("The keys are on the table.", "The key is on the table."),  # two words changed
        ("The boy hit him.", "The boy hit him."),  # identical
        ("She devoured the cake.", "She devoured."),  # two words deleted
        ("She devoured.", "She devoured it."),  # a word added
    ],
)
def test_malformed_pair_raises(good: str, bad: str) -> None:
    with pytest.raises(ValueError, match="not a minimal pair") as err:
        check_pair(MinimalPair("dropped_argument", good, bad))
    assert repr(good) in str(err.value) and repr(bad) in str(err.value)


def test_unknown_phenomenon_raises() -> None:
    with pytest.raises(ValueError, match="'negation'.*reflexive_agreement"):
        check_pair(MinimalPair("negation", "He left.", "He leave."))
    with pytest.raises(ValueError, match="'negation'"):
        load_minimal_pairs(["reflexive_agreement", "negation"])


def test_filter_and_frame() -> None:
    pairs = load_minimal_pairs(["dropped_argument"])
    assert pairs and {p.phenomenon for p in pairs} == {"dropped_argument"}
    frame = minimal_pair_frame(load_minimal_pairs())
    assert list(frame.columns) == ["phenomenon", "good", "bad", "good_word", "bad_word"]
    assert len(frame) == len(load_minimal_pairs())
    assert (frame.loc[frame["phenomenon"] == "dropped_argument", "bad_word"] == "").all()


def test_the_first_pairs_of_each_phenomenon() -> None:
    every = load_minimal_pairs()
    first = load_minimal_pairs(per_phenomenon=3)
    assert len(first) == 3 * len(PHENOMENA)
    for name in PHENOMENA:  # the first three of the file's pairs of each, in file order
        assert [p for p in first if p.phenomenon == name] == [
            p for p in every if p.phenomenon == name
        ][:3]
    assert (
        load_minimal_pairs(["dropped_argument"], per_phenomenon=2)
        == [p for p in every if p.phenomenon == "dropped_argument"][:2]
    )
    assert load_minimal_pairs(per_phenomenon=100) == every
    with pytest.raises(ValueError, match="per_phenomenon must be at least 1, got 0"):
        load_minimal_pairs(per_phenomenon=0)


def test_no_sentence_from_cola(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> None:
    mirror = shared_data  # CoLA's mirror, as the other CoLA tests

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(cache.MIRROR_ENV, str(mirror))
    monkeypatch.setattr(cache.urllib.request, "urlopen", offline)
    cola = {
        _normalize(s)
        for split in ("train", "in_domain_dev")
        for s in load_dataset("cola", split=split)["sentence"]
    }
    ours = {_normalize(s) for p in load_minimal_pairs() for s in (p.good, p.bad)}
    assert len(ours) == 2 * len(load_minimal_pairs())  # no sentence used twice
    assert not ours & cola
