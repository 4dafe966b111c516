"""CircuitLasso on patched passes: the metric regressed on which inputs were patched, edges
split by each sender's share of its receiver's contrast. Forward passes only.

Where EAP takes a gradient by a backward pass, this variant reads the metric's own response to
patching with a sparse regression, then splits it along the model's weights:

- **Slot effects.** Every *unit* (the input embedding, each head's query, key and value, each
  MLP) is patched from the counterfactual prompt at random: in each of ``n_rows / M`` passes over
  the ``M`` clean prompts, each prompt gets its own mask, each unit patched with probability
  ``patch_share``. The change of the metric ``y: (rows,)`` is regressed on the masks ``X: (rows,
  U)`` by the Lasso (penalty by ``folds``-fold cross-validation along a path), and a unit's
  effect ``E`` is minus its coefficient: how much the metric drops when that unit alone sees the
  counterfactual, averaged over random contexts of other patches (a Banzhaf-style value), so
  units that act only together still score. Rows grow with the units, not the prompts.
- **Edges into a head or an MLP.** A receiver slot's input is the sum of its senders' outputs
  (the residual stream), read through its own weights after the LayerNorm. Sender ``u``'s share
  of slot ``v.x``'s contrast is ::

      share(u, v.x) = sum_{prompt, position} r . (o_u(clean) - o_u(cf)) W_x / sigma . dx_v
                      / sum_{prompt, position} r . |dx_v|^2

  with ``dx_v`` the slot's own clean minus counterfactual value (the head's q, k or v; the MLP's
  gate pre-activation), ``W_x`` its read weights, ``sigma`` the clean LayerNorm scale and ``r``
  the position's relevance to the metric (below); the shares of all senders sum to about 1. The
  edge scores ``E(v.x) * share(u, v.x)``.
- **Relevance of a position.** A slot's contrast counts where the metric can see it. From the
  positions the metric reads, down the layers, the residual stream's relevance is rolled out
  through the clean attention patterns (``R_l = R_{l+1} + R_{l+1} A_l``, ``A_l`` the layer's
  pattern averaged over its heads, each prompt's ``R_l`` summing to 1); a head's query and an MLP
  at position ``p`` weigh ``R_{l+1}[p]``, where their output lands, and a head's key and value
  at ``p`` weigh ``sum_q R_{l+1}[q] A_h[q, p]``, what the head's own queries read of them. On
  IOI's and SVA's development items this rollout raised CPR from 2.04 to 2.15 and from 1.34 to
  1.39, and lowered CMD from 0.045 to 0.027 and from 0.062 to 0.035, over unweighted sums.
- **Slots the Lasso leaves at zero.** Most units get no effect (the Lasso keeps about 50 to 80 of
  SmolLM2-135M's 841), so the edges into them would all score 0, and MIB's pruning drops every
  edge out of a node that receives none: the measured top edges then hang from senders without
  inputs. So, from the output down, a node none of whose slots the Lasso kept takes its total
  effect through the surrogate, ``T(u) = direct(u) + sum_v share(u, v) E(v)`` (``E`` the measured
  or filled effects of the slots it feeds), split equally over its slots and weighed by
  ``fill_weight`` (:data:`FILL_WEIGHT`, far below a measured effect, so that the measured edges
  rank first); ``fill_weight=0`` leaves them at zero.
- **Edges into the output.** The sender's contrast times the metric's gradient with respect to
  the logits (the metric alone, no pass through the model) read back through ``W_U`` and the
  final LayerNorm scale: its direct effect on the metric.

Scores are signed (positive where the clean value carries the clean behaviour, as EAP's) and
keyed per receiver slot as MIB counts edges; a head's node-edge score is ``|q| + |k| + |v|``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from sklearn.model_selection import KFold
from tqdm import tqdm
from transformer_lens import HookedTransformer

from circuitlasso.circuits.anchored import slot_node_scores
from circuitlasso.circuits.circuit import EdgeScores
from circuitlasso.data.graph import (
    DEFAULT_PASS_GIB,
    INPUT_HOOK,
    NodeLocation,
    can_feed,
    graph_nodes,
    hook_flags,
    prompts_per_batch,
    sender_reads,
)
from circuitlasso.evaluation.eap import (
    QKV,
    Metric,
    logit_difference_metric,
    logit_projection_metric,
    sender_outputs,
)
from circuitlasso.forward import read_logits, residual_gradient
from circuitlasso.solve import lam_max, lasso_path
from circuitlasso.solve.options import LamMaxOptions, LassoOptions
from circuitlasso.timing import Stopwatch

PATCHED_ROWS = 1200
"""Default patched rows (prompt passes): about 1.4 per unit on SmolLM2-135M's 841 units."""
PATCH_SHARE = 0.1
"""Default chance that a unit is patched in a row (0.1 beat 0.2 on IOI's development items)."""
CV_FOLDS = 5
N_LAMS = 30
LAM_MAX_OPTIONS: LamMaxOptions = {"dtype": torch.float64, "normalize": False, "fit_intercept": True}
SOLVE: LassoOptions = {**LAM_MAX_OPTIONS, "stop": "gap", "tol": 1e-6}
LAM_EPS = 1e-3  # the path runs from lam_max down to LAM_EPS * lam_max
SHARE_POSITIONS = "relevance rollout"
"""How a share weighs its positions (module docstring): part of a stored result's key, so that
results measured with unweighted shares are not read back as this variant's."""
FILL_WEIGHT = 0.01
"""Weight of a slot's effect filled in from its node's total effect through the surrogate (module
docstring): 0.01 to 0.3 scored alike on IOI's and SVA's development items, all far above no
filling (0)."""


