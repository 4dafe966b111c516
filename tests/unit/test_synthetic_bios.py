"""Biographies generated offline: the same rows on every machine, gender in names and pronouns,
profession in duties and places but never named, no template that gives the profession away, and
the hub loader's own construction of the ambiguous and balanced sets."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import OneHotEncoder

from circuitlasso.data import load_dataset
from circuitlasso.data import synthetic_bios as sb
from circuitlasso.data.bias_in_bios import GENDERS, PROFESSIONS, load_bias_in_bios
from circuitlasso.evaluation.debias.data import load_splits


@pytest.mark.parametrize("split", list(sb.PER_GROUP))
def test_each_split_is_the_same_rows_on_every_machine(split: str) -> None:
    frame = sb.generate_split(split)
    assert len(frame) == 12 * sb.PER_GROUP[split]  # 6 professions x 2 genders
    assert sb.digest(frame) == sb.SHA256[split]
    assert sb.digest(sb.generate_split(split, seed=1)) != sb.SHA256[split]


def test_gender_is_in_the_names_and_pronouns_and_neither_profession_of_the_pair_is_named() -> None:
    frame = sb.generate_split("dev")
    words = {"male": {"he", "his", "him"}, "female": {"she", "her"}}
    names = {g: set(sb.FIRST_NAMES[g]) for g in GENDERS}
    partner = {a: b for pair in sb.PAIRS for a, b in (pair, pair[::-1])}
    for text, profession, gender in zip(frame.hard_text, frame.profession, frame.gender,
                                        strict=True):  # fmt: skip
        tokens = re.findall(r"[A-Za-z']+", text)
        lower = {t.lower() for t in tokens}
        mine, other = GENDERS[gender], GENDERS[1 - gender]
        assert lower & words[mine] and not lower & words[other], text
        assert set(tokens) & names[mine] and not set(tokens) & names[other], text
        own = PROFESSIONS[profession]
        for name in (own, partner[own]):  # neither its profession's name nor its pair's
            assert not re.search(rf"\b{name.replace('_', ' ')}s?\b", text.lower()), (name, text)


@pytest.mark.parametrize("pair", sb.PAIRS)
def test_the_template_alone_says_nothing_of_the_profession_and_the_words_do(pair) -> None:
    train, test = (load_dataset("synthetic_bios", professions=pair, split="train", seed=0)[s]
                   for s in ("balanced_train", "balanced_test"))  # fmt: skip
    rows = {s: sb.generate_split(s).set_index("hard_text")["template"] for s in ("train", "test")}
    templates = OneHotEncoder(handle_unknown="ignore").fit(np.stack(rows["train"].to_numpy()))
    by_template = LogisticRegression(max_iter=1000).fit(
        templates.transform(np.stack(rows["train"][train.text].to_numpy())), train.profession
    )
    accuracy = by_template.score(
        templates.transform(np.stack(rows["test"][test.text].to_numpy())), test.profession
    )
    assert abs(accuracy - 0.5) < 0.05, accuracy  # chance on the balanced test set
    words = CountVectorizer().fit(train.text)
    by_words = LogisticRegression(max_iter=1000).fit(words.transform(train.text), train.profession)
    assert by_words.score(words.transform(test.text), test.profession) > 0.99


def test_the_sets_are_the_hub_loaders_construction_of_the_same_rows(tmp_path: Path) -> None:
    # the generated rows written as a local copy in the hub's layout, read by the hub's loader
    for split in ("train", "test"):
        frame = sb.generate_split(split, seed=3).drop(columns="template")
        (tmp_path / "data").mkdir(exist_ok=True)
        frame.to_parquet(tmp_path / "data" / f"{split}-00000-of-00001-abc.parquet")
    pair = ("surgeon", "dietitian")
    from_hub = load_bias_in_bios(pair, seed=3, source=tmp_path)
    offline = sb.load_synthetic_bios(pair, seed=3)
    assert from_hub.keys() == offline.keys()
    for name in from_hub:
        pd.testing.assert_frame_equal(from_hub[name], offline[name])
    sizes = offline["balanced_train"].groupby(["profession", "gender"]).size()
    assert sizes.to_dict() == {(p, g): sb.PER_GROUP["train"] for p in pair for g in GENDERS}
    splits = load_splits("synthetic_bios", pair, seed=3, max_prompts=100)
    assert {name: len(frame) for name, frame in splits.items()} == dict.fromkeys(splits, 100)
    # a cut keeps a balanced split balanced (a plain sample of 300 of professor/nurse's 1,200
    # balanced test rows, seed 0, put 57.3% of them on the ambiguous set's diagonal: groups of
    # 83, 55, 73 and 89), and its groups shuffled together
    for name, frame in splits.items():
        sizes = set(frame.groupby(["profession", "gender"]).size())
        assert sizes == ({25} if name.startswith("balanced") else {50}), name
    assert splits["ambiguous_train"]["profession"].iloc[:10].nunique() == 2


def test_bad_requests_are_named() -> None:
    with pytest.raises(ValueError, match="one of the generated pairs"):
        sb.load_synthetic_bios(("professor", "surgeon"))
    with pytest.raises(ValueError, match="unknown professions"):
        sb.load_synthetic_bios(("professor", "astronaut"))
    with pytest.raises(ValueError, match="split must be one of"):
        sb.load_synthetic_bios(split="test")
    with pytest.raises(ValueError, match="per_group must be at least 1"):
        sb.generate_split("train", per_group=0)
    with pytest.raises(ValueError, match="synthetic_bios has none"):
        load_splits("synthetic_bios", ("professor", "nurse"), source="somewhere")
    with pytest.raises(ValueError, match=r"profession_signal must be in \(0, 1\]"):
        sb.load_synthetic_bios(profession_signal=0.0)
    with pytest.raises(ValueError, match="toy_bias_in_bios has none"):
        load_splits("toy_bias_in_bios", ("professor", "nurse"), profession_signal=0.5)


def _own_cues(frame: pd.DataFrame, profession: str) -> float:
    """The share of ``profession``'s biographies whose workplace is one of its own."""
    texts = frame[frame.profession == PROFESSIONS.index(profession)].hard_text
    return float(np.mean([any(p in t for p in sb.CUES[profession]["places"]) for t in texts]))


