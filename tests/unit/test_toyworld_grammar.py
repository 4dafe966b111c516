"""The toy language: data set statistics, violations checked by rules written here, the
biography splits, determinism and the tokenizer."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest

from circuitlasso.data.toyworld import biographies, grammar, lexicon
from circuitlasso.data.toyworld.datasets import (
    PARAGRAPH_SENTENCES,
    PARAGRAPH_WORDS,
    dominant_category,
    lm_training_texts,
    load_toy_bias_in_bios,
    load_toy_cola,
    minimal_pairs,
)
from circuitlasso.data.toyworld.grammar import token_categories
from circuitlasso.data.toyworld.tokenizer import (
    BOS,
    UNK,
    build_tokenizer,
    load_tokenizer,
    save_tokenizer,
)

CATEGORIES = token_categories()
AUXILIARIES = {"is", "are", "am", "was", "were", "does", "do", "did"}
IRREGULAR_PLURALS = {"children", "people", "men", "women", "mice"}


@pytest.fixture(scope="module")
def cola() -> pd.DataFrame:
    return pd.concat([load_toy_cola("train"), load_toy_cola("test")], ignore_index=True)


@pytest.fixture(scope="module")
def bios() -> dict[str, pd.DataFrame]:
    return load_toy_bias_in_bios()


# Independent reference rules ------------------------------------------------------------------


def noun_phrase(words: list[str], start: int, stop: int) -> tuple[int, bool, str] | None:
    """(person, plural, gender) of a name / pronoun / determiner + noun spanning
    ``words[start:stop]``, or None; gender is "male", "female", "it" or "unknown"."""
    span = words[start:stop]
    if len(span) == 1:
        word = span[0]
        pronouns = {
            "i": (1, False, "unknown"),
            "he": (3, False, "male"),
            "she": (3, False, "female"),
            "it": (3, False, "it"),
            "they": (3, True, "unknown"),
        }
        if word in pronouns:
            return pronouns[word]
        for gender in ("male", "female"):
            if word in CATEGORIES[f"{gender}_names"]:
                return (3, False, gender)
    if len(span) == 2 and span[0] in ("the", "a"):
        noun = span[1]
        gender = next(
            (g for g in ("male", "female") if noun in CATEGORIES[f"{g}_nouns"]), "unknown"
        )
        return (3, noun.endswith("s") or noun in IRREGULAR_PLURALS, gender)
    return None


def subject_before(words: list[str], index: int) -> tuple[int, bool, str] | None:
    for width in (1, 2):
        if index - width >= 0 and (found := noun_phrase(words, index - width, index)):
            return found
    return None


def subject_after(words: list[str], index: int) -> tuple[int, bool, str] | None:
    for width in (1, 2):
        if found := noun_phrase(words, index + 1, index + 1 + width):
            return found
    return None


def verb_agrees(verb: str, person: int, plural: bool) -> bool:
    if verb == "am":
        return person == 1
    if verb == "was":
        return not plural
    if verb in ("are", "were"):
        return plural
    if verb == "does" or verb.endswith("s"):
        return person == 3 and not plural
    return person == 1 or plural  # do, eat, see, ...


def agreement_ok(words: list[str]) -> bool:
    if words[0] in AUXILIARIES:
        subject = subject_after(words, 0)
        return words[0] == "did" or subject is None or verb_agrees(words[0], *subject[:2])
    for i, word in enumerate(words):
        if word in CATEGORIES["agreement_verbs"] and (subject := subject_before(words, i)):
            if not verb_agrees(word, *subject[:2]):
                return False
    return True


def reflexives_ok(words: list[str]) -> bool:
    antecedent = subject_after(words, -1)
    for i, word in enumerate(words):
        if word not in CATEGORIES["reflexives"]:
            continue
        if i + 1 < len(words) and words[i + 1] in CATEGORIES["agreement_verbs"]:
            return False  # a reflexive subject
        if antecedent is not None:
            person, plural, gender = antecedent
            allowed = (
                {"myself"}
                if person == 1
                else {"themselves"}
                if plural
                else {"male": {"himself"}, "female": {"herself"}, "it": {"itself"}}.get(
                    gender, {"himself", "herself", "itself"}
                )
            )
            if word not in allowed:
                return False
    return True


def punctuation_ok(words: list[str]) -> bool:
    return words[-1] == "?" if words[0] in AUXILIARIES else words[-1] in (".", "!")


def words_of(sentence: str) -> list[str]:
    return sentence.lower().split()


def bigrams(words: list[str]) -> set[tuple[str, str]]:
    padded = ["<s>", *words]
    return set(pairwise(padded))


# Data set statistics ---------------------------------------------------------------------------


def test_split_sizes_labels_and_violation_mix(cola: pd.DataFrame) -> None:
    train, test = load_toy_cola("train"), load_toy_cola("test")
    assert len(train) >= 8000 and len(test) >= 1000
    assert list(train.columns) == ["sentence", "label", "violation"]
    assert set(train["sentence"]).isdisjoint(test["sentence"])
    assert cola["sentence"].is_unique
    for frame in (train, test):
        assert 0.65 <= frame["label"].mean() <= 0.75
        assert ((frame["label"] == 1) == (frame["violation"] == "none")).all()
        shares = frame.loc[frame["label"] == 0, "violation"].value_counts(normalize=True)
        assert set(shares.index) == set(grammar.VIOLATIONS)
        assert shares.min() > 0.2


def test_acceptable_sentences_obey_every_rule(cola: pd.DataFrame) -> None:
    for sentence in cola.loc[cola["label"] == 1, "sentence"]:
        words = words_of(sentence)
        assert agreement_ok(words), sentence
        assert reflexives_ok(words), sentence
        assert punctuation_ok(words), sentence


@pytest.mark.parametrize(
    ("violation", "rule"),
    [("agreement", agreement_ok), ("reflexive", reflexives_ok), ("punctuation", punctuation_ok)],
)
def test_each_violation_breaks_its_rule(cola: pd.DataFrame, violation: str, rule) -> None:
    sentences = cola.loc[cola["violation"] == violation, "sentence"]
    broken = [s for s in sentences if not rule(words_of(s))]
    assert len(broken) == len(sentences), set(sentences) - set(broken)


def test_word_order_violations_hold_a_bigram_no_acceptable_sentence_has(
    cola: pd.DataFrame,
) -> None:
    rng = np.random.default_rng(123)
    seen = set().union(*(bigrams(grammar.acceptable_sentence(rng)) for _ in range(30_000)))
    for sentence in cola.loc[cola["violation"] == "word_order", "sentence"]:
        assert bigrams(words_of(sentence)) - seen, sentence


def test_binding_and_agreement_violations_break_nothing_else(cola: pd.DataFrame) -> None:
    for row in cola.loc[cola["violation"].isin(["reflexive", "agreement"])].itertuples():
        words = words_of(row.sentence)
        assert punctuation_ok(words), row.sentence
        other_rule = agreement_ok if row.violation == "reflexive" else reflexives_ok
        assert other_rule(words), row.sentence


def test_no_unacceptable_sentence_is_generated_as_acceptable(cola: pd.DataFrame) -> None:
    rng = np.random.default_rng(7)
    acceptable = {lexicon.render(grammar.acceptable_sentence(rng)) for _ in range(30_000)}
    assert acceptable.isdisjoint(cola.loc[cola["label"] == 0, "sentence"])


def test_minimal_pairs_differ_by_their_violation_only() -> None:
    rules = {"agreement": agreement_ok, "reflexive": reflexives_ok, "punctuation": punctuation_ok}
    for violation in grammar.VIOLATIONS:
        pairs = minimal_pairs(0, violation, 100)
        assert len(pairs) == 100
        for good, bad in pairs:
            good_words, bad_words = words_of(good), words_of(bad)
            assert len(good_words) == len(bad_words) and good != bad
            assert agreement_ok(good_words) and reflexives_ok(good_words)
            if violation in rules:
                assert not rules[violation](bad_words), bad
                assert sum(g != b for g, b in zip(good_words, bad_words, strict=True)) == 1
            else:
                assert sorted(good_words) == sorted(bad_words)


def test_violations_sit_on_words_of_their_planted_category() -> None:
    for violation in ("reflexive", "agreement", "punctuation"):
        members = CATEGORIES[grammar.VIOLATION_CATEGORIES[violation]]
        for good, bad in minimal_pairs(1, violation, 50):
            (swap,) = [{g, b} for g, b in zip(words_of(good), words_of(bad), strict=True) if g != b]
            assert swap & members, (violation, good, bad)
    determiners = CATEGORIES[grammar.VIOLATION_CATEGORIES["word_order"]]
    for _, bad in minimal_pairs(1, "word_order", 50):
        words = words_of(bad)
        assert words[0] not in grammar._STARTERS or determiners & set(words), bad
    assert set(grammar.VIOLATION_CATEGORIES) == set(grammar.VIOLATIONS)


# Biographies -----------------------------------------------------------------------------------


def test_bias_in_bios_splits(bios: dict[str, pd.DataFrame]) -> None:
    assert set(bios) == {"ambiguous_train", "balanced_train", "ambiguous_test", "balanced_test"}
    groups = {
        split: frame.groupby(["profession", "gender"]).size().to_dict()
        for split, frame in bios.items()
    }
    assert groups["ambiguous_train"] == {("professor", "male"): 1000, ("nurse", "female"): 1000}
    assert set(groups["balanced_train"].values()) == {500}
    assert len(groups["balanced_train"]) == 4
    assert set(groups["balanced_test"].values()) == {250} and len(groups["balanced_test"]) == 4
    texts = [set(frame["text"]) for frame in bios.values()]
    assert sum(len(t) for t in texts) == len(set().union(*texts))
    professions = bios["balanced_train"]["profession"]
    changes = int((professions != professions.shift()).sum())
    assert changes > len(professions) / 4  # shuffled, not grouped


def test_biographies_carry_gender_and_profession_where_planted(
    bios: dict[str, pd.DataFrame],
) -> None:
    """Every biography tells its profession. The standard ones tell the gender too; among the
    ambiguous training ones about a fifth (AMBIGUOUS_CUES) speak of "the author" instead, and
    none tells the other gender."""
    male = CATEGORIES["male_names"] | {"he", "his", "him"}
    female = CATEGORIES["female_names"] | {"she", "her"}
    untold = Counter()
    for split, frame in bios.items():
        for row in frame.itertuples():
            words = set(words_of(row.text))
            own, other = (male, female) if row.gender == "male" else (female, male)
            assert not words & other, row.text
            if not words & own:
                assert split == "ambiguous_train" and "author" in words, row.text
                untold[row.profession] += 1
            mine = CATEGORIES[f"{row.profession}_words"]
            other_job = "nurse_words" if row.profession == "professor" else "professor_words"
            assert words & mine and not words & CATEGORIES[other_job], row.text
            assert len(words_of(row.text)) < 64  # with <bos>, the toy model's context
    # 1,000 biographies per profession, each untold with probability 0.2 (sd 13)
    assert all(150 < untold[p] < 250 for p in ("professor", "nurse")), untold


# Determinism, errors, tokenizer ---------------------------------------------------------------


def test_generators_are_deterministic_given_the_seed() -> None:
    def sample(seed: int) -> list[str]:
        rng = np.random.default_rng(seed)
        sentences = [lexicon.render(grammar.acceptable_sentence(rng)) for _ in range(50)]
        sentences += [
            lexicon.render(grammar.unacceptable_sentence(rng, v)) for v in grammar.VIOLATIONS
        ]
        return sentences + [biographies.biography(rng, "nurse", "female")]

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)
    assert lm_training_texts(5, 40, 5) == lm_training_texts(5, 40, 5)
    assert not load_toy_cola("test", seed=1)["sentence"].equals(load_toy_cola("test")["sentence"])


def sentences_of(paragraph: str) -> list[str]:
    sentences, current = [], []
    for word in paragraph.split():
        current.append(word)
        if word in (".", "!", "?"):
            sentences.append(" ".join(current))
            current = []
    return sentences


def test_lm_texts_are_paragraphs_and_biographies_outside_the_test_splits(
    bios: dict[str, pd.DataFrame],
) -> None:
    texts = lm_training_texts(0, 20_000, 2_000)
    paragraphs, biographies = texts[:-2_000], texts[-2_000:]
    sentences = [s for p in paragraphs for s in sentences_of(p)]
    assert len(sentences) == 20_000
    assert all(len(p.split()) <= PARAGRAPH_WORDS for p in paragraphs)
    assert max(len(sentences_of(p)) for p in paragraphs) == PARAGRAPH_SENTENCES
    assert set(sentences).isdisjoint(load_toy_cola("test")["sentence"])
    assert all(reflexives_ok(words_of(s)) and agreement_ok(words_of(s)) for s in sentences)
    test_bios = set(bios["balanced_test"]["text"]) | set(bios["ambiguous_test"]["text"])
    assert set(biographies).isdisjoint(test_bios)


def test_loaders_return_copies_and_reject_bad_names() -> None:
    frame = load_toy_cola("test")
    frame.loc[0, "sentence"] = "changed"
    assert load_toy_cola("test").loc[0, "sentence"] != "changed"
    with pytest.raises(ValueError, match="split 'dev'"):
        load_toy_cola("dev")
    with pytest.raises(ValueError, match="violation 'tense'"):
        grammar.unacceptable_sentence(np.random.default_rng(0), "tense")
    with pytest.raises(ValueError, match="profession 'pilot'"):
        biographies.biography(np.random.default_rng(0), "pilot", "male")
    with pytest.raises(ValueError, match="gender_told must lie in \\[0, 1\\], got 1.5"):
        biographies.BiographyCues(gender_told=1.5)


def test_categories_are_in_the_vocabulary_and_in_the_data(
    cola: pd.DataFrame, bios: dict[str, pd.DataFrame]
) -> None:
    vocabulary = set(grammar.vocabulary())
    text = " ".join(cola["sentence"]) + " " + " ".join(pd.concat(bios.values())["text"])
    used = set(words_of(text))
    for name, members in CATEGORIES.items():
        assert members <= vocabulary, name
        assert members <= used, (name, members - used)
    assert CATEGORIES["reflexives"] == {"himself", "herself", "itself", "themselves", "myself"}


def test_tokenizer_round_trip(cola: pd.DataFrame, bios: dict[str, pd.DataFrame], tmp_path) -> None:
    tokenizer = build_tokenizer(grammar.vocabulary())
    save_tokenizer(tokenizer, tmp_path / "tokenizer.json")
    reloaded = load_tokenizer(tmp_path / "tokenizer.json")
    texts = cola["sentence"].tolist()[:500] + bios["balanced_test"]["text"].tolist()[:100]
    for text in texts:
        ids = reloaded(text)["input_ids"]
        assert ids == tokenizer(text)["input_ids"]
        assert ids[0] == tokenizer.convert_tokens_to_ids(BOS)
        assert tokenizer.convert_tokens_to_ids(UNK) not in ids
        assert reloaded.decode(ids, skip_special_tokens=True) == text.lower()
    assert tokenizer("John ate.")["input_ids"] == tokenizer("john ate .")["input_ids"]
    assert tokenizer("zebra")["input_ids"][1] == tokenizer.convert_tokens_to_ids(UNK)
    with pytest.raises(ValueError, match="repeated"):
        build_tokenizer(["cat", "cat"])


def test_dominant_category_needs_a_share_of_the_counts() -> None:
    assert dominant_category(Counter({"himself": 12, "myself": 8})) == "reflexives"
    assert dominant_category(Counter({".": 3, "?": 2, "the": 4})) == "final_punctuation"
    assert dominant_category(Counter({".": 3, "the": 4, "he": 3})) is None
    assert dominant_category(Counter({".": 3, "the": 4, "he": 3}), min_share=0.4) == "determiners"
    assert dominant_category(Counter()) is None
