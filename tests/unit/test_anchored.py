"""CircuitLasso anchored on the metric: its edges into the output against exact edge patching (the
logit difference with answers, the logits along their mean contrast without),
on a small random transformer without a final norm, where the logit difference is linear in the
last residual stream (so the regression's slope is exact, up to the Lasso's shrinkage)."""

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.circuits.anchored import anchored_circuit, anchored_edge_scores
from circuitlasso.collect import collect_nodes
from circuitlasso.data.counterfactual_tasks import TaskTokens, logit_difference
from circuitlasso.evaluation.mib import edge_patched_logits, mib_edges

torch.set_num_threads(1)
FLAGS = {"use_attn_result": True, "use_split_qkv_input": True, "use_hook_mlp_in": True}


def _model() -> HookedTransformer:
    cfg = HookedTransformerConfig(n_layers=2, d_model=8, n_ctx=6, d_head=4, n_heads=2,
                                  d_mlp=16, d_vocab=11, act_fn="relu",
                                  normalization_type=None, seed=0, **FLAGS)  # fmt: skip
    return HookedTransformer(cfg)


def _tokens(m=16, p=6, seed=0) -> TaskTokens:
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, 11, (m, p), generator=g)
    counter = clean.clone()
    counter[:, 1] = torch.randint(0, 11, (m,), generator=g)
    last = torch.full((m,), p - 1)
    answer = torch.randint(0, 11, (m,), generator=g)
    wrong = (answer + 1 + torch.randint(0, 10, (m,), generator=g)) % 11
    return TaskTokens(clean, counter, last, answer, wrong, bos=False)


def _mean_logit_diff(model, tokens, circuit) -> float:
    logits = edge_patched_logits(model, tokens.clean, tokens.counterfactual, circuit)
    return float(logit_difference(logits, tokens).double().mean())


@pytest.mark.parametrize("lam_ratio", [0.01, 0.2])
def test_edges_into_the_output_score_the_exact_effect_of_patching_them(lam_ratio):
    model, tokens = _model(), _tokens()
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


def test_every_mib_edge_is_scored_and_heads_sum_their_slots():
    model, tokens = _model(), _tokens()
    found = anchored_circuit(model, tokens.clean, tokens.counterfactual,
                             answers=torch.stack([tokens.answer, tokens.wrong], 1))  # fmt: skip
    assert set(found.slot_scores) == set(mib_edges(model))
    q, k, v = (found.slot_scores[("input", f"a1.h0.{x}")] for x in "qkv")
    assert found.scores[("input", "a1.h0")] == pytest.approx(abs(q) + abs(k) + abs(v))
    assert any(found.slot_scores[e] < 0 for e in found.slot_scores)  # signed


def test_bad_inputs_are_clear_errors():
    model, tokens = _model(), _tokens()
    with pytest.raises(ValueError, match="same shape"):
        anchored_circuit(model, tokens.clean, tokens.counterfactual[:, :4])
    acts = collect_nodes(model, torch.cat([tokens.clean, tokens.counterfactual]))
    with pytest.raises(ValueError, match="stacked"):
        anchored_edge_scores(acts, model, n_pairs=5)
    with pytest.raises(ValueError, match="lam_ratio"):
        anchored_edge_scores(acts, model, n_pairs=16, lam_ratio=1.5)


def test_without_answers_the_metric_is_the_logits_along_their_mean_contrast():
    model, tokens = _model(), _tokens()
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
