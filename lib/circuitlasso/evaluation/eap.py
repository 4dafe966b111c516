"""Edge attribution patching (EAP) and EAP with integrated gradients (EAP-IG).

On the component graph of :mod:`circuitlasso.collect`, the edge ``u -> v`` carries what ``u`` writes
into the part of the residual stream ``v`` reads (a head reads it three times: query, key and value
inputs). Patching the edge from the clean to the corrupted prompt changes the metric by about

    score(u -> v) = sum_{prompt, position} (a_u(clean) - a_u(corrupted)) . g_v

with ``g_v`` the gradient of the metric with respect to ``v``'s input (Syed et al., 2023): on the
clean prompt for EAP, averaged over ``steps`` inputs interpolated between the corrupted and clean
embeddings for EAP-IG (Hanna et al., 2024). Scores are averaged over prompts. A head's edge score is
``|query| + |key| + |value|`` of its three signed input scores; every other edge score is
``|signed score|``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm
from transformer_lens import HookedTransformer

from circuitlasso.circuits.circuit import EdgeScores
from circuitlasso.data.graph import (
    DEFAULT_PASS_GIB,
    INPUT_HOOK,
    NodeLocation,
    SenderRead,
    can_feed,
    graph_nodes,
    heads_summed,
    prompts_per_batch,
    require_hook_flags,
    sender_reads,
)
from circuitlasso.timing import Stopwatch

Metric = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
QKV = ("q", "k", "v")


def logit_projection_metric(
    logits: torch.Tensor,
    clean_logits: torch.Tensor,
    corrupted_logits: torch.Tensor,
    position_weights: torch.Tensor,
) -> torch.Tensor:
    """Per-prompt sum over positions of ``<logits - corrupted, clean - corrupted>``.

    Shapes: logits (B, P, V), position_weights (B, P); returns (B,). It is 0 on the corrupted run,
    ``||clean - corrupted||^2`` on the clean run and linear in the logits, so its gradient never
    vanishes (unlike a KL or squared distance to the clean output). For a numerical program
    (V = 1) it is the product of the output's change and the clean-corrupted difference.
    """
    direction = clean_logits - corrupted_logits
    per_position = ((logits - corrupted_logits) * direction).sum(-1)
    return (per_position * position_weights).sum(-1)


def logit_difference_metric(answer: torch.Tensor, wrong: torch.Tensor) -> Metric:
    """A metric for prompts whose (answer, wrong) token ids are ``answer``, ``wrong``: ``(B,)``
    each: per prompt, the sum over positions of the position weights (1 where the answer is
    read) times logit(answer) - logit(wrong)."""

    def metric(logits, clean_logits, corrupted_logits, weights):
        index = torch.stack([answer, wrong], 1).to(logits.device)  # (B, 2)
        picked = logits.gather(-1, index[:, None, :].expand(-1, logits.shape[1], -1))
        return ((picked[..., 0] - picked[..., 1]) * weights).sum(-1)

    return metric


@dataclass(frozen=True)
class ReceiverSlot:
    """One input of a node: ``hook`` holds it; ``head`` indexes the head axis of qkv inputs."""

    name: str
    node: NodeLocation
    hook: str
    head: int | None


def receiver_slots(model: HookedTransformer, nodes: list[NodeLocation]) -> list[ReceiverSlot]:
    """Every input of ``nodes`` in graph order: a head's q, k and v inputs (one slot each), an
    MLP's input, the logits' input (the last residual stream)."""
    last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
    slots: list[ReceiverSlot] = []
    for node in nodes:
        if node.kind == "head":
            slots.extend(
                ReceiverSlot(
                    f"{node.name}.{x}", node, f"blocks.{node.layer}.hook_{x}_input", node.head
                )
                for x in QKV
            )
        elif node.kind == "mlp":
            slots.append(ReceiverSlot(node.name, node, f"blocks.{node.layer}.hook_mlp_in", None))
        elif node.kind == "output":
            slots.append(ReceiverSlot(node.name, node, last, None))
    return slots


def require_ungrouped_heads(model: HookedTransformer) -> None:
    """ValueError unless every query head has key and value inputs of its own: a grouped-query
    model (several query heads sharing a key/value head) must be ungrouped first."""
    cfg = model.cfg
    grouped = cfg.n_key_value_heads is not None and cfg.n_key_value_heads != cfg.n_heads
    if grouped and not cfg.ungroup_grouped_query_attention:
        raise ValueError(
            f"the model's {cfg.n_heads} query heads share {cfg.n_key_value_heads} key/value "
            "heads: call model.set_ungroup_grouped_query_attention(True) so that each head's "
            "key and value inputs can be patched on their own"
        )


def check_patching_inputs(
    model: HookedTransformer, clean: torch.Tensor, other: torch.Tensor
) -> None:
    """ValueError unless ``model`` has the hooks edge patching reads (every query head with its
    own key and value inputs) and ``clean`` and ``other`` (corrupted or counterfactual) are
    token batches ``(prompts, positions)`` of the same shape."""
    require_hook_flags(model)
    require_ungrouped_heads(model)
    if clean.shape != other.shape or clean.ndim != 2:
        raise ValueError(
            f"clean {tuple(clean.shape)} and {tuple(other.shape)} token batches must both be "
            "(prompts, positions) of the same shape"
        )


@dataclass(frozen=True)
class AttributionResult:
    """EAP output: promoted edge scores, signed per-input scores and the time split.

    ``slot_scores[(sender, slot)]`` is the signed score for sender node -> receiver input
    (``"a1.h0.q"``, ``"m1"``, ``"output"``). ``collect_seconds`` covers the forward passes caching
    the senders' clean and corrupted outputs, ``attribute_seconds`` the gradient passes.
    """

    scores: EdgeScores
    slot_scores: dict[tuple[str, str], float]
    collect_seconds: float
    attribute_seconds: float


def sender_outputs(
    reads: dict[str, list[SenderRead]], cache: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Every sender's output, sender-major: ``(S, B, P, d_model)``, from a ``cache`` holding
    the hooks of ``reads`` (:func:`sender_reads`)."""
    outputs = [(read.index, read(cache[hook])) for hook, found in reads.items() for read in found]
    return torch.stack([output for _, output in sorted(outputs, key=lambda pair: pair[0])])


