"""A decoder's sentence log-probabilities and minimal-pair judgements, on the toy world's LM,
against the chain rule computed one prefix at a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from circuitlasso.data.minimal_pairs import MinimalPair
from circuitlasso.data.models import load_model
from circuitlasso.evaluation.acceptability import (
    minimal_pair_accuracy,
    minimal_pair_table,
    sentence_log_probs,
)

SENTENCES = [
    "Alan seemed worried .",
    "Is Julia weary ?",
    "The bankers declared that they were thirsty .",
]


@pytest.fixture(scope="module")
def toy_lm():
    return load_model("toy")


@torch.no_grad()
def _chain_rule(model, sentence: str, prefix_id: int) -> float:
    """log p(sentence): each token's probability read from a run over its prefix alone."""
    ids = [prefix_id, *model.to_tokens(sentence, prepend_bos=False)[0].tolist()]
    total = 0.0
    for i in range(1, len(ids)):
        logits = model(torch.tensor([ids[:i]]), return_type="logits")[0, -1].double()
        total += float(logits.log_softmax(-1)[ids[i]])
    return total


def test_log_probs_follow_the_chain_rule_in_padded_batches(toy_lm) -> None:
    bos = toy_lm.tokenizer.bos_token_id
    expected = [_chain_rule(toy_lm, s, bos) for s in SENTENCES]
    for batch_size in (1, 2, 3):  # the shorter sentences padded beside the longest
        found = sentence_log_probs(toy_lm, SENTENCES, batch_size=batch_size)
        np.testing.assert_allclose(found, expected, rtol=1e-5)
    other = sentence_log_probs(toy_lm, SENTENCES[:1], prefix_id=bos + 5)
    assert abs(other[0] - expected[0]) > 1e-3  # the context token is read


def test_minimal_pairs_are_judged_by_their_margin(toy_lm) -> None:
    pairs = [
        MinimalPair("subject_verb_agreement", "A mother is friendly .", "A mother are friendly ."),
        MinimalPair("reflexive_agreement", "Rachel follows herself .", "Rachel follows myself ."),
    ]
    table = minimal_pair_table(toy_lm, pairs)
    good = sentence_log_probs(toy_lm, [p.good for p in pairs])
    bad = sentence_log_probs(toy_lm, [p.bad for p in pairs])
    np.testing.assert_allclose(table["margin"], good - bad, rtol=1e-9)
    assert list(table["correct"]) == list(good > bad)
    accuracy = minimal_pair_accuracy(table)
    assert accuracy["all"] == pytest.approx(np.mean(good > bad))
    assert set(accuracy) == {"all", "subject_verb_agreement", "reflexive_agreement"}


def test_bad_input_is_named(toy_lm) -> None:
    with pytest.raises(ValueError, match="longer than the model's context of 64"):
        sentence_log_probs(toy_lm, ["Alan seemed worried . " * 20])
    with pytest.raises(ValueError, match="prompts is empty"):
        sentence_log_probs(toy_lm, [])
    with pytest.raises(ValueError, match="no minimal pairs"):
        minimal_pair_table(toy_lm, [])
