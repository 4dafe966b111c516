"""Labels for SAE features: the multi-prompt and single-prompt procedures of App. B.3.

- Multi-prompt: the prompts whose token-averaged activation of the feature is largest, each with
  its per-token values (the paper's Tables 3-5), and the feature's top tokens: the most frequent
  tokens among its largest per-token activations on those prompts.
- Single-prompt: replace chosen tokens of one prompt by alternatives and report how the feature's
  activation changes (the paper's Table 6).

Per-token values are those of the prompt's real tokens (BOS, EOS and padding left out, see
:mod:`circuitlasso.forward`), the tokens the collector averages over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from sae_lens import SAE

from circuitlasso.circuits.features import Features
from circuitlasso.forward import (
    Model,
    hook_activations,
    prompt_ids,
    real_token_mask,
    single_token_id,
    stop_at_layer,
    token_strings,
)


@torch.no_grad()
def token_values(
    model: Model, sae: SAE, feature: int, tokens: Sequence[torch.Tensor]
) -> list[np.ndarray]:
    """Per prompt, the activation of SAE ``feature`` at each of its real tokens: ``(T_i,)``.

    ``tokens``: one 1-D id tensor per prompt (as :func:`~circuitlasso.forward.prompt_ids`
    makes them); its real tokens are those :func:`~circuitlasso.forward.real_token_mask`
    marks (no special token), the tokens the collector averages over.
    """
    return [values[:, 0] for values in features_token_values(model, sae, [feature], tokens)]


@torch.no_grad()
def features_token_values(
    model: Model,
    sae: SAE,
    features: Sequence[int],
    tokens: Sequence[torch.Tensor],
    batch_size: int = 64,
) -> list[np.ndarray]:
    """:func:`token_values` of several features at once: per prompt ``(T_i, F)``, column ``j``
    feature ``features[j]`` (:func:`layers_token_values` of one SAE)."""
    return layers_token_values(model, {0: sae}, {0: features}, tokens, batch_size)[0]


@torch.no_grad()
def layers_token_values(
    model: Model,
    saes: Mapping[int, SAE],
    features: Mapping[int, Sequence[int]],
    tokens: Sequence[torch.Tensor],
    batch_size: int = 64,
) -> dict[int, list[np.ndarray]]:
    """Per key of ``features`` (a layer), the values of its ``features[layer]`` in the SAE
    ``saes[layer]`` at each prompt's real tokens: per prompt ``(T_i, F_layer)``, column ``j``
    feature ``features[layer][j]``. One model run serves every layer: the prompts run
    ``batch_size`` at a time, shortest first, each batch right-padded (which the model does not
    attend to), every layer's activation read from it and encoded once."""
    for layer, wanted in features.items():
        for feature in wanted:
            if not 0 <= feature < saes[layer].cfg.d_sae:
                raise ValueError(
                    f"feature {feature} out of range: the SAE on "
                    f"{saes[layer].cfg.metadata.hook_name!r} has {saes[layer].cfg.d_sae} features"
                )
    hooks = {layer: str(saes[layer].cfg.metadata.hook_name) for layer in features}
    stop = stop_at_layer(list(hooks.values()))
    pad = model.tokenizer.pad_token_id if model.tokenizer is not None else None
    columns = {layer: torch.as_tensor(list(f), dtype=torch.long) for layer, f in features.items()}
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
    values: dict[int, list[np.ndarray]] = {layer: [np.empty(0)] * len(tokens) for layer in hooks}
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(tokens[i]) for i in rows)
        batch = torch.full((len(rows), width), pad if pad is not None else 0, dtype=torch.long)
        for row, i in enumerate(rows):
            batch[row, : len(tokens[i])] = tokens[i]
        saved = hook_activations(model, batch, sorted(set(hooks.values())), stop_at_layer=stop)
        real = [_real(model, tokens[i]) for i in rows]
        for layer, hook in hooks.items():
            activations = saved[hook]
            encoded = saes[layer].encode(activations)[..., columns[layer].to(activations.device)]
            encoded = encoded.float().cpu()  # on the model's device until here
            for row, i in enumerate(rows):
                values[layer][i] = encoded[row, : len(tokens[i])][real[row]].numpy()
    return values


def _real(model: Model, ids: torch.Tensor) -> torch.Tensor:
    """``(T,)`` bool real tokens of one prompt's ids, on the CPU."""
    return real_token_mask(model, ids.cpu())


