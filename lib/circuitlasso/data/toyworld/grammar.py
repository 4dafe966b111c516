"""The toy language: a lexicon with planted categories, a sentence grammar, violation injectors
and a biography generator.

Sentences are lists of lowercase words ending in a punctuation token; ``render`` turns them into
text ("He said that himself was hungry ."). Every acceptable sentence obeys four rules that the
violations break, each at a specific token:

- reflexive binding: a reflexive is never a subject and agrees with the sentence's subject;
- agreement: finite verbs agree in number (and person) with their subject;
- punctuation: declaratives end in "." or "!", questions in "?";
- word order: sentences start with a subject word or an auxiliary, and a determiner is always
  followed by a noun.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from circuitlasso.data.toyworld.biographies import (
    FIELDS,
    NURSE_WORDS,
    PROFESSOR_WORDS,
    WARDS,
    biography_words,
)
from circuitlasso.data.toyworld.lexicon import (
    ADJECTIVES,
    ADVERBS,
    ANIMATE_NOUNS,
    AUXILIARIES,
    BE_FORMS,
    COMMUNICATION_VERBS,
    DECLARATIVE_END,
    DETERMINERS,
    DO_FORMS,
    DRINKING_VERBS,
    DRINKS,
    EATING_VERBS,
    FEMALE_NAMES,
    FEMALE_NOUNS,
    FINITE_VERBS,
    FOODS,
    HUNGER,
    LINKING_VERBS,
    MALE_NAMES,
    MALE_NOUNS,
    OBJECT_PRONOUNS,
    OF_ADJECTIVES,
    PERSON_VERBS,
    PLACES,
    PREPOSITIONS,
    QUESTION_END,
    REFLEXIVES,
    RESTING_VERBS,
    SUBJECT_PRONOUNS,
    THIRST,
    TIRED,
    WRONG_END,
    Gender,
    Noun,
    Referent,
    Rng,
    Tense,
    Verb,
    agreeing_reflexives,
    be_form,
    mismatched_reflexives,
    pick,
    verb_form,
    wrong_be_forms,
    wrong_verb_forms,
)

VIOLATIONS = ("reflexive", "agreement", "punctuation", "word_order")


def _name(rng: Rng) -> Referent:
    if rng.random() < 0.5:
        return Referent((pick(rng, MALE_NAMES),), 3, False, "male")
    return Referent((pick(rng, FEMALE_NAMES),), 3, False, "female")


def _noun_phrase(rng: Rng, nouns: Sequence[Noun]) -> Referent:
    noun = pick(rng, nouns)
    if rng.random() < 0.5:
        return Referent(("the", noun.plural), 3, True, noun.gender)
    return Referent((pick(rng, DETERMINERS), noun.singular), 3, False, noun.gender)


def _pronoun_subject(rng: Rng) -> Referent:
    key = pick(rng, ("male", "female", "plural", "first"))
    gender: Gender = key if key in ("male", "female") else "any"  # type: ignore[assignment]
    return Referent((SUBJECT_PRONOUNS[key],), 1 if key == "first" else 3, key == "plural", gender)


def subject(rng: Rng) -> Referent:
    """A sentence subject: a name, a pronoun or a determiner + animate noun."""
    draw = rng.random()
    if draw < 0.35:
        return _name(rng)
    if draw < 0.55:
        return _pronoun_subject(rng)
    return _noun_phrase(rng, ANIMATE_NOUNS)


def person_object(rng: Rng) -> tuple[str, ...]:
    """Object of a person verb: a name, an object pronoun or a determiner + animate noun."""
    draw = rng.random()
    if draw < 0.3:
        return _name(rng).words
    if draw < 0.45:
        return (pick(rng, tuple(OBJECT_PRONOUNS.values())),)
    return _noun_phrase(rng, ANIMATE_NOUNS).words


def bound_pronoun(rng: Rng, referent: Referent) -> str:
    """The subject pronoun that refers back to ``referent``."""
    key = referent.key
    if key == "any":
        key = pick(rng, ("male", "female"))
    return SUBJECT_PRONOUNS[key]


def pronoun_referent(pronoun: str) -> Referent:
    key = {v: k for k, v in SUBJECT_PRONOUNS.items()}[pronoun]
    gender: Gender = key if key in ("male", "female", "neuter") else "any"  # type: ignore[assignment]
    return Referent((pronoun,), 1 if key == "first" else 3, key == "plural", gender)


@dataclass
class Draft:
    """An acceptable sentence under construction, with the places a violation can go.

    ``agreement_sites``: (index, disagreeing forms). ``reflexive_sites``: (start, stop,
    reflexives) -- putting one of the reflexives in place of ``words[start:stop]`` breaks binding.
    """

    words: list[str] = field(default_factory=list)
    question: bool = False
    agreement_sites: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    reflexive_sites: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)

    def add(self, *words: str) -> None:
        self.words.extend(words)

    def add_subject(self, referent: Referent, reflexive: str) -> None:
        """A subject; a reflexive in its place ("Himself is hungry") breaks binding."""
        start = len(self.words)
        self.add(*referent.words)
        self.reflexive_sites.append((start, len(self.words), (reflexive,)))

    def add_finite(self, form: str, wrong_forms: tuple[str, ...]) -> None:
        if wrong_forms:
            self.agreement_sites.append((len(self.words), wrong_forms))
        self.add(form)

    def add_verb(self, verb: Verb, subject: Referent, tense: Tense) -> None:
        """``verb``'s form agreeing with ``subject`` in ``tense``; its other forms break it."""
        self.add_finite(verb_form(verb, subject, tense), wrong_verb_forms(verb, subject, tense))

    def add_clause(self, subject: Referent, verb: Verb, tense: Tense) -> None:
        """``subject``'s words, then ``verb``'s form agreeing with it (:meth:`add_verb`)."""
        self.add(*subject.words)
        self.add_verb(verb, subject, tense)

    def add_be(self, subject: Referent, tense: Tense) -> None:
        """The form of "be" agreeing with ``subject`` in ``tense``; its other forms break it."""
        self.add_finite(be_form(subject, tense), wrong_be_forms(subject, tense))

    def add_reflexive_object(self, antecedent: Referent, rng: Rng) -> None:
        index = len(self.words)
        self.add(pick(rng, agreeing_reflexives(antecedent)))
        self.reflexive_sites.append((index, index + 1, mismatched_reflexives(antecedent)))

    def end(self, rng: Rng) -> Draft:
        if self.question:
            self.add("?")
        else:
            self.add("." if rng.random() < 0.85 else "!")
        return self


