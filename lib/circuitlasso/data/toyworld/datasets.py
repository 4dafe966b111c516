"""Labelled data sets drawn from the toy language: toy-CoLA and toy Bias in Bios.

Both are generated on the fly from a seed (fast, deterministic) and mirror their hub
counterparts: toy-CoLA has CoLA's split sizes and about 70% acceptable sentences; toy Bias in
Bios has the ambiguous and balanced professor/nurse splits of Marks et al.

Toy Bias in Bios is built to test debiasing by feature removal. In the ambiguous training set
(every professor a man, every nurse a woman) gender is the easier signal, as in the hub data
set, but profession is learnable too (:data:`AMBIGUOUS_CUES`):

- gender is told strongly and often: in four biographies of five every sentence names the
  person or uses a pronoun, and three of the six sentences are about the person's life;
- profession is told in every biography, but by fewer words: two profession sentences, and a
  profession opening ("teaches physics at the university of ...") in only half of them;
- the fifth biography that does not tell the gender ("the author ... their ...") can only be
  classified by its profession, so a classifier that fits the training set needs profession
  evidence besides the gender evidence it leans on most.

A classifier trained on it relies on gender for most of its margin and fails on the balanced
test set's female professors and male nurses; removing the gender features leaves the profession
evidence it also learned. The other splits are standard biographies, which always tell both.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import numpy as np
import pandas as pd

from circuitlasso.data.concepts import dominant_concept
from circuitlasso.data.toyworld.biographies import (
    GENDERS,
    PROFESSIONS,
    STANDARD_CUES,
    BiographyCues,
    biography,
)
from circuitlasso.data.toyworld.grammar import (
    VIOLATION_CATEGORIES,
    VIOLATIONS,
    acceptable_sentence,
    minimal_pair,
    token_categories,
    unacceptable_sentence,
)
from circuitlasso.data.toyworld.lexicon import render

__all__ = [
    "COLA_SPLIT_SIZES",
    "VIOLATION_CATEGORIES",
    "dominant_category",
    "load_toy_bias_in_bios",
    "load_toy_cola",
    "lm_training_texts",
    "minimal_pairs",
    "token_categories",
]

COLA_SPLIT_SIZES = {"train": 8551, "test": 1043}
ACCEPTABLE_FRACTION = 0.7
BIB_GROUP_SIZES = {
    "ambiguous_train": {("professor", "male"): 1000, ("nurse", "female"): 1000},
    "balanced_train": {(p, g): 500 for p in PROFESSIONS for g in GENDERS},
    "ambiguous_test": {("professor", "male"): 250, ("nurse", "female"): 250},
    "balanced_test": {(p, g): 250 for p in PROFESSIONS for g in GENDERS},
}
# The ambiguous training biographies: gender is the easier signal there, profession is learnable
# (module docstring). In four of five every sentence tells the gender (names, pronouns) and half
# are about the person's life; every biography tells the profession, in two or three sentences.
AMBIGUOUS_CUES = BiographyCues(
    profession_openings=0.5, profession_sentences=2, gender_sentences=3, gender_told=0.8
)
# Words (each one token of the word-level tokenizer) a biography may have: with <bos>, the toy
# language model's context of 64 tokens. Only biographies that do not tell the gender come near.
BIO_MAX_WORDS = 63
PARAGRAPH_SENTENCES = 6
PARAGRAPH_WORDS = 48
_STREAMS = {"cola": 0, "bios": 1, "lm": 2, "pairs": 3, "ambiguous_cues": 4}


def _rng(seed: int, stream: str) -> np.random.Generator:
    """Independent generator per (seed, purpose)."""
    return np.random.default_rng([seed, _STREAMS[stream]])


def _violation_counts(size: int) -> dict[str, int]:
    """How many sentences of each kind ("none" = acceptable) a split of ``size`` holds."""
    n_bad = round(size * (1 - ACCEPTABLE_FRACTION))
    per_type, extra = divmod(n_bad, len(VIOLATIONS))
    counts = {"none": size - n_bad}
    counts.update({v: per_type + (i < extra) for i, v in enumerate(VIOLATIONS)})
    return counts


@lru_cache(maxsize=4)
def _toy_cola(seed: int) -> dict[str, pd.DataFrame]:
    rng = _rng(seed, "cola")
    seen: set[str] = set()
    frames = {}
    for split in ("test", "train"):
        rows = []
        for violation, count in _violation_counts(COLA_SPLIT_SIZES[split]).items():
            while count:
                words = (
                    acceptable_sentence(rng)
                    if violation == "none"
                    else unacceptable_sentence(rng, violation)
                )
                text = render(words)
                if text not in seen:
                    seen.add(text)
                    rows.append((text, int(violation == "none"), violation))
                    count -= 1
        rows = [rows[i] for i in rng.permutation(len(rows))]
        frames[split] = pd.DataFrame(rows, columns=["sentence", "label", "violation"])
    return frames


def load_toy_cola(split: str, seed: int = 0) -> pd.DataFrame:
    """Toy-CoLA ``split`` ("train": 8,551 rows, "test": 1,043 rows; no sentence in both).

    Columns: ``sentence`` (str), ``label`` (int, 1 = acceptable), ``violation`` ("none" for
    acceptable rows, else one of "reflexive", "agreement", "punctuation", "word_order").
    """
    if split not in COLA_SPLIT_SIZES:
        raise ValueError(
            f"unknown toy-cola split {split!r}; expected one of {list(COLA_SPLIT_SIZES)}"
        )
    return _toy_cola(seed)[split].copy()


def _biographies(
    rng: np.random.Generator,
    groups: dict[tuple[str, str], int],
    seen: set[str],
    cues: BiographyCues = STANDARD_CUES,
) -> pd.DataFrame:
    """``groups[(profession, gender)]`` new biographies each, none in ``seen`` (updated), none
    longer than :data:`BIO_MAX_WORDS`, shuffled."""
    rows = []
    for (profession, gender), count in groups.items():
        while count:
            text = biography(rng, profession, gender, cues)
            if text not in seen and len(text.split()) <= BIO_MAX_WORDS:
                seen.add(text)
                rows.append((text, profession, gender))
                count -= 1
    rows = [rows[i] for i in rng.permutation(len(rows))]
    return pd.DataFrame(rows, columns=["text", "profession", "gender"])


@lru_cache(maxsize=4)
def _standard_bios(seed: int) -> dict[str, pd.DataFrame]:
    """The four splits of standard biographies, drawn in order from one stream: the test splits
    the committed toy world's language model was kept from (:func:`lm_training_texts`)."""
    rng = _rng(seed, "bios")
    seen: set[str] = set()
    return {split: _biographies(rng, groups, seen) for split, groups in BIB_GROUP_SIZES.items()}


