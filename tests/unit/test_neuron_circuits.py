import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso
from tracr.rasp import rasp

from circuitlasso.circuits.circuit import circuit_at_threshold, gap_threshold
from circuitlasso.circuits.components import (
    _group_sparse_mlp,
    group_lam_max,
    linear_edge_scores,
    nonlinear_edge_scores,
    principal_axes,
    standardize,
    whiten,
    whiten_stack,
)
from circuitlasso.collect import NodeActivations, collect_nodes
from circuitlasso.data.interpbench import (
    TracrTask,
    compile_case,
    make_prompts,
    to_hooked_transformer,
)
from circuitlasso.evaluation.interpbench import METHODS, RunSettings, evaluate_case, evaluate_task
from circuitlasso.solve.group_mlp import group_sparse_mlp

NAMES = ["input", "a0.h0", "a0.h1", "m0", "output"]
PARENTS = [[], [0], [0], [0, 1, 2], [0, 1, 2, 3]]
TRUE_EDGES = {("input", "a0.h0"), ("a0.h0", "m0"), ("m0", "output")}


def _chain(m=2000, seed=0):
    """A linear chain input -> a0.h0 -> m0 -> output, with a0.h1 unrelated noise."""
    g = torch.Generator().manual_seed(seed)
    noise = lambda *shape: 0.3 * torch.randn(*shape, generator=g, dtype=torch.float64)
    x = torch.randn(m, 3, generator=g, dtype=torch.float64)
    h0 = x @ torch.randn(3, 3, generator=g, dtype=torch.float64) + noise(m, 3)
    h1 = torch.randn(m, 3, generator=g, dtype=torch.float64)
    mlp = h0 @ torch.randn(3, 4, generator=g, dtype=torch.float64) + noise(m, 4)
    out = mlp @ torch.randn(4, 2, generator=g, dtype=torch.float64) + noise(m, 2)
    blocks = [x, h0, h1, mlp, out]
    return NodeActivations(torch.cat(blocks, 1), NAMES, [b.shape[1] for b in blocks], PARENTS)


def test_linear_scores_match_a_reference_lasso_and_find_the_chain():
    acts = _chain()
    scores = linear_edge_scores(acts, lam_ratio=0.05, tol=1e-8)
    x = standardize(acts.X).numpy()
    offsets = np.cumsum([0, *acts.block_sizes])
    for j, parents in enumerate(PARENTS):
        if not parents:
            continue
        cols = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in parents])
        y = x[:, offsets[j] : offsets[j + 1]]
        alpha = 0.05 * np.abs(x[:, cols].T @ y).max() / len(x)
        coef = Lasso(alpha=alpha, fit_intercept=False, tol=1e-10, max_iter=100_000)
        coef = coef.fit(x[:, cols], y).coef_.reshape(y.shape[1], -1).T
        start = 0
        for i in parents:
            size = acts.block_sizes[i]
            expected = np.linalg.norm(coef[start : start + size]) / np.sqrt(y.shape[1])
            assert scores[(NAMES[i], NAMES[j])] == pytest.approx(expected, rel=1e-3, abs=1e-6)
            start += size
    smallest_true = min(scores[e] for e in TRUE_EDGES)
    assert smallest_true > 0.3
    assert max(s for e, s in scores.items() if "a0.h1" in e) < 0.5 * smallest_true
    assert circuit_at_threshold(scores, gap_threshold(scores)).edges == TRUE_EDGES


@pytest.mark.parametrize("scorer", [linear_edge_scores, nonlinear_edge_scores])
def test_a_child_s_width_does_not_scale_its_edges(scorer):
    """The same parent copied into a one-column child and, column by column, into a four-column
    child (one constant column more) scores alike: the score is per child column."""
    g = torch.Generator().manual_seed(2)
    m = 600
    a = torch.randn(m, 1, generator=g, dtype=torch.float64)
    noise = lambda q: 0.5 * torch.randn(m, q, generator=g, dtype=torch.float64)
    narrow = a + noise(1)
    wide = torch.cat([a.repeat(1, 4) + noise(4), torch.ones(m, 1, dtype=torch.float64)], 1)
    blocks = [a, narrow, wide]
    acts = NodeActivations(
        torch.cat(blocks, 1), ["input", "m0", "output"], [1, 1, 5], [[], [0], [0]]
    )
    scores = scorer(acts)
    assert scores[("input", "output")] == pytest.approx(scores[("input", "m0")], rel=0.1)


