"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants

from circuitlasso import cache

TOKENIZER_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "gpt2-tokenizer"


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face hub cache in offline mode; our own cache mirrors the tokenizer."""
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "circuitlasso"))
    monkeypatch.setenv(cache.MIRROR_ENV, str(TOKENIZER_DIR))
    return hub
