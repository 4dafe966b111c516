"""Token-averaged activations at the nodes of the component graph (:mod:`circuitlasso.data.graph`).

:func:`collect_nodes` runs the model on a batch of prompts (for CircuitLasso: clean and corrupted
prompts stacked) and averages every node's activation over the selected token positions, giving one
observation row per prompt: ``X: (M, N)`` with the node blocks side by side in computation order.
The output node is the logits, or with ``answers`` each prompt's logit difference answer - wrong
(one column, the direction MIB's metric reads, instead of the whole vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm import tqdm
from transformer_lens import HookedTransformer

from circuitlasso.data.graph import (
    DEFAULT_PASS_GIB,
    LOGITS,
    allowed_parents,
    graph_nodes,
    heads_summed,
    prompts_per_batch,
    require_hook_flags,
    sender_reads,
)
from circuitlasso.forward import mean_over_real


@dataclass(frozen=True)
class NodeActivations:
    """Token-averaged node activations: ``X: (M, N)``, blocks in computation order.

    ``block_sizes[j]`` columns belong to ``names[j]``; ``parents[j]`` lists the block indices
    allowed to feed block ``j``. ``output_reads: (M, d_model)``, where the output node is a logit
    difference: the residual-stream direction it reads on each prompt, ``W_U[:, answer] -
    W_U[:, wrong]``.
    """

    X: torch.Tensor
    names: list[str]
    block_sizes: list[int]
    parents: list[list[int]]
    output_reads: torch.Tensor | None = None

    def block(self, name: str) -> torch.Tensor:
        """The columns of node ``name``: (M, block_size)."""
        if name not in self.names:
            raise ValueError(f"no node named {name!r}; nodes: {self.names}")
        j = self.names.index(name)
        start = sum(self.block_sizes[:j])
        return self.X[:, start : start + self.block_sizes[j]]


def _position_mask(position_mask: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
    """``(M, P)`` bool positions averaged over (default all), checked against ``tokens``."""
    m, p = tokens.shape
    if position_mask is None:
        return torch.ones(m, p, dtype=torch.bool)
    mask = position_mask.bool()
    if mask.ndim == 1:
        mask = mask.expand(m, -1)
    if mask.shape != (m, p):
        raise ValueError(f"position_mask shape {tuple(position_mask.shape)} != tokens {(m, p)}")
    if not bool(mask.any(1).all()):
        raise ValueError("position_mask selects no position for some prompts")
    return mask


def _answer_pairs(answers: torch.Tensor | None, tokens: torch.Tensor, d_vocab: int) -> None:
    """Check ``answers: (M, 2)`` token ids (answer, wrong) against ``tokens: (M, P)``."""
    if answers is None:
        return
    if answers.ndim != 2 or answers.shape != (len(tokens), 2):
        raise ValueError(
            f"answers must be (prompts, 2) token ids (answer, wrong) for {len(tokens)} prompts, "
            f"got shape {tuple(answers.shape)}"
        )
    if answers.dtype.is_floating_point or answers.dtype == torch.bool:
        raise ValueError(f"answers must be integer token ids, got {answers.dtype}")
    low, high = (int(answers.min()), int(answers.max())) if len(answers) else (0, 0)
    if not 0 <= low <= high < d_vocab:
        raise ValueError(f"answers must be token ids in [0, {d_vocab}), got {low}..{high}")


def collect_nodes(
    model: HookedTransformer,
    tokens: torch.Tensor,
    position_mask: torch.Tensor | None = None,
    batch_size: int | None = None,
    memory_gib: float = DEFAULT_PASS_GIB,
    progress: bool = False,
    answers: torch.Tensor | None = None,
    output_mask: torch.Tensor | None = None,
) -> NodeActivations:
    """Token-averaged activations of every graph node on ``tokens: (M, P)``.

    ``position_mask: (P,)`` or ``(M, P)`` bool selects the positions averaged over (default all).
    ``batch_size`` prompts run at once; by default as many as fit in ``memory_gib``
    (:func:`~circuitlasso.data.graph.prompts_per_batch`). ``answers: (M, 2)`` token ids
    (answer, wrong) make the output node each prompt's logit difference, one column.
    ``output_mask`` (same shapes as ``position_mask``): the positions the output node alone is
    averaged over, where a metric reads other positions than the senders are averaged over
    (default ``position_mask``'s).
    """
    require_hook_flags(model)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be (prompts, positions), got shape {tuple(tokens.shape)}")
    _answer_pairs(answers, tokens, model.cfg.d_vocab)
    nodes = graph_nodes(model)
    mask = _position_mask(position_mask, tokens)
    read_at = mask if output_mask is None else _position_mask(output_mask, tokens)
    if batch_size is None:
        batch_size = prompts_per_batch(model, tokens.shape[1], memory_gib)
    written = [j for j, n in enumerate(nodes) if n.hook != LOGITS]  # read at a hook
    outputs_at = sender_reads(model, [nodes[j] for j in written])
    blocks: list[list[torch.Tensor]] = [[] for _ in nodes]
    device = model.cfg.device
    for start in tqdm(range(0, len(tokens), batch_size), desc="collect", disable=not progress):
        batch = tokens[start : start + batch_size].to(device)
        chosen = mask[start : start + batch_size]
        cache: dict[str, torch.Tensor] = {}

        def save(activation: torch.Tensor, hook, cache=cache) -> None:
            cache[hook.name] = activation

        with torch.inference_mode(), heads_summed(model):
            logits = model.run_with_hooks(batch, fwd_hooks=[(h, save) for h in sorted(outputs_at)])
        if answers is not None:
            pair = answers[start : start + batch_size].to(logits.device)  # (B, 2)
            picked = logits.gather(-1, pair[:, None, :].expand(-1, logits.shape[1], -1))
            logits = picked[..., :1] - picked[..., 1:]  # (B, P, 1)
        for hook, found in outputs_at.items():
            for read in found:
                mean = mean_over_real(read(cache[hook]), chosen).float().cpu()
                blocks[written[read.index]].append(mean)
        for j, node in enumerate(nodes):
            if node.hook == LOGITS:
                at = read_at[start : start + batch_size]
                blocks[j].append(mean_over_real(logits, at).float().cpu())
    columns = [torch.cat(b) for b in blocks]
    reads = None
    if answers is not None:
        unembed = model.W_U.detach().float().cpu()  # (d_model, d_vocab)
        pairs = answers.cpu()
        reads = (unembed[:, pairs[:, 0]] - unembed[:, pairs[:, 1]]).T
    return NodeActivations(
        X=torch.cat(columns, dim=1),
        names=[n.name for n in nodes],
        block_sizes=[c.shape[1] for c in columns],
        parents=allowed_parents(nodes),
        output_reads=reads,
    )
