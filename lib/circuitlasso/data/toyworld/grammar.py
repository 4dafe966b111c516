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
from typing import Literal, TypeVar

import numpy as np

T = TypeVar("T")
Rng = np.random.Generator
Gender = Literal["male", "female", "any", "neuter"]
Tense = Literal["present", "past"]

VIOLATIONS = ("reflexive", "agreement", "punctuation", "word_order")

MALE_NAMES = (
    "john", "bill", "david", "tom", "james", "peter", "paul", "mark", "george", "henry",
    "frank", "jack", "robert", "daniel", "edward", "oscar", "michael", "richard", "thomas",
    "charles", "steven", "kevin", "brian", "jason", "eric", "adam", "ryan", "simon", "victor",
    "martin", "alan", "walter", "arthur", "harry", "leo", "max", "hugo", "ivan", "felix", "carl",
)  # fmt: skip
FEMALE_NAMES = (
    "mary", "anna", "sarah", "emma", "lucy", "kate", "jane", "alice", "susan", "laura",
    "helen", "clara", "rose", "julia", "grace", "nora", "linda", "karen", "lisa", "nancy",
    "betty", "sandra", "ruth", "emily", "hannah", "olivia", "sophia", "chloe", "amy", "megan",
    "rachel", "diana", "ella", "fiona", "irene", "judy", "paula", "tina", "wendy", "maria",
)  # fmt: skip

REFLEXIVES = ("himself", "herself", "itself", "themselves", "myself")
DETERMINERS = ("the", "a")
DECLARATIVE_END = (".", "!")
QUESTION_END = ("?",)
WRONG_END = (",",)


@dataclass(frozen=True)
class Noun:
    singular: str
    plural: str
    gender: Gender


def _nouns(words: str, gender: Gender) -> tuple[Noun, ...]:
    """Nouns from "sing/plur" or "sing" (regular plural) entries."""
    nouns = []
    for entry in words.split():
        singular, _, plural = entry.partition("/")
        nouns.append(Noun(singular, plural or singular + "s", gender))
    return tuple(nouns)


HUMAN_NOUNS = _nouns(
    "teacher student doctor farmer driver painter lawyer baker soldier president writer singer "
    "neighbor visitor pilot child/children person/people artist author banker butcher chef "
    "clerk dancer editor engineer judge manager miner poet sailor tailor tourist worker",
    "any",
)
MALE_NOUNS = _nouns("man/men boy king father son brother uncle husband prince", "male")
FEMALE_NOUNS = _nouns(
    "woman/women girl queen mother daughter sister aunt wife/wives bride", "female"
)
ANIMAL_NOUNS = _nouns(
    "dog cat horse bird goat rabbit bear wolf/wolves mouse/mice fox/foxes cow duck lion tiger "
    "monkey pig frog owl",
    "neuter",
)
ANIMATE_NOUNS = HUMAN_NOUNS + MALE_NOUNS + FEMALE_NOUNS + ANIMAL_NOUNS
FOODS = (
    "bread", "soup", "apples", "rice", "cake", "cheese", "meat", "fruit", "pasta", "eggs",
    "carrots", "potatoes", "beans", "cookies", "pizza", "salad", "noodles", "oranges", "grapes",
    "chicken", "pie", "sandwiches", "berries", "honey", "porridge",
)  # fmt: skip
DRINKS = ("water", "milk", "tea", "juice", "coffee", "lemonade", "cocoa", "soda", "cider", "broth")
PLACES = (
    "kitchen", "park", "garden", "market", "station", "school", "river", "house", "library",
    "office", "forest", "beach", "village", "church", "hall", "street", "farm", "harbor",
    "museum", "bakery",
)  # fmt: skip
PREPOSITIONS = ("in", "at", "near")
ADVERBS = (
    "today", "yesterday", "again", "quickly", "slowly", "quietly", "often", "outside",
    "loudly", "happily", "sadly", "early",
)  # fmt: skip

