"""The 16 main InterpBench tasks as RASP programs, with their vocabularies and input samplers.

Each task is a :class:`TracrTask`: a factory for the RASP program (a fresh expression graph per
call, because tracr annotates expressions while compiling), the vocabulary, the sequence length, a
sampler of clean inputs and a sampler of corrupted inputs paired with the clean ones. Inputs are
lists of vocabulary values of length ``max_seq_len`` (no BOS; the compiler's BOS is added when
encoding). All sequences have the full length, so programs never see padding.

Ids follow InterpBench. The programs are written from the task descriptions, not copied; where a
description leaves room, the docstring of the factory states the choice.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from tracr.rasp import rasp

Value: TypeAlias = Hashable  # a token or output value: str, int, float or bool
InputSampler = Callable[[np.random.Generator, int], list[list[Value]]]
Corrupter = Callable[[np.random.Generator, list[list[Value]]], list[list[Value]]]

REMOVED = "_"  # placeholder value for positions whose token is dropped (cases 19 and 21)


def _uniform_sampler(vocab: Sequence[Value], max_seq_len: int) -> InputSampler:
    """Sampler drawing every position uniformly from ``vocab``."""
    values = list(vocab)

    def sample(rng: np.random.Generator, n: int) -> list[list[Value]]:
        idx = rng.integers(0, len(values), size=(n, max_seq_len))
        return [[values[i] for i in row] for row in idx]

    return sample


def _resample_corrupter(sampler: InputSampler) -> Corrupter:
    """Corrupted inputs drawn independently of the clean ones with the same sampler."""

    def corrupt(rng: np.random.Generator, clean: list[list[Value]]) -> list[list[Value]]:
        return sampler(rng, len(clean))

    return corrupt


@dataclass(frozen=True)
class TracrTask:
    """A RASP task: program factory, vocabulary, length and input samplers.

    ``make_program`` returns a new RASP SOp on each call. ``sample_inputs(rng, n)`` returns ``n``
    input sequences; ``sample_corrupted(rng, clean)`` returns one corrupted sequence per clean one.
    Build custom tasks with :meth:`from_program`.
    """

    case_id: str
    description: str
    make_program: Callable[[], rasp.SOp]
    vocab: frozenset[Value]
    max_seq_len: int
    sample_inputs: InputSampler
    sample_corrupted: Corrupter

    def __post_init__(self) -> None:
        if self.max_seq_len < 1:
            raise ValueError(
                f"task {self.case_id!r}: max_seq_len must be >= 1, got {self.max_seq_len}"
            )
        if not self.vocab:
            raise ValueError(f"task {self.case_id!r}: vocab is empty")

    @classmethod
    def from_program(
        cls,
        name: str,
        make_program: Callable[[], rasp.SOp],
        vocab: Sequence[Value],
        max_seq_len: int,
        description: str = "custom RASP program",
        sample_inputs: InputSampler | None = None,
        sample_corrupted: Corrupter | None = None,
    ) -> TracrTask:
        """A task for a user's own RASP program; inputs default to uniform draws from ``vocab``."""
        vocab_set = frozenset(vocab)
        sampler = sample_inputs or _uniform_sampler(sorted(vocab_set, key=str), max_seq_len)
        return cls(
            name,
            description,
            make_program,
            vocab_set,
            max_seq_len,
            sampler,
            sample_corrupted or _resample_corrupter(sampler),
        )


def shift_by(offset: int, sop: rasp.SOp) -> rasp.SOp:
    """``sop`` moved ``offset`` positions to the right (one attention head); None-padded."""
    select = rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + offset)
    return rasp.Aggregate(select, sop, default=None).named(f"shift_by_{offset}")


def make_hist() -> rasp.SOp:
    """Number of occurrences of each position's token in the sequence (selector width)."""
    same_tok = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ).named("same_tok")
    return rasp.SelectorWidth(same_tok).named("hist")