def _tense(rng: Rng) -> Tense:
    return "present" if rng.random() < 0.5 else "past"


def _optional_modifier(rng: Rng, draft: Draft) -> None:
    draw = rng.random()
    if draw < 0.2:
        draft.add(pick(rng, PREPOSITIONS), "the", pick(rng, PLACES))
    elif draw < 0.35:
        draft.add(pick(rng, ADVERBS))


def _copula(rng: Rng) -> Draft:
    """The teachers were hungry (in the kitchen) ."""
    draft, subj, tense = Draft(), subject(rng), _tense(rng)
    draft.add_subject(subj, pick(rng, agreeing_reflexives(subj)))
    draft.add_be(subj, tense)
    draft.add(pick(rng, ADJECTIVES))
    _optional_modifier(rng, draft)
    return draft.end(rng)


def _embedded_clause(rng: Rng) -> Draft:
    """John whined that he was hungry ."""
    draft, subj, tense = Draft(), subject(rng), _tense(rng)
    draft.add(*subj.words)
    draft.add(pick(rng, COMMUNICATION_VERBS), "that")
    pronoun = pronoun_referent(bound_pronoun(rng, subj))
    draft.add_subject(pronoun, agreeing_reflexives(pronoun)[0])
    draft.add_be(pronoun, tense)
    draft.add(pick(rng, HUNGER + THIRST + TIRED if rng.random() < 0.6 else ADJECTIVES))
    return draft.end(rng)


def _ingestion(rng: Rng) -> tuple[Verb, str]:
    """An eating or drinking verb and a fitting object noun."""
    if rng.random() < 0.65:
        return pick(rng, EATING_VERBS), pick(rng, FOODS)
    return pick(rng, DRINKING_VERBS), pick(rng, DRINKS)


def _transitive(rng: Rng) -> Draft:
    """The dog eats the bread . / Mary trusted the doctors ."""
    draft, subj, tense = Draft(), subject(rng), _tense(rng)
    if rng.random() < 0.5:
        verb, food = _ingestion(rng)
        obj: tuple[str, ...] = ("the", food)
    else:
        verb, obj = pick(rng, PERSON_VERBS), person_object(rng)
    if tense == "present":
        draft.add_subject(subj, pick(rng, agreeing_reflexives(subj)))
    else:
        draft.add(*subj.words)
    draft.add_verb(verb, subj, tense)
    draft.add(*obj)
    _optional_modifier(rng, draft)
    return draft.end(rng)


def _reflexive_object(rng: Rng) -> Draft:
    """John washed himself (in the river) ."""
    draft, subj, tense = Draft(), subject(rng), _tense(rng)
    verb = pick(rng, PERSON_VERBS)
    draft.add_clause(subj, verb, tense)
    draft.add_reflexive_object(subj, rng)
    _optional_modifier(rng, draft)
    return draft.end(rng)


