"""CircuitLasso anchored on the metric: its edges into the output against exact edge patching (the
logit difference with answers, the logits along their mean contrast without),
on a small random transformer without a final norm, where the logit difference is linear in the
last residual stream (so the regression's slope is exact, up to the Lasso's shrinkage)."""

import pytest
import torch

from circuitlasso.circuits.anchored import anchored_circuit, anchored_edge_scores
from circuitlasso.collect import collect_nodes
from circuitlasso.data.counterfactual_tasks import logit_difference
from circuitlasso.evaluation.mib import edge_patched_logits, mib_edges

torch.set_num_threads(1)


def _mean_logit_diff(model, tokens, circuit) -> float:
    logits = edge_patched_logits(model, tokens.clean, tokens.counterfactual, circuit)
    return float(logit_difference(logits, tokens).double().mean())


@pytest.mark.parametrize("lam_ratio", [0.01, 0.2])
def test_edges_into_the_output_score_the_exact_effect_of_patching_them(
    lam_ratio, no_norm_model, random_task_tokens
):
    model, tokens = no_norm_model, random_task_tokens()
    mask = torch.cat([tokens.last_mask] * 2)
    answers = torch.stack([tokens.answer, tokens.wrong], 1)
    found = anchored_circuit(model, tokens.clean, tokens.counterfactual, mask,
                             answers=answers, lam_ratio=lam_ratio)  # fmt: skip
    edges = mib_edges(model)
    full = _mean_logit_diff(model, tokens, edges)
    into_output = [edge for edge in edges if edge[1] == "output"]
    for edge in into_output:
        effect = full - _mean_logit_diff(model, tokens, [e for e in edges if e != edge])
        # one standardized column: the Lasso's slope is (1 - lam_ratio) of the exact one
        assert found.slot_scores[edge] == pytest.approx((1 - lam_ratio) * effect, rel=1e-4,
                                                        abs=1e-6)  # fmt: skip
    assert max(abs(found.slot_scores[e]) for e in into_output) > 1e-2  # the case is not empty


def test_every_mib_edge_is_scored_and_heads_sum_their_slots(no_norm_model, random_task_tokens):
    model, tokens = no_norm_model, random_task_tokens()
    found = anchored_circuit(model, tokens.clean, tokens.counterfactual,
                             answers=torch.stack([tokens.answer, tokens.wrong], 1))  # fmt: skip
    assert set(found.slot_scores) == set(mib_edges(model))
    q, k, v = (found.slot_scores[("input", f"a1.h0.{x}")] for x in "qkv")
    assert found.scores[("input", "a1.h0")] == pytest.approx(abs(q) + abs(k) + abs(v))
    assert any(found.slot_scores[e] < 0 for e in found.slot_scores)  # signed


def test_bad_inputs_are_clear_errors(no_norm_model, random_task_tokens):
    model, tokens = no_norm_model, random_task_tokens()
    with pytest.raises(ValueError, match="same shape"):
        anchored_circuit(model, tokens.clean, tokens.counterfactual[:, :4])
    acts = collect_nodes(model, torch.cat([tokens.clean, tokens.counterfactual]))
    with pytest.raises(ValueError, match="stacked"):
        anchored_edge_scores(acts, model, n_pairs=5)
    with pytest.raises(ValueError, match="lam_ratio"):
        anchored_edge_scores(acts, model, n_pairs=16, lam_ratio=1.5)


def test_without_answers_the_metric_is_the_logits_along_their_mean_contrast(
    no_norm_model, random_task_tokens
):
    model, tokens = no_norm_model, random_task_tokens()
    lam_ratio = 0.01
    found = anchored_circuit(model, tokens.clean, tokens.counterfactual, lam_ratio=lam_ratio)
    edges = mib_edges(model)
    with torch.no_grad():
        clean, counter = model(tokens.clean).mean(1), model(tokens.counterfactual).mean(1)
    direction = (clean - counter).mean(0)  # (V,): the mean logit contrast

    def metric(circuit) -> float:
        logits = edge_patched_logits(model, tokens.clean, tokens.counterfactual, circuit)
        return float((logits.mean(1) @ direction).double().mean())

    full = metric(edges)
    for edge in [edge for edge in edges if edge[1] == "output"]:
        effect = full - metric([e for e in edges if e != edge])
        assert found.slot_scores[edge] == pytest.approx((1 - lam_ratio) * effect, rel=1e-4,
                                                        abs=1e-6)  # fmt: skip
