"""Which SAE features are about gender: an automatic rule, and the toy world's ground truth.

The rule is a counterfactual swap, the paper's single-prompt procedure run over many prompts.
Every gendered English word of :data:`GENDER_SWAPS` in the ambiguous training texts is replaced
by its counterpart ("he" <-> "she", "his" -> "her", "james" <-> "mary", ...), which turns male
professors into female professors and female nurses into male nurses while the profession words
stay. A feature's *swap effect* is the share of its token-averaged activation that moves,
``sum_i |z'_i - z_i| / sum_i (z_i + z'_i)`` over the prompts (``z`` before, ``z'`` after the
swap; SAE features are non-negative, so the effect lies in [0, 1]): 1 for a feature that follows
the gendered words completely, 0 for one that ignores them. A candidate is gendered when its
effect is at least a threshold. The rule needs no labels and nothing model-specific, only the
word list (pronouns, gendered nouns and titles, and the 50 most common US first names of each
gender), so it runs on hub models as on the toy world. A name missing from the list stays, so a
feature of names or of a gender read from names moves only partly.

Ground truth on the toy world, where every biography's gender and every planted word category
are known, from the paper's two labelling procedures' raw material:

- top tokens: a feature is gendered when the dominant planted category of its top tokens
  (:func:`circuitlasso.circuits.interpret.top_tokens`,
  :func:`circuitlasso.data.toyworld.datasets.dominant_category`: at least half of them) is one of
  the gendered names, pronouns or nouns (:data:`GENDERED_CATEGORIES`);
- top prompts: a feature is gendered when its most active biographies of the balanced set
  (where gender and profession are independent) are nearly all of one gender
  (:func:`top_prompt_share`). This also counts features that fire on a neutral token, such as
  the full stop, but only in biographies of one gender.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.collect import collect_sae_features
from circuitlasso.data.toyworld.datasets import dominant_category
from circuitlasso.data.toyworld.grammar import token_categories

Node = tuple[int, int]  # (layer, SAE feature)

# Pairs swapped in both directions, then words mapped one way ("her" is "his" or "him").
_PAIRS = (
    ("he", "she"), ("himself", "herself"), ("man", "woman"), ("men", "women"), ("boy", "girl"),
    ("boys", "girls"), ("father", "mother"), ("son", "daughter"), ("brother", "sister"),
    ("husband", "wife"), ("king", "queen"), ("uncle", "aunt"), ("mr", "ms"), ("sir", "madam"),
)  # fmt: skip
# The 50 most common male and female first names given in the US over the last century (Social
# Security Administration), paired by rank.
MALE_FIRST_NAMES = (
    "james", "robert", "john", "michael", "david", "william", "richard", "joseph", "thomas",
    "charles", "christopher", "daniel", "matthew", "anthony", "mark", "donald", "steven", "paul",
    "andrew", "joshua", "kenneth", "kevin", "brian", "george", "timothy", "ronald", "edward",
    "jason", "jeffrey", "ryan", "jacob", "gary", "nicholas", "eric", "jonathan", "stephen",
    "larry", "justin", "scott", "brandon", "benjamin", "samuel", "gregory", "alexander", "frank",
    "patrick", "raymond", "jack", "dennis", "jerry",
)  # fmt: skip
FEMALE_FIRST_NAMES = (
    "mary", "patricia", "jennifer", "linda", "elizabeth", "barbara", "susan", "jessica", "sarah",
    "karen", "lisa", "nancy", "betty", "margaret", "sandra", "ashley", "kimberly", "emily",
    "donna", "michelle", "carol", "amanda", "dorothy", "melissa", "deborah", "stephanie",
    "rebecca", "sharon", "laura", "cynthia", "kathleen", "amy", "angela", "shirley", "anna",
    "brenda", "pamela", "emma", "nicole", "helen", "samantha", "katherine", "christine", "debra",
    "rachel", "carolyn", "janet", "catherine", "maria", "heather",
)  # fmt: skip
GENDER_SWAPS = {
    **{a: b for a, b in (*_PAIRS, *zip(MALE_FIRST_NAMES, FEMALE_FIRST_NAMES, strict=True))},
    **{b: a for a, b in (*_PAIRS, *zip(MALE_FIRST_NAMES, FEMALE_FIRST_NAMES, strict=True))},
    "his": "her",
    "him": "her",
    "her": "his",  # "him" where "her" is an object, see _OBJECT_HER
    "hers": "his",
    "mrs": "mr",
}
GENDERED_CATEGORIES = (
    "male_names", "female_names", "male_pronouns", "female_pronouns", "male_nouns", "female_nouns",
)  # fmt: skip
_WORD = re.compile(r"\b(" + "|".join(sorted(GENDER_SWAPS, key=len, reverse=True)) + r")\b", re.I)
# "her" before punctuation, the end or a function word is an object ("trust her with"), else a
# possessive ("her patients").
_OBJECT_HER = re.compile(
    r"her(?=\s*(?:[.,;:!?]|$)|\s+(?:with|to|for|and|or|at|in|on|from|as|that|about|the|a|an)\b)",
    re.I,
)


def _swap_word(match: re.Match) -> str:
    word = match[0]
    swapped = GENDER_SWAPS[word.lower()]
    if word.lower() == "her" and _OBJECT_HER.match(match.string, match.start()):
        swapped = "him"
    if word.isupper() and len(word) > 1:
        return swapped.upper()
    return swapped.capitalize() if word[0].isupper() else swapped


def gender_swap(text: str) -> str:
    """``text`` with each word of :data:`GENDER_SWAPS` (any case) replaced by its counterpart."""
    return _WORD.sub(_swap_word, text)


def swap_effects(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    nodes: Sequence[Node],
    prompts: Sequence[str],
    *,
    batch_size: int = 64,
) -> np.ndarray:
    """``(len(nodes),)`` swap effect of each ``(layer, feature)``, in [0, 1] (module docstring)."""
    layers = {layer: saes[layer] for layer in sorted({layer for layer, _ in nodes})}
    if not layers:
        return np.zeros(0)
    swapped = [gender_swap(p) for p in prompts]
    before = collect_sae_features(model, layers, prompts, batch_size=batch_size, progress=False)
    after = collect_sae_features(model, layers, swapped, batch_size=batch_size, progress=False)
    effects = []
    for layer, feature in nodes:
        z = before[layer][:, feature].toarray().ravel()
        z_swapped = after[layer][:, feature].toarray().ravel()
        mass = float(np.sum(z + z_swapped))
        effects.append(float(np.abs(z_swapped - z).sum()) / mass if mass > 0 else 0.0)
    return np.array(effects)


def gendered_tokens(tokens: Counter[str], min_share: float = 0.5) -> bool:
    """Whether a feature's top ``tokens`` (word -> count) are dominated (at least ``min_share``)
    by one gendered planted category of the toy world (:data:`GENDERED_CATEGORIES`)."""
    lower: Counter[str] = Counter()
    for word, n in tokens.items():
        lower[word.lower()] += n
    return dominant_category(lower, min_share) in GENDERED_CATEGORIES


def top_prompt_share(Z: sp.csr_matrix, feature: int, mask: np.ndarray, n: int = 50) -> float:
    """Share of the ``n`` prompts with the largest positive ``Z[:, feature]`` (``Z: (M, D)``)
    that ``mask: (M,)`` marks; NaN when the feature is never active."""
    column = Z[:, feature].toarray().ravel()
    top = np.argsort(-column, kind="stable")[:n]
    top = top[column[top] > 0]
    return float(np.mean(mask[top])) if len(top) else float("nan")


def toy_truth(
    candidates: pd.DataFrame,
    Z: Mapping[int, sp.csr_matrix],
    male: np.ndarray,
    *,
    min_share: float = 0.5,
    purity: float = 0.9,
    n: int = 50,
) -> pd.DataFrame:
    """The toy world's ground truth for each candidate (a row of
    :func:`circuitlasso.evaluation.debias.compare.describe`): ``by_tokens``
    (:func:`gendered_tokens` at ``min_share``) and ``by_prompts`` (at least ``purity`` of its
    ``n`` top prompts of one gender), with ``Z[layer]: (M, D)`` the features of balanced
    biographies and ``male: (M,)`` their gender."""
    shares = [
        top_prompt_share(Z[layer], feature, male, n)
        for layer, feature in zip(candidates["layer"], candidates["feature"], strict=True)
    ]
    return pd.DataFrame(
        {
            "by_tokens": [gendered_tokens(t, min_share) for t in candidates["tokens"]],
            "by_prompts": [max(s, 1 - s) >= purity for s in shares],  # NaN compares False
        },
        index=candidates.index,
    )


def precision_recall(flagged: Sequence[bool], truth: Sequence[bool]) -> dict[str, float]:
    """Precision and recall of the ``flagged`` candidates against the ``truth`` (boolean, one per
    candidate); NaN where undefined (nothing flagged, or nothing true)."""
    calls, true = np.asarray(flagged, dtype=bool), np.asarray(truth, dtype=bool)
    if calls.shape != true.shape:
        raise ValueError(f"{calls.shape} flags but {true.shape} truth values")
    hits = int(np.sum(calls & true))
    return {
        "precision": hits / int(calls.sum()) if calls.any() else float("nan"),
        "recall": hits / int(true.sum()) if true.any() else float("nan"),
    }


def rule_vs_truth(
    candidates: Mapping[str, pd.DataFrame], Z: Mapping[int, sp.csr_matrix], male: np.ndarray
) -> pd.DataFrame:
    """The automatic rule against each ground truth of :func:`toy_truth`, one row per method of
    ``candidates`` (method -> rows of :func:`circuitlasso.evaluation.debias.compare.describe`)
    and truth: ``method``, ``ground truth``, ``truly gendered`` and ``flagged`` (how many
    candidates the truth and the rule call gendered), ``precision`` and ``recall``
    (:func:`precision_recall`); ``Z[layer]: (M, D)`` and ``male: (M,)`` as for :func:`toy_truth`.
    """
    rows = []
    for method, found in candidates.items():
        for name, truth in toy_truth(found, Z, male).items():
            rows.append(
                {
                    "method": method,
                    "ground truth": name,
                    "truly gendered": int(truth.sum()),
                    "flagged": int(found["gendered"].sum()),
                    **precision_recall(found["gendered"], truth),
                }
            )
    return pd.DataFrame(rows)


def toy_name_coverage() -> tuple[int, int]:
    """How many of the toy world's first names the rule's list has (:data:`MALE_FIRST_NAMES`,
    :data:`FEMALE_FIRST_NAMES`), and how many first names the toy world has."""
    categories = token_categories()
    names = categories["male_names"] | categories["female_names"]
    return len(names & {*MALE_FIRST_NAMES, *FEMALE_FIRST_NAMES}), len(names)