@pytest.mark.parametrize("signal", [0.2, 0.6])
def test_a_weaker_profession_signal_draws_the_pairs_other_cues_as_often_as_asked(signal) -> None:
    frame = sb.generate_split("train", per_group=300, profession_signal=signal)
    # a cue is the profession's own with probability signal, else either profession's alike
    expected = signal + (1 - signal) / 2
    for profession in ("professor", "nurse"):
        assert _own_cues(frame, profession) == pytest.approx(expected, abs=0.05)
    assert _own_cues(sb.generate_split("train", per_group=300), "nurse") == 1.0
    # a biography's two duties differ, as at signal 1
    duties = [duty for cues in sb.CUES.values() for duty in cues["duties"]]
    assert not any(text.count(duty) > 1 for text in frame.hard_text for duty in duties)
    # the gender is as plain as ever: every biography names it with its pronouns
    male = frame[frame.gender == 0].hard_text
    assert all(re.search(r"\b(he|his|him|He|His)\b", t) for t in male)
    sets = sb.load_synthetic_bios(per_group=20, profession_signal=signal)
    generated = sb.generate_split("test", per_group=20, profession_signal=signal).hard_text
    assert sets["balanced_test"].text.isin(generated).all()


def test_no_last_name_is_a_first_name_and_no_duty_frame_repeats() -> None:
    first = set(sb.FIRST_NAMES["male"]) | set(sb.FIRST_NAMES["female"])
    assert not set(sb.LAST_NAMES) & first
    frames = np.stack(sb.generate_split("dev")["template"].to_numpy())
    assert not (frames[:, 1] == frames[:, 2]).any()