@dataclass(frozen=True)
class PatchedResult:
    """:class:`~circuitlasso.evaluation.eap.AttributionResult`'s fields (node-edge ``scores``,
    signed ``slot_scores``, seconds of the passes and of the regression and shares), each
    unit's regressed ``unit_effects`` (the metric's mean drop when it alone is patched) and the
    ``slot_effects`` its edges split (the regressed ones, or filled in where the Lasso kept none
    of a node's slots: :func:`filled_effects`)."""

    scores: EdgeScores
    slot_scores: dict[tuple[str, str], float]
    collect_seconds: float
    attribute_seconds: float
    unit_effects: dict[str, float]
    slot_effects: dict[str, float]


@dataclass(frozen=True)
class PatchUnit:
    """One patchable unit: its ``name`` (``"input"``, ``"a3.h1.q"``, ``"m2"``), the ``hook``
    holding it and, for a head's q, k or v, the ``head`` index on the hook's head axis."""

    name: str
    hook: str
    head: int | None = None


def patch_units(model: HookedTransformer) -> list[PatchUnit]:
    """The input, then per layer each head's q, k and v and the MLP, in computation order."""
    units = [PatchUnit("input", INPUT_HOOK)]
    for layer in range(model.cfg.n_layers):
        units += [
            PatchUnit(f"a{layer}.h{head}.{x}", f"blocks.{layer}.attn.hook_{x}", head)
            for x in QKV
            for head in range(model.cfg.n_heads)
        ]
        units.append(PatchUnit(f"m{layer}", f"blocks.{layer}.hook_mlp_out"))
    return units


@contextmanager
def _patching_hooks_only(model: HookedTransformer) -> Iterator[None]:
    """``model`` with one q, k and v per query head (grouped heads ungrouped), without the
    split-input and MLP-input hooks, which slow every pass and are not patched here, and with
    the heads read at ``hook_z``."""
    flags = {"ungroup_grouped_query_attention": True, "use_split_qkv_input": False,
             "use_hook_mlp_in": False, "use_attn_result": False}  # fmt: skip
    with hook_flags(model, **flags):
        yield


def _scale_hook(model: HookedTransformer, name: str) -> str | None:
    """The hook of LayerNorm ``name``'s scale (``blocks.3.ln1``, ``ln_final``), None without one."""
    return f"{name}.hook_scale" if model.cfg.normalization_type is not None else None


def _mlp_read(model: HookedTransformer, layer: int) -> torch.Tensor:
    """``(d_model, d_mlp)``: what ``hook_pre`` reads (the gate of a gated MLP)."""
    mlp = model.blocks[layer].mlp
    weight = mlp.W_gate if model.cfg.gated_mlp else mlp.W_in
    assert isinstance(weight, torch.Tensor)
    return weight.detach()


def _cache_hooks(model: HookedTransformer, units: list[PatchUnit], reads: dict) -> list[str]:
    layers = range(model.cfg.n_layers)
    hooks = {u.hook for u in units} | set(reads)
    hooks |= {f"blocks.{layer}.mlp.hook_pre" for layer in layers}
    hooks |= {f"blocks.{layer}.attn.hook_pattern" for layer in layers}
    scales = [f"blocks.{layer}.ln{k}" for layer in layers for k in (1, 2)] + ["ln_final"]
    hooks |= {h for h in (_scale_hook(model, name) for name in scales) if h is not None}
    return sorted(hooks)


