"""The toy world's own check, run on no other model: the automatic gender-feature rule's calls
on a comparison's candidates against the planted ground truth, where every biography's gender and
every word category are known (:func:`~circuitlasso.evaluation.debias.gender.toy_truth`)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import scipy.sparse as sp
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.collect import collect_sae_features
from circuitlasso.evaluation.debias.compare import Comparison
from circuitlasso.evaluation.debias.gender import rule_vs_truth, toy_name_coverage

TOY_MODEL = "toy"  # the toy world's model, as load_model names it


def rule_vs_toy_truth(
    model: HookedTransformer,
    saes: Mapping[int, SAE],
    comparison: Comparison,
    splits: Mapping[str, pd.DataFrame],
    *,
    batch_size: int = 64,
) -> pd.DataFrame:
    """:func:`~circuitlasso.evaluation.debias.gender.rule_vs_truth` for the comparison's
    candidates, the ground truth read on the balanced training split of ``splits`` (gender and
    profession independent) with the features of ``saes`` collected here, and how many of the toy
    world's first names the rule's swap list has (:func:`toy_name_coverage`)."""
    balanced = splits["balanced_train"]
    layers = sorted({int(s) for found in comparison.candidates.values() for s in found["layer"]})
    Z: Mapping[int, sp.csr_matrix] = {}
    if layers:
        texts = balanced["text"].tolist()
        chosen = {s: saes[s] for s in layers}
        Z = collect_sae_features(model, chosen, texts, batch_size=batch_size, progress=False)
    male = (balanced["gender"] == "male").to_numpy()
    coverage = "{} of {}".format(*toy_name_coverage())
    return rule_vs_truth(comparison.candidates, Z, male).assign(**{"names swapped": coverage})
