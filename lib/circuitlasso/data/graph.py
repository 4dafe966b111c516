"""The component graph of a HookedTransformer: node names, hook locations and candidate edges.

The graph has the nodes EAP-IG and InterpBench use, in computation order: ``input`` (token plus
position embedding), per layer the heads ``a{l}.h{h}`` then the MLP ``m{l}``, and ``output`` (the
logits). A node's activation is what it writes: the embedding, a head's ``hook_result`` slice, the
MLP's ``hook_mlp_out``, the logits for ``output``. A child may read any node that comes before it,
except that heads of one layer run in parallel and so never feed each other. An edge
``(parent, child)`` says the child reads what the parent writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from transformer_lens import HookedTransformer

from circuitlasso.memory import (
    PLANNED_SHARE,
    MemoryBudgetError,
    batch_size,
    budget_bytes,
    gib,
)

Edge = tuple[str, str]
INPUT = "input"
OUTPUT = "output"


NodeKind = Literal["input", "head", "mlp", "output"]


REQUIRED_HOOK_FLAGS = ("use_split_qkv_input", "use_hook_mlp_in")
"""What edge patching and collection read: each head's own q, k, v inputs and each MLP's input.
The heads' outputs are read at ``hook_z`` (:func:`sender_reads`), so ``use_attn_result`` is not
among them."""


LOGITS = "logits"


INPUT_HOOK = "blocks.0.hook_resid_pre"  # token plus position embedding


DEFAULT_PASS_GIB = 4.0
"""Default memory budget, in GiB, of one batch's passes through the graph's hooks."""


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
            f"model.set_use_split_qkv_input(True), model.set_use_hook_mlp_in(True) "
            f"(or in the HookedTransformerConfig)"
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


def pass_bytes_per_prompt(
    model: HookedTransformer, n_positions: int, gradients: bool = False
) -> int:
    """Bytes one prompt of ``n_positions`` tokens takes in a forward pass through the graph's hooks,
    or in a forward and backward pass (``gradients``).

    The estimate counts the (positions, n_heads, d_head, d_model) product TransformerLens forms
    for each head's result with ``use_attn_result`` (and, in a backward pass, its gradient). The
    passes of this package read the heads at ``hook_z`` and run without that flag, so the term is
    headroom for a caller's model that sets it. On top come the logits and what the pass keeps:
    the nodes' outputs, or with gradients what autograd saves (about 24 n_heads + 16
    residual-width vectors per position and layer with split qkv inputs). On a 2-layer
    GPT-2-family model (d_model 256, 64 positions) it overstates the measured peak growth of a
    batch about 4x forward and 2.5x forward and backward (``tests/unit/test_graph_memory.py``).
    """
    cfg = model.cfg
    item = torch.finfo(cfg.dtype).bits // 8
    result = cfg.n_heads * cfg.d_head * cfg.d_model
    if gradients:
        kept = 2.2 * result + cfg.n_layers * (24 * cfg.n_heads + 16) * cfg.d_model
    else:
        kept = 1.25 * result + (len(graph_nodes(model)) + 2 * cfg.n_layers) * cfg.d_model
    return int(n_positions * item * (kept + cfg.d_vocab))


def prompts_per_batch(
    model: HookedTransformer,
    n_positions: int,
    memory_gib: float = DEFAULT_PASS_GIB,
    *,
    gradients: bool = False,
    extra_bytes_per_prompt: int = 0,
) -> int:
    """How many prompts of ``n_positions`` tokens one batch of passes through the graph's hooks
    may hold within ``memory_gib`` (:func:`pass_bytes_per_prompt`, plus what the caller keeps
    per prompt). MemoryBudgetError, before any work, when one prompt does not fit."""
    per_prompt = pass_bytes_per_prompt(model, n_positions, gradients) + extra_bytes_per_prompt
    available = int(PLANNED_SHARE * budget_bytes(memory_gib))
    if per_prompt > available:
        passes = "forward and backward pass" if gradients else "forward pass"
        raise MemoryBudgetError(
            f"one prompt of {n_positions} positions takes about {gib(per_prompt)} in a {passes} "
            f"through the component graph's hooks, more than the {gib(available)} planned within "
            f"memory_gib={memory_gib}: raise memory_gib or use shorter prompts"
        )
    return batch_size(available, per_prompt)


@dataclass(frozen=True)
class SenderRead:
    """How sender ``index``'s output is read from its hook's activation: whole (``head`` None),
    or a head's slice of ``z: (B, P, H, d_head)`` through its ``W_O: (d_head, d_model)``."""

    index: int
    head: int | None = None
    W_O: torch.Tensor | None = None

    def __call__(self, act: torch.Tensor) -> torch.Tensor:
        if self.head is None or self.W_O is None:
            return act
        return act[:, :, self.head] @ self.W_O


def sender_reads(
    model: HookedTransformer, senders: list[NodeLocation]
) -> dict[str, list[SenderRead]]:
    """``{hook: [SenderRead]}`` for ``senders``, hooks in computation order. A head is read at
    its attention's ``hook_z`` and projected by its own ``W_O`` slice: the output its
    ``hook_result`` slice holds, without TransformerLens forming every head's result in the
    residual stream (``use_attn_result``), which makes a pass several times slower
    (:func:`heads_summed`)."""
    reads: dict[str, list[SenderRead]] = {}
    for i, node in enumerate(senders):
        if node.kind == "head":
            hook = f"blocks.{node.layer}.attn.hook_z"
            W_O = model.blocks[node.layer].attn.W_O[node.head].detach()
            reads.setdefault(hook, []).append(SenderRead(i, node.head, W_O))
        else:
            reads.setdefault(node.hook, []).append(SenderRead(i))
    return reads


@contextmanager
def hook_flags(model: HookedTransformer, **flags: bool) -> Iterator[HookedTransformer]:
    """``model`` with the config ``flags`` given (``use_split_qkv_input=True``, ...) set through
    their ``set_*`` methods for the block inside; the caller's values restored after."""
    kept = {flag: bool(getattr(model.cfg, flag)) for flag in flags}
    try:
        for flag, value in flags.items():
            getattr(model, f"set_{flag}")(value)
        yield model
    finally:
        for flag, value in kept.items():
            getattr(model, f"set_{flag}")(value)


@contextmanager
def heads_summed(model: HookedTransformer) -> Iterator[None]:
    """``model`` without ``use_attn_result`` for the passes inside (the flag restored after):
    edge patching and node collection read the heads at ``hook_z`` (:func:`sender_reads`)."""
    with hook_flags(model, use_attn_result=False):
        yield
