"""CircuitLasso on model components (paper Sec. 3.2, App. B.2): edge scores from regressions.

Every child node's token-averaged activation is regressed on the activations of the nodes allowed
to feed it (:func:`circuitlasso.data.graph.allowed_parents`); the edge ``parent -> child`` is
scored by how much the fitted model uses the parent's block.

- linear (the paper's method): one block-upper-triangular Lasso (:func:`circuitlasso.solve.
  block_lasso`) on standardized columns; the score is the Frobenius norm of the coefficient block
  over the square root of the child's width (its non-constant columns), the root mean square
  over the child's columns (:func:`~circuitlasso.circuits.circuit.block_norm_scores`), so that
  children of different widths (a d_model-wide head, a one-column logit difference) score on one
  scale.
- linear with ``read_projection``: each parent's activation is first mapped through the child's
  read weights (W_Q|W_K|W_V of a head, W_in of an MLP, W_U of the output; for an output that is
  each prompt's logit difference, its own ``W_U[:, answer] - W_U[:, wrong]``), so a parent only
  counts through what the child can read, and whitened (a rank-deficient projection becomes a
  few uncorrelated columns); one :func:`circuitlasso.solve.lasso` per child, its target the
  child's standardized columns rotated onto their principal axes (:func:`principal_axes`: as
  many outputs as the child has directions of variance, at most M - 1, where a head has
  d_model columns). The nonlinear variant takes the same projection and target.
- nonlinear: per child a one-hidden-layer ReLU MLP ``Y ~ relu(X W1^T + b1) W2^T + b2`` with a
  group-lasso penalty on the first-layer weights, one group per parent block; the score is the
  group norm ``||W1[:, g]||_F`` over the square root of the child's width, as the linear score
  (the second layer is held in the unit ball, so the first grows with the output's width).
  Constant parents score 0 and stay out of the fit.

Both variants choose their penalty the same way: ``lam_ratio`` times the child's smallest all-zero
penalty, on standardized data. For the Lasso that is its lam_max, ``max |x_k^T y_t| / M``. The
MLP's first-layer penalty alone has no scale (ReLU is positively homogeneous: ``W1, b1`` times
``c`` and ``W2`` over ``c`` give the same fit and ``c`` times the penalty), so the second layer is
held in the unit ball ``||W2||_F <= 1``; then ``W1 = 0`` is a stationary point for every admissible
``W2, b1`` exactly when ``lam >= lam_max = max_g ||X_g^T Y||_2 / (Mq)`` (the loss is
``1/(2Mq) ||.||_F^2``), the group lasso's own lam_max (:func:`group_lam_max`; from a random ``W2``
not aligned with the top singular vectors of ``X_g^T Y`` a group enters only at a smaller penalty).
The fit is proximal (group soft-thresholding, see :func:`_group_sparse_mlp`), so a parent the fit
does not need has a group norm of exactly 0, and it starts from a small ``W1`` so that the scores
reflect the fit rather than the initialization. The MLP is not convex: ``W1 = 0`` is stationary for
any ``lam`` when a child depends on its parents only through terms uncorrelated with them
(``lam_max`` only sees correlation), which is why the fit starts near, not at, zero; and where a
parent is itself a function of an earlier parent (every node of a compiled model is a function of
the input) the MLP may use the earlier one alone, an edge set the linear model cannot reach.

The circuit keeps edges above :func:`circuitlasso.circuits.circuit.gap_threshold`, for every
variant. None of these choices looks at a ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
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
from circuitlasso.data.graph import OUTPUT, graph_nodes
from circuitlasso.solve import block_lasso, lam_max, lasso
from circuitlasso.solve.group_mlp import group_sparse_mlp
from circuitlasso.solve.prepare import column_stats
from circuitlasso.timing import Stopwatch

NEGLIGIBLE_STD = 1e-6  # columns whose std is below this fraction of the largest std are constant
LINEAR_TOL = 1e-4  # the linear fits stop at a duality gap below this times each column's variance
MLP_INIT = 0.1  # norm of each hidden unit's first-layer weights at the start of a nonlinear fit

Blocks = dict[tuple[int, int], torch.Tensor]  # (parent, child) -> coefficient block (p_i, q_j)


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


def live_width(x: torch.Tensor) -> int:
    """Non-constant columns of a standardized ``x: (M, q)`` (:func:`standardize` zeroes the
    constant ones)."""
    return int(x.abs().any(0).sum())


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


def _stacked_principal_components(
    x: torch.Tensor, rtol: float
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each ``x[i]`` of ``x: (n, M, p)``: the left singular vectors (M, rank) and singular
    values (rank,) of the centered ``x[i]``, those below ``rtol`` times its largest dropped (one
    batched SVD)."""
    centered = x.double() - x.double().mean(1, keepdim=True)
    if centered.shape[2] == 0:
        return [(c, c.new_zeros(0)) for c in centered]
    u, sing, _ = torch.linalg.svd(centered, full_matrices=False)
    out = []
    for ui, si in zip(u, sing, strict=True):
        rank = int((si > rtol * max(float(si[0]), 1e-300)).sum()) if si.numel() else 0
        out.append((ui[:, :rank], si[:rank]))
    return out