def _linking(rng: Rng) -> Draft:
    """The teacher became tired of the students . / The president looks weary ."""
    draft, subj, tense = Draft(), subject(rng), _tense(rng)
    verb = pick(rng, LINKING_VERBS)
    adjective = pick(rng, ADJECTIVES)
    draft.add_clause(subj, verb, tense)
    draft.add(adjective)
    if adjective in OF_ADJECTIVES and rng.random() < 0.6:
        draft.add("of", *person_object(rng))
    return draft.end(rng)


def _coordinated_reflexive(rng: Rng) -> Draft:
    """Bill understands Mary and himself ."""
    draft, subj, tense = Draft(), _name(rng), _tense(rng)
    verb = pick(rng, PERSON_VERBS)
    draft.add_clause(subj, verb, tense)
    draft.add(*_name(rng).words, "and")
    draft.add_reflexive_object(subj, rng)
    return draft.end(rng)


def _hunger_consequence(rng: Rng) -> Draft:
    """The boys were hungry so they ate the bread ."""
    draft, subj, tense = Draft(), subject(rng), _tense(rng)
    verb, food = _ingestion(rng)
    adjective = pick(rng, HUNGER if verb in EATING_VERBS else THIRST)
    draft.add_subject(subj, pick(rng, agreeing_reflexives(subj)))
    draft.add_be(subj, tense)
    draft.add(adjective, "so")
    pronoun = pronoun_referent(bound_pronoun(rng, subj))
    draft.add(pronoun.words[0])
    draft.add_verb(verb, pronoun, tense)
    draft.add("the", food)
    return draft.end(rng)


def _tired_consequence(rng: Rng) -> Draft:
    """Mary was weary so she slept (outside) ."""
    draft, subj, tense = Draft(), subject(rng), _tense(rng)
    verb = pick(rng, RESTING_VERBS)
    draft.add_subject(subj, pick(rng, agreeing_reflexives(subj)))
    draft.add_be(subj, tense)
    draft.add(pick(rng, TIRED), "so")
    pronoun = pronoun_referent(bound_pronoun(rng, subj))
    draft.add(pronoun.words[0])
    draft.add_verb(verb, pronoun, tense)
    _optional_modifier(rng, draft)
    return draft.end(rng)


def _be_question(rng: Rng) -> Draft:
    """Is the teacher hungry ?"""
    draft, subj, tense = Draft(question=True), subject(rng), _tense(rng)
    draft.add_be(subj, tense)
    draft.add(*subj.words, pick(rng, ADJECTIVES))
    return draft.end(rng)


def _do_question(rng: Rng) -> Draft:
    """Does Mary eat the bread ? / Did the dogs see John ?"""
    draft, subj, tense = Draft(question=True), subject(rng), _tense(rng)
    if tense == "past":
        draft.add("did")
    elif subj.third_singular:
        draft.add_finite("does", ("do",))
    else:
        draft.add_finite("do", ("does",))
    if rng.random() < 0.5:
        verb, food = _ingestion(rng)
        obj: tuple[str, ...] = ("the", food)
    else:
        verb, obj = pick(rng, PERSON_VERBS), person_object(rng)
    draft.add(*subj.words, verb.base, *obj)
    return draft.end(rng)


TEMPLATES: tuple[tuple[Callable[[Rng], Draft], float], ...] = (
    (_copula, 0.15),
    (_embedded_clause, 0.15),
    (_transitive, 0.15),
    (_reflexive_object, 0.12),
    (_linking, 0.08),
    (_coordinated_reflexive, 0.07),
    (_hunger_consequence, 0.1),
    (_tired_consequence, 0.06),
    (_be_question, 0.06),
    (_do_question, 0.06),
)
_TEMPLATE_P = np.array([w for _, w in TEMPLATES]) / sum(w for _, w in TEMPLATES)


def draft_sentence(rng: Rng) -> Draft:
    """One acceptable sentence with its violation sites."""
    template = TEMPLATES[int(rng.choice(len(TEMPLATES), p=_TEMPLATE_P))][0]
    return template(rng)


def acceptable_sentence(rng: Rng) -> list[str]:
    return draft_sentence(rng).words


def _break_reflexive(draft: Draft, rng: Rng) -> list[str] | None:
    if not draft.reflexive_sites:
        return None
    start, stop, options = pick(rng, draft.reflexive_sites)
    return draft.words[:start] + [pick(rng, options)] + draft.words[stop:]


def _break_agreement(draft: Draft, rng: Rng) -> list[str] | None:
    if not draft.agreement_sites:
        return None
    index, options = pick(rng, draft.agreement_sites)
    return draft.words[:index] + [pick(rng, options)] + draft.words[index + 1 :]


