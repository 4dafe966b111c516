"""CircuitLasso anchored on the model's own metric: signed edge scores of what patching moves.

The paper's component scores (:mod:`circuitlasso.circuits.components`) measure how much of a
child's variance a parent explains; nothing ties them to the metric, and they never see how much
a sender differs between a prompt and its counterfactual, which is all that patching an edge
changes. Here the sparse regressions stand in for the gradient that EAP takes by a backward pass,
on the same token-averaged node activations (clean and counterfactual prompts stacked, rows ``i``
and ``n + i`` a pair), with forward passes only:

- the metric ``y: (M,)`` is the output node's one column (each prompt's logit difference, where
  the output was collected with answers), or else the logits projected on the mean clean minus
  counterfactual logits (EAP's :func:`~circuitlasso.evaluation.eap.logit_projection_metric`);
- every receiver ``v`` (an MLP, a head's query, key and value inputs, the output) gets a
  sensitivity ``s_v: (d_model,)``, the slope of its contribution to the metric with respect to
  its input, from one Lasso: ``z_v = o_v . t_v`` (its output ``o_v: (M, d_model)`` along its
  total effect ``t_v``) regressed on its input read through its own weights (``W_Q | W_K | W_V``
  of a head, ``W_in`` of an MLP; :func:`~circuitlasso.circuits.components.read_maps`), the
  coefficients mapped back through those weights (``s_v = R_v beta``, split by slot for a head).
  The output's slope is the metric's on its read direction (``W_U[:, answer] - W_U[:, wrong]``
  per prompt). Over pairs of a prompt and its counterfactual, a regression slope is a secant
  across the contrast, as EAP-IG's path average is, not a tangent at the clean prompt;
- a sender's total effect ``t_u`` is the sum of the sensitivities of every receiver it feeds
  (the residual stream is a sum), so receivers are taken from the output backwards;
- the edge ``u -> v`` (per receiver slot, as MIB counts edges) scores
  ``mean over pairs of (o_u(clean) - o_u(counterfactual)) . s_v``: signed, positive where the
  clean value of the edge carries the clean behaviour, as EAP's score.

Every regression's penalty is ``lam_ratio`` of its own ``lam_max`` on standardized columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens import HookedTransformer

from circuitlasso.circuits.circuit import EdgeScores, gap_threshold
from circuitlasso.collect import NodeActivations, collect_nodes
from circuitlasso.data.graph import OUTPUT, NodeLocation, graph_nodes
from circuitlasso.solve import lam_max, lasso
from circuitlasso.timing import Stopwatch

SlotScores = dict[tuple[str, str], float]  # (sender, receiver slot) -> signed score
QKV = ("q", "k", "v")
ANCHORED_TOL = 1e-6  # each regression stops at a duality gap below this times its variance


@dataclass(frozen=True)
class AnchoredScores:
    """Signed scores per receiver slot (``("m0", "a2.h1.q")``, MIB's edges) and per node edge
    (``|q| + |k| + |v|`` for a head, as EAP promotes its slot scores)."""

    slot_scores: SlotScores
    scores: EdgeScores


def _slope(design: torch.Tensor, target: torch.Tensor, lam_ratio: float) -> torch.Tensor:
    """Lasso coefficients ``(p,)`` of ``target: (M,)`` on ``design: (M, p)`` in the design's own
    units, the penalty ``lam_ratio`` of ``lam_max`` on standardized columns; constant columns
    get 0."""
    centered = design - design.mean(0)
    scale = centered.norm(dim=0) / len(design) ** 0.5
    live = scale > 1e-9 * max(float(scale.max()), 1e-300) if design.shape[1] else scale > 0
    coef = torch.zeros(design.shape[1], dtype=torch.float64)
    y = target - target.mean()
    if not bool(live.any()) or float(y.abs().max()) == 0.0:
        return coef
    x = centered[:, live] / scale[live]
    top = float(lam_max(x, y[:, None], normalize=False).max())
    if top == 0.0:
        return coef
    fit = lasso(x, y[:, None], lam_ratio * top, normalize=False, tol=ANCHORED_TOL,
                dtype=torch.float64)  # fmt: skip
    coef[live] = fit.coef[:, 0].double() / scale[live]
    return coef


def _logit_contrast(acts: NodeActivations) -> torch.Tensor:
    """The output's mean clean minus counterfactual value, ``(V,)``: the direction the metric
    reads where the output is every logit (module docstring)."""
    out = acts.block(OUTPUT).double()
    half = len(out) // 2
    return (out[:half] - out[half:]).mean(0)


def _metric(acts: NodeActivations) -> torch.Tensor:
    """The metric per prompt ``(M,)``: the output's one column, or the logits projected on
    :func:`_logit_contrast`."""
    out = acts.block(OUTPUT).double()
    return out[:, 0] if out.shape[1] == 1 else out @ _logit_contrast(acts)


def anchored_edge_scores(
    acts: NodeActivations,
    model: HookedTransformer,
    n_pairs: int,
    lam_ratio: float = 0.05,
) -> AnchoredScores:
    """Signed edge scores anchored on the metric (module docstring).

    ``acts``: :func:`~circuitlasso.collect.collect_nodes` of the ``n_pairs`` clean prompts
    followed by their ``n_pairs`` counterfactuals, in the same order.
    """
    if not 0 < lam_ratio < 1:
        raise ValueError(f"lam_ratio must be in (0, 1), got {lam_ratio}")
    m = acts.X.shape[0]
    if n_pairs < 2 or m != 2 * n_pairs:
        raise ValueError(
            f"need the clean prompts and their counterfactuals stacked, 2 * n_pairs rows with "
            f"n_pairs >= 2: got {m} rows for n_pairs={n_pairs}"
        )
    nodes = graph_nodes(model)
    names = [n.name for n in nodes]
    if names != acts.names:
        raise ValueError("the activations were not collected on this model's graph")
    senders = [name for name in names if name != OUTPUT]
    outputs = torch.stack([acts.block(name).double() for name in senders])  # (S, M, d)
    running = outputs.cumsum(0)  # the residual stream after each sender
    contrast = outputs[:, :n_pairs] - outputs[:, n_pairs:]  # (S, n, d)
    mean_contrast = contrast.mean(1)  # (S, d)
    shared = torch.zeros(len(senders), outputs.shape[2], dtype=torch.float64)
    direct = torch.zeros_like(outputs[0])  # (M, d): the output's sensitivity, per prompt
    y = _metric(acts)
    slot_scores: SlotScores = {}
    for j in reversed(range(len(nodes))):
        parents = acts.parents[j]
        if not parents:
            continue
        node = nodes[j]
        if parents == list(range(len(parents))):  # a prefix in computation order
            inputs = running[len(parents) - 1]
        else:
            inputs = outputs[parents].sum(0)
        if node.name == OUTPUT:
            direct = _output_sensitivity(acts, model, inputs, y, lam_ratio)
            scores = (contrast[parents] * direct[:n_pairs]).sum(-1).mean(-1)
            slot_scores.update(_keyed(senders, parents, OUTPUT, scores))
            continue
        own = outputs[senders.index(node.name)]
        contribution = (own * (direct + shared[senders.index(node.name)])).sum(-1)  # (M,)
        for slot, s in _receiver_sensitivities(model, node, inputs, contribution, lam_ratio):
            slot_scores.update(_keyed(senders, parents, slot, mean_contrast[parents] @ s))
            shared[parents] += s
    return AnchoredScores(slot_scores, slot_node_scores(slot_scores))


def _keyed(senders: list[str], parents: list[int], slot: str, scores: torch.Tensor) -> SlotScores:
    """``{(sender, slot): score}`` for the ``parents`` (sender indices) and their ``scores``."""
    return {(senders[i], slot): score for i, score in zip(parents, scores.tolist(), strict=True)}


def _output_sensitivity(
    acts: NodeActivations,
    model: HookedTransformer,
    inputs: torch.Tensor,
    y: torch.Tensor,
    lam_ratio: float,
) -> torch.Tensor:
    """The metric's sensitivity to the last residual stream ``inputs: (M, d)``, per prompt:
    ``(M, d)``, the slope of ``y`` on the stream read along the output's direction (each
    prompt's ``W_U[:, answer] - W_U[:, wrong]``, or ``W_U`` times the mean logit contrast)."""
    if acts.output_reads is not None:
        reads = acts.output_reads.double()  # (M, d)
    else:
        unembed = model.W_U.detach().double().cpu()
        reads = (unembed @ _logit_contrast(acts)).expand(len(inputs), -1)
    read = (inputs * reads).sum(-1, keepdim=True)
    return _slope(read, y, lam_ratio)[0] * reads


def _receiver_sensitivities(
    model: HookedTransformer,
    node: NodeLocation,
    inputs: torch.Tensor,
    contribution: torch.Tensor,
    lam_ratio: float,
) -> list[tuple[str, torch.Tensor]]:
    """``(slot, s)`` of a head's three inputs or an MLP's one: ``s: (d_model,)``, the slope of
    the node's ``contribution: (M,)`` to the metric on its ``inputs: (M, d_model)`` read
    through its own weights, mapped back through them."""
    if node.kind == "head":
        attn = model.blocks[node.layer].attn
        maps = [w[node.head].detach().double().cpu() for w in (attn.W_Q, attn.W_K, attn.W_V)]
        design = torch.cat([inputs @ w for w in maps], 1)
        beta = torch.split(_slope(design, contribution, lam_ratio), [w.shape[1] for w in maps])
        return [(f"{node.name}.{x}", w @ b) for x, w, b in zip(QKV, maps, beta, strict=True)]
    w_in = model.blocks[node.layer].mlp.W_in.detach().double().cpu()
    return [(node.name, w_in @ _slope(inputs @ w_in, contribution, lam_ratio))]


def slot_node_scores(slot_scores: SlotScores) -> EdgeScores:
    """Node-edge scores: the sum of ``|score|`` over a receiver's slots."""
    scores: EdgeScores = {}
    for (sender, slot), score in slot_scores.items():
        receiver = slot.rsplit(".", 1)[0] if slot.endswith(tuple(f".{x}" for x in QKV)) else slot
        scores[(sender, receiver)] = scores.get((sender, receiver), 0.0) + abs(score)
    return scores


@dataclass(frozen=True)
class AnchoredResult:
    """:class:`AnchoredScores` with the ground-truth-free threshold of the node-edge scores and
    the time split in seconds."""

    slot_scores: SlotScores
    scores: EdgeScores
    threshold: float
    collect_seconds: float
    solve_seconds: float


def anchored_circuit(
    model: HookedTransformer,
    clean: torch.Tensor,
    counterfactual: torch.Tensor,
    position_mask: torch.Tensor | None = None,
    *,
    metric_mask: torch.Tensor | None = None,
    answers: torch.Tensor | None = None,
    lam_ratio: float = 0.05,
) -> AnchoredResult:
    """Collect the node activations of ``clean: (n, P)`` and ``counterfactual: (n, P)`` stacked
    and score every edge (:func:`anchored_edge_scores`).

    ``position_mask: (2n, P)`` or ``(P,)`` the positions the senders are averaged over,
    ``metric_mask`` (the same shapes) those the metric reads (default ``position_mask``'s: a
    next-token metric reads the last token, while a sender's contrast may sit at any earlier
    one, so they are averaged over every real token); ``answers: (n, 2)``
    token ids (answer, wrong) make the metric each prompt's logit difference, read on the
    counterfactual prompt's same two tokens.
    """
    if clean.shape != counterfactual.shape:
        raise ValueError(
            f"clean {tuple(clean.shape)} and counterfactual {tuple(counterfactual.shape)} "
            "token batches must have the same shape"
        )
    clock = Stopwatch()
    acts = collect_nodes(
        model,
        torch.cat([clean, counterfactual]),
        position_mask,
        answers=None if answers is None else torch.cat([answers, answers]),
        output_mask=metric_mask,
    )
    collect_seconds = clock.lap("collect")
    found = anchored_edge_scores(acts, model, len(clean), lam_ratio)
    threshold = gap_threshold(found.scores)
    return AnchoredResult(
        found.slot_scores, found.scores, threshold, collect_seconds, clock.lap("solve")
    )