def _principal_components(x: torch.Tensor, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_stacked_principal_components` of one ``x: (M, p)``."""
    return _stacked_principal_components(x[None], rtol)[0]


def whiten_stack(x: torch.Tensor, rtol: float = 1e-6) -> list[torch.Tensor]:
    """:func:`whiten` of each ``x[i]`` of ``x: (n, M, p)`` (one batched SVD)."""
    return [u * x.shape[1] ** 0.5 for u, _ in _stacked_principal_components(x, rtol)]


def whiten(x: torch.Tensor, rtol: float = 1e-6) -> torch.Tensor:
    """Principal components of ``x: (M, p)`` scaled to unit variance: (M, rank).

    Components with a singular value below ``rtol`` times the largest are dropped, so a block
    that the read projection makes rank-deficient becomes a few uncorrelated columns.
    """
    return whiten_stack(x[None], rtol)[0]


def principal_axes(y: torch.Tensor, rtol: float = 1e-6) -> torch.Tensor:
    """``y: (M, q)`` centered and rotated onto its principal axes, the directions without
    variance dropped: ``U S`` of its thin SVD, (M, rank), rank <= min(M - 1, q).

    Every column's variance is kept, only rotated: a least-squares fit of the rotated target is
    the rotated fit, with the same Frobenius norm per parent block, and a child with more
    columns than prompts (a d_model-wide head on a few dozen prompts) needs rank fits, not q.
    """
    u, sing = _principal_components(y, rtol)
    return u * sing


def _child_design(
    acts: NodeActivations, j: int, reads: dict[str, torch.Tensor] | None
) -> tuple[torch.Tensor, list[int], torch.Tensor, int]:
    """Predictors (M, p), their per-parent sizes, the child's target (M, q') and its width.

    The width is the number of non-constant columns of the standardized child block (q). Without
    ``reads`` the parent blocks are standardized column by column, and the target is the
    standardized child block; with ``reads`` each parent block is mapped through the child's
    read matrix and whitened (:func:`whiten`), and the target is the standardized child block
    on its principal axes (:func:`principal_axes`, q' <= min(M - 1, q)).
    """
    child = standardize(acts.block(acts.names[j]))
    parents = [acts.block(acts.names[i]).double() for i in acts.parents[j]]
    if reads is None:
        blocks = [standardize(block) for block in parents]
    elif len({block.shape for block in parents}) == 1:  # every parent writes d_model columns
        blocks = whiten_stack(_read(acts, j, torch.stack(parents), reads))
    else:
        blocks = [whiten(_read(acts, j, block, reads)) for block in parents]
    target = child if reads is None else principal_axes(child)
    return torch.cat(blocks, 1), [b.shape[1] for b in blocks], target, live_width(child)


def _read(
    acts: NodeActivations, j: int, block: torch.Tensor, reads: dict[str, torch.Tensor]
) -> torch.Tensor:
    """A parent's ``block: (M, d_model)`` (or a stack of them, ``(n, M, d_model)``) as child
    ``j`` reads it: through its read matrix, (M, r); a logit-difference output
    (``acts.output_reads``) reads one direction per prompt, (M, 1)."""
    if acts.names[j] == OUTPUT and acts.output_reads is not None:
        return (block * acts.output_reads.double()).sum(-1, keepdim=True)
    return block @ reads[acts.names[j]]


def _paper_lasso_blocks(
    acts: NodeActivations, lam_ratio: float, tol: float
) -> tuple[Blocks, dict[int, int]]:
    """One block-upper-triangular Lasso on the standardized X: coefficient blocks (p_i, p_j),
    and each block's width (:func:`live_width`)."""
    x = standardize(acts.X)
    offsets = [0]
    for size in acts.block_sizes:
        offsets.append(offsets[-1] + size)
    widths = {j: live_width(x[:, offsets[j] : offsets[j + 1]]) for j in range(len(acts.names))}
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
    return result.coef, widths


def _read_lasso_blocks(
    acts: NodeActivations, lam_ratio: float, reads: dict[str, torch.Tensor], tol: float
) -> tuple[Blocks, dict[int, int]]:
    """One Lasso per child on its read-projected, whitened parents: coefficient blocks, and each
    child's width (:func:`live_width`)."""
    blocks: Blocks = {}
    widths: dict[int, int] = {}
    for j, parents in enumerate(acts.parents):
        if not parents:
            continue
        predictors, sizes, target, widths[j] = _child_design(acts, j, reads)
        top = _lam_max(predictors, target)
        if top == 0:
            continue
        coef = lasso(
            predictors, target, lam_ratio * top, normalize=False, tol=tol, dtype=torch.float64
        ).coef
        blocks.update({(i, j): b for i, b in zip(parents, torch.split(coef, sizes), strict=True)})
    return blocks, widths


def linear_edge_scores(
    acts: NodeActivations,
    lam_ratio: float = 0.05,
    reads: dict[str, torch.Tensor] | None = None,
    tol: float = LINEAR_TOL,
) -> EdgeScores:
    """Lasso edge scores: Frobenius norm of each standardized coefficient block over the square
    root of its child's width (:func:`~circuitlasso.circuits.circuit.block_norm_scores`).

    ``reads`` (from :func:`read_maps`) switches on the read projection (see module docstring).
    """
    if not 0 < lam_ratio < 1:
        raise ValueError(f"lam_ratio must be in (0, 1), got {lam_ratio}")
    names = acts.names
    scores: EdgeScores = {
        (names[i], names[j]): 0.0 for j, ps in enumerate(acts.parents) for i in ps
    }
    if reads is None:
        blocks, widths = _paper_lasso_blocks(acts, lam_ratio, tol)
    else:
        blocks, widths = _read_lasso_blocks(acts, lam_ratio, reads, tol)
    scores.update(block_norm_scores(blocks, names, widths))
    return scores


def group_lam_max(predictors: torch.Tensor, sizes: list[int], target: torch.Tensor) -> float:
    """Smallest group-lasso penalty at which ``W1 = 0`` is stationary for every admissible
    second layer: ``max_g ||X_g^T Y||_2 / (M q)`` (spectral norm), see the module docstring.

    predictors (M, p) split into groups of ``sizes`` columns, target (M, q) centered.
    """
    m, q = target.shape
    if predictors.shape[1] == 0 or q == 0:
        return 0.0
    corr = predictors.double().T @ target.double() / (m * q)
    return max(
        (float(torch.linalg.matrix_norm(b, 2)) for b in torch.split(corr, sizes) if b.numel()),
        default=0.0,
    )


def _group_sparse_mlp(
    predictors: torch.Tensor,
    sizes: list[int],
    target: torch.Tensor,
    lam: float,
    hidden: int,
    max_steps: int,
    tol: float,
    generator: torch.Generator,
) -> list[float]:
    """Group norms of the first-layer weights of a group-lasso MLP fit ``target ~ predictors``
    (:func:`circuitlasso.solve.group_mlp.group_sparse_mlp`).

    predictors (M, p) split into groups of ``sizes`` columns; target (M, q) centered. ``W1``
    starts small (norm ``MLP_INIT`` per unit, against fitted group norms of order 1), so a group
    that never gets a useful gradient is shrunk to zero within a few steps; ``W2`` starts as a
    random point of the unit sphere; both drawn from ``generator``.
    """
    p, q = predictors.shape[1], target.shape[1]
    w1 = torch.randn(hidden, p, generator=generator) * (MLP_INIT / p**0.5)
    w2 = torch.randn(q, hidden, generator=generator)
    w2 /= torch.linalg.norm(w2)
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    norms = group_sparse_mlp(predictors.float().numpy(), group_of, target.float().numpy(), lam,
                             w1.numpy(), w2.numpy(), max_steps=max_steps, tol=tol)  # fmt: skip
    return [float(n) for n in norms]


def nonlinear_edge_scores(
    acts: NodeActivations,
    lam_ratio: float = 0.05,
    reads: dict[str, torch.Tensor] | None = None,
    hidden: int = 16,
    max_steps: int = 500,
    tol: float = 1e-7,
    seed: int = 0,
) -> EdgeScores:
    """Group-lasso MLP edge scores (see module docstring) on standardized data.

    Per child the penalty is ``lam_ratio`` times :func:`group_lam_max`; a parent whose columns
    are all constant scores 0 without entering the fit.
    """
    if not 0 < lam_ratio < 1:
        raise ValueError(f"lam_ratio must be in (0, 1), got {lam_ratio}")
    generator = torch.Generator().manual_seed(seed)
    names = acts.names
    scores: EdgeScores = {
        (names[i], names[j]): 0.0 for j, ps in enumerate(acts.parents) for i in ps
    }
    for j, parents in enumerate(acts.parents):
        if not parents:
            continue
        predictors, sizes, target, width = _child_design(acts, j, reads)
        blocks = torch.split(predictors, sizes, 1)
        live = [k for k, block in enumerate(blocks) if block.abs().any()]
        if not live or not target.abs().any():
            continue
        x = torch.cat([blocks[k] for k in live], 1)
        live_sizes = [sizes[k] for k in live]
        top = group_lam_max(x, live_sizes, target)
        if top == 0:
            continue
        norms = _group_sparse_mlp(
            x, live_sizes, target, lam_ratio * top, hidden, max_steps, tol, generator
        )
        for k, norm in zip(live, norms, strict=True):
            scores[(names[parents[k]], names[j])] = norm / width**0.5
    return scores


def component_circuit(
    model: HookedTransformer,
    tokens: torch.Tensor,
    position_mask: torch.Tensor | None = None,
    *,
    nonlinear: bool = False,
    read_projection: bool = False,
    lam_ratio: float = 0.05,
    seed: int = 0,
    answers: torch.Tensor | None = None,
) -> CircuitLassoResult:
    """Collect token-averaged node activations on ``tokens: (M, P)`` and score every edge.

    For CircuitLasso, ``tokens`` stacks the clean and the corrupted prompts (App. B.2).
    ``lam_ratio`` sets the penalty of the linear and the nonlinear variant alike (module
    docstring). ``answers: (M, 2)`` token ids (answer, wrong) make the output node each
    prompt's logit difference (:func:`~circuitlasso.collect.collect_nodes`), which the read
    variant reads along ``W_U[:, answer] - W_U[:, wrong]``; by default it is every logit.
    """
    clock = Stopwatch()
    acts = collect_nodes(model, tokens, position_mask, answers=answers)
    collect_seconds = clock.lap("collect")
    reads = read_maps(model) if read_projection else None
    if nonlinear:
        scores = nonlinear_edge_scores(acts, lam_ratio, reads, seed=seed)
    else:
        scores = linear_edge_scores(acts, lam_ratio, reads)
    threshold = gap_threshold(scores)
    return CircuitLassoResult(scores, threshold, collect_seconds, clock.lap("solve"))