def _break_punctuation(draft: Draft, rng: Rng) -> list[str]:
    """Drop the final punctuation or replace it with a wrong one (a comma; "." on a question)."""
    endings: tuple[str | None, ...] = (None,) + WRONG_END
    if draft.question:
        endings += DECLARATIVE_END[:1]
    ending = pick(rng, endings)
    return draft.words[:-1] + ([] if ending is None else [ending])


def breaks_word_order(words: Sequence[str]) -> bool:
    """Whether ``words`` breaks a local order rule that every acceptable sentence obeys: the
    first word can start no sentence, or a determiner is not followed by a noun."""
    if words[0] not in _STARTERS:
        return True
    return any(w in DETERMINERS and nxt not in _NOUNS for w, nxt in pairwise(words))


def _break_word_order(draft: Draft, rng: Rng) -> list[str]:
    """Shuffle the words before the final punctuation until an order rule is broken."""
    body, end = draft.words[:-1], draft.words[-1:]
    while True:
        shuffled = [body[i] for i in rng.permutation(len(body))] + end
        if breaks_word_order(shuffled):
            return shuffled


_INJECTORS: dict[str, Callable[[Draft, Rng], list[str] | None]] = {
    "reflexive": _break_reflexive,
    "agreement": _break_agreement,
    "punctuation": _break_punctuation,
    "word_order": _break_word_order,
}


def minimal_pair(rng: Rng, violation: str) -> tuple[list[str], list[str]]:
    """An acceptable sentence and the same sentence with one ``violation`` injected."""
    if violation not in _INJECTORS:
        raise ValueError(f"unknown violation {violation!r}; expected one of {VIOLATIONS}")
    while True:
        draft = draft_sentence(rng)
        acceptable = list(draft.words)
        broken = _INJECTORS[violation](draft, rng)
        if broken is not None:
            return acceptable, broken


def unacceptable_sentence(rng: Rng, violation: str) -> list[str]:
    """An acceptable sentence with one violation of type ``violation`` injected."""
    return minimal_pair(rng, violation)[1]


def _verb_forms(verbs: Sequence[Verb], *attrs: str) -> set[str]:
    return {getattr(v, a) for v in verbs for a in attrs}


# The planted category whose words carry each violation: the misplaced reflexive, the verb that
# fails to agree, the (missing or wrong) final punctuation, the determiner left without its noun.
VIOLATION_CATEGORIES = {
    "reflexive": "reflexives",
    "agreement": "agreement_verbs",
    "punctuation": "final_punctuation",
    "word_order": "determiners",
}


def token_categories() -> dict[str, set[str]]:
    """The planted categories: category name -> the (lowercase) words that belong to it."""
    return {
        "reflexives": set(REFLEXIVES),
        "hunger_thirst": set(HUNGER + THIRST),
        "tired_weary": set(TIRED),
        "eating_verbs": _verb_forms(EATING_VERBS + DRINKING_VERBS, "base", "third", "past"),
        "final_punctuation": set(DECLARATIVE_END + QUESTION_END),
        "determiners": set(DETERMINERS),
        "agreement_verbs": set(BE_FORMS + DO_FORMS) | _verb_forms(FINITE_VERBS, "base", "third"),
        "male_names": set(MALE_NAMES),
        "female_names": set(FEMALE_NAMES),
        "male_pronouns": {"he", "him", "his", "himself"},
        "female_pronouns": {"she", "her", "herself"},
        "male_nouns": {w for n in MALE_NOUNS for w in (n.singular, n.plural)},
        "female_nouns": {w for n in FEMALE_NOUNS for w in (n.singular, n.plural)},
        "professor_words": set(PROFESSOR_WORDS + FIELDS),
        "nurse_words": set(NURSE_WORDS + WARDS),
    }


_NOUNS = frozenset(
    [w for n in ANIMATE_NOUNS for w in (n.singular, n.plural)] + list(FOODS + DRINKS + PLACES)
)
_STARTERS = frozenset(
    MALE_NAMES + FEMALE_NAMES + DETERMINERS + AUXILIARIES + ("he", "she", "they", "i")
)


def vocabulary() -> list[str]:
    """Every word the sentence and biography generators can emit, sorted."""
    words = set(MALE_NAMES + FEMALE_NAMES + REFLEXIVES + DETERMINERS + ADJECTIVES + ADVERBS)
    words |= set(DECLARATIVE_END + QUESTION_END + WRONG_END + PREPOSITIONS + PLACES)
    words |= set(FOODS + DRINKS + COMMUNICATION_VERBS + AUXILIARIES + ("that", "so", "of", "and"))
    words |= set(SUBJECT_PRONOUNS.values()) | set(OBJECT_PRONOUNS.values())
    words |= {w for n in ANIMATE_NOUNS for w in (n.singular, n.plural)}
    words |= _verb_forms(FINITE_VERBS, "base", "third", "past")
    return sorted(words | biography_words())