def make_frac_prevs(bools: rasp.SOp) -> rasp.SOp:
    """Fraction of positions up to and including this one where numerical ``bools`` is 1."""
    prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named("prevs")
    return rasp.numerical(rasp.Aggregate(prevs, bools, default=0)).named("frac_prevs")


# --- case 3: fraction of 'x' tokens in the prefix -------------------------------------------------
def make_case_3() -> rasp.SOp:
    """Fraction of 'x' tokens among the tokens up to each position (numerical output)."""
    is_x = rasp.numerical(rasp.Map(lambda t: 1 if t == "x" else 0, rasp.tokens)).named("is_x")
    return make_frac_prevs(is_x).named("frac_x")


# --- case 4: fraction of previous "(" minus fraction of previous ")" ------------------------------
def make_case_4() -> rasp.SOp:
    """Fraction of "(" minus fraction of ")" in the prefix (numerical output)."""
    is_open = rasp.numerical(rasp.Map(lambda t: 1 if t == "(" else 0, rasp.tokens)).named("is_open")
    is_close = rasp.numerical(rasp.Map(lambda t: 1 if t == ")" else 0, rasp.tokens))
    frac_open = make_frac_prevs(is_open).named("frac_open")
    frac_close = make_frac_prevs(is_close.named("is_close")).named("frac_close")
    balance = rasp.LinearSequenceMap(frac_open, frac_close, 1, -1)
    return rasp.numerical(balance).named("pair_balance")


# --- case 8: identity ---------------------------------------------------------------------------
def make_case_8() -> rasp.SOp:
    """Each token copied to the output by one MLP lookup."""
    return rasp.Map(lambda t: t, rasp.tokens).named("identity")


# --- case 11: count of tokens with the same length ----------------------------------------------
def make_case_11() -> rasp.SOp:
    """For each word, how many words in the sequence have its length (itself included)."""
    length = rasp.Map(len, rasp.tokens).named("word_length")
    same_length = rasp.Select(length, length, rasp.Comparison.EQ).named("same_length")
    return rasp.SelectorWidth(same_length).named("same_length_count")


# --- case 13: trend vs the previous token (non-causal) ------------------------------------------
def _trend(token: int, previous: int) -> str:
    if token > previous:
        return "up"
    return "down" if token < previous else "flat"


def make_case_13() -> rasp.SOp:
    """Whether each digit is above, below or equal to the previous one."""
    previous = shift_by(1, rasp.tokens).named("previous_token")
    return rasp.SequenceMap(_trend, rasp.tokens, previous).named("trend")


# --- case 18: token frequency class (non-causal) ------------------------------------------------
def make_case_18(max_seq_len: int) -> rasp.SOp:
    """Each token classed 'frequent' (> half the sequence), 'common' (> a quarter) or 'rare'.

    Sequences always have ``max_seq_len`` tokens, so the thresholds use that length directly.
    """

    def frequency_class(count: int) -> str:
        if count > max_seq_len / 2:
            return "frequent"
        return "common" if count > max_seq_len / 4 else "rare"

    return rasp.Map(frequency_class, make_hist()).named("frequency_class")


# --- case 19: remove consecutive duplicates -----------------------------------------------------
def make_case_19() -> rasp.SOp:
    """Each token kept unless it repeats the previous token (then ``REMOVED``)."""
    previous = shift_by(1, rasp.tokens).named("previous_token")
    keep = rasp.SequenceMap(lambda t, p: REMOVED if t == p else t, rasp.tokens, previous)
    return keep.named("dedup")


# --- case 20: spam-word detector ----------------------------------------------------------------
SPAM_WORDS = ("free", "offer", "click", "now")
HAM_WORDS = ("hello", "meet", "lunch", "today")