def test_read_projection_ignores_what_the_child_cannot_read():
    g = torch.Generator().manual_seed(1)
    m = 500
    a = torch.randn(m, 2, generator=g, dtype=torch.float64)
    zeros = torch.zeros(m, 2, dtype=torch.float64)
    # the child reads residual dims 0-1, where input writes a noisy copy of a; a0.h0 writes the
    # exact a, but into dims 2-3, which the child does not read
    noisy = a + 0.5 * torch.randn(m, 2, generator=g, dtype=torch.float64)
    child = a @ torch.tensor([[1.0], [-2.0]], dtype=torch.float64)
    blocks = [torch.cat([noisy, zeros], 1), torch.cat([zeros, a], 1), child]
    acts = NodeActivations(
        torch.cat(blocks, 1), ["input", "a0.h0", "m0"], [4, 4, 1], [[], [], [0, 1]]
    )
    reads = {"m0": torch.eye(4, dtype=torch.float64)[:, :2]}
    plain = linear_edge_scores(acts)
    projected = linear_edge_scores(acts, reads=reads)
    assert plain[("a0.h0", "m0")] > 10 * plain[("input", "m0")]  # correlation prefers the copy
    assert projected[("a0.h0", "m0")] == 0.0
    assert projected[("input", "m0")] > 0.5


def test_standardize_gives_unit_variance_and_zeroes_negligible_columns():
    g = torch.Generator().manual_seed(4)
    scale = torch.tensor([1.0, 30.0, 1e-8, 0.0], dtype=torch.float64)
    offset = torch.tensor([5.0, -2.0, 0.0, 5.0], dtype=torch.float64)
    x = offset + torch.randn(200, 4, generator=g, dtype=torch.float64) * scale
    out = standardize(x).numpy()
    ref = x.numpy()
    expected = (ref[:, :2] - ref[:, :2].mean(0)) / ref[:, :2].std(0, ddof=1)
    np.testing.assert_allclose(out[:, :2], expected, rtol=1e-9, atol=1e-12)
    # std 1e-8 is below NEGLIGIBLE_STD (1e-6) times the largest (30); 0 is constant
    assert not out[:, 2:].any()


def test_principal_axes_keep_the_variance_and_the_least_squares_block_norms():
    g = torch.Generator().manual_seed(4)
    m, q = 12, 30  # more columns than prompts, as a head's d_model on a few prompts
    x = torch.randn(m, 3, generator=g, dtype=torch.float64)
    y = x @ torch.randn(3, q, generator=g, dtype=torch.float64)
    y = y + torch.randn(m, q, generator=g, dtype=torch.float64)
    rotated = principal_axes(y)
    centered = y - y.mean(0)
    assert rotated.shape == (m, m - 1)  # centering leaves M - 1 directions
    gram = rotated.T @ rotated
    assert torch.allclose(gram, torch.diag(torch.diag(gram)), atol=1e-9)  # uncorrelated
    assert float(gram.trace()) == pytest.approx(float((centered**2).sum()), rel=1e-12)
    design = x - x.mean(0)
    plain = torch.linalg.lstsq(design, centered).solution
    fit = torch.linalg.lstsq(design, rotated).solution
    assert float(torch.linalg.norm(fit)) == pytest.approx(float(torch.linalg.norm(plain)), rel=1e-9)


def test_whiten_gives_uncorrelated_unit_columns_spanning_the_block():
    g = torch.Generator().manual_seed(2)
    base = torch.randn(300, 2, generator=g, dtype=torch.float64)
    block = torch.cat([base, base @ torch.tensor([[1.0], [2.0]], dtype=torch.float64)], 1)
    white = whiten(block)
    assert white.shape == (300, 2)
    torch.testing.assert_close(white.T @ white / 300, torch.eye(2, dtype=torch.float64))
    centered = block - block.mean(0)
    residual = centered - white @ torch.linalg.lstsq(white, centered).solution
    assert residual.abs().max() < 1e-8


