"""CoLA, the Corpus of Linguistic Acceptability (Warstadt et al.), from its official 1.1 release."""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

import pandas as pd

from circuitlasso.cache import fetch

COLA_URL = "https://nyu-mll.github.io/CoLA/cola_public_1.1.zip"
COLA_SHA256 = "2cf856f46df11c143d38e0cf2f9f34ff2fdb088c521cd859f5c4b9581683278b"
# split name -> file in the zip (raw, untokenized sentences). The test sets are not public.
COLA_SPLITS = {
    "train": "cola_public/raw/in_domain_train.tsv",
    "dev": "cola_public/raw/in_domain_dev.tsv",
    "in_domain_dev": "cola_public/raw/in_domain_dev.tsv",
    "out_of_domain_dev": "cola_public/raw/out_of_domain_dev.tsv",
}
# Columns of the release's .tsv files (its README, section 4.2).
_TSV_COLUMNS = ["source", "label", "author_judgment", "sentence"]


def load_cola(split: str = "train", *, mirror: str | Path | None = None) -> pd.DataFrame:
    """One CoLA split as a DataFrame with columns ``sentence``, ``label``, ``source``.

    ``label`` is an int, 1 = acceptable; ``source`` is the code of the publication the sentence
    comes from. Splits: ``train`` (8,551 rows), ``dev`` = ``in_domain_dev`` (527) and
    ``out_of_domain_dev`` (516). The zip is fetched through :func:`circuitlasso.cache.fetch`,
    so a local mirror directory (``mirror`` or ``$CIRCUITLASSO_MIRROR``) holding
    ``cola_public_1.1.zip`` is a valid source.
    """
    if split not in COLA_SPLITS:
        raise ValueError(f"unknown CoLA split {split!r}; valid splits: {', '.join(COLA_SPLITS)}")
    archive = fetch(COLA_URL, COLA_SHA256, mirror=mirror)
    with zipfile.ZipFile(archive) as zf:
        text = zf.read(COLA_SPLITS[split]).decode("utf-8")
    frame = pd.read_csv(
        io.StringIO(text),
        sep="\t",
        header=None,
        names=_TSV_COLUMNS,
        quoting=csv.QUOTE_NONE,
        keep_default_na=False,
        dtype={"source": str, "label": "int64", "author_judgment": str, "sentence": str},
    )
    return frame[["sentence", "label", "source"]]
