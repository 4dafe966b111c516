"""Circuit faithfulness scored as MIB's circuit-localization track does (Mueller et al., 2025).

MIB counts the edges of the component graph (:mod:`circuitlasso.data.graph`) the way its own
graph does: an edge into an attention head goes to one of its three inputs, so ``u -> a1.h0``
is three edges, ``u -> a1.h0.q``, ``.k`` and ``.v`` (the receiver slots of
:mod:`circuitlasso.evaluation.eap`); an edge into an MLP or the output is one. A circuit ``C`` is
a set of such edges, and

    m(C) = mean over items of logit(answer) - logit(wrong) at the last real token,

on the clean prompt with every edge outside ``C`` patched: its receiver reads the sender's
activation on the counterfactual prompt instead of the clean one (an interchange intervention),
all in one forward pass, each sender's clean-side value being its value in that patched pass.
The empty circuit gives the counterfactual run, the full circuit the clean run. Faithfulness is

    f(C) = (m(C) - m(empty)) / (m(full) - m(empty)).

For a scoring of edges, the circuit at budget ``k`` is MIB's ``apply_topn(k, absolute)``: with
``absolute=True`` the ``k`` edges of largest ``|score|``, with ``absolute=False`` the ``k`` edges
of largest signed score (ties in computation order), then pruned as MIB prunes
(:func:`prune`: repeatedly drop nodes without an incoming edge (``input`` excepted) or an
outgoing one (``output`` excepted), and the edges touching them). Budgets are MIB's fractions
of all edges (:data:`MIB_FRACTIONS`, 0.1 % to 100 %), ``k = int(fraction * n_edges)`` as MIB
rounds. Over the curve ``(fraction, f)``, ::

    CPR = area under f,    CMD = area under |1 - f|,

both by the trapezoidal rule on the fractions themselves, a linear axis from 0.001 to 1 (MIB's
``evaluate_area_under_curve``: it computes log-fractions under ``log_scale=True`` but integrates
over the raw fractions), not normalized by the axis' length 0.999. Higher CPR and lower CMD are
better; a circuit with f = 1 at every budget has CPR 0.999 and CMD 0. :func:`trapezoid_area` and
:func:`cpr_cmd` are pure functions of the curve. MIB's ``print_results.py`` reports CPR from the
signed ranking (``absolute=False``: an edge that pushes the metric the wrong way is ranked last,
so f may exceed 1) and CMD from the absolute one; :func:`mib_scores` gives both curves from one
set of patched passes (:class:`MIBScores`: ``cpr`` signed, ``cmd`` absolute, ``cpr_abs``).

Grouped-query attention: a head's key and value inputs are its own only once the model is
ungrouped (``model.set_ungroup_grouped_query_attention(True)``; MIB asserts the same), else
TransformerLens's ``hook_k_input`` holds one slot per key/value head; :func:`edge_patched_logits`
refuses a grouped model.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformer_lens import HookedTransformer

from circuitlasso.data.counterfactual_tasks import TaskTokens, logit_difference
from circuitlasso.data.graph import (
    DEFAULT_PASS_GIB,
    INPUT,
    OUTPUT,
    NodeLocation,
    can_feed,
    graph_nodes,
    heads_summed,
    prompts_per_batch,
    sender_reads,
)
from circuitlasso.evaluation.eap import (
    ReceiverSlot,
    check_patching_inputs,
    forward_cache,
    receiver_slots,
    sender_outputs,
)
from circuitlasso.forward import read_logits

SlotEdge = tuple[str, str]  # (sender node, receiver slot): ("a0.h1", "a2.h0.q"), ("m0", "output")
MIB_FRACTIONS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def _slots(model: HookedTransformer) -> list[ReceiverSlot]:
    return receiver_slots(model, graph_nodes(model))


def mib_edges(model: HookedTransformer) -> list[SlotEdge]:
    """Every edge of the model's graph as MIB counts them (one per head input), receivers in
    computation order, then senders."""
    senders = [n for n in graph_nodes(model) if n.kind != "output"]
    return [(u.name, r.name) for r in _slots(model) for u in senders if can_feed(u, r.node)]


def expand_scores(
    model: HookedTransformer, scores: Mapping[tuple[str, str], float]
) -> dict[SlotEdge, float]:
    """Scores per MIB edge from scores keyed by MIB edges or by node edges: a node edge into a
    head (``("m0", "a1.h0")``, as CircuitLasso and :class:`~circuitlasso.evaluation.eap.
    AttributionResult.scores` key them) gives its score to the head's three inputs. Edges not
    scored score 0; ValueError on an edge not in the graph or scored both ways."""
    heads: dict[str, list[str]] = {}
    for slot in _slots(model):
        if slot.node.kind == "head":
            heads.setdefault(slot.node.name, []).append(slot.name)
    edges = mib_edges(model)
    valid = set(edges)
    out: dict[SlotEdge, float] = dict.fromkeys(edges, 0.0)
    seen: set[SlotEdge] = set()
    for (sender, receiver), score in scores.items():
        targets = [(sender, s) for s in heads.get(receiver, [receiver])]
        for edge in targets:
            if edge not in valid:
                raise ValueError(f"edge {sender} -> {receiver} is not in the model's graph")
            if edge in seen:
                raise ValueError(f"edge {edge} is scored twice (as a node edge and a slot edge)")
            seen.add(edge)
            out[edge] = float(score)
    return out


def prune(model: HookedTransformer, circuit: Collection[SlotEdge]) -> frozenset[SlotEdge]:
    """MIB's pruning: repeatedly drop every node without an incoming circuit edge (``input``
    excepted) or without an outgoing one (``output`` excepted), then the edges whose sender or
    receiver node was dropped, until nothing changes."""
    node_of = {r.name: r.node.name for r in _slots(model)}
    unknown = [e for e in circuit if e[1] not in node_of]
    if unknown:
        raise ValueError(f"edges {unknown[:3]} do not end in a receiver slot of the model")
    edges = set(circuit)
    while True:
        has_out = {u for u, _ in edges}
        has_in = {node_of[r] for _, r in edges} | {INPUT}
        live = (has_out & has_in) | {OUTPUT}
        kept = {(u, r) for u, r in edges if u in live and node_of[r] in live}
        if kept == edges:
            return frozenset(edges)
        edges = kept


def _ranked_edges(
    model: HookedTransformer, scores: Mapping[tuple[str, str], float], absolute: bool = True
) -> list:
    """Every MIB edge by decreasing ``|score|`` (``absolute``) or decreasing signed score
    (:func:`expand_scores`; ties in computation order)."""
    expanded = expand_scores(model, scores)
    if absolute:
        return sorted(expanded, key=lambda e: -abs(expanded[e]))  # stable: computation order
    return sorted(expanded, key=lambda e: -expanded[e])


def top_edges(
    model: HookedTransformer,
    scores: Mapping[tuple[str, str], float],
    n: int,
    *,
    pruned: bool = True,
    absolute: bool = True,
) -> frozenset[SlotEdge]:
    """The ``n`` MIB edges of largest ``|score|`` (or of largest signed score where
    ``absolute=False``; :func:`expand_scores`; ties in computation order), pruned as MIB prunes
    unless ``pruned=False``."""
    order = _ranked_edges(model, scores, absolute)
    if not 0 <= n <= len(order):
        raise ValueError(f"n must be in [0, {len(order)}], got {n}")
    chosen = frozenset(order[:n])
    return prune(model, chosen) if pruned else chosen


@dataclass(frozen=True)
class _EdgeGraph:
    """A model's senders and receiver slots in computation order, and which sender can feed
    which slot (``real: (S, R)`` bool)."""

    senders: list[NodeLocation]
    slots: list[ReceiverSlot]
    real: torch.Tensor

    @classmethod
    def of(cls, model: HookedTransformer) -> _EdgeGraph:
        nodes = graph_nodes(model)
        senders = [n for n in nodes if n.kind != "output"]
        slots = receiver_slots(model, nodes)
        real = torch.tensor([[can_feed(u, r.node) for r in slots] for u in senders])
        return cls(senders, slots, real)

    def inside(self, circuit: Collection[SlotEdge]) -> torch.Tensor:
        """``(S, R)`` bool: the edges of ``circuit``; ValueError on an edge not in the graph."""
        index = {n.name: i for i, n in enumerate(self.senders)}
        slot_index = {r.name: j for j, r in enumerate(self.slots)}
        edges = list(circuit)
        pairs = [
            (index.get(sender, -1), slot_index.get(receiver, -1)) for sender, receiver in edges
        ]
        inside = torch.zeros(len(self.senders), len(self.slots), dtype=torch.bool)
        if not pairs:
            return inside
        rows, columns = torch.tensor(pairs).T
        known = (rows >= 0) & (columns >= 0)
        valid = known.clone()
        valid[known] = self.real[rows[known], columns[known]]
        if not valid.all():
            sender, receiver = edges[int(torch.nonzero(~valid)[0])]
            raise ValueError(f"edge {sender} -> {receiver} is not in the model's graph")
        inside[rows, columns] = True
        return inside

    def counterfactual_outputs(
        self, model: HookedTransformer, counterfactual: torch.Tensor
    ) -> torch.Tensor:
        """Every sender's output on ``counterfactual``, sender-major: ``(S, B, P, d_model)``."""
        reads = sender_reads(model, self.senders)
        _, cache = forward_cache(model, counterfactual, sorted(reads))
        return sender_outputs(reads, cache)


