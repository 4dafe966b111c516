"""A held-out suite of RASP tasks, disjoint from the 16 InterpBench cases.

Protocol, fixed before any results: the held-out tasks run through the same harness as the
InterpBench suite (:func:`circuitlasso.evaluation.interpbench.report.run_cases` with
``suite="heldout"``), with the same methods (``METHODS``), the same variants (``VARIANTS``: exact
and distractors), the same number of prompt pairs and the same seed as the InterpBench run they are
compared with. No task here was used to design or tune any method.

Six tasks call tracr's own library (``tracr.compiler.lib``); three are new programs written here.
None computes what an InterpBench case computes (fraction of a token in the prefix, bracket
balance, identity, same-length count, trend, frequency class, deduplication, spam, unique tokens,
cascade and the word-level maps). Vocabularies and lengths are small so each task compiles in
seconds. Inputs are uniform draws from the vocabulary (distinct keys for the sort; half balanced
strings for the brackets) and corrupted inputs are independent draws from the same sampler, except
for the brackets, whose corrupted input has the opposite balance so the one-bit output changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tracr.compiler import lib
from tracr.rasp import rasp

from circuitlasso.data.interpbench.programs import (
    InputSampler,
    TracrTask,
    Value,
)


# --- from tracr.compiler.lib ----------------------------------------------------------------------
def make_reverse() -> rasp.SOp:
    """The sequence reversed (``lib.make_reverse``: length, opposite index, one head)."""
    return lib.make_reverse(rasp.tokens)


def make_sort() -> rasp.SOp:
    """Tokens sorted ascending (``lib.make_sort`` with the tokens as keys; ties by position)."""
    return lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=5, min_key=1)


def make_count_a() -> rasp.SOp:
    """Number of 'a' tokens in the sequence, at every position (``lib.make_count``)."""
    return lib.make_count(rasp.tokens, "a")


def make_count_less_freq() -> rasp.SOp:
    """Number of positions whose token occurs at most 2 times, at every position (tracr's
    ``lib.make_count_less_freq(2)``)."""
    return lib.make_count_less_freq(2)


def make_detect_pattern() -> rasp.SOp:
    """Whether the pattern "ab" ends at each position (``lib.detect_pattern``)."""
    return lib.detect_pattern(rasp.tokens, "ab")


def make_balanced() -> rasp.SOp:
    """Whether the sequence is a balanced bracket string, at every position
    (``lib.make_shuffle_dyck`` with "()")."""
    return lib.make_shuffle_dyck(["()"])


# --- new programs ---------------------------------------------------------------------------------
def make_two_back() -> rasp.SOp:
    """The token two positions back: a chain of two previous-token moves (two heads); None first."""
    previous = lib.shift_by(1, rasp.tokens).named("previous")
    return lib.shift_by(1, previous).named("two_back")


def make_rank() -> rasp.SOp:
    """Number of tokens strictly smaller than each token (SelectorWidth of a LT select)."""
    smaller = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT).named("smaller")
    return rasp.SelectorWidth(smaller).named("rank")


def make_neighbour_sum() -> rasp.SOp:
    """Each digit plus the previous digit, modulo 3 (undefined at the first position)."""
    previous = lib.shift_by(1, rasp.tokens).named("previous")
    return rasp.SequenceMap(lambda t, p: (t + (p or 0)) % 3, rasp.tokens, previous).named(
        "neighbour_sum"
    )


def _sample_distinct(vocab: Sequence[Value], max_seq_len: int) -> InputSampler:
    """Each sequence a random arrangement of ``max_seq_len`` distinct tokens of ``vocab``."""

    def sample(rng: np.random.Generator, n: int) -> list[list[Value]]:
        return [[vocab[i] for i in rng.permutation(len(vocab))[:max_seq_len]] for _ in range(n)]

    return sample


def _sample_brackets(max_seq_len: int) -> InputSampler:
    """Half the sequences balanced (random Dyck words), half uniform draws of "(" and ")"."""

    def sample(rng: np.random.Generator, n: int) -> list[list[Value]]:
        return [
            _dyck_word(rng, max_seq_len)
            if rng.random() < 0.5
            else [("(", ")")[i] for i in rng.integers(0, 2, size=max_seq_len)]
            for _ in range(n)
        ]

    return sample


def _dyck_word(rng: np.random.Generator, length: int) -> list[Value]:
    """A random balanced bracket string of even ``length``."""
    word: list[Value] = []
    depth = 0
    for i in range(length):
        must_close = depth == length - i
        opens = not must_close and (depth == 0 or rng.random() < 0.5)
        word.append("(" if opens else ")")
        depth += 1 if opens else -1
    return word


def _flip_balance(rng: np.random.Generator, clean: list[list[Value]]) -> list[list[Value]]:
    """Per clean sequence, a balanced one if it is unbalanced and an unbalanced one otherwise."""
    uniform = _sample_brackets(len(clean[0]))
    out = []
    for row in clean:
        if _is_balanced(row):
            candidate = _dyck_word(rng, len(row))
            while _is_balanced(candidate):
                candidate = uniform(rng, 1)[0]
        else:
            candidate = _dyck_word(rng, len(row))
        out.append(candidate)
    return out


def _is_balanced(row: Sequence[Value]) -> bool:
    depth = 0
    for token in row:
        depth += 1 if token == "(" else -1
        if depth < 0:
            return False
    return depth == 0


def _build_tasks() -> dict[str, TracrTask]:
    abc = ("a", "b", "c")
    task = TracrTask.from_program  # (id, program, vocab, length, description, sampler, corrupter)
    tasks = [
        task("h-reverse", make_reverse, abc, 4, "reverse the sequence (tracr lib.make_reverse)"),
        task(
            "h-sort",
            make_sort,
            (1, 2, 3, 4, 5, 6),
            5,
            "sort distinct numbers ascending (tracr lib.make_sort)",
            _sample_distinct((1, 2, 3, 4, 5, 6), 5),
        ),
        task("h-count", make_count_a, abc, 5, "count of 'a' tokens (tracr lib.make_count)"),
        task(
            "h-count-less-freq",
            make_count_less_freq,
            ("a", "b", "c", "d"),
            5,
            "positions whose token occurs at most twice (tracr lib.make_count_less_freq)",
        ),
        task(
            "h-detect-pattern",
            make_detect_pattern,
            abc,
            5,
            'pattern "ab" ends here (tracr lib.detect_pattern)',
        ),
        task(
            "h-balanced",
            make_balanced,
            ("(", ")"),
            6,
            "balanced brackets in the prefix (tracr lib.make_shuffle_dyck)",
            _sample_brackets(6),
            _flip_balance,
        ),
        task("h-two-back", make_two_back, abc, 5, "token two positions back (new)"),
        task("h-rank", make_rank, (0, 1, 2, 3), 5, "count of smaller tokens (new)"),
        task(
            "h-neighbour-sum",
            make_neighbour_sum,
            (0, 1, 2),
            5,
            "digit plus previous digit mod 3 (new)",
        ),
    ]
    return {t.case_id: t for t in tasks}


HELDOUT_TASKS: dict[str, TracrTask] = _build_tasks()
HELDOUT_IDS: tuple[str, ...] = tuple(HELDOUT_TASKS)
