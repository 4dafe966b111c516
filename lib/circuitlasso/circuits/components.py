"""CircuitLasso on model components (paper Sec. 3.2, App. B.2): edge scores from regressions.

Every child node's token-averaged activation is regressed on the activations of the nodes allowed
to feed it (:func:`circuitlasso.data.graph.allowed_parents`); the edge ``parent -> child`` is
scored by how much the fitted model uses the parent's block.

- linear (the paper's method): one block-upper-triangular Lasso (:func:`circuitlasso.solve.
  block_lasso`) on standardized columns; the score is the Frobenius norm of the coefficient block.
- linear with ``read_projection``: each parent's activation is first mapped through the child's
  read weights (W_Q|W_K|W_V of a head, W_in of an MLP, W_U of the output), so a parent only
  counts through what the child can read, and whitened (a rank-deficient projection becomes a
  few uncorrelated columns); one :func:`circuitlasso.solve.lasso` per child.
- nonlinear: per child a one-hidden-layer ReLU MLP with a group-lasso penalty on the first-layer
  weights, one group per parent block, trained by proximal gradient descent; the score is the
  group norm.

The linear penalty is ``lam_ratio`` times the child's smallest all-zero penalty (the Lasso's
lam_max on standardized data); the nonlinear one is a fixed ``lam`` on standardized data. The
circuit keeps edges above :func:`circuitlasso.circuits.circuit.gap_threshold`. None of these
choices looks at a ground truth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformer_lens import HookedTransformer

from circuitlasso.circuits.circuit import (
    Circuit,
    EdgeScores,
    block_norm_scores,
    circuit_at_threshold,
    gap_threshold,
)
from circuitlasso.collect import NodeActivations, collect_nodes
from circuitlasso.data.graph import graph_nodes
from circuitlasso.solve import block_lasso, lam_max, lasso
from circuitlasso.solve.prepare import column_stats

NEGLIGIBLE_STD = 1e-6  # columns whose std is below this fraction of the largest std are constant
LINEAR_TOL = 1e-4  # the linear fits stop at a duality gap below this times each column's variance


@dataclass(frozen=True)
class CircuitLassoResult:
    """Edge scores, the ground-truth-free threshold, and the time split in seconds."""

    scores: EdgeScores
    threshold: float
    collect_seconds: float
    solve_seconds: float

    @property
    def circuit(self) -> Circuit:
        """The edges scoring above ``threshold``, pruned to paths into ``output``."""
        return circuit_at_threshold(self.scores, self.threshold)


def standardize(x: torch.Tensor) -> torch.Tensor:
    """Columns centered and scaled to unit variance; (near-)constant columns set to 0: (M, p).

    The means and centered norms are the solver's (:func:`circuitlasso.solve.prepare.
    column_stats`); the standard deviation is ``norm / sqrt(M - 1)``.
    """
    x = x.double()
    mean, norm = column_stats(x, fit_intercept=True)
    live = norm > NEGLIGIBLE_STD * max(float(norm.max()), 1e-300) if x.shape[1] else norm > 0
    out = torch.zeros_like(x)
    out[:, live] = (x[:, live] - mean[live]) / norm[live] * (len(x) - 1) ** 0.5
    return out


def _lam_max(predictors: torch.Tensor, targets: torch.Tensor) -> float:
    """The solver's :func:`circuitlasso.solve.lam_max` of the plain Lasso of the (centered)
    ``targets`` on ``predictors``, largest over the target columns: ``max |x_k^T y_t| / M``."""
    if predictors.shape[1] == 0 or targets.shape[1] == 0:
        return 0.0
    return float(lam_max(predictors, targets, normalize=False).max())


def read_maps(model: HookedTransformer) -> dict[str, torch.Tensor]:
    """Residual-stream read matrix of every receiving node: name -> (d_model, r)."""
    maps: dict[str, torch.Tensor] = {}
    for node in graph_nodes(model):
        if node.kind == "head":
            attn = model.blocks[node.layer].attn
            h = node.head
            maps[node.name] = torch.cat([attn.W_Q[h], attn.W_K[h], attn.W_V[h]], dim=1)
        elif node.kind == "mlp":
            maps[node.name] = model.blocks[node.layer].mlp.W_in
        elif node.kind == "output":
            maps[node.name] = model.W_U
    return {name: m.detach().double().cpu() for name, m in maps.items()}


def whiten(x: torch.Tensor, rtol: float = 1e-6) -> torch.Tensor:
    """Principal components of ``x: (M, p)`` scaled to unit variance: (M, rank).

    Components with a singular value below ``rtol`` times the largest are dropped, so a block
    that the read projection makes rank-deficient becomes a few uncorrelated columns.
    """
    centered = x.double() - x.double().mean(0)
    if centered.shape[1] == 0:
        return centered
    u, sing, _ = torch.linalg.svd(centered, full_matrices=False)
    rank = int((sing > rtol * max(float(sing[0]), 1e-300)).sum()) if sing.numel() else 0
    return u[:, :rank] * len(x) ** 0.5


def _child_design(
    acts: NodeActivations, j: int, reads: dict[str, torch.Tensor] | None
) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """Predictors (M, p), their per-parent sizes, and the standardized child block (M, q).

    Without ``reads`` the parent blocks are standardized column by column; with ``reads`` each
    parent block is mapped through the child's read matrix and whitened (:func:`whiten`).
    """
    child = acts.names[j]
    blocks = []
    for i in acts.parents[j]:
        block = acts.block(acts.names[i]).double()
        blocks.append(standardize(block) if reads is None else whiten(block @ reads[child]))
    return torch.cat(blocks, 1), [b.shape[1] for b in blocks], standardize(acts.block(child))


def _paper_lasso_blocks(
    acts: NodeActivations, lam_ratio: float, tol: float
) -> dict[tuple[int, int], torch.Tensor]:
    """One block-upper-triangular Lasso on the standardized X: coefficient blocks (p_i, p_j)."""
    x = standardize(acts.X)
    offsets = [0]
    for size in acts.block_sizes:
        offsets.append(offsets[-1] + size)
    lam = torch.ones(x.shape[1], dtype=torch.float64)  # any lam works for constant children
    for j, parents in enumerate(acts.parents):
        if parents:
            cols = torch.cat([torch.arange(offsets[i], offsets[i + 1]) for i in parents])
            top = _lam_max(x[:, cols], x[:, offsets[j] : offsets[j + 1]])
            if top > 0:
                lam[offsets[j] : offsets[j + 1]] = lam_ratio * top
    result = block_lasso(
        x, acts.block_sizes, acts.parents, lam, normalize=False, tol=tol, dtype=torch.float64
    )
    return result.coef


def _read_lasso_blocks(
    acts: NodeActivations, lam_ratio: float, reads: dict[str, torch.Tensor], tol: float
) -> dict[tuple[int, int], torch.Tensor]:
    """One Lasso per child on its read-projected, whitened parents: coefficient blocks."""
    blocks: dict[tuple[int, int], torch.Tensor] = {}
    for j, parents in enumerate(acts.parents):
        if not parents:
            continue
        predictors, sizes, target = _child_design(acts, j, reads)
        top = _lam_max(predictors, target)
        if top == 0:
            continue
        coef = lasso(
            predictors, target, lam_ratio * top, normalize=False, tol=tol, dtype=torch.float64
        ).coef
        blocks.update({(i, j): b for i, b in zip(parents, torch.split(coef, sizes), strict=True)})
    return blocks


def linear_edge_scores(
    acts: NodeActivations,
    lam_ratio: float = 0.05,
    reads: dict[str, torch.Tensor] | None = None,
    tol: float = LINEAR_TOL,
) -> EdgeScores:
    """Lasso edge scores: Frobenius norm of each standardized coefficient block.

    ``reads`` (from :func:`read_maps`) switches on the read projection (see module docstring).
    """
    if not 0 < lam_ratio < 1:
        raise ValueError(f"lam_ratio must be in (0, 1), got {lam_ratio}")
    names = acts.names
    scores: EdgeScores = {
        (names[i], names[j]): 0.0 for j, ps in enumerate(acts.parents) for i in ps
    }
    if reads is None:
        blocks = _paper_lasso_blocks(acts, lam_ratio, tol)
    else:
        blocks = _read_lasso_blocks(acts, lam_ratio, reads, tol)
    scores.update(block_norm_scores(blocks, names))
    return scores


def _group_sparse_mlp(
    predictors: torch.Tensor,
    sizes: list[int],
    target: torch.Tensor,
    lam: float,
    hidden: int,
    steps: int,
    lr: float,
    generator: torch.Generator,
) -> list[float]:
    """Group norms of the first-layer weights of a group-lasso MLP fit ``target ~ predictors``.

    predictors (M, p) split into groups of ``sizes`` columns; target (M, q). Proximal gradient
    descent on ``1/(2Mq) ||target - f(predictors)||_F^2 + lam sum_g ||W1[:, g]||_F``: a full-batch
    gradient step of size ``lr``, then each group's first-layer columns shrunk by ``lr * lam`` in
    norm (the group soft-threshold, exactly zero for groups the fit does not need).
    """
    p, q = predictors.shape[1], target.shape[1]
    x, y = predictors.float(), target.float()
    w1 = (torch.randn(hidden, p, generator=generator) / p**0.5).requires_grad_()
    b1 = torch.zeros(hidden, requires_grad=True)
    w2 = (torch.randn(q, hidden, generator=generator) / hidden**0.5).requires_grad_()
    b2 = torch.zeros(q, requires_grad=True)
    params = [w1, b1, w2, b2]
    bounds = torch.cumsum(torch.tensor([0, *sizes]), 0).tolist()
    groups = list(zip(bounds[:-1], bounds[1:], strict=True))
    for _ in range(steps):
        fit = torch.relu(x @ w1.T + b1) @ w2.T + b2
        loss = 0.5 * ((y - fit) ** 2).sum() / (len(x) * q)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for param, grad in zip(params, grads, strict=True):
                param -= lr * grad
            for start, stop in groups:
                group = w1[:, start:stop]
                norm = torch.linalg.norm(group)
                group.mul_(torch.clamp(1 - lr * lam / norm, min=0) if norm > 0 else 0)
    return [float(torch.linalg.norm(w1[:, a:b].detach())) for a, b in groups]


def nonlinear_edge_scores(
    acts: NodeActivations,
    lam: float = 0.01,
    reads: dict[str, torch.Tensor] | None = None,
    hidden: int = 16,
    steps: int = 300,
    lr: float = 0.3,
    seed: int = 0,
) -> EdgeScores:
    """Group-lasso MLP edge scores (see module docstring) on standardized data."""
    if lam <= 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    generator = torch.Generator().manual_seed(seed)
    names = acts.names
    scores: EdgeScores = {
        (names[i], names[j]): 0.0 for j, ps in enumerate(acts.parents) for i in ps
    }
    for j, parents in enumerate(acts.parents):
        if not parents:
            continue
        predictors, sizes, target = _child_design(acts, j, reads)
        if not target.abs().any() or not predictors.abs().any():
            continue
        norms = _group_sparse_mlp(predictors, sizes, target, lam, hidden, steps, lr, generator)
        for i, norm in zip(parents, norms, strict=True):
            scores[(names[i], names[j])] = norm
    return scores


def circuit_lasso(
    model: HookedTransformer,
    tokens: torch.Tensor,
    position_mask: torch.Tensor | None = None,
    nonlinear: bool = False,
    read_projection: bool = False,
    lam_ratio: float = 0.05,
    nonlinear_lam: float = 0.01,
    seed: int = 0,
) -> CircuitLassoResult:
    """Collect token-averaged node activations on ``tokens: (M, P)`` and score every edge.

    For CircuitLasso, ``tokens`` stacks the clean and the corrupted prompts (App. B.2).
    """
    tic = time.perf_counter()
    acts = collect_nodes(model, tokens, position_mask)
    collected = time.perf_counter()
    reads = read_maps(model) if read_projection else None
    if nonlinear:
        scores = nonlinear_edge_scores(acts, nonlinear_lam, reads, seed=seed)
    else:
        scores = linear_edge_scores(acts, lam_ratio, reads)
    threshold = gap_threshold(scores)
    done = time.perf_counter()
    return CircuitLassoResult(scores, threshold, collected - tic, done - collected)