def _run(model: HookedTransformer, tokens: torch.Tensor, hooks: list[str]):
    cache: dict[str, torch.Tensor] = {}

    def save(act: torch.Tensor, hook) -> None:
        cache[hook.name] = act.detach().clone()

    logits = model.run_with_hooks(tokens, fwd_hooks=[(h, save) for h in hooks])
    return logits, cache


def _patch_hooks(units: list[PatchUnit], mask: torch.Tensor, source: dict[str, torch.Tensor]):
    """Hooks replacing, per prompt, the units ``mask: (B, U)`` marks with ``source``'s values."""
    by_hook: dict[str, list[tuple[int, PatchUnit]]] = {}
    for i, unit in enumerate(units):
        by_hook.setdefault(unit.hook, []).append((i, unit))
    hooks = []
    for name, found in by_hook.items():
        cols = [i for i, _ in found]
        heads = [u.head for _, u in found]

        def hook(act, hook, cols=cols, heads=heads):
            chosen = mask[:, cols].to(act.device)
            if heads[0] is None:
                return torch.where(chosen[:, :1, None], source[hook.name][: len(act)], act)
            full = torch.zeros(act.shape[0], act.shape[2], dtype=torch.bool, device=act.device)
            full[:, heads] = chosen
            return torch.where(full[:, None, :, None], source[hook.name][: len(act)], act)

        hooks.append((name, hook))
    return hooks


def _read_positions(model: HookedTransformer, weights: torch.Tensor) -> torch.Tensor:
    """``(B, P)`` bool: the positions that can reach the metric (``weights: (B, P)``), every one
    under bidirectional attention, else those up to each prompt's last weighted position (the
    padding after it is never read)."""
    if model.cfg.attention_dir != "causal":
        return torch.ones_like(weights, dtype=torch.bool)
    positions = torch.arange(weights.shape[1], device=weights.device)
    last = torch.where(weights != 0, positions, -1).amax(1)
    return positions[None, :] <= last[:, None]


def _scale(cache: dict[str, torch.Tensor], hook: str | None, like: torch.Tensor) -> torch.Tensor:
    """``(B, P, 1)`` clean LayerNorm scale at ``hook``, ones where the model has none."""
    if hook is None:
        return torch.ones(*like.shape[:2], 1, dtype=like.dtype, device=like.device)
    return cache[hook].reshape(*like.shape[:2], 1)


