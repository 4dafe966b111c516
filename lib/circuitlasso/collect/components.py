"""Token-averaged activations at the nodes of the component graph (:mod:`circuitlasso.data.graph`).

:func:`collect_nodes` runs the model on a batch of prompts (for CircuitLasso: clean and corrupted
prompts stacked) and averages every node's activation over the selected token positions, giving one
observation row per prompt: ``X: (M, N)`` with the node blocks side by side in computation order.
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
    prompts_per_batch,
    require_hook_flags,
)
from circuitlasso.forward import mean_over_real


@dataclass(frozen=True)
class NodeActivations:
    """Token-averaged node activations: ``X: (M, N)``, blocks in computation order.

    ``block_sizes[j]`` columns belong to ``names[j]``; ``parents[j]`` lists the block indices
    allowed to feed block ``j``.
    """

    X: torch.Tensor
    names: list[str]
    block_sizes: list[int]
    parents: list[list[int]]

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


def collect_nodes(
    model: HookedTransformer,
    tokens: torch.Tensor,
    position_mask: torch.Tensor | None = None,
    batch_size: int | None = None,
    memory_gib: float = DEFAULT_PASS_GIB,
    progress: bool = False,
) -> NodeActivations:
    """Token-averaged activations of every graph node on ``tokens: (M, P)``.

    ``position_mask: (P,)`` or ``(M, P)`` bool selects the positions averaged over (default all).
    ``batch_size`` prompts run at once; by default as many as fit in ``memory_gib``
    (:func:`~circuitlasso.data.graph.prompts_per_batch`).
    """
    require_hook_flags(model)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be (prompts, positions), got shape {tuple(tokens.shape)}")
    nodes = graph_nodes(model)
    mask = _position_mask(position_mask, tokens)
    if batch_size is None:
        batch_size = prompts_per_batch(model, tokens.shape[1], memory_gib)
    hooks = sorted({n.hook for n in nodes if n.hook != LOGITS})
    blocks: list[list[torch.Tensor]] = [[] for _ in nodes]
    device = model.cfg.device
    for start in tqdm(range(0, len(tokens), batch_size), desc="collect", disable=not progress):
        batch = tokens[start : start + batch_size].to(device)
        chosen = mask[start : start + batch_size]
        cache: dict[str, torch.Tensor] = {}

        def save(activation: torch.Tensor, hook, cache=cache) -> None:
            cache[hook.name] = activation

        with torch.inference_mode():
            logits = model.run_with_hooks(batch, fwd_hooks=[(h, save) for h in hooks])
        cache[LOGITS] = logits
        for j, node in enumerate(nodes):
            act = cache[node.hook]
            if node.head is not None:
                act = act[:, :, node.head]
            blocks[j].append(mean_over_real(act, chosen).float().cpu())
    columns = [torch.cat(b) for b in blocks]
    return NodeActivations(
        X=torch.cat(columns, dim=1),
        names=[n.name for n in nodes],
        block_sizes=[c.shape[1] for c in columns],
        parents=allowed_parents(nodes),
    )
