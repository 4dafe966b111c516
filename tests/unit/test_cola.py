"""Tests for circuitlasso.data.cola on the real CoLA 1.1 zip, served from a local mirror."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest

from circuitlasso import cache
from circuitlasso.data import load_dataset
from circuitlasso.data.cola import COLA_URL, load_cola


@pytest.fixture(autouse=True)
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache and no network: every test must get the zip from a mirror or fail."""

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.MIRROR_ENV, raising=False)
    monkeypatch.setattr(cache.urllib.request, "urlopen", offline)
    return tmp_path / "cache"


@pytest.fixture
def mirror(monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> Path:
    monkeypatch.setenv(cache.MIRROR_ENV, str(shared_data))
    return shared_data


@pytest.mark.parametrize(
    ("split", "rows", "acceptable"),
    # counts from the release README (rows) and the reference (train acceptable)
    [("train", 8551, 6023), ("dev", 527, None), ("out_of_domain_dev", 516, None)],
)
def test_split_sizes(mirror: Path, split: str, rows: int, acceptable: int | None) -> None:
    frame = load_cola(split)
    assert list(frame.columns) == ["sentence", "label", "source"]
    assert len(frame) == rows
    assert set(frame["label"]) == {0, 1}
    assert frame["label"].dtype.kind == "i"
    if acceptable is not None:
        assert frame["label"].sum() == acceptable
    assert (frame["sentence"].str.len() > 0).all()


def test_rows_parse_quotes_and_sources(mirror: Path) -> None:
    train = load_cola("train")
    # first line of raw/in_domain_train.tsv: gj04 <tab> 1 <tab> <tab> Our friends won't ...
    assert train.iloc[0].to_dict() == {
        "sentence": "Our friends won't buy this analysis, let alone the next one we propose.",
        "label": 1,
        "source": "gj04",
    }
    assert train["sentence"].str.contains('"').any()  # quotes kept verbatim, not parsed
    assert train["source"].nunique() == 17  # the README's 17 in-domain sources


def test_dev_aliases_and_registry(mirror: Path) -> None:
    dev = load_cola("dev")
    assert dev.equals(load_cola("in_domain_dev"))
    assert dev.equals(load_dataset("cola", split="dev"))


def test_unknown_split() -> None:
    with pytest.raises(ValueError, match="'test'.*train, dev"):
        load_cola("test")


def test_sha256_mismatch_in_mirror(tmp_path: Path) -> None:
    fake = tmp_path / "cola_public_1.1.zip"
    fake.write_bytes(b"not the CoLA release")
    with pytest.raises(ValueError, match="cola_public_1.1.zip has sha256 .* expected 2cf856f4"):
        load_cola("train", mirror=tmp_path)


def test_offline_and_missing_says_what_and_where(empty_cache: Path) -> None:
    with pytest.raises(cache.ResourceUnavailableError) as info:
        load_cola("train")
    message = str(info.value)
    assert COLA_URL in message
    assert cache.MIRROR_ENV in message
    assert str(empty_cache / "files") in message