def make_case_20() -> rasp.SOp:
    """Every position labelled 'spam' when the message contains a spam keyword, else 'ham'."""
    is_spam_word = rasp.numerical(rasp.Map(lambda w: 1 if w in SPAM_WORDS else 0, rasp.tokens))
    all_positions = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE).named("all")
    spam_fraction = rasp.numerical(
        rasp.Aggregate(all_positions, is_spam_word.named("is_spam_word"), default=0)
    ).named("spam_fraction")
    return rasp.Map(lambda f: "spam" if f > 0 else "ham", spam_fraction).named("spam_label")


def _sample_messages(rng: np.random.Generator, n: int, max_seq_len: int) -> list[list[Value]]:
    """Half the messages use ham words only; the others mix in spam words."""
    messages: list[list[Value]] = []
    for _ in range(n):
        pool = HAM_WORDS if rng.random() < 0.5 else HAM_WORDS + SPAM_WORDS
        messages.append([pool[i] for i in rng.integers(0, len(pool), size=max_seq_len)])
    return messages


# --- case 21: unique-token extractor ------------------------------------------------------------
def make_case_21() -> rasp.SOp:
    """Tokens occurring exactly once in the sequence are kept; the others become ``REMOVED``."""
    keep = rasp.SequenceMap(lambda t, c: t if c == 1 else REMOVED, rasp.tokens, make_hist())
    return keep.named("unique_tokens")


# --- case 26: token cascade ---------------------------------------------------------------------
def make_case_26() -> rasp.SOp:
    """Each token repeated (position + 1) times, e.g. a b c -> a bb ccc."""
    return rasp.SequenceMap(lambda t, i: t * (i + 1), rasp.tokens, rasp.indices).named("cascade")


# --- words shared by the word-level cases -------------------------------------------------------
WORDS = ("sky", "tree", "apple", "banana", "moon", "strength", "idea", "queue")


def make_case_29() -> rasp.SOp:
    """Each word abbreviated to its first three letters."""
    return rasp.Map(lambda w: w[:3], rasp.tokens).named("abbreviation")


def make_case_33() -> rasp.SOp:
    """Whether each word's length is 'even' or 'odd': two MLPs (length, then parity).

    ``simplify=False`` keeps tracr from fusing the two Maps into one lookup.
    """
    length = rasp.Map(len, rasp.tokens).named("word_length")
    parity = rasp.Map(lambda n: "even" if n % 2 == 0 else "odd", length, simplify=False)
    return parity.named("length_parity")


VOWELS = frozenset("aeiou")


def make_case_34() -> rasp.SOp:
    """Vowels divided by consonants in each word (numerical output; every word has a consonant)."""
    vowels = rasp.Map(lambda w: sum(c in VOWELS for c in w), rasp.tokens).named("vowels")
    consonants = rasp.Map(lambda w: sum(c not in VOWELS for c in w), rasp.tokens)
    ratio = rasp.SequenceMap(lambda v, c: round(v / c, 4), vowels, consonants.named("consonants"))
    return rasp.numerical(rasp.Map(float, ratio.named("ratio_value"))).named("vowel_ratio")


def _alternate_case(word: str) -> str:
    return "".join(c.upper() if i % 2 == 0 else c.lower() for i, c in enumerate(word))


def make_case_35() -> rasp.SOp:
    """Each word with alternating capitalisation, e.g. apple -> ApPlE."""
    return rasp.Map(_alternate_case, rasp.tokens).named("alternate_case")


EMOJI_SENTIMENT = {
    "😊": "positive",
    "🎉": "positive",
    "😢": "negative",
    "😡": "negative",
    "📘": "neutral",
}


def make_case_36() -> rasp.SOp:
    """Each emoji classified 'positive', 'negative' or 'neutral'."""
    return rasp.Map(lambda e: EMOJI_SENTIMENT[e], rasp.tokens).named("emoji_sentiment")


KEEP_WORD = "idea"


def make_case_37() -> rasp.SOp:
    """Each word reversed, except ``KEEP_WORD`` which is kept as is."""
    return rasp.Map(lambda w: w if w == KEEP_WORD else w[::-1], rasp.tokens).named("reverse")


