"""Activations at the nodes of a HookedTransformer's component graph, token-averaged.

The graph has the nodes EAP-IG and InterpBench use, in computation order: ``input`` (token plus
position embedding), per layer the heads ``a{l}.h{h}`` then the MLP ``m{l}``, and ``output`` (the
logits). A node's activation is what it writes: the embedding, a head's ``hook_result`` slice, the
MLP's ``hook_mlp_out``, the logits for ``output``. A child may read any node that comes before it,
except that heads of one layer run in parallel and so never feed each other.

:func:`collect_nodes` runs the model on a batch of prompts (for CircuitLasso: clean and corrupted
prompts stacked) and averages every node's activation over the selected token positions, giving one
observation row per prompt: ``X: (M, N)`` with the node blocks side by side in computation order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tqdm import tqdm
from transformer_lens import HookedTransformer

from circuitlasso.circuit import INPUT, OUTPUT, Edge

NodeKind = Literal["input", "head", "mlp", "output"]
REQUIRED_HOOK_FLAGS = ("use_attn_result", "use_split_qkv_input", "use_hook_mlp_in")
LOGITS = "logits"
INPUT_HOOK = "blocks.0.hook_resid_pre"  # token plus position embedding


@dataclass(frozen=True)
class NodeLocation:
    """Where a graph node's activation lives: ``hook`` (and ``head`` for attention heads).

    ``layer`` is -1 for ``input`` and ``n_layers`` for ``output``; ``hook`` is ``"logits"`` for
    ``output`` (the model's return value).
    """

    name: str
    kind: NodeKind
    layer: int
    hook: str
    head: int | None = None


def require_hook_flags(model: HookedTransformer) -> None:
    """ValueError naming every hook flag in ``REQUIRED_HOOK_FLAGS`` the model's config lacks."""
    missing = [flag for flag in REQUIRED_HOOK_FLAGS if not getattr(model.cfg, flag, False)]
    if missing:
        raise ValueError(
            f"model config lacks hook flags {missing}; set them with "
            f"model.set_use_attn_result(True), model.set_use_split_qkv_input(True), "
            f"model.set_use_hook_mlp_in(True) (or in the HookedTransformerConfig)"
        )


def graph_nodes(model: HookedTransformer) -> list[NodeLocation]:
    """The model's component nodes in computation order."""
    cfg = model.cfg
    nodes = [NodeLocation(INPUT, "input", -1, INPUT_HOOK)]
    for layer in range(cfg.n_layers):
        nodes.extend(
            NodeLocation(f"a{layer}.h{h}", "head", layer, f"blocks.{layer}.attn.hook_result", h)
            for h in range(cfg.n_heads)
        )
        if not cfg.attn_only:
            nodes.append(NodeLocation(f"m{layer}", "mlp", layer, f"blocks.{layer}.hook_mlp_out"))
    nodes.append(NodeLocation(OUTPUT, "output", cfg.n_layers, LOGITS))
    return nodes


def can_feed(parent: NodeLocation, child: NodeLocation) -> bool:
    """Whether ``parent`` is computed before ``child`` and writes something ``child`` can read."""
    if parent.kind == "output" or child.kind == "input":
        return False
    if parent.layer != child.layer:
        return parent.layer < child.layer
    return parent.kind == "head" and child.kind == "mlp"


def allowed_parents(nodes: list[NodeLocation]) -> list[list[int]]:
    """For each node index ``j``, the indices of the nodes that may feed it."""
    return [[i for i, p in enumerate(nodes) if can_feed(p, c)] for c in nodes]


def candidate_edges(nodes: list[NodeLocation]) -> list[Edge]:
    """Every edge of the full component graph, parents in computation order."""
    return [(p.name, c.name) for c in nodes for p in nodes if can_feed(p, c)]


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


def _position_weights(position_mask: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
    """Averaging weights over positions: (M, P), rows summing to 1."""
    m, p = tokens.shape
    if position_mask is None:
        mask = torch.ones(m, p)
    else:
        mask = position_mask.to(torch.float32)
        if mask.ndim == 1:
            mask = mask.expand(m, -1)
        if mask.shape != (m, p):
            raise ValueError(f"position_mask shape {tuple(position_mask.shape)} != tokens {(m, p)}")
    counts = mask.sum(1, keepdim=True)
    if (counts == 0).any():
        raise ValueError("position_mask selects no position for some prompts")
    return mask / counts


def collect_nodes(
    model: HookedTransformer,
    tokens: torch.Tensor,
    position_mask: torch.Tensor | None = None,
    batch_size: int = 1024,
    progress: bool = False,
) -> NodeActivations:
    """Token-averaged activations of every graph node on ``tokens: (M, P)``.

    ``position_mask: (P,)`` or ``(M, P)`` bool selects the positions averaged over (default all).
    """
    require_hook_flags(model)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be (prompts, positions), got shape {tuple(tokens.shape)}")
    nodes = graph_nodes(model)
    weights = _position_weights(position_mask, tokens)
    hooks = sorted({n.hook for n in nodes if n.hook != LOGITS})
    blocks: list[list[torch.Tensor]] = [[] for _ in nodes]
    device = model.cfg.device
    for start in tqdm(range(0, len(tokens), batch_size), desc="collect", disable=not progress):
        batch = tokens[start : start + batch_size].to(device)
        w = weights[start : start + batch_size].to(device)
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
            blocks[j].append(torch.einsum("mp,mpd->md", w, act.float()).cpu())
    columns = [torch.cat(b) for b in blocks]
    return NodeActivations(
        X=torch.cat(columns, dim=1),
        names=[n.name for n in nodes],
        block_sizes=[c.shape[1] for c in columns],
        parents=allowed_parents(nodes),
    )