def test_whitening_a_stack_whitens_each_block_alone():
    g = torch.Generator().manual_seed(4)
    full = torch.randn(3, 12, 5, generator=g, dtype=torch.float64)
    full[1, :, 3:] = full[1, :, :2] @ torch.randn(2, 2, generator=g, dtype=torch.float64)
    full[2] = 1.0  # constant: whitens to nothing
    whites = whiten_stack(full)
    assert [w.shape[1] for w in whites] == [5, 3, 0]
    for block, white in zip(full, whites, strict=True):
        torch.testing.assert_close(white, whiten(block), rtol=0, atol=1e-12)


def test_nonlinear_scores_find_a_nonlinear_parent_and_are_seeded():
    g = torch.Generator().manual_seed(3)
    m = 400
    a = torch.randn(m, 2, generator=g, dtype=torch.float64)
    d = torch.randn(m, 2, generator=g, dtype=torch.float64)
    child = (a[:, :1] ** 2 - torch.relu(a[:, 1:])).reshape(m, 1)
    acts = NodeActivations(
        torch.cat([a, d, child], 1), ["input", "a0.h0", "m0"], [2, 2, 1], [[], [], [0, 1]]
    )
    scores = nonlinear_edge_scores(acts, seed=0)
    assert scores[("input", "m0")] > 0.5
    assert scores[("a0.h0", "m0")] == 0.0
    assert nonlinear_edge_scores(acts, seed=0) == scores


def _planted(kind: str, seed: int, m: int = 400) -> NodeActivations:
    """Ten parents of 2 columns each (parent 4 constant) and a child of parents 2 and 7 only."""
    g = torch.Generator().manual_seed(seed)
    parents = torch.randn(m, 10, 2, generator=g, dtype=torch.float64)
    parents[:, 4] = 1.5
    a, b = parents[:, 2], parents[:, 7]
    if kind == "relu":
        child = torch.relu(a[:, :1] + b[:, 1:]) - torch.relu(a[:, 1:] - b[:, :1])
    elif kind == "product":
        child = a[:, :1] * b[:, :1] + a[:, 1:]
    else:  # "abs": no linear trace of parent 2's first column
        child = a[:, :1].abs() + torch.relu(b[:, 1:])
    names = [f"p{i}" for i in range(10)] + ["child"]
    x = torch.cat([parents.reshape(m, 20), child], 1)
    return NodeActivations(x, names, [2] * 10 + [1], [[] for _ in range(10)] + [list(range(10))])


@pytest.mark.parametrize("kind", ["relu", "product", "abs"])
@pytest.mark.parametrize("seed", [0, 1])
def test_nonlinear_scores_recover_exactly_the_planted_parents(kind, seed):
    scores = nonlinear_edge_scores(_planted(kind, seed), seed=seed)
    true = {("p2", "child"), ("p7", "child")}
    assert {e for e, s in scores.items() if s > 0} == true  # non-edges are exactly zero
    threshold = gap_threshold(scores)
    assert {e for e, s in scores.items() if s > threshold} == true
    assert min(scores[e] for e in true) > 0.5


def test_group_lam_max_is_where_the_first_layer_vanishes():
    g = torch.Generator().manual_seed(5)
    x = standardize(torch.randn(400, 18, generator=g, dtype=torch.float64))
    mix = torch.tensor([[2.0, 0.5], [0.0, 1.0]], dtype=torch.float64)
    y = standardize(x[:, 4:6] @ mix)  # two columns, linear in group 2 (of 9 groups of 2)
    top = group_lam_max(x, [2] * 9, y)
    corr = (x.T @ y / (400 * 2)).numpy()
    spectral = [np.linalg.norm(corr[k : k + 2], 2) for k in range(0, 18, 2)]
    assert top == pytest.approx(max(spectral))
    assert top < max(np.linalg.norm(corr[k : k + 2]) for k in range(0, 18, 2))  # not Frobenius
    for seed in range(3):  # at or above lam_max the first layer vanishes whatever the start
        fit = _group_sparse_mlp(x, [2] * 9, y, 1.05 * top, 16, 500, 1e-7, _generator(seed))
        assert fit == [0.0] * 9
    # below it the group enters (from a random W2 the entry point is below lam_max, the largest
    # gradient over all W2 in the unit ball)
    fit = _group_sparse_mlp(x, [2] * 9, y, 0.3 * top, 16, 500, 1e-7, _generator(0))
    assert [k for k, n in enumerate(fit) if n > 0] == [2]


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_nonlinear_lam_ratio_must_be_a_fraction():
    with pytest.raises(ValueError, match="lam_ratio"):
        nonlinear_edge_scores(_chain(), lam_ratio=0.0)


