"""A decoder's own acceptability judgement: the log-probability it gives a sentence, and the
minimal pairs it gets right by it.

A sentence's log-probability is the sum, over its tokens, of the log-probability of each token
given the ones before it, with one context token in front (a document separator such as
``<|endoftext|>``), so that the first word is scored too. A minimal pair is judged right when the
acceptable sentence is the more probable: its margin ``log p(good) - log p(bad)`` is positive
(the metric of BLiMP, Warstadt et al., 2020).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from transformer_lens import HookedTransformer

from circuitlasso.data.minimal_pairs import MinimalPair
from circuitlasso.forward import check_prompts


def _sentence_ids(model: HookedTransformer, sentence: str, prefix_id: int) -> torch.Tensor:
    ids = model.to_tokens(sentence, prepend_bos=False, truncate=False, move_to_device=False)[0]
    if len(ids) + 1 > model.cfg.n_ctx:
        raise ValueError(
            f"sentence of {len(ids)} tokens is longer than the model's context of "
            f"{model.cfg.n_ctx} tokens (with its context token): {sentence[:80]!r}"
        )
    return torch.cat([torch.tensor([prefix_id]), ids])


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``(B, P - 1)`` float64 ``log p(tokens[:, t + 1] | tokens[:, :t + 1])`` from the logits
    ``(B, P, V)``: the next token's logit minus the log-sum-exp over the vocabulary, both taken
    in the logits' own precision (a float64 copy of every logit would be most of the pass's
    time and memory on a large vocabulary) and subtracted in float64."""
    logits = logits[:, :-1]
    chosen = logits.gather(-1, tokens[:, 1:, None].to(logits.device))[..., 0]
    return chosen.double() - torch.logsumexp(logits, -1).double()


@torch.no_grad()
def sentence_log_probs(
    model: HookedTransformer,
    sentences: Sequence[str],
    *,
    prefix_id: int | None = None,
    batch_size: int = 32,
) -> np.ndarray:
    """``(N,)`` float64: each sentence's log-probability under the decoder ``model``, every token
    scored given the ones before it and ``prefix_id`` (default: the tokenizer's BOS id) in
    front. Sentences run shortest first (ties by their text), so that a batch pads little."""
    sentences = check_prompts(sentences)
    if not isinstance(model, HookedTransformer):
        raise TypeError(f"a sentence's log-probability needs a decoder, not {type(model).__name__}")
    if prefix_id is None:
        prefix_id = getattr(model.tokenizer, "bos_token_id", None)
        if prefix_id is None:
            raise ValueError("the tokenizer has no BOS token: pass prefix_id (a context token)")
    rows = [_sentence_ids(model, s, prefix_id) for s in sentences]
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i]), sentences[i]))
    scores = np.zeros(len(rows))
    for start in range(0, len(rows), batch_size):
        chosen = order[start : start + batch_size]
        lengths = torch.tensor([len(rows[i]) for i in chosen])
        tokens = torch.full((len(chosen), int(lengths.max())), prefix_id)
        for i, row in enumerate(chosen):
            tokens[i, : len(rows[row])] = rows[row]  # right-padded: never attended to or scored
        logits = model(tokens.to(model.cfg.device), return_type="logits").cpu()
        scored = torch.arange(tokens.shape[1] - 1)[None] < (lengths - 1)[:, None]
        scores[chosen] = (token_log_probs(logits, tokens) * scored).sum(1).numpy()
    return scores


def minimal_pair_table(
    model: HookedTransformer,
    pairs: Sequence[MinimalPair],
    *,
    prefix_id: int | None = None,
    batch_size: int = 32,
) -> pd.DataFrame:
    """One row per pair: phenomenon, good, bad, ``margin`` (log p(good) - log p(bad), nats) and
    ``correct`` (margin > 0)."""
    if not pairs:
        raise ValueError("no minimal pairs given")
    sentences = [p.good for p in pairs] + [p.bad for p in pairs]
    scores = sentence_log_probs(model, sentences, prefix_id=prefix_id, batch_size=batch_size)
    margin = scores[: len(pairs)] - scores[len(pairs) :]
    return pd.DataFrame(
        {
            "phenomenon": [p.phenomenon for p in pairs],
            "good": [p.good for p in pairs],
            "bad": [p.bad for p in pairs],
            "margin": margin,
            "correct": margin > 0,
        }
    )


def minimal_pair_accuracy(table: pd.DataFrame) -> dict[str, float]:
    """The share of pairs judged right: ``all`` of them and each phenomenon's."""
    by_phenomenon = table.groupby("phenomenon", sort=False)["correct"].mean()
    return {
        "all": float(table["correct"].mean()),
        **{k: float(v) for k, v in by_phenomenon.items()},
    }
