"""Prompt / counterfactual pairs of four next-token tasks for circuit localization scored as in MIB.

Four tasks, generated offline from templates and word lists written for this project, seeded:
two development tasks (:data:`TASKS`) and two held-out ones (:data:`HELDOUT_TASKS`), scored once.

- ``"ioi"``, indirect object identification in the style of Wang et al. (2022)::

      When Mary and John went to the store, John gave a drink to    -> " Mary" (wrong: " John")

  The first clause names the indirect object (IO) and the subject (S) in either order (ABBA or
  BABA); the second clause repeats S. The counterfactual is the ABC variant: the repeated subject
  alone is replaced by a third name (``..., Kate gave a drink to``), so nothing tells the two
  first names apart any more. Names must be one token after a space for the tokenizer in use:
  :func:`single_token_words` keeps those that are and a ValueError says so when too few remain.
- ``"sva"``, subject-verb agreement across an attractor phrase::

      The key near the cabinets    -> " is" (wrong: " are")

  The counterfactual flips the subject's number and nothing else (``The keys near the
  cabinets``), so its answer is the other verb form. The attractor's number is the opposite of
  the subject's by default (``attractor="opposite"``), or the same, or drawn at random. A verb
  pair (is/are, was/were, has/have) is drawn per item; subject nouns are kept only where both
  forms are one token after a space, so a prompt and its counterfactual have the same length.
- ``"pronoun"`` (held out), a gendered pronoun after a gendered name or kin noun::

      After Mary finished the report,    -> " she" (wrong: " he")

  The subject is a name or ``my`` and a kin noun (``my mother``), never first in the prompt.
  The counterfactual flips the subject's gender and nothing else: a name of the other gender
  (``After David finished the report,``) or the kin noun's counterpart (``my father``), so
  ``" she"`` and ``" he"`` swap roles. Names and kin pairs are kept where they are one token
  after a space (:func:`single_token_words`), so both prompts have the same length.
- ``"capital"`` (held out), a country's capital city::

      The capital of France is the city of    -> " Paris" (wrong: " Berlin")

  The wrong answer is the capital of a second country drawn per item; the counterfactual names
  that country instead (``The capital of Germany is the city of``) and nothing else changes, so
  the two capitals swap roles. Only (country, capital) pairs whose country and capital are each
  one token after a space are drawn.

Each :class:`TaskItem` holds the prompt, its counterfactual, the answer and the wrong answer (one
token each, with the leading space). :func:`task_splits` draws a train and a test split of
distinct prompts (no prompt in both). :func:`encode_items` turns items into token tensors: the
prompts of a split differ in length from template to template, so they are right-padded (the
model is causal: padding after a prompt's last token changes nothing before it) and every
metric reads each prompt at its own last real token (:attr:`TaskTokens.last`). A prompt and its
counterfactual always have the same token length (checked), so their positions align for
patching. :func:`task_score` is the model's own accuracy and mean logit difference on a split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch
from transformer_lens import HookedTransformer

TaskName = Literal["ioi", "sva", "pronoun", "capital"]
TASKS: tuple[TaskName, ...] = ("ioi", "sva")  # the development tasks
HELDOUT_TASKS: tuple[TaskName, ...] = ("pronoun", "capital")  # held out, scored once
ALL_TASKS: tuple[TaskName, ...] = TASKS + HELDOUT_TASKS
Attractor = Literal["opposite", "same", "random"]
ATTRACTORS: tuple[Attractor, ...] = ("opposite", "same", "random")

MIN_NAMES = 8  # fewest single-token names an IOI generator accepts
MIN_NOUNS = 5  # fewest single-token (singular, plural) subject nouns an SVA generator accepts
MIN_PRONOUN_NAMES = 8  # fewest single-token names of each gender a pronoun generator accepts
MIN_KIN = 3  # fewest single-token (female, male) kin nouns a pronoun generator accepts
MIN_COUNTRIES = 8  # fewest (country, capital) pairs, both single-token, a capital generator accepts
MAX_DRAWS_PER_ITEM = 50  # draws allowed per distinct prompt asked for before giving up


class Tokenizer(Protocol):
    """What the generators need of a tokenizer: HF's ``encode``."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