def test_lam_ratio_must_be_a_fraction():
    with pytest.raises(ValueError, match="lam_ratio"):
        linear_edge_scores(_chain(), lam_ratio=1.5)


def test_collect_averages_each_node_over_the_chosen_positions():
    compiled = compile_case("3")
    model = to_hooked_transformer(compiled, "distractors")
    prompts = make_prompts(compiled, 8, seed=0)
    acts = collect_nodes(model, prompts.clean, prompts.position_mask)
    d = model.cfg.d_model
    assert acts.names[:6] == ["input", "a0.h0", "a0.h1", "a0.h2", "a0.h3", "m0"]
    assert acts.block_sizes == [d] * (len(acts.names) - 1) + [1]
    logits, cache = model.run_with_cache(prompts.clean)
    mean = lambda t: t[:, 1:].mean(1)
    torch.testing.assert_close(acts.block("input"), mean(cache["blocks.0.hook_resid_pre"]))
    torch.testing.assert_close(
        acts.block("a1.h0"), mean(cache["blocks.1.attn.hook_result"][:, :, 0])
    )
    torch.testing.assert_close(acts.block("m0"), mean(cache["blocks.0.hook_mlp_out"]))
    torch.testing.assert_close(acts.block("output"), mean(logits))
    assert acts.parents[acts.names.index("a0.h1")] == [0]  # heads of a layer run in parallel
    assert acts.parents[acts.names.index("m0")] == [0, 1, 2, 3, 4]


def test_collect_rejects_bad_input():
    compiled = compile_case("3")
    model = to_hooked_transformer(compiled)
    tokens = make_prompts(compiled, 4, seed=0).clean
    with pytest.raises(ValueError, match="selects no position"):
        collect_nodes(model, tokens, torch.zeros(tokens.shape[1], dtype=torch.bool))
    with pytest.raises(ValueError, match="prompts, positions"):
        collect_nodes(model, tokens[0])
    model.set_use_split_qkv_input(False)
    with pytest.raises(ValueError, match="use_split_qkv_input"):
        collect_nodes(model, tokens)


def test_evaluate_case_recovers_a_known_circuit_among_distractors():
    settings = RunSettings(["circuitlasso-linear-read", "eap"], n_prompts=200, trials=1)
    table = evaluate_case("13", "distractors", settings)
    assert list(table["method"]) == ["circuitlasso-linear-read", "eap"]
    assert {"edge_shd", "node_shd", "best_edge_shd", "edge_auroc", "collect_s", "solve_s"} <= set(
        table.columns
    )
    assert (table["edge_shd"] == 0).all()
    assert (table["n_true_edges"] == 4).all()


def test_evaluate_takes_a_custom_program_and_rejects_unknown_names():
    def program():
        previous = rasp.Aggregate(
            rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + 1), rasp.tokens
        ).named("previous")
        return rasp.SequenceMap(lambda t, p: t == p, rasp.tokens, previous).named("repeat")

    task = TracrTask.from_program("repeat", program, ["a", "b"], 4)
    table = evaluate_task(task, settings=RunSettings(["circuitlasso-linear-read"], 100, trials=1))
    assert table.loc[0, "case"] == "repeat"
    assert table.loc[0, "n_true_edges"] == 4
    with pytest.raises(ValueError, match="unknown methods"):
        RunSettings(["acdc"], n_prompts=10, trials=1)
    with pytest.raises(ValueError, match="trials must be >= 1"):
        RunSettings(trials=0)
    with pytest.raises(ValueError, match="unknown InterpBench case"):
        evaluate_case("0")
    assert set(METHODS) >= {"eap", "eap-ig", "circuitlasso-linear", "circuitlasso-nonlinear"}


def test_the_compiled_fit_names_mismatched_shapes():
    x, y = np.zeros((10, 4), np.float32), np.zeros((10, 2), np.float32)
    w1, w2 = np.zeros((3, 4), np.float32), np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"shapes do not match: x \(10, 4\), group_of \(3,\)"):
        group_sparse_mlp(x, np.zeros(3, np.int64), y, 0.1, w1, w2, max_steps=5, tol=1e-7)
