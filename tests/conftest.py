"""Fixtures shared by the unit, integration and browser tests."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from circuitlasso import cache
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import LabelFit
from circuitlasso.circuits.study import FeatureStudy
from circuitlasso.circuits.trace import LayerRegressions
from circuitlasso.data.bias_in_bios import (
    GENDERS,
    HUB_COLUMNS,
    PROFESSIONS,
    TEST_SPLIT,
    TRAIN_SPLITS,
)
from circuitlasso.estimator import CircuitLasso

QUICKSTART = Path(__file__).resolve().parents[1] / "book" / "quickstart.md"


@dataclass
class ToyCircuit:
    """A traced and interpreted circuit of the toy world (layers 1 to 3, 300 sentences)."""

    study: FeatureStudy
    lasso: CircuitLasso
    label_fit: LabelFit
    regressions: LayerRegressions
    circuit: Circuit


@pytest.fixture(scope="session")
def toy_circuit(tmp_path_factory: pytest.TempPathFactory) -> ToyCircuit:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        study = FeatureStudy.load("toy", [1, 2, 3], "resid_post", "toy_cola", max_prompts=300,
                                  label_prompts=20, seed=1, batch_size=100)  # fmt: skip
    lasso = CircuitLasso(label_lam_ratio=0.05, lam_ratio=0.1, roots=4, k=2, min_prompts=5)
    lasso.fit(study.Z, study.y)
    study.interpret_circuit(lasso.circuit_)
    return ToyCircuit(study, lasso, lasso.label_fit_, lasso.regressions_, lasso.circuit_)


@pytest.fixture(scope="session")
def quickstart_script() -> str:
    """The one Python script of the book's Quickstart page."""
    blocks = re.findall(r"```python\n(.*?)```", QUICKSTART.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "the Quickstart page shows exactly one script"
    return blocks[0]


def _write_bias_in_bios(
    folder: Path, group_sizes: dict[tuple[str, str], int], *, seed: int = 0
) -> Path:
    """Write a small copy of the Bias in Bios hub data set (its file layout and schema) under
    ``folder``: ``group_sizes[(profession, gender)]`` rows of each group in each of the
    ``train``, ``dev`` and ``test`` splits, in a seeded random order; each text names its row's
    profession and gender, so group membership can be read back from the text."""
    rng = np.random.default_rng(seed)
    for split in (*TRAIN_SPLITS, TEST_SPLIT):
        rows = []
        for (profession, gender), size in group_sizes.items():
            ids = (PROFESSIONS.index(profession), GENDERS.index(gender))
            rows += [(f"{split} bio {i}: a {gender} {profession}.", *ids) for i in range(size)]
        frame = pd.DataFrame(rows, columns=list(HUB_COLUMNS)).iloc[rng.permutation(len(rows))]
        with cache.atomic_path(folder / "data" / f"{split}-00000-of-00001.parquet") as tmp:
            frame.to_parquet(tmp, index=False)
    return folder


@pytest.fixture(scope="session")
def write_bias_in_bios() -> Callable[..., Path]:
    """The writer of a small local copy of Bias in Bios in the hub's format."""
    return _write_bias_in_bios