def _sample_frequency_skewed(vocab: Sequence[Value], max_seq_len: int) -> InputSampler:
    """Per sequence, token probabilities from a flat Dirichlet, so all frequency classes occur."""

    def sample(rng: np.random.Generator, n: int) -> list[list[Value]]:
        rows = []
        for _ in range(n):
            probs = rng.dirichlet(np.ones(len(vocab)))
            rows.append([vocab[i] for i in rng.choice(len(vocab), size=max_seq_len, p=probs)])
        return rows

    return sample


def _sample_with_repeats(vocab: Sequence[Value], max_seq_len: int) -> InputSampler:
    """Each token repeats the previous one with probability 1/2, else is drawn uniformly."""

    def sample(rng: np.random.Generator, n: int) -> list[list[Value]]:
        rows = []
        for _ in range(n):
            row = [vocab[int(rng.integers(len(vocab)))]]
            for _ in range(max_seq_len - 1):
                row.append(row[-1] if rng.random() < 0.5 else vocab[int(rng.integers(len(vocab)))])
            rows.append(row)
        return rows

    return sample


def _task(
    case_id: str,
    description: str,
    factory: Callable[[], rasp.SOp],
    vocab: Sequence[Value],
    max_seq_len: int,
    sampler: InputSampler | None = None,
) -> TracrTask:
    return TracrTask.from_program(
        case_id, factory, vocab, max_seq_len, description=description, sample_inputs=sampler
    )


def _build_cases() -> dict[str, TracrTask]:
    letters3 = ("a", "b", "c")
    digits = (0, 1, 2)
    words = list(WORDS)
    emojis = list(EMOJI_SENTIMENT)
    tasks = [
        _task("3", "fraction of 'x' tokens in the prefix", make_case_3, (*letters3, "x"), 6),
        _task(
            "4",
            'fraction of previous "(" minus fraction of previous ")"',
            make_case_4,
            (*letters3, "(", ")"),
            6,
        ),
        _task("8", "identity", make_case_8, letters3, 5),
        _task("11", "count of tokens with the same length", make_case_11, words, 5),
        _task("13", "trend up/down/flat vs the previous token", make_case_13, digits, 6),
        _task(
            "18",
            "token frequency class rare/common/frequent",
            lambda: make_case_18(6),
            ("a", "b", "c", "d", "e"),
            6,
            _sample_frequency_skewed(("a", "b", "c", "d", "e"), 6),
        ),
        _task(
            "19",
            "remove consecutive duplicates",
            make_case_19,
            letters3,
            6,
            _sample_with_repeats(letters3, 6),
        ),
        _task(
            "20",
            "spam-word detector",
            make_case_20,
            HAM_WORDS + SPAM_WORDS,
            6,
            lambda rng, n: _sample_messages(rng, n, 6),
        ),
        _task("21", "unique-token extractor", make_case_21, ("a", "b", "c", "d"), 5),
        _task("26", "token cascade (token combined with its index)", make_case_26, letters3, 4),
        _task("29", "abbreviation", make_case_29, words, 5),
        _task("33", "length parity", make_case_33, words, 5),
        _task("34", "vowel/consonant ratio", make_case_34, words, 5),
        _task("35", "alternate capitalization", make_case_35, words, 5),
        _task("36", "emoji sentiment", make_case_36, emojis, 5),
        _task("37", "reverse a word except one", make_case_37, words, 5),
    ]
    return {task.case_id: task for task in tasks}


CASES: dict[str, TracrTask] = _build_cases()
CASE_IDS: tuple[str, ...] = tuple(CASES)


def get_task(case_id: str | int) -> TracrTask:
    """The task with InterpBench id ``case_id``; ValueError naming the known ids otherwise."""
    key = str(case_id)
    if key not in CASES:
        raise ValueError(
            f"unknown InterpBench case id {case_id!r}; known ids: {', '.join(CASE_IDS)}"
        )
    return CASES[key]