def _direct_effects(
    model: HookedTransformer,
    contrast: torch.Tensor,
    cache: dict[str, torch.Tensor],
    metric: Metric,
    references: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """``(S,)`` each sender's ``contrast: (S, B, P, d_model)`` times the metric's gradient with
    respect to the final residual stream (:func:`~circuitlasso.forward.residual_gradient`),
    summed over the batch: the metric's gradient alone, no pass through the model."""
    clean_logits = references[0]
    scale = _scale(cache, _scale_hook(model, "ln_final"), clean_logits)
    direction = residual_gradient(
        model, clean_logits, lambda logits: metric(logits, *references).sum(), scale
    )
    read = direction.abs().sum(-1) != 0  # (B, P): the positions the metric reads
    return torch.einsum("skd,kd->s", contrast[:, read].double(), direction[read]).cpu()


def position_relevance(read: torch.Tensor, patterns: list[torch.Tensor]) -> list[torch.Tensor]:
    """``R[l]: (B, P)``, each summing to 1 per prompt: the relevance to the metric of the residual
    stream entering layer ``l`` (``R[n_layers]``: leaving the last), rolled out from the
    positions ``read: (B, P)`` through ``patterns[l]: (B, H, P_query, P_key)``, each layer's
    attention averaged over its heads (module docstring)."""
    relevance = read.double() / read.double().sum(1, keepdim=True).clamp_min(1e-30)
    found = [relevance]
    for pattern in reversed(patterns):
        relevance = relevance + torch.einsum("bq,bqk->bk", relevance, pattern.double().mean(1))
        relevance = relevance / relevance.sum(1, keepdim=True).clamp_min(1e-30)
        found.append(relevance)
    return found[::-1]


class _Shares:
    """Running sums, over prompts and positions, of each sender's contrast read through each
    receiver slot's weights against the slot's own contrast, and of the slot's squared contrast
    (module docstring)."""

    def __init__(self, model: HookedTransformer, senders: list[NodeLocation], nodes) -> None:
        self.model, self.senders = model, senders
        self.upstream: dict[tuple[int, str], list[int]] = {}
        for layer in range(model.cfg.n_layers):
            head = next(n for n in nodes if n.kind == "head" and n.layer == layer)
            mlp = next(n for n in nodes if n.kind == "mlp" and n.layer == layer)
            for part, node in (("attn", head), ("mlp", mlp)):
                self.upstream[(layer, part)] = [
                    i for i, s in enumerate(senders) if can_feed(s, node)
                ]
        self.numerators: dict[tuple[int, str], torch.Tensor] = {}
        self.denominators: dict[tuple[int, str], torch.Tensor] = {}

    def _add(self, key: tuple[int, str], numerator: torch.Tensor, denominator: torch.Tensor):
        self.numerators[key] = self.numerators.get(key, 0) + numerator.cpu()
        self.denominators[key] = self.denominators.get(key, 0) + denominator.cpu()

    def add(self, contrast, read, clean_cache, cf_cache) -> None:
        """Add one batch: ``contrast: (S, B, P, d_model)``, ``read: (B, P)`` the positions the
        metric reads (relevance rolled out from them: :func:`position_relevance`)."""
        model, n_layers = self.model, self.model.cfg.n_layers
        patterns = [clean_cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(n_layers)]
        relevance = position_relevance(read, patterns)
        for layer in range(n_layers):
            attn, after = model.blocks[layer].attn, relevance[layer + 1].to(contrast)  # (B, P)
            read_kv = torch.einsum("bq,bhqk->bkh", after, patterns[layer].to(after))  # (B, P, H)
            weights = {"q": after[..., None].expand_as(read_kv), "k": read_kv, "v": read_kv}
            upstream = contrast[self.upstream[(layer, "attn")]]  # one copy for q, k and v
            scale = _scale(clean_cache, _scale_hook(model, f"blocks.{layer}.ln1"), contrast[0])
            for x in QKV:
                hook = f"blocks.{layer}.attn.hook_{x}"
                delta = clean_cache[hook] - cf_cache[hook]  # (B, P, H, e)
                weight = getattr(attn, f"W_{x.upper()}").detach()  # (H, d_model, e)
                read_x = torch.einsum("bphe,hde->bphd", delta, weight) / scale[..., None]
                read_x = read_x * weights[x][..., None]
                squares = (delta.double() ** 2).sum(-1) * weights[x].double()  # (B, P, H)
                self._add((layer, x), torch.einsum("sbpd,bphd->sh", upstream, read_x),
                          squares.sum((0, 1)))  # fmt: skip
            hook, up = f"blocks.{layer}.mlp.hook_pre", self.upstream[(layer, "mlp")]
            scale = _scale(clean_cache, _scale_hook(model, f"blocks.{layer}.ln2"), contrast[0])
            delta = clean_cache[hook] - cf_cache[hook]  # (B, P, d_mlp)
            read_m = (delta @ _mlp_read(model, layer).T) / scale * after[..., None]
            squares = (delta.double() ** 2).sum(-1) * after.double()
            self._add((layer, "mlp"), torch.einsum("sbpd,bpd->s", contrast[up], read_m),
                      squares.sum())  # fmt: skip

    def shares(self) -> dict[tuple[str, str], float]:
        """``{(sender, slot): share(sender, slot)}`` for every edge into a head or an MLP."""
        found: dict[tuple[str, str], float] = {}
        for (layer, part), numerator in self.numerators.items():
            share = numerator.double() / self.denominators[(layer, part)].clamp_min(1e-30)
            up = self.upstream[(layer, "mlp" if part == "mlp" else "attn")]
            for j, i in enumerate(up):
                if part == "mlp":
                    found[(self.senders[i].name, f"m{layer}")] = float(share[j])
                    continue
                for head in range(share.shape[1]):
                    slot = f"a{layer}.h{head}.{part}"
                    found[(self.senders[i].name, slot)] = float(share[j, head])
        return found


def _node_of(unit: str) -> str:
    """The graph node of a unit: ``a3.h1.q`` -> ``a3.h1``; ``m2`` and ``input`` as they are."""
    return unit.rsplit(".", 1)[0] if unit.count(".") == 2 else unit


def filled_effects(
    unit_effects: dict[str, float],
    shares: dict[tuple[str, str], float],
    direct: dict[str, float],
    weight: float = FILL_WEIGHT,
) -> dict[str, float]:
    """Each slot's effect (``unit_effects`` keyed by unit name, in computation order): the
    Lasso's, or, for a node none of whose slots it kept, ``weight`` times the node's total
    effect ``direct[node] + sum_v shares[(node, v)] * E(v)`` split equally over its slots, the
    nodes taken from the output down (``E`` the slots' measured or unweighted filled effects).
    The input, which no edge enters, keeps its own."""
    feeds: dict[str, list[tuple[str, float]]] = {}
    for (sender, slot), share in shares.items():
        feeds.setdefault(sender, []).append((slot, share))
    slots_of: dict[str, list[str]] = {}
    for unit in unit_effects:
        slots_of.setdefault(_node_of(unit), []).append(unit)
    total = dict(unit_effects)  # the effects a node's total reads: measured or filled, unweighted
    effects = dict(unit_effects)
    for node in reversed(list(slots_of)):
        slots = slots_of[node]
        if node == "input" or any(unit_effects[slot] != 0 for slot in slots):
            continue
        node_total = direct.get(node, 0.0) + sum(total[v] * w for v, w in feeds.get(node, []))
        for slot in slots:
            total[slot] = node_total / len(slots)
            effects[slot] = weight * total[slot]
    return effects


def cross_validated_lasso(X: torch.Tensor, y: torch.Tensor, folds: int, seed: int) -> torch.Tensor:
    """Lasso coefficients ``(p,)`` of ``y: (M,)`` on ``X: (M, p)`` (the plain Lasso, scikit-learn's
    ``Lasso(alpha=lam)``: a penalty that means the same on every fold's rows) at the penalty
    with the least mean held-out squared error over ``folds`` shuffled folds (``seed``), on
    :data:`N_LAMS` penalties from ``lam_max`` down to :data:`LAM_EPS` of it: scikit-learn's
    ``LassoCV``, with the certified solver."""
    top = float(lam_max(X, y, **LAM_MAX_OPTIONS).reshape(-1)[0])
    grid = top * LAM_EPS ** torch.linspace(0, 1, N_LAMS, dtype=torch.float64)
    errors = torch.zeros(len(grid), dtype=torch.float64)
    for train, test in KFold(folds, shuffle=True, random_state=seed).split(X.numpy()):
        path = lasso_path(X[train], y[train], lams=grid, **SOLVE)
        for k, coef in enumerate(path.coefs):
            fitted = X[test] @ coef + path.intercepts[k].reshape(())
            errors[k] += ((y[test] - fitted) ** 2).mean()
    best = int(torch.argmin(errors))
    full = lasso_path(X, y, lams=grid[: best + 1], **SOLVE)
    return full.coefs[-1]


def patched_lasso(
    model: HookedTransformer,
    clean: torch.Tensor,
    counterfactual: torch.Tensor,
    metric: Metric = logit_projection_metric,
    position_mask: torch.Tensor | None = None,
    *,
    answers: torch.Tensor | None = None,
    n_rows: int = PATCHED_ROWS,
    patch_share: float = PATCH_SHARE,
    seed: int = 0,
    fill_weight: float = FILL_WEIGHT,
    memory_gib: float = DEFAULT_PASS_GIB,
    progress: bool = False,
) -> PatchedResult:
    """Signed slot scores of every MIB edge and node-edge scores (module docstring).

    ``clean``, ``counterfactual``: (M, P) token ids, paired row by row. ``position_mask: (P,)``
    or ``(M, P)`` the positions the metric reads (default all); ``answers: (M, 2)`` (answer,
    wrong) token ids make the metric each prompt's logit difference there, else ``metric``
    (EAP's signature); ``fill_weight`` weighs the effects filled in for the slots the Lasso
    leaves at zero (:func:`filled_effects`; 0: none). ``collect_seconds`` covers the passes,
    ``attribute_seconds`` the regression and the shares.
    """
    if clean.shape != counterfactual.shape or clean.ndim != 2:
        raise ValueError(
            f"clean {tuple(clean.shape)} and counterfactual {tuple(counterfactual.shape)} token "
            "batches must both be (prompts, positions) of the same shape"
        )
    if not 0 < patch_share < 1:
        raise ValueError(f"patch_share must be in (0, 1), got {patch_share}")
    if fill_weight < 0:
        raise ValueError(f"fill_weight must be at least 0, got {fill_weight}")
    if n_rows < 2 * CV_FOLDS:
        raise ValueError(f"n_rows must be at least {2 * CV_FOLDS}, got {n_rows}")
    if answers is not None and answers.shape != (len(clean), 2):
        raise ValueError(f"answers must be ({len(clean)}, 2), got {tuple(answers.shape)}")
    nodes = graph_nodes(model)
    senders = [n for n in nodes if n.kind != "output"]
    units = patch_units(model)
    mask = torch.ones(clean.shape[1], dtype=torch.bool) if position_mask is None else position_mask
    weights = mask.to(torch.float32).expand(clean.shape).contiguous()
    n, n_passes = len(clean), -(-n_rows // len(clean))
    draws = torch.rand(n_passes, n, len(units), generator=torch.Generator().manual_seed(seed))
    patched = draws < patch_share
    drops = torch.zeros(n_passes, n, dtype=torch.float64)
    shares = _Shares(model, senders, nodes)
    direct = torch.zeros(len(senders), dtype=torch.float64)
    kept = clean.shape[1] * model.cfg.d_model * 4 * (2 * len(units) + 3 * len(senders))
    kept += 2 * model.cfg.n_layers * model.cfg.n_heads * clean.shape[1] ** 2 * 4  # the patterns
    batch = prompts_per_batch(model, clean.shape[1], memory_gib, extra_bytes_per_prompt=kept)
    clock = Stopwatch()
    device = model.cfg.device
    with torch.no_grad(), _patching_hooks_only(model):
        reads = sender_reads(model, senders)
        hooks = _cache_hooks(model, units, reads)
        bar = tqdm(total=n_passes * n, desc="patched passes", disable=not progress)
        for start in range(0, n, batch):
            rows = slice(start, start + batch)
            tokens, other = clean[rows].to(device), counterfactual[rows].to(device)
            batch_weights = weights[rows].to(device)
            batch_metric = metric if answers is None else logit_difference_metric(*answers[rows].T)
            with clock.timed("collect", add=True):
                clean_logits, clean_cache = _run(model, tokens, hooks)
                cf_logits, cf_cache = _run(model, other, hooks)
                references = (clean_logits, cf_logits, batch_weights)
                baseline = batch_metric(clean_logits, *references).double()
                read = batch_weights != 0  # (B, P): where the metric reads the logits
                # several passes of a small batch run as one pass over its copies
                group = max(1, min(n_passes, batch // len(tokens)))
                sources = {h: cf_cache[h].repeat(group, *[1] * (cf_cache[h].ndim - 1))
                           for h in {u.hook for u in units}}  # fmt: skip
                for first in range(0, n_passes, group):
                    passes = range(first, min(first + group, n_passes))
                    chosen = patched[first : passes.stop, rows].reshape(-1, len(units))
                    fwd = _patch_hooks(units, chosen, sources)
                    logits = read_logits(model, tokens.repeat(len(passes), 1), fwd,
                                         read.repeat(len(passes), 1))  # fmt: skip
                    for j, k in enumerate(passes):
                        copy = logits[j * len(tokens) : (j + 1) * len(tokens)]
                        drop = baseline - batch_metric(copy, *references).double()
                        drops[k, rows] = drop.cpu()
                    bar.update(len(passes) * len(tokens))
            with clock.timed("attribute", add=True):
                contrast = sender_outputs(reads, clean_cache) - sender_outputs(reads, cf_cache)
                keep = _read_positions(model, batch_weights)
                contrast = contrast * keep[None, :, :, None]
                direct += _direct_effects(model, contrast, clean_cache, batch_metric, references)
                shares.add(contrast, read, clean_cache, cf_cache)
        bar.close()
    with clock.timed("attribute", add=True):
        X = patched.reshape(-1, len(units)).double()
        effects = cross_validated_lasso(X, drops.reshape(-1), CV_FOLDS, seed)
        unit_effects = dict(zip((u.name for u in units), effects.tolist(), strict=True))
        direct_effects = {s.name: float(direct[i] / n) for i, s in enumerate(senders)}
        split = shares.shares()
        slot_effects = filled_effects(unit_effects, split, direct_effects, fill_weight)
        slot_scores = {edge: slot_effects[edge[1]] * share for edge, share in split.items()}
        slot_scores |= {(sender, "output"): effect for sender, effect in direct_effects.items()}
    return PatchedResult(
        slot_node_scores(slot_scores),
        slot_scores,
        clock.laps.get("collect", 0.0),
        clock.laps.get("attribute", 0.0),
        unit_effects,
        slot_effects,
    )
