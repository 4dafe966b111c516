"""Hand-written English minimal pairs for acceptability, four phenomena of 12 pairs each.

Each pair is an acceptable sentence (``good``) and an unacceptable one (``bad``) that differ in
exactly one word: one word substituted, or (``dropped_argument``) one word deleted. The pairs
live in ``minimal_pairs.json`` beside this module and are read as package data.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources import files

import pandas as pd

PHENOMENA: tuple[str, ...] = (
    "reflexive_agreement",
    "subject_verb_agreement",
    "dropped_argument",
    "determiner_noun_number",
)
_DATA_FILE = "minimal_pairs.json"


def _words(sentence: str) -> list[str]:
    """The lower-cased words of ``sentence``, split on whitespace, trailing ``.,!?`` stripped."""
    return [word.rstrip(".,!?") for word in sentence.lower().split()]


def changed_words(good: str, bad: str) -> tuple[str, str]:
    """The word of ``good`` that differs and the word of ``bad`` that replaces it ("" when it is
    deleted); ValueError quoting both sentences unless they differ in exactly one word."""
    g, b = _words(good), _words(bad)
    if len(g) == len(b):
        diffs = [(x, y) for x, y in zip(g, b, strict=True) if x != y]
        if len(diffs) == 1:
            return diffs[0]
    elif len(g) == len(b) + 1:
        for i, word in enumerate(g):
            if g[:i] + g[i + 1 :] == b:
                return word, ""
    raise ValueError(f"not a minimal pair (one word substituted or deleted): {good!r} / {bad!r}")


@dataclass(frozen=True)
class MinimalPair:
    """An acceptable sentence and an unacceptable one of one phenomenon."""

    phenomenon: str
    good: str
    bad: str

    @property
    def changed(self) -> tuple[str, str]:
        """(the differing word of ``good``, that of ``bad`` or "" for a deletion), lower case."""
        return changed_words(self.good, self.bad)


def _check_phenomena(names: Iterable[str]) -> None:
    """Raise ValueError naming the first of ``names`` not in :data:`PHENOMENA`."""
    for name in names:
        if name not in PHENOMENA:
            raise ValueError(f"unknown phenomenon {name!r}; valid ones: {', '.join(PHENOMENA)}")


def check_pair(pair: MinimalPair) -> MinimalPair:
    """Return ``pair`` once its phenomenon is known and its sentences differ in one word;
    ValueError otherwise."""
    _check_phenomena([pair.phenomenon])
    changed_words(pair.good, pair.bad)
    return pair


def load_minimal_pairs(
    phenomena: Sequence[str] | None = None, *, per_phenomenon: int | None = None
) -> list[MinimalPair]:
    """The checked pairs of the package's data file, in file order, optionally only those of
    ``phenomena`` (ValueError on an unknown name) and only the first ``per_phenomenon`` of each
    (None: all 12)."""
    if phenomena is not None:
        _check_phenomena(phenomena)
    if per_phenomenon is not None and per_phenomenon < 1:
        raise ValueError(f"per_phenomenon must be at least 1, got {per_phenomenon}")
    rows = json.loads(files("circuitlasso.data").joinpath(_DATA_FILE).read_text("utf-8"))
    pairs = [check_pair(MinimalPair(r["phenomenon"], r["good"], r["bad"])) for r in rows]
    taken: Counter[str] = Counter()
    kept = []
    for pair in pairs:
        if phenomena is not None and pair.phenomenon not in phenomena:
            continue
        if per_phenomenon is not None and taken[pair.phenomenon] == per_phenomenon:
            continue
        taken[pair.phenomenon] += 1
        kept.append(pair)
    return kept


def minimal_pair_frame(pairs: Iterable[MinimalPair]) -> pd.DataFrame:
    """A DataFrame of ``pairs``, one row each: phenomenon, good, bad, good_word, bad_word."""
    rows = [(p.phenomenon, p.good, p.bad, *p.changed) for p in pairs]
    return pd.DataFrame(rows, columns=["phenomenon", "good", "bad", "good_word", "bad_word"])