IOI_NAMES: tuple[str, ...] = (
    "Mary", "John", "Anna", "David", "Sarah", "Michael", "Laura", "James", "Emma", "Daniel",
    "Rachel", "Thomas", "Alice", "Robert", "Julia", "Peter", "Grace", "Mark", "Helen", "Paul",
    "Kate", "Steven", "Lucy", "Andrew", "Claire", "Richard", "Sophie", "George", "Jessica",
    "Henry", "Emily", "Frank", "Amy", "Joseph", "Rose", "Kevin", "Diana", "Brian", "Nora",
    "Simon", "Megan", "Adam", "Ruth", "Edward", "Linda", "Charles", "Karen", "Victor", "Susan",
    "Ryan", "Jane", "Oliver", "Hannah", "Jack", "Ellen", "Martin", "Maria", "Tony", "Chloe",
    "Philip",
)  # fmt: skip
IOI_PLACES: tuple[str, ...] = (
    "store", "park", "beach", "museum", "cafe", "library", "station", "market", "garden",
    "office", "school", "bakery", "hospital", "cinema",
)  # fmt: skip
IOI_OBJECTS: tuple[str, ...] = (
    "book", "drink", "key", "ring", "pen", "letter", "ticket", "snack", "bag", "hat", "basket",
    "cup",
)  # fmt: skip
# {A}, {B}: the first clause's names (IO and S in either order); {S}: the repeated subject, after
# which the next token is the IO's name
IOI_TEMPLATES: tuple[str, ...] = (
    "When {A} and {B} went to the {place}, {S} gave a {object} to",
    "After {A} and {B} arrived at the {place}, {S} handed a {object} to",
    "Then, {A} and {B} spent the afternoon at the {place}. {S} passed a {object} to",
    "While {A} and {B} were waiting at the {place}, {S} offered a {object} to",
    "Once {A} and {B} got back from the {place}, {S} sent a {object} to",
    "Later, {A} and {B} had lunch at the {place}, and {S} threw a {object} to",
    "On Monday {A} and {B} cleaned the {place}. Afterwards {S} lent a {object} to",
    "As {A} and {B} left the {place}, {S} returned the {object} to",
)

SVA_SUBJECTS: tuple[tuple[str, str], ...] = (
    ("key", "keys"), ("book", "books"), ("dog", "dogs"), ("car", "cars"), ("house", "houses"),
    ("teacher", "teachers"), ("student", "students"), ("door", "doors"),
    ("picture", "pictures"), ("letter", "letters"), ("window", "windows"), ("chair", "chairs"),
    ("girl", "girls"), ("boy", "boys"), ("friend", "friends"), ("tree", "trees"),
    ("box", "boxes"), ("child", "children"), ("man", "men"), ("woman", "women"),
    ("bird", "birds"), ("doctor", "doctors"), ("lamp", "lamps"), ("bottle", "bottles"),
    ("farmer", "farmers"), ("painting", "paintings"), ("player", "players"),
    ("cat", "cats"), ("officer", "officers"), ("author", "authors"),
)  # fmt: skip
SVA_ATTRACTORS: tuple[tuple[str, str], ...] = (
    ("cabinet", "cabinets"), ("table", "tables"), ("window", "windows"), ("tree", "trees"),
    ("building", "buildings"), ("car", "cars"), ("river", "rivers"), ("office", "offices"),
    ("garden", "gardens"), ("shelf", "shelves"), ("fence", "fences"), ("wall", "walls"),
    ("bridge", "bridges"), ("mountain", "mountains"),
)  # fmt: skip
SVA_PREPOSITIONS: tuple[str, ...] = (
    "near", "behind", "next to", "beside", "across from", "above", "by",
)  # fmt: skip
SVA_VERBS: tuple[tuple[str, str], ...] = (("is", "are"), ("was", "were"), ("has", "have"))
# {subject} is the subject noun, whose number the counterfactual flips; the verb comes next
SVA_TEMPLATES: tuple[str, ...] = (
    "The {subject} {prep} the {attractor}",
    "I think that the {subject} {prep} the {attractor}",
    "People say the {subject} {prep} the {attractor}",
    "Apparently, the {subject} {prep} the {attractor}",
    "In the story, the {subject} {prep} the {attractor}",
)