HUNGER = ("hungry", "starving", "famished", "ravenous")
THIRST = ("thirsty", "parched")
TIRED = ("tired", "weary", "sleepy", "exhausted", "drowsy", "fatigued")
OTHER_ADJECTIVES = (
    "happy", "sad", "angry", "calm", "proud", "nervous", "busy", "quiet", "lonely", "cheerful",
    "brave", "worried", "bored", "upset", "ready", "curious", "honest", "polite", "rude", "shy",
    "clever", "gentle", "jealous", "anxious", "eager", "friendly", "grumpy", "humble", "lazy",
    "lucky", "loyal", "serious", "silly", "strict", "wise", "afraid", "glad", "scared",
)  # fmt: skip
ADJECTIVES = HUNGER + THIRST + TIRED + OTHER_ADJECTIVES
OF_ADJECTIVES = TIRED[:2] + ("proud", "bored", "afraid", "scared", "jealous")  # "tired of them"

COMMUNICATION_VERBS = (
    "said", "whined", "claimed", "thought", "believed", "knew", "intoned", "complained",
    "announced", "whispered", "insisted", "admitted", "shouted", "explained", "noticed",
    "remarked", "suspected", "guessed", "declared", "hoped",
)  # fmt: skip


@dataclass(frozen=True)
class Verb:
    base: str
    third: str
    past: str


def _verbs(entries: str) -> tuple[Verb, ...]:
    """Verbs from "base/third/past" entries."""
    return tuple(Verb(*entry.split("/")) for entry in entries.split())


EATING_VERBS = _verbs(
    "eat/eats/ate devour/devours/devoured chew/chews/chewed swallow/swallows/swallowed "
    "munch/munches/munched nibble/nibbles/nibbled"
)
DRINKING_VERBS = _verbs("drink/drinks/drank sip/sips/sipped gulp/gulps/gulped")
PERSON_VERBS = _verbs(
    "see/sees/saw like/likes/liked help/helps/helped trust/trusts/trusted admire/admires/admired "
    "blame/blames/blamed wash/washes/washed feed/feeds/fed watch/watches/watched "
    "praise/praises/praised understand/understands/understood hate/hates/hated hear/hears/heard "
    "love/loves/loved meet/meets/met protect/protects/protected visit/visits/visited "
    "thank/thanks/thanked follow/follows/followed forgive/forgives/forgave greet/greets/greeted "
    "defend/defends/defended respect/respects/respected"
)
LINKING_VERBS = _verbs(
    "look/looks/looked seem/seems/seemed feel/feels/felt become/becomes/became grow/grows/grew "
    "appear/appears/appeared remain/remains/remained"
)
RESTING_VERBS = _verbs(
    "sleep/sleeps/slept rest/rests/rested yawn/yawns/yawned nap/naps/napped doze/dozes/dozed "
    "relax/relaxes/relaxed"
)
FINITE_VERBS = EATING_VERBS + DRINKING_VERBS + PERSON_VERBS + LINKING_VERBS + RESTING_VERBS
BE_FORMS = ("am", "is", "are", "was", "were")
DO_FORMS = ("does", "do")
AUXILIARIES = BE_FORMS + DO_FORMS + ("did",)

SUBJECT_PRONOUNS = {"male": "he", "female": "she", "neuter": "it", "plural": "they", "first": "i"}
OBJECT_PRONOUNS = {"male": "him", "female": "her", "plural": "them", "first": "me"}


@dataclass(frozen=True)
class Referent:
    """A noun phrase: its words and the features verbs and reflexives agree with."""

    words: tuple[str, ...]
    person: int
    plural: bool
    gender: Gender

    @property
    def key(self) -> str:
        """Which pronoun row it takes: first, plural, male, female, neuter or any."""
        if self.person == 1:
            return "first"
        return "plural" if self.plural else self.gender

    @property
    def third_singular(self) -> bool:
        return self.person == 3 and not self.plural


def agreeing_reflexives(referent: Referent) -> tuple[str, ...]:
    """Reflexives bound by ``referent`` in acceptable sentences."""
    return {
        "first": ("myself",),
        "plural": ("themselves",),
        "male": ("himself",),
        "female": ("herself",),
        "neuter": ("itself",),
        "any": ("himself", "herself"),
    }[referent.key]


def mismatched_reflexives(referent: Referent) -> tuple[str, ...]:
    """Reflexives that clash with ``referent``: gender, number or person.

    Common nouns of unknown gender ("the teacher", "the dog") only clash in number and person,
    so that no mismatch depends on world knowledge.
    """
    if referent.key in ("any", "neuter"):
        return ("themselves", "myself")
    return tuple(r for r in REFLEXIVES if r not in agreeing_reflexives(referent))


def be_form(subject: Referent, tense: Tense) -> str:
    if tense == "past":
        return "were" if subject.plural else "was"
    if subject.person == 1:
        return "am"
    return "is" if subject.third_singular else "are"