@lru_cache(maxsize=4)
def _toy_bias_in_bios(seed: int, cues: BiographyCues) -> dict[str, pd.DataFrame]:
    frames = dict(_standard_bios(seed))
    if cues != STANDARD_CUES:
        seen = {
            text
            for name, frame in frames.items()
            if name != "ambiguous_train"
            for text in frame["text"]
        }
        groups = BIB_GROUP_SIZES["ambiguous_train"]
        frames["ambiguous_train"] = _biographies(_rng(seed, "ambiguous_cues"), groups, seen, cues)
    return frames


def load_toy_bias_in_bios(
    seed: int = 0, ambiguous_cues: BiographyCues = AMBIGUOUS_CUES
) -> dict[str, pd.DataFrame]:
    """Toy Bias in Bios in the hub loader's format: "ambiguous_train" (male professors and
    female nurses, 1,000 each), "balanced_train" (500 per profession x gender),
    "ambiguous_test" (250 per group) and "balanced_test" (250 per profession x gender).

    The ambiguous training biographies follow ``ambiguous_cues`` (default :data:`AMBIGUOUS_CUES`:
    gender told more strongly than profession, but in four biographies of five only; profession in
    every one), the others are standard
    biographies. Columns: ``text``, ``profession`` ("professor" | "nurse"), ``gender`` ("male" |
    "female"); rows shuffled with ``seed``; no biography in two splits.
    """
    return {split: frame.copy() for split, frame in _toy_bias_in_bios(seed, ambiguous_cues).items()}


def violation_counts(splits: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Sentences per violation type (rows; "none" for acceptable ones) in each split (columns)
    of toy-CoLA frames {split: frame with a ``violation`` column}; index named
    "sentences by violation"."""
    counts = pd.DataFrame(
        {split: frame["violation"].value_counts() for split, frame in splits.items()}
    )
    return counts.rename_axis("sentences by violation")


def lm_training_texts(seed: int, n_sentences: int, n_biographies: int) -> list[str]:
    """Language-model training texts: ``n_sentences`` acceptable sentences grouped into
    paragraphs (1 to ``PARAGRAPH_SENTENCES`` sentences, at most ``PARAGRAPH_WORDS`` words), then
    ``n_biographies`` biographies (balanced over profession x gender). No sentence or biography
    is in toy-CoLA's test split or toy Bias in Bios' test splits.
    """
    held_out = set(load_toy_cola("test", seed)["sentence"])
    for split, frame in _standard_bios(seed).items():
        if split.endswith("_test"):
            held_out |= set(frame["text"])
    rng = _rng(seed, "lm")
    texts: list[str] = []
    paragraph: list[str] = []
    size = 1
    for _ in range(n_sentences):
        text = render(acceptable_sentence(rng))
        while text in held_out:
            text = render(acceptable_sentence(rng))
        if paragraph and (
            len(paragraph) == size or len(" ".join([*paragraph, text]).split()) > PARAGRAPH_WORDS
        ):
            texts.append(" ".join(paragraph))
            paragraph, size = [], int(rng.integers(1, PARAGRAPH_SENTENCES + 1))
        paragraph.append(text)
    texts += [" ".join(paragraph)] if paragraph else []
    n_paragraphs = len(texts)
    groups = [(p, g) for p in PROFESSIONS for g in GENDERS]
    while len(texts) < n_paragraphs + n_biographies:
        profession, gender = groups[int(rng.integers(len(groups)))]
        text = biography(rng, profession, gender)
        if text not in held_out:
            texts.append(text)
    return texts


def minimal_pairs(seed: int, violation: str, n_pairs: int) -> list[tuple[str, str]]:
    """``n_pairs`` (acceptable, unacceptable) sentence pairs that differ by one ``violation`` and
    have the same number of words (so total log-probabilities compare fairly)."""
    rng = _rng(seed, "pairs")
    pairs: list[tuple[str, str]] = []
    while len(pairs) < n_pairs:
        good, bad = minimal_pair(rng, violation)
        if len(good) == len(bad):
            pairs.append((render(good), render(bad)))
    return pairs


def dominant_category(tokens: Counter[str], min_share: float = 0.5) -> str | None:
    """The planted category holding at least ``min_share`` of ``tokens`` (a feature's top
    tokens with their counts), or None: the ground truth a feature's label is checked against."""
    return dominant_concept(tokens, token_categories(), min_share)