PRONOUN_FEMALE_NAMES: tuple[str, ...] = (
    "Mary", "Anna", "Sarah", "Laura", "Emma", "Rachel", "Alice", "Julia", "Grace", "Helen",
    "Kate", "Lucy", "Claire", "Sophie", "Jessica", "Emily", "Amy", "Rose", "Diana", "Nora",
    "Megan", "Ruth", "Linda", "Karen", "Susan", "Jane", "Hannah", "Ellen", "Maria", "Olivia",
    "Lisa", "Nancy", "Betty", "Sandra", "Carol", "Rebecca", "Elizabeth", "Jennifer", "Barbara",
    "Margaret",
)  # fmt: skip
PRONOUN_MALE_NAMES: tuple[str, ...] = (
    "John", "David", "Michael", "James", "Daniel", "Thomas", "Robert", "Peter", "Mark", "Paul",
    "Steven", "Andrew", "Richard", "George", "Henry", "Frank", "Joseph", "Kevin", "Brian",
    "Simon", "Adam", "Edward", "Charles", "Victor", "Ryan", "Oliver", "Jack", "Martin", "Tony",
    "Philip", "William", "Matthew", "Kenneth", "Gary", "Scott", "Eric", "Patrick", "Samuel",
    "Walter", "Arthur",
)  # fmt: skip
# (female, male) kin nouns, drawn as "my {noun}"
PRONOUN_KIN: tuple[tuple[str, str], ...] = (
    ("mother", "father"), ("sister", "brother"), ("daughter", "son"), ("aunt", "uncle"),
    ("wife", "husband"), ("grandmother", "grandfather"), ("niece", "nephew"), ("mom", "dad"),
    ("girlfriend", "boyfriend"), ("grandma", "grandpa"),
)  # fmt: skip
PRONOUN_PLACES: tuple[str, ...] = (
    "office", "market", "station", "library", "garden", "kitchen", "hospital", "school",
    "bakery", "museum", "gym", "bank",
)  # fmt: skip
PRONOUN_OBJECTS: tuple[str, ...] = (
    "report", "letter", "book", "puzzle", "painting", "essay", "meal", "list", "map", "song",
    "email", "game",
)  # fmt: skip
# {subject}: a name or "my {kin noun}", never first in the prompt; the pronoun comes next
PRONOUN_TEMPLATES: tuple[str, ...] = (
    "After {subject} finished the {object},",
    "When {subject} came back from the {place},",
    "Yesterday {subject} forgot the {object} at the {place}, so",
    "Because {subject} was late to the {place},",
    "As soon as {subject} saw the {object},",
    "Later that day {subject} went to the {place}, where",
    "Although {subject} did not like the {object},",
    "On Sunday {subject} cleaned the {place}, and then",
)

