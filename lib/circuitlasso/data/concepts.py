"""Word concepts a feature's top tokens are matched against.

A feature *is* a concept when at least half of its top tokens (counted, see
:func:`~circuitlasso.circuits.interpret.top_tokens`) are words of that concept
(:func:`dominant_concept`). :data:`ENGLISH_CONCEPTS` holds the concepts of the paper's CoLA
case study (Sec. 4.2.1) in plain English; the toy world's planted categories are matched by
the same rule (:func:`~circuitlasso.data.toyworld.datasets.dominant_category`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

ENGLISH_CONCEPTS: dict[str, frozenset[str]] = {
    "reflexives": frozenset(
        "myself yourself himself herself itself oneself ourselves yourselves themselves".split()
    ),
    "hunger_thirst": frozenset("hungry hunger thirsty thirst starving famished".split()),
    "tired_weary": frozenset("tired weary exhausted sleepy fatigued".split()),
    "final_punctuation": frozenset(". ? !".split()),
    "agreement_verbs": frozenset("is are was were am has have does do".split()),
}


def dominant_concept(
    tokens: Mapping[str, int], concepts: Mapping[str, Collection[str]], min_share: float = 0.5
) -> str | None:
    """The concept of ``concepts`` (name -> lowercase words) holding at least ``min_share`` of
    ``tokens`` (a feature's top tokens with their counts), or None."""
    total = sum(tokens.values())
    if total == 0 or not concepts:
        return None
    shares = {
        name: sum(n for word, n in tokens.items() if word.lower() in members) / total
        for name, members in concepts.items()
    }
    best = max(shares, key=lambda name: shares[name])
    return best if shares[best] >= min_share else None
