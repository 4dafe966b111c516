"""Tests for circuitlasso.data.bias_in_bios on a small local copy in the hub's format."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import datasets
import pandas as pd
import pytest
from huggingface_hub import constants as hf_constants

from circuitlasso import cache
from circuitlasso.data import load_dataset
from circuitlasso.data.bias_in_bios import load_bias_in_bios, read_bias_in_bios_split

# Deliberately unequal groups, plus rows of other professions that must be left out.
GROUP_SIZES = {
    ("professor", "male"): 9,
    ("professor", "female"): 4,
    ("nurse", "male"): 3,
    ("nurse", "female"): 7,
    ("physician", "male"): 5,
    ("physician", "female"): 2,
}


@pytest.fixture
def source(tmp_path: Path, write_bias_in_bios: Callable[..., Path]) -> Path:
    return write_bias_in_bios(tmp_path / "bias_in_bios", GROUP_SIZES, seed=3)


def group_of(text: str) -> tuple[str, str]:
    """(profession, gender) written into each fixture text: '... a <gender> <profession>.'"""
    gender, profession = text.rstrip(".").split()[-2:]
    return profession, gender


def test_fixture_has_hub_schema(source: Path) -> None:
    frame = read_bias_in_bios_split("train", source)
    assert list(frame.columns) == ["hard_text", "profession", "gender"]
    assert frame["profession"].dtype == "int64" and frame["gender"].dtype == "int64"
    assert len(frame) == sum(GROUP_SIZES.values())
    # ids from the dataset card: nurse = 13, professor = 21; male = 0, female = 1
    assert set(frame.loc[frame["hard_text"].str.endswith("male professor."), "profession"]) == {21}
    assert set(frame.loc[frame["hard_text"].str.endswith("female nurse."), "gender"]) == {1}


def test_ambiguous_sets_pair_profession_with_gender(source: Path) -> None:
    sets = load_bias_in_bios(source=source)
    ambiguous = sets["ambiguous_train"]
    assert list(ambiguous.columns) == ["text", "profession", "gender"]
    # min(9 male professors, 7 female nurses) = 7 of each
    counts = ambiguous.groupby(["profession", "gender"]).size().to_dict()
    assert counts == {("nurse", "female"): 7, ("professor", "male"): 7}
    assert all(group_of(t) == (p, g) for t, p, g in ambiguous.itertuples(index=False))
    assert ambiguous["text"].str.startswith("train ").all()
    assert sets["ambiguous_test"]["text"].str.startswith("test ").all()


def test_balanced_sets_have_four_equal_groups(source: Path) -> None:
    sets = load_bias_in_bios(source=source)
    for key, prefix in [("balanced_train", "train "), ("balanced_test", "test ")]:
        balanced = sets[key]
        counts = balanced.groupby(["profession", "gender"]).size()
        assert len(counts) == 4 and set(counts) == {3}  # min group: 3 male nurses
        assert all(group_of(t) == (p, g) for t, p, g in balanced.itertuples(index=False))
        assert balanced["text"].str.startswith(prefix).all()
        assert balanced["text"].is_unique


def test_groups_keep_their_first_rows_in_dataset_order(source: Path) -> None:
    frame = read_bias_in_bios_split("train", source)
    female_professors = frame.loc[frame["hard_text"].str.endswith("female professor.")]
    balanced = load_bias_in_bios(source=source)["balanced_train"]
    chosen = balanced.loc[(balanced.profession == "professor") & (balanced.gender == "female")]
    assert set(chosen["text"]) == set(female_professors["hard_text"].iloc[:3])


def test_shuffle_is_seeded_like_marks_et_al(source: Path) -> None:
    first = load_bias_in_bios(source=source, seed=42)
    again = load_bias_in_bios(source=source, seed=42)
    other = load_bias_in_bios(source=source, seed=7)
    for key, frame in first.items():
        pd.testing.assert_frame_equal(frame, again[key])
    assert not first["balanced_train"]["text"].equals(other["balanced_train"]["text"])

    # reference: Marks et al.'s recipe written out with plain lists
    frame = read_bias_in_bios_split("train", source)
    texts = frame["hard_text"].tolist()
    neg = [t for t in texts if t.endswith(" male professor.")][:7]
    pos = [t for t in texts if t.endswith(" female nurse.")][:7]
    data = neg + pos
    idxs = list(range(len(data)))
    random.Random(42).shuffle(idxs)
    assert first["ambiguous_train"]["text"].tolist() == [data[i] for i in idxs]


def test_other_professions_and_dev_split(source: Path) -> None:
    sets = load_bias_in_bios(("physician", "nurse"), split="dev", source=source)
    assert set(sets["ambiguous_train"]["profession"]) == {"physician", "nurse"}
    assert len(sets["ambiguous_train"]) == 2 * 5  # min(5 male physicians, 7 female nurses)
    assert sets["balanced_train"]["text"].str.startswith("dev ").all()
    via_registry = load_dataset("bias_in_bios", professions=("physician", "nurse"), source=source)
    assert len(via_registry["balanced_test"]) == 4 * 2  # min group: 2 female physicians


@pytest.mark.parametrize(
    ("professions", "kwargs", "match"),
    [
        (("professor", "astronaut"), {}, "unknown professions \\['astronaut'\\]"),
        (("nurse", "nurse"), {}, "two different names"),
        (("professor", "nurse"), {"split": "test"}, "split must be one of"),
        (("professor", "dentist"), {}, "split 'train' has no biographies of female dentists"),
    ],
)
def test_bad_arguments(source: Path, professions: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_bias_in_bios(professions, source=source, **kwargs)


def test_source_without_split_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no parquet files of split 'train'"):
        load_bias_in_bios(source=tmp_path)


def test_source_with_wrong_schema(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    pd.DataFrame({"text": ["x"], "label": [0]}).to_parquet(tmp_path / "data" / "train.parquet")
    with pytest.raises(ValueError, match="lacks columns \\['hard_text', 'profession', 'gender'\\]"):
        read_bias_in_bios_split("train", tmp_path)


def test_hub_offline_says_what_and_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    with pytest.raises(cache.ResourceUnavailableError) as info:
        read_bias_in_bios_split("train")
    message = str(info.value)
    assert "hf download LabHC/bias_in_bios --repo-type dataset" in message
    assert str(tmp_path / "datasets--LabHC--bias_in_bios") in message
