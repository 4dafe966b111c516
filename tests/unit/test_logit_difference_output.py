"""CircuitLasso's output node as a logit difference (MIB's metric, `answers`): each prompt's
logit(answer) - logit(wrong) averaged over the chosen positions, one column instead of the whole
vocabulary; the read variant reads it along each prompt's W_U[:, answer] - W_U[:, wrong]."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso

from circuitlasso.circuits import components as cc
from circuitlasso.collect import collect_nodes
from circuitlasso.data.graph import OUTPUT
from circuitlasso.data.random_models import build_model, gpt2_family, random_prompt_pairs


@pytest.fixture(scope="module")
def small():
    model = build_model(gpt2_family(2, 64), n_ctx=8, seed=0)
    pairs = random_prompt_pairs(12, 8, model.cfg.d_vocab, seed=1)
    generator = torch.Generator().manual_seed(2)
    answers = torch.randint(0, model.cfg.d_vocab, (12, 2), generator=generator)
    mask = torch.rand(12, 8, generator=generator) < 0.5
    mask[:, -1] = True  # every prompt keeps a position
    return model, pairs.clean, answers, mask


def test_the_output_node_is_each_prompts_logit_difference(small):
    model, tokens, answers, mask = small
    acts = collect_nodes(model, tokens, mask, answers=answers)
    with torch.inference_mode():
        logits = model(tokens).double()
    rows = torch.arange(len(tokens))
    diff = logits[rows, :, answers[:, 0]] - logits[rows, :, answers[:, 1]]  # (M, P)
    expected = (diff * mask).sum(1) / mask.sum(1)
    assert acts.block(OUTPUT).shape == (12, 1)
    torch.testing.assert_close(acts.block(OUTPUT)[:, 0].double(), expected, rtol=1e-5, atol=1e-5)
    # every other node as without answers; the output read is each prompt's unembedding difference
    whole = collect_nodes(model, tokens, mask)
    others = [n for n in acts.names if n != OUTPUT]
    assert all(torch.equal(acts.block(n), whole.block(n)) for n in others)
    unembed = model.W_U.detach()
    for i, (answer, wrong) in enumerate(answers.tolist()):
        torch.testing.assert_close(acts.output_reads[i], unembed[:, answer] - unembed[:, wrong])
    assert whole.output_reads is None


def test_the_read_variant_reads_the_output_along_each_prompts_direction(small):
    model, tokens, answers, mask = small
    acts = collect_nodes(model, tokens, mask, answers=answers)
    j = acts.names.index(OUTPUT)
    predictors, sizes, target, width = cc._child_design(acts, j, cc.read_maps(model))
    assert sizes == [1] * len(acts.parents[j]) and target.shape == (12, 1) and width == 1
    unembed = model.W_U.detach().double()
    for k, i in enumerate(acts.parents[j]):
        block = acts.block(acts.names[i]).double()
        read = torch.stack([block[r] @ (unembed[:, a] - unembed[:, w])
                            for r, (a, w) in enumerate(answers.tolist())])  # fmt: skip
        centered = read - read.mean()
        if float(centered.abs().max()) < 1e-9:  # a constant parent whitens to nothing
            continue
        torch.testing.assert_close(predictors[:, k], centered / centered.std(unbiased=False))


@pytest.mark.parametrize("read_projection", [False, True])
def test_a_circuit_scores_its_edges_into_the_logit_difference(small, read_projection):
    model, tokens, answers, _ = small
    result = cc.component_circuit(model, tokens, answers=answers, read_projection=read_projection)
    into_output = {edge: s for edge, s in result.scores.items() if edge[1] == OUTPUT}
    # by hand: scikit-learn's Lasso of the one output column on its parents' columns (the
    # design checked above), at 0.05 of its lam_max; an edge's score, the norm of its block
    acts = collect_nodes(model, tokens, answers=answers)
    j = acts.names.index(OUTPUT)
    reads = cc.read_maps(model) if read_projection else None
    predictors, sizes, target, width = cc._child_design(acts, j, reads)
    X, y = predictors.numpy(), target[:, 0].numpy()
    lam = 0.05 * np.abs(X.T @ y).max() / len(y)
    coef = Lasso(alpha=lam, fit_intercept=False, tol=1e-14, max_iter=1_000_000).fit(X, y).coef_
    blocks = np.split(coef, np.cumsum(sizes)[:-1])
    expected = {(acts.names[i], OUTPUT): float(np.linalg.norm(b)) / width**0.5
                for i, b in zip(acts.parents[j], blocks, strict=True)}  # fmt: skip
    assert width == 1 and set(into_output) == set(expected)
    assert sum(s > 0 for s in expected.values()) >= 2  # a sparse fit, not an empty one
    # the circuit's scores, solved to its duality gap (measured: within 8e-4 of these), and the
    # same solve to a gap of 1e-10 (within 1e-12)
    exact = cc.linear_edge_scores(acts, 0.05, reads, tol=1e-10)
    for edge, score in expected.items():
        assert into_output[edge] == pytest.approx(score, abs=2e-3), edge
        assert exact[edge] == pytest.approx(score, abs=1e-9), edge


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (torch.zeros(12, 3, dtype=torch.long), "must be \\(prompts, 2\\)"),
        (torch.zeros(11, 2, dtype=torch.long), "must be \\(prompts, 2\\)"),
        (torch.zeros(12, 2), "must be integer token ids"),
        (torch.full((12, 2), 10**6), "must be token ids in \\[0, 64\\)"),
    ],
)
def test_bad_answers_are_refused_by_name(small, answers, message):
    model, tokens, _, _ = small
    with pytest.raises(ValueError, match=f"answers {message}"):
        collect_nodes(model, tokens, answers=answers)
