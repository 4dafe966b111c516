"""The Bias in Bios task: its four splits and their group sizes, CBP's concepts, the 0/1 targets
and the three accuracies of Table 2.

A split is a DataFrame with columns ``text``, ``profession`` and ``gender`` (the format of
:func:`circuitlasso.data.bias_in_bios.load_bias_in_bios`). For ``professions = (a, b)`` the
ambiguous splits hold male a's and female b's, the balanced ones all four groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from circuitlasso.data import load_dataset
from circuitlasso.data.bias_in_bios import check_professions

DATASETS = ("toy_bias_in_bios", "bias_in_bios", "synthetic_bios")
SPLITS = ("ambiguous_train", "balanced_train", "ambiguous_test", "balanced_test")
GENDERS = ("male", "female")
TOY_PROFESSIONS = ("professor", "nurse")
# CBP's concepts on the toy world (name -> short texts in its vocabulary); the last two are the
# gender concepts CBP leaves out.
TOY_CONCEPTS = {
    "teaching": ["lectures", "seminar", "undergraduate students", "the university"],
    "research": ["research", "journals", "papers and books", "thesis"],
    "hospital": ["hospital", "ward", "the emergency department"],
    "patient care": ["patients", "medication", "bandages", "injections"],
    "hobbies": ["hiking", "reading", "cooking", "chess"],
    "family": ["family", "two children", "a dog"],
    "male": ["he", "his", "him", "man"],
    "female": ["she", "her", "woman"],
}


def load_splits(
    dataset: str,
    professions: Sequence[str],
    *,
    seed: int = 0,
    max_prompts: int | None = None,
    source: str | Path | None = None,
    profession_signal: float = 1.0,
) -> dict[str, pd.DataFrame]:
    """The four splits of ``dataset`` (one of :data:`DATASETS`: the toy world's, the hub's, the
    biographies generated here) for ``professions = (a, b)``, each cut to at most
    ``max_prompts`` rows by a seeded sample of equal groups (:func:`_cut`); an unknown
    profession, an empty split or a missing
    group is an error naming it. ``source``: a local copy of the hub data set (see
    :func:`~circuitlasso.data.bias_in_bios.read_bias_in_bios_split`); ``profession_signal``:
    below 1, generated biographies whose profession cues are often the other profession's
    (:func:`~circuitlasso.data.synthetic_bios.biography`), ``synthetic_bios`` only."""
    check_professions(professions)
    pair = (str(professions[0]), str(professions[1]))
    if profession_signal != 1.0 and dataset != "synthetic_bios":
        raise ValueError(f"profession_signal sets generated biographies; {dataset} has none")
    if dataset == "toy_bias_in_bios":
        if pair != TOY_PROFESSIONS:
            raise ValueError(
                f"the toy world has professions {TOY_PROFESSIONS} (professors paired with men in "
                f"the ambiguous set), got {pair}"
            )
        if source is not None:
            raise ValueError("source names a copy of the hub data set; the toy world has none")
        splits = load_dataset(dataset, seed=seed)
    elif dataset == "bias_in_bios":
        splits = load_dataset(dataset, professions=pair, seed=seed, source=source)
    elif dataset == "synthetic_bios":
        if source is not None:
            raise ValueError("source names a copy of the hub data set; synthetic_bios has none")
        splits = load_dataset(
            dataset, professions=pair, seed=seed, profession_signal=profession_signal
        )
    else:
        raise ValueError(f"unknown data set {dataset!r}; valid: {', '.join(DATASETS)}")
    if max_prompts is not None:
        splits = {name: _cut(frame, max_prompts, seed) for name, frame in splits.items()}
    for name in SPLITS:
        check_split(splits.get(name), name, pair)
    return splits


def _cut(frame: pd.DataFrame, max_prompts: int, seed: int) -> pd.DataFrame:
    """At most ``max_prompts`` rows of ``frame``, as many of each (profession, gender) group as
    it allows (the first groups one more where they do not divide evenly), each a seeded
    sample, shuffled together: a balanced split stays balanced, and no group comes first."""
    groups = [group for _, group in frame.groupby(["profession", "gender"], sort=True)]
    share, extra = divmod(max(max_prompts, 0), max(len(groups), 1))
    parts = [
        group.sample(n=min(share + (k < extra), len(group)), random_state=seed)
        for k, group in enumerate(groups)
    ]
    if not parts:
        return frame.iloc[:0]
    return pd.concat(parts).sample(frac=1.0, random_state=seed)


def group_sizes(splits: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """``(groups, splits)`` number of biographies of each (profession, gender) group in each
    split, 0 where a split has none."""
    sizes = {name: frame.groupby(["profession", "gender"]).size() for name, frame in splits.items()}
    return pd.DataFrame(sizes).fillna(0).astype(int)


def bottleneck(
    concepts: Mapping[str, Sequence[str]], gender_concepts: Sequence[str]
) -> dict[str, Sequence[str]]:
    """The ``concepts`` (name -> short texts) CBP's bottleneck keeps: all but the
    ``gender_concepts``, each of which must be one of them."""
    unknown = sorted(set(gender_concepts) - set(concepts))
    if unknown:
        raise ValueError(f"gender concepts {unknown} are not among the concepts {list(concepts)}")
    return {name: texts for name, texts in concepts.items() if name not in gender_concepts}


def concept_table(
    concepts: Mapping[str, Sequence[str]] | None, gender_concepts: Sequence[str]
) -> pd.DataFrame:
    """One row per concept (``concepts``, name -> short texts; None: :data:`TOY_CONCEPTS`): its
    ``texts`` joined by commas and whether it is ``in the bottleneck`` (see :func:`bottleneck`)."""
    concepts = TOY_CONCEPTS if concepts is None else concepts
    kept = bottleneck(concepts, gender_concepts)
    return pd.DataFrame(
        {
            "texts": [", ".join(texts) for texts in concepts.values()],
            "in the bottleneck": [name in kept for name in concepts],
        },
        index=pd.Index(list(concepts), name="concept"),
    )


def check_split(frame: pd.DataFrame | None, name: str, professions: Sequence[str]) -> None:
    """Raise ``ValueError`` unless split ``name`` holds every profession x gender group it should
    (ambiguous: (a, male) and (b, female); balanced: all four)."""
    if frame is None or len(frame) == 0:
        raise ValueError(f"split {name!r} is empty")
    missing_columns = {"text", "profession", "gender"} - set(frame.columns)
    if missing_columns:
        raise ValueError(f"split {name!r} lacks columns {sorted(missing_columns)}")
    first, second = professions
    if name.startswith("ambiguous"):
        groups = [(first, "male"), (second, "female")]
    else:
        groups = [(p, g) for p in professions for g in GENDERS]
    present = set(zip(frame["profession"], frame["gender"], strict=True))
    missing = [group for group in groups if group not in present]
    if missing:
        raise ValueError(f"split {name!r} has no biographies of the groups {missing}")


def targets(frame: pd.DataFrame, professions: Sequence[str]) -> np.ndarray:
    """``(M,)`` int profession label: 1 for ``professions[0]``, 0 for ``professions[1]``."""
    unknown = sorted(set(frame["profession"]) - set(professions))
    if unknown:
        raise ValueError(f"professions {unknown} are not among {professions}")
    return (frame["profession"] == professions[0]).to_numpy().astype(int)


def accuracies(predictions: np.ndarray, frame: pd.DataFrame, professions: Sequence[str]) -> dict:
    """Table 2's columns for ``predictions: (M,)`` (1 = ``professions[0]``) on a balanced split,
    in percent.

    - ``profession``: accuracy of the predicted profession.
    - ``gender``: accuracy of the prediction read as a gender, ``professions[0]`` as male (the
      pairing of the ambiguous set); 50 means the output says nothing about gender, 100 that it
      follows gender, below 50 that it over-corrects.
    - ``worst_group``: the lowest profession accuracy over the four profession x gender groups.
    """
    predictions = np.asarray(predictions).astype(int)
    if predictions.shape != (len(frame),):
        raise ValueError(f"predictions have shape {predictions.shape}, the split {len(frame)} rows")
    correct = predictions == targets(frame, professions)
    male = (frame["gender"] == "male").to_numpy()
    groups = frame.groupby(["profession", "gender"]).indices.values()
    return {
        "profession": 100 * float(correct.mean()),
        "gender": 100 * float(np.mean(predictions == male)),
        "worst_group": 100 * min(float(correct[rows].mean()) for rows in groups),
    }
