"""Bias in Bios (De-Arteaga et al.) built into the ambiguous and balanced sets of SHIFT.

The construction follows Marks et al. (Sparse Feature Circuits), as in their released code
(github.com/saprmarks/feature-circuits): for professions (a, b), the *ambiguous* set holds male
a's and female b's, the *balanced* set holds male a's, female a's, male b's and female b's; each
group is cut to the size of the smallest one by keeping its first rows in dataset order, the
groups are concatenated in that order, and the rows are shuffled with ``random.Random(seed)``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from circuitlasso.cache import hub_resource_error

DATASET_REPO = "LabHC/bias_in_bios"
HUB_COLUMNS = ("hard_text", "profession", "gender")
# Profession ids (position = id), from the dataset card of LabHC/bias_in_bios on the Hugging Face
# hub ("Classification labels"); Marks et al. use professor = 21, nurse = 13.
PROFESSIONS = (
    "accountant", "architect", "attorney", "chiropractor", "comedian", "composer", "dentist",
    "dietitian", "dj", "filmmaker", "interior_designer", "journalist", "model", "nurse",
    "painter", "paralegal", "pastor", "personal_trainer", "photographer", "physician", "poet",
    "professor", "psychologist", "rapper", "software_engineer", "surgeon", "teacher",
    "yoga_teacher",
)  # fmt: skip
# Gender ids from the same card ("Sensitive attributes"): Male = 0, Female = 1.
GENDERS = ("male", "female")
TRAIN_SPLITS = ("train", "dev")
TEST_SPLIT = "test"


def _split_files(folder: Path, split: str) -> list[Path]:
    """Parquet files of ``split`` under ``folder``, in name order.

    Accepts the hub repo layout (``data/<split>-00000-of-00001-<hash>.parquet``), the hub's
    parquet conversion (``<config>/<split>/0000.parquet``) and a plain ``<split>.parquet``.
    """
    return sorted(
        path
        for path in folder.rglob("*.parquet")
        if path.name.startswith(f"{split}-")
        or path.name == f"{split}.parquet"
        or path.parent.name == split
    )


def read_bias_in_bios_split(split: str, source: str | Path | None = None) -> pd.DataFrame:
    """One split of the hub dataset in its own schema: ``hard_text``, ``profession``, ``gender``.

    ``source`` is a local folder of the dataset's parquet files; ``None`` reads the hub dataset
    through ``datasets.load_dataset`` (cached by the ``datasets`` library).
    """
    if source is None:
        import datasets

        try:
            frame = datasets.load_dataset(DATASET_REPO, split=split).to_pandas()
        except OSError as err:  # offline (ConnectionError) or missing from the cache
            raise hub_resource_error(
                f"the {split!r} split of the data set", DATASET_REPO, err, repo_type="dataset"
            ) from err
    else:
        files = _split_files(Path(source), split)
        if not files:
            raise ValueError(f"no parquet files of split {split!r} under {source}")
        frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    missing = [c for c in HUB_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"Bias in Bios split {split!r} lacks columns {missing}")
    return frame


def _groups(
    frame: pd.DataFrame, groups: list[tuple[str, str]], split: str, seed: int
) -> pd.DataFrame:
    """Texts of each (profession, gender) group cut to a common size, concatenated, shuffled."""
    texts = []
    for profession, gender in groups:
        rows = (frame["profession"] == PROFESSIONS.index(profession)) & (
            frame["gender"] == GENDERS.index(gender)
        )
        group_texts = frame.loc[rows, "hard_text"].tolist()
        if not group_texts:
            raise ValueError(f"split {split!r} has no biographies of {gender} {profession}s")
        texts.append(group_texts)
    n = min(len(t) for t in texts)
    built = pd.DataFrame(
        {
            "text": [text for group in texts for text in group[:n]],
            "profession": np.repeat([p for p, _ in groups], n),
            "gender": np.repeat([g for _, g in groups], n),
        }
    )
    order = list(range(len(built)))
    random.Random(seed).shuffle(order)
    return built.iloc[order].reset_index(drop=True)


def check_professions(professions: Sequence[str]) -> None:
    """A ValueError naming what is wrong with a pair of professions: not two different names,
    or a name the data set's card does not list."""
    if len(professions) != 2 or professions[0] == professions[1]:
        raise ValueError(f"professions must be two different names, got {list(professions)}")
    unknown = [p for p in professions if p not in PROFESSIONS]
    if unknown:
        raise ValueError(f"unknown professions {unknown}; valid: {', '.join(PROFESSIONS)}")


def check_request(professions: Sequence[str], split: str) -> None:
    """A ValueError naming what is wrong with a request for the sets of ``professions`` trained
    on hub split ``split``: the pair (:func:`check_professions`), or an unknown split."""
    check_professions(professions)
    if split not in TRAIN_SPLITS:
        raise ValueError(f"split must be one of {TRAIN_SPLITS}, got {split!r}")


def build_sets(
    train: pd.DataFrame,
    test: pd.DataFrame,
    professions: tuple[str, str],
    *,
    split: str = "train",
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """The ambiguous and balanced sets (see :func:`load_bias_in_bios`) of ``professions``
    built from rows in the hub's schema (``hard_text``, ``profession`` and ``gender`` ids):
    ``train`` rows of hub split ``split``, ``test`` rows of ``test``."""
    check_request(professions, split)
    first, second = professions
    ambiguous = [(first, "male"), (second, "female")]
    balanced = [(first, "male"), (first, "female"), (second, "male"), (second, "female")]
    return {
        "ambiguous_train": _groups(train, ambiguous, split, seed),
        "balanced_train": _groups(train, balanced, split, seed),
        "ambiguous_test": _groups(test, ambiguous, TEST_SPLIT, seed),
        "balanced_test": _groups(test, balanced, TEST_SPLIT, seed),
    }


def load_bias_in_bios(
    professions: tuple[str, str] = ("professor", "nurse"),
    *,
    split: str = "train",
    seed: int = 0,
    source: str | Path | None = None,
) -> dict[str, pd.DataFrame]:
    """Ambiguous and balanced Bias in Bios sets for a pair of professions.

    ``professions = (a, b)``: the ambiguous sets pair a with men and b with women. The training
    sets come from hub split ``split`` (``train``, as Marks et al., or ``dev``), the test sets
    from ``test``. Returns ``ambiguous_train``, ``balanced_train``, ``ambiguous_test`` and
    ``balanced_test``, each with columns ``text``, ``profession`` (name) and ``gender``
    (``"male"`` / ``"female"``). ``source``: see :func:`read_bias_in_bios_split`. Offline,
    :func:`circuitlasso.data.synthetic_bios.load_synthetic_bios` builds the same sets from
    generated rows.
    """
    check_request(professions, split)  # before any download
    train = read_bias_in_bios_split(split, source)
    test = read_bias_in_bios_split(TEST_SPLIT, source)
    return build_sets(train, test, professions, split=split, seed=seed)