def wrong_be_forms(subject: Referent, tense: Tense) -> tuple[str, ...]:
    """Forms of "be" that disagree with ``subject`` ("I is", "they was")."""
    if tense == "past":
        return ("was",) if subject.plural else ("were",)
    return tuple(f for f in ("is", "are") if f != be_form(subject, tense))


def verb_form(verb: Verb, subject: Referent, tense: Tense) -> str:
    if tense == "past":
        return verb.past
    return verb.third if subject.third_singular else verb.base


def wrong_verb_forms(verb: Verb, subject: Referent, tense: Tense) -> tuple[str, ...]:
    """Present-tense forms that disagree with ``subject``; past forms do not agree."""
    if tense == "past":
        return ()
    return (verb.base,) if subject.third_singular else (verb.third,)


def pick(rng: Rng, options: Sequence[T]) -> T:
    """One of ``options``, uniformly."""
    return options[int(rng.integers(len(options)))]


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


def render(words: Sequence[str]) -> str:
    """Words to text: capitalized first word, names and "I"; tokens joined by spaces."""
    out = [w.capitalize() if w in _CAPITALIZED else w for w in words]
    if out:
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out)


# Biographies: profession via content words, gender via name and pronouns.

PROFESSIONS = ("professor", "nurse")
GENDERS = ("male", "female")
CITIES = (
    "boston", "london", "paris", "berlin", "chicago", "toronto", "sydney", "madrid", "rome",
    "vienna", "dublin", "oslo", "lisbon", "prague", "denver", "seattle", "houston", "atlanta",
    "montreal", "melbourne",
)  # fmt: skip
FIELDS = (
    "history", "physics", "chemistry", "economics", "biology", "philosophy", "linguistics",
    "mathematics", "astronomy", "geology", "sociology", "psychology", "literature", "statistics",
    "anthropology",
)  # fmt: skip
WARDS = (
    "surgical",
    "maternity",
    "cancer",
    "emergency",
    "pediatric",
    "cardiac",
    "geriatric",
    "burns",
)
PROFESSOR_WORDS = (
    "university", "lectures", "undergraduate", "research", "journals", "doctoral", "grant",
    "papers", "books", "seminar", "semester", "faculty", "thesis", "campus", "tenure",
)  # fmt: skip
NURSE_WORDS = (
    "hospital", "ward", "patients", "surgery", "medication", "vital", "signs", "shifts",
    "night", "nursing", "wounds", "infections", "care", "cares", "bandages", "injections",
)  # fmt: skip
HOBBIES = (
    "hiking", "reading", "cooking", "gardening", "painting", "music", "running", "chess",
    "swimming", "cycling", "fishing", "knitting", "dancing", "photography", "climbing", "baking",
)  # fmt: skip

_BIO_OPENINGS = {
    "professor": ("{name} teaches {field} at the university of {city} .",),
    "nurse": ("{name} works on the {ward} ward of a hospital in {city} .",),
}
_BIO_PLAIN_OPENING = "{name} lives in {city} ."  # names the person, not the profession
_BIO_SENTENCES = {
    "professor": (
        "{he} gives lectures on {field} to undergraduate students .",
        "{his} research on {field} appears in leading journals .",
        "{he} supervises doctoral students in the department of {field} .",
        "{he} received a grant to study the history of {field} .",
        "{he} has published many papers and two books .",
        "{he} runs a seminar on {field} every semester .",
        "{he} joined the faculty after finishing {his} thesis .",
        "{he} was granted tenure at a campus in {city} .",
    ),
    "nurse": (
        "{he} cares for patients after surgery .",
        "{he} gives medication and checks the vital signs of patients .",
        "{he} works night shifts in the emergency department .",
        "{his} patients trust {him} with their care .",
        "{he} trained at a nursing school in {city} .",
        "{he} helps doctors treat wounds and infections .",
        "{he} teaches nursing students on the ward .",
        "{he} changes bandages and gives injections .",
    ),
}
_BIO_NEUTRAL = (
    "{he} lives in {city} with {his} family .",
    "in {his} free time {he} enjoys {hobby} .",
    "{he} has two children and a dog .",
    "{he} likes {hobby} and {hobby2} .",
    "{his} friends say that {he} is kind and calm .",
)
_PRONOUNS = {
    "male": {"he": "he", "his": "his", "him": "him"},
    "female": {"he": "she", "his": "her", "him": "her"},
}
# A biography that does not tell the gender: "the author teaches ... their research ...".
_UNTOLD = {"name": "the author", "he": "the author", "his": "their", "him": "them"}