def _words(model: Model, ids: torch.Tensor) -> list[str]:
    """The prompt's real tokens as strings."""
    words = token_strings(model, ids)
    return [w for w, real in zip(words, _real(model, ids).tolist(), strict=True) if real]


def _highlight(words: list[str], values: np.ndarray) -> str:
    """The prompt's tokens joined, the most active one in [brackets]."""
    top = int(np.argmax(values)) if len(values) and values.max() > 0 else -1
    return " ".join(f"[{w.strip()}]" if i == top else w.strip() for i, w in enumerate(words))


def token_text(token: str) -> str:
    """A token as labels and examples show it: without the spaces around it (a decoder's tokens
    carry their leading space, which a page's text drops), and a token of whitespace alone by its
    escape (``'\\n'``, ``' '``), never as a blank."""
    return token.strip() or repr(token)


@dataclass(frozen=True)
class Activation:
    """One prompt's activation of a feature: its row of ``Z``, its real tokens ``(T,)``, the
    feature's value at each of them ``values: (T,)`` and its token average ``mean``."""

    row: int
    tokens: list[str]
    values: np.ndarray
    mean: float


def _top_rows(
    prompts: Sequence[str], Z: Features, feature: int, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """``Z[:, feature]: (M,)`` and the rows of its ``n`` largest positive values, largest first."""
    if Z.shape[0] != len(prompts):
        raise ValueError(f"Z has {Z.shape[0]} rows but there are {len(prompts)} prompts")
    column = np.asarray(Z[:, feature].toarray()).ravel()
    order = np.argsort(-column, kind="stable")[:n]
    return column, order[column[order] > 0]


MEAN_RTOL = 1e-3
"""Relative tolerance of :func:`check_token_means` for float32 models and SAEs (looser for
half-precision ones, see there)."""


def check_token_means(
    model: Model,
    sae: SAE,
    feature: int,
    column: np.ndarray,
    rows: np.ndarray,
    values: Sequence[np.ndarray],
) -> None:
    """Raise ``ValueError`` unless each prompt's per-token ``values[j]`` of ``feature`` (at its
    real tokens, from :func:`token_values`), averaged, give ``column[rows[j]]``: the value the
    collector stored for that prompt (:func:`~circuitlasso.collect.collect_sae_features` averages
    the same values over the same tokens). A prompt that does not is not the prompt of that row
    of ``Z``: other prompts, or the right ones in another order.

    Tolerance: ``|mean - z| <= rtol * |z| + rtol * 1e-2 * max(column)``, ``rtol`` =
    :data:`MEAN_RTOL` for float32, ``16 * eps`` of the model's or the SAE's dtype if coarser
    (bfloat16: 0.125), room for the sums of another batch's shapes.
    """
    eps = max(torch.finfo(model.cfg.dtype).eps, torch.finfo(sae.W_enc.dtype).eps)
    rtol = max(MEAN_RTOL, 16 * eps)
    atol = rtol * 1e-2 * float(np.max(column, initial=0.0))
    for row, vals in zip(rows, values, strict=True):
        expected = float(column[row])
        recomputed = float(np.mean(vals, dtype=np.float64)) if len(vals) else float("nan")
        if not abs(recomputed - expected) <= rtol * abs(expected) + atol:
            raise ValueError(
                f"prompt {int(row)} is not the prompt the features were collected on: feature "
                f"{feature} of the SAE on {sae.cfg.metadata.hook_name!r} averages "
                f"{recomputed:.6g} over its real tokens, but Z[{int(row)}, {feature}] is "
                f"{expected:.6g}; pass the prompts Z was collected on, in the same order"
            )


def top_activations(
    model: Model,
    sae: SAE,
    feature: int,
    prompts: Sequence[str],
    Z: Features,
    n: int = 8,
    *,
    verify: bool = False,
) -> list[Activation]:
    """The ``n`` prompts with the largest token-averaged activation ``Z[:, feature]`` (``Z: (M,
    D)`` from the collector; prompts where it is zero left out), largest first, with the
    feature's value at each real token. ``verify``: check that these prompts are the rows of
    ``Z`` they stand for (:func:`check_token_means`, at no extra cost: the per-token values are
    computed anyway); off by default, as ``Z`` may also be any ranking of the prompts."""
    return nodes_top_activations(model, {0: sae}, [(0, feature)], prompts, {0: Z}, n,
                                 verify=verify)[(0, feature)]  # fmt: skip


def nodes_top_activations(
    model: Model,
    saes: Mapping[int, SAE],
    nodes: Iterable[tuple[int, int]],
    prompts: Sequence[str],
    Z: Mapping[int, Features],
    n: int = 8,
    *,
    verify: bool = False,
) -> dict[tuple[int, int], list[Activation]]:
    """:func:`top_activations` of each ``(layer, feature)`` node (``saes[layer]``,
    ``Z[layer]``), with one model run over the union of every node's top prompts."""
    top = _NodesTopValues(model, saes, nodes, prompts, Z, n, verify)
    return {
        node: [
            Activation(
                int(i),
                [token_text(str(w)) for w in top.words[top.place[int(i)]]],
                vals,
                float(column[i]),
            )  # fmt: skip
            for i, vals in zip(order, top.values[node], strict=True)
        ]
        for node, (column, order) in top.tops.items()
    }


def activation_table(activations: Sequence[Activation]) -> pd.DataFrame:
    """A feature's top prompts (:func:`top_activations`) as a table, a row per prompt.

    Columns: ``prompt`` (most active token in [brackets]), ``value`` (token-averaged),
    ``per_token`` (values at the real tokens, rounded), ``top_token``.
    """
    rows = [
        {
            "prompt": _highlight(top.tokens, top.values),
            "value": top.mean,
            "per_token": tuple(np.round(top.values, 3).tolist()),
            "top_token": top.tokens[int(np.argmax(top.values))],
        }
        for top in activations
    ]
    return pd.DataFrame(rows, columns=["prompt", "value", "per_token", "top_token"])


def top_tokens(
    model: Model,
    sae: SAE,
    feature: int,
    prompts: Sequence[str],
    Z: Features,
    *,
    n_prompts: int = 50,
    n_activations: int = 20,
    verify: bool = False,
) -> Counter[str]:
    """How often each token is among the feature's ``n_activations`` largest per-token
    activations over its ``n_prompts`` top prompts (by ``Z[:, feature]``; ``Z: (M, D)`` has one
    row per prompt).

    ``verify``: check that the top prompts are those whose rows of ``Z`` ranked them, i.e. that
    ``prompts`` are the ones ``Z`` was collected on, in order (:func:`check_token_means`: each top
    prompt's per-token values, computed here anyway, must average to its ``Z[i, feature]``);
    a ``ValueError`` names the first prompt that does not. It costs no model run beyond the one
    made for the labels, and checks exactly the prompts whose tokens the labels count. Off by
    default, as ``Z`` may also be any ranking of the prompts.
    """
    return features_top_tokens(
        model, sae, [feature], prompts, Z, n_prompts=n_prompts, n_activations=n_activations,
        verify=verify,
    )[feature]  # fmt: skip


def features_top_tokens(
    model: Model,
    sae: SAE,
    features: Sequence[int],
    prompts: Sequence[str],
    Z: Features,
    *,
    n_prompts: int = 50,
    n_activations: int = 20,
    verify: bool = False,
) -> dict[int, Counter[str]]:
    """:func:`top_tokens` of each of ``features`` (of one SAE), with one model run over the
    union of their top prompts (:func:`nodes_top_tokens` of one layer)."""
    nodes = nodes_top_tokens(
        model, {0: sae}, [(0, int(f)) for f in features], prompts, {0: Z}, n_prompts=n_prompts,
        n_activations=n_activations, verify=verify,
    )  # fmt: skip
    return {feature: counts for (_, feature), counts in nodes.items()}


def nodes_top_tokens(
    model: Model,
    saes: Mapping[int, SAE],
    nodes: Iterable[tuple[int, int]],
    prompts: Sequence[str],
    Z: Mapping[int, Features],
    *,
    n_prompts: int = 50,
    n_activations: int = 20,
    verify: bool = False,
) -> dict[tuple[int, int], Counter[str]]:
    """:func:`top_tokens` of each ``(layer, feature)`` node (``saes[layer]``, ``Z[layer]``),
    with one model run over the union of every node's top prompts."""
    top = _NodesTopValues(model, saes, nodes, prompts, Z, n_prompts, verify)
    counts: dict[tuple[int, int], Counter[str]] = {}
    for node, (_, order) in top.tops.items():
        if not len(order):
            counts[node] = Counter()
            continue
        own_words = np.concatenate([top.words[top.place[int(i)]] for i in order])
        flat = np.concatenate(top.values[node])
        best = np.argsort(-flat, kind="stable")[:n_activations]
        counts[node] = Counter(token_text(str(w)) for w in own_words[best[flat[best] > 0]])
    return counts


class _NodesTopValues:
    """Each ``(layer, feature)`` node's ``n`` top rows of ``Z[layer]`` (``tops[node]``: the
    column ``(M,)`` and the rows, largest first) and its values at their real tokens
    (``values[node]``: one ``(T_i,)`` array per top row), from one model run over the union of
    the top prompts (:func:`layers_token_values`); ``words[place[row]]``: that prompt's real
    tokens. ``verify``: :func:`check_token_means` of every node."""

    def __init__(
        self,
        model: Model,
        saes: Mapping[int, SAE],
        nodes: Iterable[tuple[int, int]],
        prompts: Sequence[str],
        Z: Mapping[int, Features],
        n: int,
        verify: bool,
    ) -> None:
        self.tops = {
            (int(layer), int(feature)): _top_rows(prompts, Z[int(layer)], int(feature), n)
            for layer, feature in nodes
        }
        rows = sorted({int(i) for _, order in self.tops.values() for i in order})
        self.place = {i: k for k, i in enumerate(rows)}
        tokens = [prompt_ids(model, prompts[i]) for i in rows]
        needed: dict[int, list[int]] = {}
        for (layer, feature), (_, order) in self.tops.items():
            if len(order):
                needed.setdefault(layer, []).append(feature)
        values = layers_token_values(model, saes, needed, tokens)
        self.words = [np.array(_words(model, ids), dtype=object) for ids in tokens]
        self.values: dict[tuple[int, int], list[np.ndarray]] = {}
        for node, (column, order) in self.tops.items():
            layer, feature = node
            j = needed[layer].index(feature) if len(order) else 0
            self.values[node] = [values[layer][self.place[int(i)]][:, j] for i in order]
            if verify and len(order):
                check_token_means(model, saes[layer], feature, column, order, self.values[node])


def _replacement_id(model: Model, ids: torch.Tensor, index: int, text: str) -> int:
    """The id that puts ``text`` at ``ids[index]`` as one token: as a word after a space where
    the token there follows one and that is one token (a decoder's `` word`` piece, as top
    tokens are shown stripped), else as given; ValueError unless it is one token, or if it is a
    BOS, EOS or PAD token."""
    spaced = token_strings(model, ids[index : index + 1])[0].startswith(" ")
    try:
        token = single_token_id(model, f" {text.strip()}" if spaced else text)
    except ValueError:
        if not spaced:
            raise
        token = single_token_id(model, text)
    replaced = ids.clone()
    replaced[index] = token
    if not _real(model, replaced)[index]:
        raise ValueError(f"replacement {text!r} is a BOS, EOS or PAD token")
    return token


def single_token_replacements(
    model: Model, prompt: str, position: int, words: Sequence[str]
) -> list[str]:
    """The ``words`` that :func:`perturb` can put at real token number ``position`` of
    ``prompt``: one token each there, none a BOS, EOS or PAD token."""
    ids = prompt_ids(model, prompt)
    index = int(_real(model, ids).nonzero()[position, 0])
    fitting = []
    for word in words:
        try:
            _replacement_id(model, ids, index, word)
        except ValueError:
            continue
        fitting.append(word)
    return fitting


def perturb(
    model: Model,
    sae: SAE,
    feature: int,
    prompt: str,
    position: int,
    replacements: Sequence[str],
) -> pd.DataFrame:
    """Single-prompt table: ``prompt`` and its variants with its real token number ``position``
    (0 = the first token after BOS, if the model prepends one) replaced by each of
    ``replacements`` (single tokens there, none of them BOS, EOS or PAD; a word replacing a token
    that follows a space follows one too, :func:`single_token_replacements`).

    Columns: ``prompt`` (changed token in [brackets]), ``value`` (activation at ``position``),
    ``change`` (minus the original's), ``per_token``.
    """
    original = prompt_ids(model, prompt)
    where = _real(model, original).nonzero()[:, 0].tolist()
    if not 0 <= position < len(where):
        raise ValueError(f"position {position} out of range: the prompt has {len(where)} tokens")
    variants = [original]
    for text in replacements:
        ids = original.clone()
        ids[where[position]] = _replacement_id(model, original, where[position], text)
        variants.append(ids)
    values = token_values(model, sae, feature, variants)
    rows = []
    for ids, vals in zip(variants, values, strict=True):
        words = [w.strip() for w in _words(model, ids)]
        words[position] = f"[{words[position]}]"
        rows.append(
            {
                "prompt": " ".join(words),
                "value": float(vals[position]),
                "change": float(vals[position] - values[0][position]),
                "per_token": tuple(np.round(vals, 3).tolist()),
            }
        )
    return pd.DataFrame(rows)
