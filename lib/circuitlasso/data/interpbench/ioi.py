"""Indirect object identification (IOI) prompts and the evaluation of InterpBench's IOI case.

A clean IOI prompt (Wang et al., 2022) introduces two people, then repeats one of them (the
subject, S) as the actor of a second clause that ends where the other one (the indirect object,
IO) is the natural continuation::

    When Mary and John went to the store, John gave a drink to   -> " Mary"

The first clause names them in either order (``ABBA``: IO first, ``BABA``: S first). Corrupted
partners keep the template, place and object and change only names, so a clean prompt and its
partner have the same tokens everywhere else and the same length:

- ``"abc"`` (Wang et al.'s ABC distribution): the three name slots get three new, distinct names,
  so no name repeats and the clean answer is absent;
- ``"swap"``: the repeated subject is replaced by the IO, so the other name becomes the answer.

Names are single GPT-2 tokens after a space (so the partners' lengths match); :func:`encode_ioi`
checks this for the tokenizer it is given. :func:`evaluate_ioi` loads the trained IOI model and
its circuit with :func:`circuitlasso.data.interpbench.load_hub_case` and runs
:func:`circuitlasso.data.interpbench.evaluate_model` on these prompts: EAP's metric is read at
the last position of each prompt (where the IO is predicted), CircuitLasso averages activations
over every prompt token (App. B.2), BOS and padding excluded. By default the model's logits are
read on the name tokens only (:func:`restrict_unembedding`), the task's output space, as the tracr
cases read their program's output space: the ``output`` node then has one column per name instead
of one per vocabulary entry (50257 for GPT-2), which the regressions would otherwise all fit.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformers import PreTrainedTokenizerBase

from circuitlasso.data.prompt_pairs import PromptPairs

Corruption = Literal["abc", "swap"]
CORRUPTIONS: tuple[Corruption, ...] = ("abc", "swap")
IOI_CASE = "ioi"

NAMES = (
    "Mary", "John", "Alice", "Bob", "Sarah", "Tom", "Emma", "James", "Lisa", "Mark",
    "Anna", "David", "Laura", "Paul", "Kate", "Michael", "Rachel", "Daniel", "Amy", "Kevin",
    "Helen", "Eric", "Susan", "Brian", "Nancy", "Jason", "Karen", "Adam", "Emily", "Peter",
)  # fmt: skip
PLACES = (
    "store", "park", "office", "school", "garden", "station", "hospital", "restaurant",
    "beach", "library", "house", "market",
)  # fmt: skip
OBJECTS = ("drink", "book", "ring", "ball", "snack", "letter", "bag", "gift", "pen", "key")

# {A} and {B} are the first clause's names, {S} the repeated subject; the answer follows "to".
TEMPLATES = (
    "When {A} and {B} went to the {place}, {S} gave a {object} to",
    "After {A} and {B} went to the {place}, {S} gave a {object} to",
    "Then, {A} and {B} had a long day at the {place}. {S} gave a {object} to",
    "While {A} and {B} were working at the {place}, {S} handed a {object} to",
    "Friends {A} and {B} found a {object} at the {place}. {S} gave it to",
    "Yesterday {A} and {B} met at the {place}, and {S} passed a {object} to",
)


@dataclass(frozen=True)
class IOIPair:
    """A clean IOI prompt, its corrupted partner and the names that fill them.

    ``names`` and ``corrupted_names`` are the (A, B, S) slot fillers of ``template``; ``io`` and
    ``s`` are the clean prompt's indirect object and subject, ``target`` the clean answer token.
    """

    template: str
    order: Literal["ABBA", "BABA"]
    io: str
    s: str
    place: str
    object: str
    names: tuple[str, str, str]
    corrupted_names: tuple[str, str, str]

    @property
    def clean(self) -> str:
        return self._fill(self.names)

    @property
    def corrupted(self) -> str:
        return self._fill(self.corrupted_names)

    @property
    def target(self) -> str:
        return " " + self.io

    def _fill(self, names: tuple[str, str, str]) -> str:
        a, b, s = names
        return self.template.format(A=a, B=b, S=s, place=self.place, object=self.object)


def ioi_prompts(
    n_prompts: int,
    seed: int = 0,
    corruption: Corruption = "abc",
    names: Sequence[str] = NAMES,
    templates: Sequence[str] = TEMPLATES,
) -> list[IOIPair]:
    """``n_prompts`` seeded IOI pairs: template, order, names, place and object drawn uniformly."""
    if n_prompts < 1:
        raise ValueError(f"n_prompts must be >= 1, got {n_prompts}")
    if corruption not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {corruption!r}; expected one of {CORRUPTIONS}")
    pool = list(dict.fromkeys(names))
    if len(pool) < 5:
        raise ValueError(f"need at least 5 distinct names, got {len(pool)}")
    for template in templates:
        if any(template.count(slot) != 1 for slot in ("{A}", "{B}", "{S}")):
            raise ValueError(f"template {template!r} needs {{A}}, {{B}} and {{S}} once each")
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n_prompts):
        template = templates[int(rng.integers(len(templates)))]
        chosen = rng.choice(len(pool), size=5, replace=False)
        io, s, *fresh = (pool[i] for i in chosen)
        order: Literal["ABBA", "BABA"] = "ABBA" if rng.random() < 0.5 else "BABA"
        first = (io, s) if order == "ABBA" else (s, io)
        names_clean = (first[0], first[1], s)
        if corruption == "abc":
            names_corrupted = (fresh[0], fresh[1], fresh[2])
        else:  # swap: the repeated subject becomes the IO, so the answer flips to S
            names_corrupted = (first[0], first[1], io)
        pairs.append(
            IOIPair(
                template=template,
                order=order,
                io=io,
                s=s,
                place=PLACES[int(rng.integers(len(PLACES)))],
                object=OBJECTS[int(rng.integers(len(OBJECTS)))],
                names=names_clean,
                corrupted_names=names_corrupted,
            )
        )
    return pairs


def name_token_ids(tokenizer: PreTrainedTokenizerBase, names: Sequence[str] = NAMES) -> list[int]:
    """The single token id of ``" " + name`` for each name; ValueError naming any that is not."""
    ids = [tokenizer.encode(" " + name, add_special_tokens=False) for name in names]
    multi = [name for name, i in zip(names, ids, strict=True) if len(i) != 1]
    if multi:
        raise ValueError(f"IOI names {multi} are not single tokens after a space")
    return [i[0] for i in ids]


def encode_ioi(
    pairs: Sequence[IOIPair], tokenizer: PreTrainedTokenizerBase, prepend_bos: bool = True
) -> PromptPairs:
    """Token ids of the clean and corrupted prompts, right-padded, with their masks.

    ``position_mask`` (M, P) marks each prompt's last token (where the IO is predicted);
    ``average_mask`` (M, P) its tokens without BOS and padding.
    """
    if not pairs:
        raise ValueError("no IOI pairs to encode")
    name_token_ids(tokenizer, sorted({n for p in pairs for n in (*p.names, *p.corrupted_names)}))
    bos = tokenizer.bos_token_id
    if prepend_bos and bos is None:
        raise ValueError("prepend_bos=True but the tokenizer has no BOS token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else bos
    prefix = [bos] if prepend_bos else []
    rows = []
    for pair in pairs:
        clean = prefix + tokenizer.encode(pair.clean, add_special_tokens=False)
        corrupted = prefix + tokenizer.encode(pair.corrupted, add_special_tokens=False)
        if len(clean) != len(corrupted):
            raise ValueError(
                f"clean and corrupted prompts differ in length: {pair.clean!r} ({len(clean)}) "
                f"vs {pair.corrupted!r} ({len(corrupted)})"
            )
        rows.append((clean, corrupted))
    width = max(len(c) for c, _ in rows)
    shape = (len(rows), width)
    clean_ids = torch.full(shape, pad if pad is not None else 0, dtype=torch.long)
    corrupted_ids = clean_ids.clone()
    last = torch.zeros(shape, dtype=torch.bool)
    tokens = torch.zeros(shape, dtype=torch.bool)
    for i, (clean, corrupted) in enumerate(rows):
        clean_ids[i, : len(clean)] = torch.tensor(clean)
        corrupted_ids[i, : len(corrupted)] = torch.tensor(corrupted)
        last[i, len(clean) - 1] = True
        tokens[i, len(prefix) : len(clean)] = True
    return PromptPairs(clean_ids, corrupted_ids, last, tokens)


def restrict_unembedding(model: HookedTransformer, token_ids: Sequence[int]) -> HookedTransformer:
    """A copy of ``model`` whose logits are those of ``token_ids`` only, in that order.

    Everything before the unembedding is unchanged (same weights, hooks and tokenizer), so the
    component graph and its circuit are the same; ``W_U`` and ``b_U`` keep the chosen columns.
    """
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= model.cfg.d_vocab_out:
        raise ValueError(
            f"token ids must be in [0, {model.cfg.d_vocab_out}), got {ids.tolist()[:10]}"
        )
    cfg = HookedTransformerConfig.from_dict({**model.cfg.to_dict(), "d_vocab_out": len(ids)})
    state = model.state_dict()
    state["unembed.W_U"] = state["unembed.W_U"][:, ids]
    state["unembed.b_U"] = state["unembed.b_U"][ids]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        restricted = HookedTransformer(cfg, tokenizer=model.tokenizer)  # on cfg.device
    restricted.load_state_dict(state)
    return restricted.eval()