@dataclass(frozen=True)
class BiographyCues:
    """How strongly a biography tells its profession and its gender: a share
    ``profession_openings`` of biographies open with the profession ("... teaches physics at the
    university ...", the rest with where the person lives), then come ``profession_sentences``
    profession sentences and ``gender_sentences`` sentences about the person's life, which tell
    the gender (pronouns) but not the profession. A share ``gender_told`` of biographies tell the
    gender (a name and pronouns), the rest speak of "the author" and "their". The default is the
    standard biography."""

    profession_openings: float = 1.0
    profession_sentences: int = 2
    gender_sentences: int = 1
    gender_told: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.profession_openings <= 1.0:
            raise ValueError(
                f"profession_openings must lie in [0, 1], got {self.profession_openings}"
            )
        if not 0.0 <= self.gender_told <= 1.0:
            raise ValueError(f"gender_told must lie in [0, 1], got {self.gender_told}")
        most = min(len(pool) for pool in _BIO_SENTENCES.values())
        if not 0 <= self.profession_sentences <= most:
            raise ValueError(
                f"profession_sentences must lie in 0..{most}, got {self.profession_sentences}"
            )
        if not 1 <= self.gender_sentences <= len(_BIO_NEUTRAL):
            raise ValueError(
                f"gender_sentences must lie in 1..{len(_BIO_NEUTRAL)}, got {self.gender_sentences}"
            )


STANDARD_CUES = BiographyCues()  # the standard biography, as the toy world's LM read it


def biography(rng: Rng, profession: str, gender: str, cues: BiographyCues = STANDARD_CUES) -> str:
    """A rendered biography: an opening and, in random order, the profession and gender
    sentences of ``cues`` (the default: a profession opening, two profession sentences and one
    about the person's life)."""
    if profession not in PROFESSIONS:
        raise ValueError(f"unknown profession {profession!r}; expected one of {PROFESSIONS}")
    if gender not in GENDERS:
        raise ValueError(f"unknown gender {gender!r}; expected one of {GENDERS}")
    names = MALE_NAMES if gender == "male" else FEMALE_NAMES
    hobbies = rng.permutation(len(HOBBIES))[:2]
    slots = {
        "name": pick(rng, names),
        "city": pick(rng, CITIES),
        "field": pick(rng, FIELDS),
        "ward": pick(rng, WARDS),
        "hobby": HOBBIES[hobbies[0]],
        "hobby2": HOBBIES[hobbies[1]],
        **_PRONOUNS[gender],
    }
    pool = _BIO_SENTENCES[profession]
    body = [pool[i] for i in rng.permutation(len(pool))[: cues.profession_sentences]]
    life = [pick(rng, _BIO_NEUTRAL)]  # draws as the standard biography does, then any others
    if cues.gender_sentences > 1:
        rest = [t for t in _BIO_NEUTRAL if t != life[0]]
        life += [rest[i] for i in rng.permutation(len(rest))[: cues.gender_sentences - 1]]
    body += life
    opening = pick(rng, _BIO_OPENINGS[profession])
    if cues.profession_openings < 1.0 and rng.random() >= cues.profession_openings:
        opening = _BIO_PLAIN_OPENING
    if cues.gender_told < 1.0 and rng.random() >= cues.gender_told:
        slots.update(_UNTOLD)
    templates = [opening] + [body[i] for i in rng.permutation(len(body))]
    return " ".join(render(t.format(**slots).split()) for t in templates)


def _template_words(templates: Sequence[str]) -> set[str]:
    return {w for t in templates for w in t.split() if not w.startswith("{")}


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


_CAPITALIZED = frozenset(MALE_NAMES + FEMALE_NAMES + CITIES + ("i",))
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
    words |= set(CITIES + FIELDS + WARDS + HOBBIES)
    words |= {p for row in _PRONOUNS.values() for p in row.values()}
    bio_templates = (*_BIO_NEUTRAL, _BIO_PLAIN_OPENING) + tuple(
        t for table in (_BIO_OPENINGS, _BIO_SENTENCES) for ts in table.values() for t in ts
    )
    return sorted(words | _template_words(bio_templates))