SPARSE_DENSITY = 0.25  # a hook's sender masks are multiplied as sparse matrices below this


@dataclass(frozen=True)
class _HookUpdate:
    """How the receivers of one hook (a layer's heads at one input, its MLP, or the output) take
    their patch: ``heads`` (None for a whole-activation receiver); ``change: (n, S)`` each
    receiver's patched senders; ``keep: (n, S)`` the same update written as the running sum of
    every sender so far (``from_running``) minus its kept senders, where that is the sparser
    product, valid when exactly the ``prefix`` first senders have run; each as a sparse matrix
    where it is sparse."""

    heads: tuple[int | None, ...]
    change: torch.Tensor
    keep: torch.Tensor
    from_running: torch.Tensor
    prefix: int

    @classmethod
    def of(
        cls,
        slots: Sequence[tuple[int | None, int]],
        graph: _EdgeGraph,
        inside: torch.Tensor,
        like: torch.Tensor,
    ) -> _HookUpdate:
        """The hook's receivers ``slots`` (head, column of ``graph.slots``) for the circuit
        ``inside: (S, R)``, as matrices of ``like``'s dtype on its device."""

        def matrix(mask: torch.Tensor) -> torch.Tensor:
            mask = mask.to(like)
            sparse = mask.count_nonzero() < SPARSE_DENSITY * mask.numel()
            return mask.to_sparse() if sparse else mask

        columns = [j for _, j in slots]
        feeds = graph.real[:, columns].T  # (n, S)
        kept = inside[:, columns].T & feeds
        change = feeds & ~kept
        n_feeding = feeds.sum(1)
        prefix = int(n_feeding[0])
        is_prefix = bool((feeds[:, :prefix].all() & ~feeds[:, prefix:].any()).item())
        from_running = (kept.sum(1) < change.sum(1)) & is_prefix
        keep = torch.where(from_running[:, None], -kept.double(), change.double())
        return cls(
            heads=tuple(head for head, _ in slots),
            change=matrix(change),
            keep=matrix(keep),
            from_running=from_running.to(like),
            prefix=prefix if is_prefix else -1,
        )

    def updates(self, difference: torch.Tensor, running: torch.Tensor, recorded: int):
        """``(n, *difference.shape[1:])``: each receiver's sum over its patched senders of
        ``difference: (S, ...)`` (zero past the ``recorded`` senders), ``running`` its sum."""
        flat = difference.flatten(1)
        if self.prefix == recorded:
            out = torch.mm(self.keep, flat) + self.from_running[:, None] * running.flatten()
        else:
            out = torch.mm(self.change, flat)
        return out.view(-1, *difference.shape[1:])