def forward_cache(
    model: HookedTransformer, tokens: torch.Tensor, hooks: list[str]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits (B, P, V) and the activations at ``hooks``, without gradients (and without
    ``use_attn_result``: :func:`heads_summed`)."""
    cache: dict[str, torch.Tensor] = {}

    def save(act: torch.Tensor, hook) -> None:
        cache[hook.name] = act.detach()

    with torch.no_grad(), heads_summed(model):
        logits = model.run_with_hooks(tokens, fwd_hooks=[(h, save) for h in hooks])
    return logits, cache


def _receiver_gradients(
    model: HookedTransformer,
    tokens: torch.Tensor,
    embedding: torch.Tensor,
    slots: list[ReceiverSlot],
    metric: Metric,
    references: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """Gradient of the summed metric at every receiver input: (B, P, n_slots, d_model).

    The model runs on ``tokens`` with its input embedding (at ``INPUT_HOOK``) replaced
    by ``embedding``; ``references`` are the metric's clean logits, corrupted logits and weights.
    """
    inputs: dict[str, torch.Tensor] = {}

    def replace(act: torch.Tensor, hook) -> torch.Tensor:
        return embedding.clone().requires_grad_(True)

    def keep(act: torch.Tensor, hook) -> None:
        inputs[hook.name] = act

    hooks: list = [(INPUT_HOOK, replace)]
    hooks += [(h, keep) for h in sorted({s.hook for s in slots})]
    with torch.enable_grad(), heads_summed(model):
        total = metric(model.run_with_hooks(tokens, fwd_hooks=hooks), *references).sum()
        names = list(inputs)
        found = torch.autograd.grad(total, [inputs[n] for n in names], allow_unused=True)
    by_hook = dict(zip(names, found, strict=True))
    grads = torch.zeros(*embedding.shape[:2], len(slots), embedding.shape[-1], device=tokens.device)
    for r, slot in enumerate(slots):
        grad = by_hook[slot.hook]
        if grad is not None:
            grads[:, :, r] = grad[:, :, slot.head] if slot.head is not None else grad
    return grads


def edge_attribution_patching(
    model: HookedTransformer,
    clean: torch.Tensor,
    corrupted: torch.Tensor,
    ig_steps: int = 0,
    metric: Metric = logit_projection_metric,
    position_mask: torch.Tensor | None = None,
    batch_size: int | None = None,
    memory_gib: float = DEFAULT_PASS_GIB,
    progress: bool = False,
) -> AttributionResult:
    """EAP (``ig_steps=0``) or EAP-IG (``ig_steps`` interpolation steps) edge scores.

    ``clean``, ``corrupted``: (M, P) token ids, prompt ``i`` of one paired with prompt ``i`` of the
    other. ``position_mask: (P,)`` or ``(M, P)`` bool chooses the positions the metric sums over
    (default all). The metric gets ``(logits, clean_logits, corrupted_logits, weights)`` and
    returns one value per prompt. ``batch_size`` prompt pairs run at once; by default as many as
    fit in ``memory_gib`` (:func:`~circuitlasso.data.graph.prompts_per_batch`).
    """
    check_patching_inputs(model, clean, corrupted)
    if ig_steps < 0:
        raise ValueError(f"ig_steps must be >= 0, got {ig_steps}")
    nodes = graph_nodes(model)
    senders = [n for n in nodes if n.kind != "output"]
    slots = receiver_slots(model, nodes)
    reads = sender_reads(model, senders)
    device = model.cfg.device
    mask = torch.ones(clean.shape[1], dtype=torch.bool) if position_mask is None else position_mask
    weights = mask.to(torch.float32).expand(clean.shape).contiguous()
    alphas = [1.0] if ig_steps == 0 else [k / ig_steps for k in range(1, ig_steps + 1)]
    if batch_size is None:
        # per prompt and position: the senders' clean and corrupted outputs and their difference
        # (float32), the receivers' gradients summed over steps and their mean (float64) and one
        # step's (float32)
        kept = clean.shape[1] * model.cfg.d_model * (12 * len(senders) + 20 * len(slots))
        batch_size = prompts_per_batch(
            model, clean.shape[1], memory_gib, gradients=True, extra_bytes_per_prompt=kept
        )

    totals = torch.zeros(len(senders), len(slots), dtype=torch.float64)
    clock = Stopwatch()
    for start in tqdm(range(0, len(clean), batch_size), desc="EAP", disable=not progress):
        stop = start + batch_size
        batch_clean, batch_corrupted = (
            clean[start:stop].to(device),
            corrupted[start:stop].to(device),
        )
        batch_weights = weights[start:stop].to(device)

        with clock.timed("collect", add=True):
            clean_logits, clean_cache = forward_cache(model, batch_clean, sorted(reads))
            corrupted_logits, corrupted_cache = forward_cache(model, batch_corrupted, sorted(reads))
            delta = sender_outputs(reads, clean_cache) - sender_outputs(reads, corrupted_cache)
            delta = delta.permute(1, 2, 0, 3)  # (B, P, S, D)

        with clock.timed("attribute", add=True):
            embed_clean, embed_corrupted = clean_cache[INPUT_HOOK], corrupted_cache[INPUT_HOOK]

            references = (clean_logits, corrupted_logits, batch_weights)
            grads = torch.zeros(
                *delta.shape[:2], len(slots), delta.shape[-1], dtype=torch.float64, device=device
            )
            for alpha in alphas:
                mixed = embed_corrupted + alpha * (embed_clean - embed_corrupted)
                grads += _receiver_gradients(model, batch_clean, mixed, slots, metric, references)
            mean_grads = grads / len(alphas)
            totals += torch.einsum("bpsd,bprd->sr", delta.double(), mean_grads).cpu()

    totals /= len(clean)
    slot_scores: dict[tuple[str, str], float] = {}
    scores: EdgeScores = {}
    for i, sender in enumerate(senders):
        for r, slot in enumerate(slots):
            if can_feed(sender, slot.node):
                score = float(totals[i, r])
                slot_scores[(sender.name, slot.name)] = score
                edge = (sender.name, slot.node.name)
                scores[edge] = scores.get(edge, 0.0) + abs(score)
    return AttributionResult(
        scores, slot_scores, clock.laps.get("collect", 0.0), clock.laps.get("attribute", 0.0)
    )
