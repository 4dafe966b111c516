"""The toy language's lexicon: its words with their planted categories (names, nouns with number
and gender, verbs with their forms, reflexives, pronouns, places), referents and the agreement
rules the grammar and the violations use, and how words are written as text (``render``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

T = TypeVar("T")
Rng = np.random.Generator
Gender = Literal["male", "female", "any", "neuter"]
Tense = Literal["present", "past"]

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


CITIES = (
    "boston", "london", "paris", "berlin", "chicago", "toronto", "sydney", "madrid", "rome",
    "vienna", "dublin", "oslo", "lisbon", "prague", "denver", "seattle", "houston", "atlanta",
    "montreal", "melbourne",
)  # fmt: skip
_CAPITALIZED = frozenset(MALE_NAMES + FEMALE_NAMES + CITIES + ("i",))


def render(words: Sequence[str]) -> str:
    """Words to text: capitalized first word, names and "I"; tokens joined by spaces."""
    out = [w.capitalize() if w in _CAPITALIZED else w for w in words]
    if out:
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out)