def _patched_logits(
    model: HookedTransformer,
    graph: _EdgeGraph,
    clean: torch.Tensor,
    counter_outputs: torch.Tensor,
    inside: torch.Tensor,
    read: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits ``(B, P, V)`` on ``clean`` with every edge of ``graph`` outside ``inside: (S, R)``
    patched with its sender's output in ``counter_outputs: (S, B, P, D)``; only where ``read:
    (B, P)`` is True when it is given (zeros elsewhere, :func:`~circuitlasso.forward.read_logits`).

    A receiver adds, over its patched senders, the sender's counterfactual output minus its
    output in this pass. Senders run in computation order and every sender that can feed a
    receiver has run before it, so the receivers of one hook take their updates in one product
    of their sender masks and the senders' differences (:class:`_HookUpdate`); where every
    sender so far feeds them, a receiver with fewer kept than patched senders takes the running
    sum minus its kept ones, so that small and large circuits alike are sparse products and
    cost little more than a forward pass."""
    patched = graph.real & ~inside
    reads = sender_reads(model, graph.senders)
    slots_by_hook: dict[str, list[tuple[int | None, int]]] = {}
    for j, slot in enumerate(graph.slots):
        if patched[:, j].any():
            slots_by_hook.setdefault(slot.hook, []).append((slot.head, j))
    if not slots_by_hook:  # the full circuit: the clean run itself
        return _logits(model, clean, [], read)
    like = counter_outputs[0, 0, 0, 0]
    receivers = {
        hook: _HookUpdate.of(slots, graph, inside, like) for hook, slots in slots_by_hook.items()
    }
    difference = torch.zeros_like(counter_outputs)  # counterfactual - this pass, per sender
    running = torch.zeros_like(counter_outputs[0])  # the sum of difference over senders so far
    recorded = [0]  # how many senders (a prefix, in computation order) difference holds

    def record(act: torch.Tensor, hook) -> None:
        for read in reads[hook.name]:
            difference[read.index] = counter_outputs[read.index] - read(act)
            running.add_(difference[read.index])
            recorded[0] = read.index + 1

    def patch(act: torch.Tensor, hook) -> torch.Tensor:
        receiver = receivers[hook.name]
        updates = receiver.updates(difference, running, recorded[0])
        out = act.clone()
        for head, update in zip(receiver.heads, updates, strict=True):
            if head is None:
                out += update
            else:
                out[:, :, head] += update
        return out

    hooks: list = [(h, record) for h in reads]
    hooks += [(h, patch) for h in receivers]
    return _logits(model, clean, hooks, read)


def _logits(
    model: HookedTransformer, tokens: torch.Tensor, hooks: list, read: torch.Tensor | None
) -> torch.Tensor:
    """``(B, P, V)`` logits of a pass with ``hooks``, heads summed, no gradients; only where
    ``read: (B, P)`` is True when it is given."""
    with torch.no_grad(), heads_summed(model):
        if read is not None:
            return read_logits(model, tokens, hooks, read)
        return model.run_with_hooks(tokens.to(model.cfg.device), fwd_hooks=hooks)


def edge_patched_logits(
    model: HookedTransformer,
    clean: torch.Tensor,
    counterfactual: torch.Tensor,
    circuit: Collection[SlotEdge],
) -> torch.Tensor:
    """Logits ``(B, P, V)`` on ``clean`` with every edge outside ``circuit`` patched with its
    sender's activation on ``counterfactual`` (same shape), in one pass without gradients."""
    check_patching_inputs(model, clean, counterfactual)
    graph = _EdgeGraph.of(model)
    inside = graph.inside(circuit)
    counter_outputs = graph.counterfactual_outputs(model, counterfactual.to(model.cfg.device))
    return _patched_logits(model, graph, clean, counter_outputs, inside)


def circuits_logit_diff(
    model: HookedTransformer,
    tokens: TaskTokens,
    circuits: Sequence[Collection[SlotEdge]],
    batch_size: int | None = None,
    memory_gib: float = DEFAULT_PASS_GIB,
) -> list[float]:
    """m(C) of each circuit of ``circuits``: the mean over items of the logit difference
    (:func:`~circuitlasso.data.counterfactual_tasks.logit_difference`) with every edge outside
    ``C`` patched with its counterfactual activation (:func:`edge_patched_logits`),
    ``batch_size`` items at a time (by default as many as fit in ``memory_gib``); each batch's
    counterfactual run serves every circuit."""
    check_patching_inputs(model, tokens.clean, tokens.counterfactual)
    if not circuits:
        return []
    graph = _EdgeGraph.of(model)
    insides = [graph.inside(circuit) for circuit in circuits]
    if batch_size is None:
        kept = 3 * tokens.clean.shape[1] * len(graph.senders) * model.cfg.d_model * 4
        batch_size = prompts_per_batch(
            model, tokens.clean.shape[1], memory_gib, extra_bytes_per_prompt=kept
        )
    totals = [0.0] * len(circuits)
    for start in range(0, len(tokens), batch_size):
        batch = tokens.rows(slice(start, start + batch_size))
        counter = graph.counterfactual_outputs(model, batch.counterfactual.to(model.cfg.device))
        for k, inside in enumerate(insides):
            logits = _patched_logits(model, graph, batch.clean, counter, inside, batch.last_mask)
            totals[k] += float(logit_difference(logits, batch).double().sum())
    return [total / len(tokens) for total in totals]


def circuit_logit_diff(
    model: HookedTransformer,
    tokens: TaskTokens,
    circuit: Collection[SlotEdge],
    batch_size: int | None = None,
    memory_gib: float = DEFAULT_PASS_GIB,
) -> float:
    """m(C) of one circuit (:func:`circuits_logit_diff`)."""
    return circuits_logit_diff(model, tokens, [circuit], batch_size, memory_gib)[0]


def trapezoid_area(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Trapezoidal area under the points ``(x, y)``: ``sum (x[i+1] - x[i]) (y[i] + y[i+1]) / 2``.
    ValueError unless there are two or more points with strictly increasing ``x``."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape or len(xs) < 2:
        raise ValueError(
            f"need two or more (x, y) points of equal count, got {xs.shape}, {ys.shape}"
        )
    if not np.all(np.diff(xs) > 0):
        raise ValueError(f"x must be strictly increasing, got {xs.tolist()}")
    if not np.all(np.isfinite(ys)):
        raise ValueError(f"y must be finite, got {ys.tolist()}")
    return float(np.sum(np.diff(xs) * (ys[:-1] + ys[1:]) / 2))


def cpr_cmd(fractions: Sequence[float], faithfulness: Sequence[float]) -> tuple[float, float]:
    """MIB's (CPR, CMD) of a faithfulness curve: trapezoidal areas under ``f`` and under
    ``|1 - f|`` over the edge fractions (linear axis, module docstring)."""
    f = np.asarray(faithfulness, dtype=np.float64)
    return trapezoid_area(fractions, f), trapezoid_area(fractions, np.abs(1.0 - f))


@dataclass(frozen=True)
class MIBScore:
    """A scoring's faithfulness curve and its areas.

    ``budgets[i]`` edges were asked for at ``fractions[i]``, ``kept[i]`` remained after pruning;
    ``m`` the circuits' logit differences, ``faithfulness`` their f; ``m_empty`` and ``m_full``
    the empty and full circuits' (the counterfactual and the clean run).
    """

    fractions: tuple[float, ...]
    budgets: tuple[int, ...]
    kept: tuple[int, ...]
    m: tuple[float, ...]
    faithfulness: tuple[float, ...]
    m_empty: float
    m_full: float
    n_edges: int
    cpr: float
    cmd: float


def faithfulness(m: float, m_empty: float, m_full: float) -> float:
    """f = (m - m_empty) / (m_full - m_empty); ValueError when the counterfactual leaves the
    metric unchanged (``m_full == m_empty``)."""
    if m_full == m_empty:
        raise ValueError(
            f"the full and empty circuits give the same metric ({m_full}): the counterfactual "
            "does not change the logit difference, so faithfulness is undefined"
        )
    return (m - m_empty) / (m_full - m_empty)


def circuit_ends(
    model: HookedTransformer,
    tokens: TaskTokens,
    batch_size: int | None = None,
    memory_gib: float = DEFAULT_PASS_GIB,
) -> tuple[float, float]:
    """``(m(empty), m(full))`` on ``tokens``: the counterfactual and the clean run's metric,
    shared by every scoring on the same items (``ends`` of :func:`mib_score`)."""
    m_empty, m_full = circuits_logit_diff(
        model, tokens, [(), mib_edges(model)], batch_size, memory_gib
    )
    return m_empty, m_full


def _curves(
    model: HookedTransformer,
    tokens: TaskTokens,
    orders: Sequence[Sequence[SlotEdge]],
    fracs: tuple[float, ...],
    batch_size: int | None,
    memory_gib: float,
    ends: tuple[float, float] | None,
) -> list[MIBScore]:
    """The MIB curve of each ranking of ``orders`` (every MIB edge, first to last), all scored
    in one set of patched passes (:func:`circuits_logit_diff`), with the empty and full
    circuits' metric ``ends`` when given (:func:`circuit_ends`)."""
    if not all(0 < x <= 1 for x in fracs):
        raise ValueError(f"fractions must lie in (0, 1], got {fracs}")
    edges = mib_edges(model)
    n_edges = len(edges)
    budgets = [int(fraction * n_edges) for fraction in fracs]  # MIB's rounding
    circuits = [prune(model, frozenset(order[:n])) for order in orders for n in budgets]
    if ends is None:
        ends = circuit_ends(model, tokens, batch_size, memory_gib)
    m_empty, m_full = ends
    known = {frozenset(): m_empty, frozenset(edges): m_full}
    distinct = [c for c in dict.fromkeys(circuits) if c not in known]  # shared passes
    found = circuits_logit_diff(model, tokens, distinct, batch_size, memory_gib)
    known.update(zip(distinct, found, strict=True))
    values = [known[circuit] for circuit in circuits]
    out = []
    for k in range(len(orders)):
        m = values[k * len(budgets) : (k + 1) * len(budgets)]
        f = [faithfulness(v, m_empty, m_full) for v in m]
        cpr, cmd = cpr_cmd(fracs, f)
        kept = circuits[k * len(budgets) : (k + 1) * len(budgets)]
        out.append(
            MIBScore(
                fractions=fracs,
                budgets=tuple(budgets),
                kept=tuple(len(circuit) for circuit in kept),
                m=tuple(m),
                faithfulness=tuple(f),
                m_empty=m_empty,
                m_full=m_full,
                n_edges=n_edges,
                cpr=cpr,
                cmd=cmd,
            )
        )
    return out


def mib_score(
    model: HookedTransformer,
    tokens: TaskTokens,
    scores: Mapping[tuple[str, str], float],
    fractions: Sequence[float] = MIB_FRACTIONS,
    *,
    absolute: bool = True,
    batch_size: int | None = None,
    memory_gib: float = DEFAULT_PASS_GIB,
    ends: tuple[float, float] | None = None,
) -> MIBScore:
    """MIB's faithfulness curve, CPR and CMD of an edge scoring on ``tokens`` (module docstring),
    its circuits the top edges by ``|score|`` (``absolute=True``) or by signed score; ``ends``
    the empty and full circuits' metric on ``tokens`` (:func:`circuit_ends`) where already known.

    ``scores`` are keyed by MIB edges or node edges (:func:`expand_scores`): EAP's, EAP-IG's
    (:class:`~circuitlasso.evaluation.eap.AttributionResult`, its ``scores`` or ``slot_scores``)
    or CircuitLasso's; a ranked list of edges through :func:`ranking_scores`.
    """
    fracs = tuple(float(x) for x in fractions)
    order = _ranked_edges(model, scores, absolute)
    return _curves(model, tokens, [order], fracs, batch_size, memory_gib, ends)[0]


@dataclass(frozen=True)
class MIBScores:
    """MIB's two curves of one scoring, as its ``print_results.py`` reports them: ``signed``
    (circuits of the top signed scores) and ``absolute`` (of the top ``|score|``)."""

    signed: MIBScore
    absolute: MIBScore

    @property
    def cpr(self) -> float:
        """MIB's CPR: the signed curve's."""
        return self.signed.cpr

    @property
    def cmd(self) -> float:
        """MIB's CMD: the absolute curve's."""
        return self.absolute.cmd

    @property
    def cpr_abs(self) -> float:
        """The absolute curve's CPR."""
        return self.absolute.cpr


def mib_scores(
    model: HookedTransformer,
    tokens: TaskTokens,
    scores: Mapping[tuple[str, str], float],
    fractions: Sequence[float] = MIB_FRACTIONS,
    *,
    batch_size: int | None = None,
    memory_gib: float = DEFAULT_PASS_GIB,
    ends: tuple[float, float] | None = None,
) -> MIBScores:
    """:func:`mib_score` of the signed and the absolute ranking of ``scores``, their circuits
    scored in one set of patched passes."""
    fracs = tuple(float(x) for x in fractions)
    orders = [_ranked_edges(model, scores, absolute) for absolute in (False, True)]
    signed, absolute = _curves(model, tokens, orders, fracs, batch_size, memory_gib, ends)
    return MIBScores(signed, absolute)


def ranking_scores(ranked: Sequence[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """Scores that rank ``ranked`` edges (MIB or node edges) first to last: ``len - position``;
    ValueError on a repeated edge."""
    if len(set(ranked)) != len(ranked):
        raise ValueError("the ranking lists an edge twice")
    return {edge: float(len(ranked) - i) for i, edge in enumerate(ranked)}
