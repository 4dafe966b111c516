"""What a decoder's attention heads do to a counterfactual task's answer, read off one clean run:
each head's direct effect on the logit difference and where it looks from the answer position.

In IOI (Wang et al., 2022) the heads that move the indirect object's name to the answer
("name movers") attend from the last token to that name and write it into the logits: a large
positive direct effect and attention to the answer's earlier occurrence. :func:`direct_effects`
measures both for every head; it does not establish a role (Wang et al. use path patching for
that), it names the candidates a circuit should hold. :func:`candidates_in_circuits` says which of
the strongest candidates each method's top heads include.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import torch
from transformer_lens import HookedTransformer

from circuitlasso.data.counterfactual_tasks import TaskTokens
from circuitlasso.data.graph import heads_summed


@torch.no_grad()
def direct_effects(
    model: HookedTransformer, tokens: TaskTokens, batch_size: int = 16
) -> pd.DataFrame:
    """A row per attention head, averaged over the items of ``tokens``:

    - ``direct_effect``: the head's output at the last real token, through the final norm
      (centred for a LayerNorm, divided by the clean run's scale, times its weight), on
      ``W_U[:, answer] - W_U[:, wrong]``: its share
      of the logit difference, not counting its effect through later layers;
    - ``attention_answer`` and ``attention_wrong``: the attention from the last real token to
      the earlier positions holding the answer token and the wrong one (in IOI the indirect
      object's name and the subject's).

    A head's output is read at its attention's ``hook_z`` through its own ``W_O`` slice. Sorted
    by ``direct_effect``, largest first."""
    cfg = model.cfg
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(cfg.n_layers)]
    names += [f"blocks.{layer}.attn.hook_pattern" for layer in range(cfg.n_layers)]
    names.append("ln_final.hook_scale")
    weight = getattr(model.ln_final, "w", None)
    centered = cfg.normalization_type in ("LN", "LNPre")  # a LayerNorm subtracts the mean
    totals = torch.zeros(3, cfg.n_layers, cfg.n_heads, dtype=torch.float64)
    for start in range(0, len(tokens), batch_size):
        batch = tokens.rows(slice(start, start + batch_size))
        items = torch.arange(len(batch))
        with heads_summed(model):
            _, cache = model.run_with_cache(
                batch.clean.to(cfg.device), names_filter=lambda name: name in names
            )
        direction = model.W_U[:, batch.answer] - model.W_U[:, batch.wrong]  # (D, B)
        if weight is not None:
            direction = direction * weight[:, None]
        scale = cache["ln_final.hook_scale"][items, batch.last]  # (B, 1)
        answer_at = batch.clean.to(cfg.device) == batch.answer[:, None].to(cfg.device)  # (B, P)
        wrong_at = batch.clean.to(cfg.device) == batch.wrong[:, None].to(cfg.device)
        for layer in range(cfg.n_layers):
            z = cache[names[layer]][items, batch.last]  # (B, H, d_head)
            out = torch.einsum("bhe,hed->bhd", z, model.blocks[layer].attn.W_O)  # (B, H, D)
            if centered:
                out = out - out.mean(-1, keepdim=True)
            out = out / scale[:, :, None]
            effect = torch.einsum("bhd,db->h", out, direction)
            pattern = cache[names[cfg.n_layers + layer]][items, :, batch.last]  # (B, H, K)
            totals[0, layer] += effect.double().cpu()
            totals[1, layer] += (pattern * answer_at[:, None]).sum((0, 2)).double().cpu()
            totals[2, layer] += (pattern * wrong_at[:, None]).sum((0, 2)).double().cpu()
    means = (totals / len(tokens)).numpy()
    rows = [
        {
            "head": f"a{layer}.h{head}",
            "layer": layer,
            "direct_effect": means[0, layer, head],
            "attention_answer": means[1, layer, head],
            "attention_wrong": means[2, layer, head],
        }  # fmt: skip
        for layer in range(cfg.n_layers)
        for head in range(cfg.n_heads)
    ]
    table = pd.DataFrame(rows).sort_values("direct_effect", ascending=False, kind="stable")
    return table.reset_index(drop=True)


def candidates_in_circuits(
    effects: pd.DataFrame, top_heads: Mapping[str, Sequence[str]], n: int = 5
) -> pd.DataFrame:
    """The ``n`` heads of largest direct effect in ``effects`` (:func:`direct_effects`), with, per
    method of ``top_heads`` (``{method: heads, most important first}``), the head's rank among
    the method's heads (1 is first; empty where the method's list leaves it out)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    table = effects.head(n)[["head", "direct_effect", "attention_answer", "attention_wrong"]].copy()
    for method, heads in top_heads.items():
        rank = {head: k + 1 for k, head in enumerate(heads)}
        table[method] = pd.array([rank.get(h) for h in table["head"]], dtype="Int64")
    return table.reset_index(drop=True)