# (country, capital): countries named without an article, capitals of one word
CAPITAL_PAIRS: tuple[tuple[str, str], ...] = (
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("England", "London"), ("Japan", "Tokyo"), ("Russia", "Moscow"), ("Egypt", "Cairo"),
    ("Greece", "Athens"), ("Austria", "Vienna"), ("Ireland", "Dublin"), ("Portugal", "Lisbon"),
    ("China", "Beijing"), ("Poland", "Warsaw"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
    ("Hungary", "Budapest"), ("Finland", "Helsinki"), ("Thailand", "Bangkok"), ("Peru", "Lima"),
    ("Cuba", "Havana"), ("Kenya", "Nairobi"), ("Canada", "Ottawa"), ("Australia", "Canberra"),
    ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Denmark", "Copenhagen"),
    ("Belgium", "Brussels"), ("Switzerland", "Bern"), ("Chile", "Santiago"),
    ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"), ("Scotland", "Edinburgh"),
    ("Wales", "Cardiff"), ("Lebanon", "Beirut"), ("Syria", "Damascus"),
    ("Afghanistan", "Kabul"), ("Ukraine", "Kyiv"), ("Romania", "Bucharest"),
    ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Nepal", "Kathmandu"),
    ("Mongolia", "Ulaanbaatar"), ("Venezuela", "Caracas"), ("Colombia", "Bogota"),
)  # fmt: skip
CAPITAL_PEOPLE: tuple[str, ...] = (
    "teacher", "friend", "guide", "neighbor", "cousin", "uncle", "aunt", "boss", "driver",
    "brother", "sister", "father", "mother", "grandmother", "colleague",
)  # fmt: skip
# {country}: the country, never first in the prompt; its capital comes next
CAPITAL_TEMPLATES: tuple[str, ...] = (
    "The capital of {country} is the city of",
    "My {person} told me that the capital of {country} is",
    "The capital city of {country} is",
    "Question: What is the capital of {country}? Answer:",
    "Last summer my {person} visited the capital of {country}, which is",
    "If you want to see the capital of {country}, you have to go to",
    "My {person} works for the government of {country}, in its capital,",
    "Everyone knows that the capital of {country} is",
)


@dataclass(frozen=True)
class TaskItem:
    """A prompt, its counterfactual and the two answer tokens (each with its leading space).

    ``answer`` is the prompt's correct next token, ``wrong`` the competitor the logit difference
    is taken against (IOI: the subject's name; SVA: the other verb form; pronoun: the other
    pronoun; capital: the other country's capital); ``template`` is the template the prompt was
    filled from.
    """

    task: TaskName
    template: str
    prompt: str
    counterfactual: str
    answer: str
    wrong: str


@dataclass(frozen=True)
class TaskSplits:
    """A train and a test split of one task: seeded, no prompt in both."""

    task: TaskName
    seed: int
    train: list[TaskItem]
    test: list[TaskItem]


def _is_single_token(tokenizer: Tokenizer, text: str) -> bool:
    return len(tokenizer.encode(text, add_special_tokens=False)) == 1


def single_token_words(
    tokenizer: Tokenizer, words: Sequence[str], minimum: int = 1, what: str = "words"
) -> list[str]:
    """The ``words`` (in order, without repeats) that are one token after a space; ValueError,
    naming how many remain, when fewer than ``minimum`` do."""
    kept = [w for w in dict.fromkeys(words) if _is_single_token(tokenizer, " " + w)]
    if len(kept) < minimum:
        raise ValueError(
            f"only {len(kept)} of {len(set(words))} {what} are a single token after a space for "
            f"this tokenizer ({kept}); at least {minimum} are needed"
        )
    return kept


def _check_template(template: str, slots: Sequence[str]) -> None:
    for slot in slots:
        if template.count("{" + slot + "}") != 1:
            raise ValueError(f"template {template!r} needs {{{slot}}} exactly once")


def _distinct(draw, n: int, rng: np.random.Generator, what: str) -> list[TaskItem]:
    """``n`` items of ``draw(rng)`` with distinct prompts, in the order drawn."""
    if n < 1:
        raise ValueError(f"need at least one {what} item, got n={n}")
    found: dict[str, TaskItem] = {}
    for _ in range(MAX_DRAWS_PER_ITEM * n):
        item = draw(rng)
        found.setdefault(item.prompt, item)
        if len(found) == n:
            return list(found.values())
    raise ValueError(
        f"found only {len(found)} distinct {what} prompts in {MAX_DRAWS_PER_ITEM * n} draws, "
        f"{n} asked for: give more templates or words, or ask for fewer"
    )


def ioi_items(
    tokenizer: Tokenizer,
    n: int,
    seed: int = 0,
    *,
    names: Sequence[str] = IOI_NAMES,
    templates: Sequence[str] = IOI_TEMPLATES,
    places: Sequence[str] = IOI_PLACES,
    objects: Sequence[str] = IOI_OBJECTS,
    min_names: int = MIN_NAMES,
) -> list[TaskItem]:
    """``n`` seeded IOI items with distinct prompts (module docstring); counterfactual: ABC.

    Names are those of ``names`` that are one token after a space for ``tokenizer``; ValueError
    when fewer than ``max(min_names, 3)`` remain, or a template lacks a slot.
    """
    for template in templates:
        _check_template(template, ("A", "B", "S"))
    pool = single_token_words(tokenizer, names, max(min_names, 3), "IOI names")

    def draw(rng: np.random.Generator) -> TaskItem:
        template = templates[int(rng.integers(len(templates)))]
        io, s, c = (pool[i] for i in rng.choice(len(pool), size=3, replace=False))
        a, b = (io, s) if rng.random() < 0.5 else (s, io)  # ABBA or BABA
        fill = {"A": a, "B": b, "place": places[int(rng.integers(len(places)))],
                "object": objects[int(rng.integers(len(objects)))]}  # fmt: skip
        return TaskItem(
            task="ioi",
            template=template,
            prompt=template.format(S=s, **fill),
            counterfactual=template.format(S=c, **fill),
            answer=" " + io,
            wrong=" " + s,
        )

    return _distinct(draw, n, np.random.default_rng(seed), "IOI")


def sva_items(
    tokenizer: Tokenizer,
    n: int,
    seed: int = 0,
    *,
    attractor: Attractor = "opposite",
    subjects: Sequence[tuple[str, str]] = SVA_SUBJECTS,
    attractors: Sequence[tuple[str, str]] = SVA_ATTRACTORS,
    prepositions: Sequence[str] = SVA_PREPOSITIONS,
    verbs: Sequence[tuple[str, str]] = SVA_VERBS,
    templates: Sequence[str] = SVA_TEMPLATES,
    min_nouns: int = MIN_NOUNS,
) -> list[TaskItem]:
    """``n`` seeded subject-verb agreement items with distinct prompts (module docstring).

    Subject nouns are kept where both forms are one token after a space, verb pairs where both
    forms are; ValueError when fewer than ``min_nouns`` nouns or no verb pair remain, on an
    unknown ``attractor`` rule, or when a template lacks a slot.
    """
    if attractor not in ATTRACTORS:
        raise ValueError(f"unknown attractor rule {attractor!r}; expected one of {ATTRACTORS}")
    for template in templates:
        _check_template(template, ("subject", "prep", "attractor"))
    nouns = [p for p in subjects if all(_is_single_token(tokenizer, " " + w) for w in p)]
    if len(nouns) < min_nouns:
        raise ValueError(
            f"only {len(nouns)} of {len(subjects)} subject nouns are a single token after a space "
            f"in both numbers for this tokenizer; at least {min_nouns} are needed"
        )
    verb_pairs = [p for p in verbs if all(_is_single_token(tokenizer, " " + w) for w in p)]
    if not verb_pairs:
        raise ValueError(f"no verb pair of {list(verbs)} is single-token for this tokenizer")

    def draw(rng: np.random.Generator) -> TaskItem:
        template = templates[int(rng.integers(len(templates)))]
        noun = nouns[int(rng.integers(len(nouns)))]
        others = [p for p in attractors if p[0] != noun[0]]
        other = others[int(rng.integers(len(others)))]
        plural = bool(rng.random() < 0.5)
        if attractor == "random":
            attractor_plural = bool(rng.random() < 0.5)
        else:
            attractor_plural = plural != (attractor == "opposite")
        verb = verb_pairs[int(rng.integers(len(verb_pairs)))]
        fill = {"prep": prepositions[int(rng.integers(len(prepositions)))],
                "attractor": other[int(attractor_plural)]}  # fmt: skip
        return TaskItem(
            task="sva",
            template=template,
            prompt=template.format(subject=noun[int(plural)], **fill),
            counterfactual=template.format(subject=noun[int(not plural)], **fill),
            answer=" " + verb[int(plural)],
            wrong=" " + verb[int(not plural)],
        )

    return _distinct(draw, n, np.random.default_rng(seed), "SVA")


def pronoun_items(
    tokenizer: Tokenizer,
    n: int,
    seed: int = 0,
    *,
    female_names: Sequence[str] = PRONOUN_FEMALE_NAMES,
    male_names: Sequence[str] = PRONOUN_MALE_NAMES,
    kin: Sequence[tuple[str, str]] = PRONOUN_KIN,
    places: Sequence[str] = PRONOUN_PLACES,
    objects: Sequence[str] = PRONOUN_OBJECTS,
    templates: Sequence[str] = PRONOUN_TEMPLATES,
    min_names: int = MIN_PRONOUN_NAMES,
    min_kin: int = MIN_KIN,
) -> list[TaskItem]:
    """``n`` seeded gendered-pronoun items with distinct prompts (module docstring).

    The subject is a name (two draws in three) or ``my`` and a kin noun; the counterfactual puts
    a name of the other gender, or the kin noun's counterpart, in its place, so ``" she"`` and
    ``" he"`` swap roles. Names are kept where they are one token after a space, kin pairs where
    both nouns are; ValueError when fewer than ``min_names`` names of a gender or ``min_kin``
    kin pairs remain, when ``" she"`` or ``" he"`` is not one token, or a template lacks a slot.
    """
    for template in templates:
        _check_template(template, ("subject",))
    names = (
        single_token_words(tokenizer, female_names, min_names, "female names"),
        single_token_words(tokenizer, male_names, min_names, "male names"),
    )
    pairs = [p for p in kin if all(_is_single_token(tokenizer, " " + w) for w in p)]
    if len(pairs) < min_kin:
        raise ValueError(
            f"only {len(pairs)} of {len(kin)} kin noun pairs are a single token after a space "
            f"for this tokenizer; at least {min_kin} are needed"
        )
    pronouns = (" she", " he")
    for pronoun in pronouns:
        _single_id(tokenizer, pronoun)

    def draw(rng: np.random.Generator) -> TaskItem:
        template = templates[int(rng.integers(len(templates)))]
        male = int(rng.random() < 0.5)
        if rng.random() < 2 / 3:
            own, other = names[male], names[1 - male]
            subject = own[int(rng.integers(len(own)))]
            swapped = other[int(rng.integers(len(other)))]
        else:
            pair = pairs[int(rng.integers(len(pairs)))]
            subject, swapped = "my " + pair[male], "my " + pair[1 - male]
        fill = {"place": places[int(rng.integers(len(places)))],
                "object": objects[int(rng.integers(len(objects)))]}  # fmt: skip
        return TaskItem(
            task="pronoun",
            template=template,
            prompt=template.format(subject=subject, **fill),
            counterfactual=template.format(subject=swapped, **fill),
            answer=pronouns[male],
            wrong=pronouns[1 - male],
        )

    return _distinct(draw, n, np.random.default_rng(seed), "pronoun")


def capital_items(
    tokenizer: Tokenizer,
    n: int,
    seed: int = 0,
    *,
    pairs: Sequence[tuple[str, str]] = CAPITAL_PAIRS,
    people: Sequence[str] = CAPITAL_PEOPLE,
    templates: Sequence[str] = CAPITAL_TEMPLATES,
    min_countries: int = MIN_COUNTRIES,
) -> list[TaskItem]:
    """``n`` seeded country-to-capital items with distinct prompts (module docstring).

    The wrong answer is the capital of a second country drawn from the rest; the counterfactual
    names that country, so the two capitals swap roles. (country, capital) pairs are kept where
    both are one token after a space; ValueError when fewer than ``max(min_countries, 2)``
    remain, or a template lacks a slot.
    """
    for template in templates:
        _check_template(template, ("country",))
    pool = [p for p in pairs if all(_is_single_token(tokenizer, " " + w) for w in p)]
    if len(pool) < max(min_countries, 2):
        raise ValueError(
            f"only {len(pool)} of {len(pairs)} (country, capital) pairs are a single token after "
            f"a space for this tokenizer; at least {max(min_countries, 2)} are needed"
        )

    def draw(rng: np.random.Generator) -> TaskItem:
        template = templates[int(rng.integers(len(templates)))]
        (country, capital), (other, other_capital) = (
            pool[i] for i in rng.choice(len(pool), size=2, replace=False)
        )
        person = people[int(rng.integers(len(people)))]
        return TaskItem(
            task="capital",
            template=template,
            prompt=template.format(country=country, person=person),
            counterfactual=template.format(country=other, person=person),
            answer=" " + capital,
            wrong=" " + other_capital,
        )

    return _distinct(draw, n, np.random.default_rng(seed), "capital")


def task_items(task: TaskName, tokenizer: Tokenizer, n: int, seed: int = 0) -> list[TaskItem]:
    """``n`` items of ``task`` (:data:`ALL_TASKS`) with its generator's defaults."""
    if task == "ioi":
        return ioi_items(tokenizer, n, seed)
    if task == "sva":
        return sva_items(tokenizer, n, seed)
    if task == "pronoun":
        return pronoun_items(tokenizer, n, seed)
    if task == "capital":
        return capital_items(tokenizer, n, seed)
    raise ValueError(f"unknown task {task!r}; expected one of {ALL_TASKS}")


def task_splits(
    task: TaskName, tokenizer: Tokenizer, n_train: int, n_test: int, seed: int = 0
) -> TaskSplits:
    """A seeded train and test split of ``task``: ``n_train + n_test`` distinct prompts drawn at
    once, the first ``n_train`` for training, so no prompt is in both."""
    if n_train < 1 or n_test < 1:
        raise ValueError(f"both splits need at least one item, got {n_train} and {n_test}")
    items = task_items(task, tokenizer, n_train + n_test, seed)
    return TaskSplits(task, seed, items[:n_train], items[n_train:])


@dataclass(frozen=True)
class TaskTokens:
    """Items as tokens: prompts and counterfactuals right-padded to one length ``(M, P)``.

    ``last[i]`` is the position of prompt ``i``'s last real token (where the answer is read; a
    prompt and its counterfactual have the same length), ``answer`` and ``wrong`` the two
    answer token ids ``(M,)``, ``bos`` whether position 0 holds a prepended BOS.
    """

    clean: torch.Tensor
    counterfactual: torch.Tensor
    last: torch.Tensor
    answer: torch.Tensor
    wrong: torch.Tensor
    bos: bool

    def __len__(self) -> int:
        return len(self.clean)

    def rows(self, index: slice | torch.Tensor) -> TaskTokens:
        """The items at ``index`` (a slice or index tensor)."""
        return TaskTokens(
            self.clean[index],
            self.counterfactual[index],
            self.last[index],
            self.answer[index],
            self.wrong[index],
            self.bos,
        )

    @property
    def last_mask(self) -> torch.Tensor:
        """``(M, P)`` bool, True at each prompt's last real token (EAP's ``position_mask``)."""
        positions = torch.arange(self.clean.shape[1])
        return positions[None, :] == self.last[:, None]

    @property
    def real_mask(self) -> torch.Tensor:
        """``(M, P)`` bool, True at each prompt's real tokens, the BOS left out (the positions
        CircuitLasso averages over)."""
        positions = torch.arange(self.clean.shape[1])
        return (positions[None, :] <= self.last[:, None]) & (positions[None, :] >= int(self.bos))


def _single_id(tokenizer: Tokenizer, text: str) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"answer {text!r} is {len(ids)} tokens for this tokenizer, not one")
    return int(ids[0])


def encode_items(
    tokenizer: Tokenizer, items: Sequence[TaskItem], bos_id: int | None = None, pad_id: int = 0
) -> TaskTokens:
    """Tokens of ``items``: each text encoded without special tokens, ``bos_id`` first where
    given, right-padded with ``pad_id``. ValueError when a prompt and its counterfactual differ
    in token length, or an answer is not one token."""
    if not items:
        raise ValueError("no items to encode")
    prefix = [] if bos_id is None else [bos_id]
    clean, counterfactual = [], []
    for item in items:
        a = prefix + list(tokenizer.encode(item.prompt, add_special_tokens=False))
        b = prefix + list(tokenizer.encode(item.counterfactual, add_special_tokens=False))
        if len(a) != len(b):
            raise ValueError(
                f"prompt and counterfactual differ in token length ({len(a)} vs {len(b)}): "
                f"{item.prompt!r} / {item.counterfactual!r}"
            )
        clean.append(a)
        counterfactual.append(b)
    width = max(len(t) for t in clean)

    def padded(rows: list[list[int]]) -> torch.Tensor:
        return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)

    return TaskTokens(
        clean=padded(clean),
        counterfactual=padded(counterfactual),
        last=torch.tensor([len(r) - 1 for r in clean], dtype=torch.long),
        answer=torch.tensor([_single_id(tokenizer, i.answer) for i in items], dtype=torch.long),
        wrong=torch.tensor([_single_id(tokenizer, i.wrong) for i in items], dtype=torch.long),
        bos=bos_id is not None,
    )


def encode_for_model(model: HookedTransformer, items: Sequence[TaskItem]) -> TaskTokens:
    """:func:`encode_items` with the model's tokenizer, its BOS where the model prepends one
    (``cfg.default_prepend_bos``) and its pad token (else its BOS, else 0)."""
    tokenizer = model.tokenizer
    if tokenizer is None:
        raise ValueError("the model has no tokenizer; use encode_items with one")
    bos = tokenizer.bos_token_id if model.cfg.default_prepend_bos else None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (bos or 0)
    return encode_items(tokenizer, items, bos_id=bos, pad_id=pad)  # type: ignore[arg-type]


def logit_difference(logits: torch.Tensor, tokens: TaskTokens) -> torch.Tensor:
    """Per item, logit(answer) - logit(wrong) at its last real token: logits ``(M, P, V)``
    -> ``(M,)``."""
    rows = torch.arange(len(tokens), device=logits.device)
    at_last = logits[rows, tokens.last.to(logits.device)]
    answer, wrong = tokens.answer.to(logits.device), tokens.wrong.to(logits.device)
    return at_last[rows, answer] - at_last[rows, wrong]


@dataclass(frozen=True)
class TaskScore:
    """A model on a split: the share of items whose answer outscores the wrong token, the mean
    logit difference, and the mean logit difference of the same two tokens read on the
    counterfactual prompts."""

    n: int
    accuracy: float
    mean_logit_diff: float
    counterfactual_logit_diff: float


def task_score(model: HookedTransformer, tokens: TaskTokens, batch_size: int = 32) -> TaskScore:
    """The model's own accuracy and mean logit difference on ``tokens`` (batched, no grad)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = model.cfg.device
    clean, counter = [], []
    with torch.inference_mode():
        for start in range(0, len(tokens), batch_size):
            batch = tokens.rows(slice(start, start + batch_size))
            clean.append(logit_difference(model(batch.clean.to(device)), batch).float().cpu())
            logits = model(batch.counterfactual.to(device))
            counter.append(logit_difference(logits, batch).float().cpu())
    diffs, counter_diffs = torch.cat(clean), torch.cat(counter)
    return TaskScore(
        n=len(tokens),
        accuracy=float((diffs > 0).double().mean()),
        mean_logit_diff=float(diffs.double().mean()),
        counterfactual_logit_diff=float(counter_diffs.double().mean()),
    )
