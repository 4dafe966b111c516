"""CircuitLasso on patched passes, on a small random transformer without norms (so a receiver's
input is exactly the sum of its senders' outputs and the logit difference is linear in the last
residual stream): edges into the output against exact edge patching, shares that split each
receiver's effect exactly, unit effects against exact single-unit patching, the effects filled in
for the slots the Lasso leaves at zero against a hand-computed graph, and the cross-validated
Lasso against scikit-learn's LassoCV."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import LassoCV
from sklearn.model_selection import KFold
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.data.counterfactual_tasks import logit_difference
from circuitlasso.evaluation.mib import edge_patched_logits, mib_edges
from circuitlasso.evaluation.patched import (
    FILL_WEIGHT,
    LAM_EPS,
    N_LAMS,
    _node_of,
    _patch_hooks,
    cross_validated_lasso,
    filled_effects,
    patch_units,
    patched_lasso,
    position_relevance,
)
from circuitlasso.forward import read_logits, residual_gradient

torch.set_num_threads(1)


def _found(model, tokens, **kw):
    answers = torch.stack([tokens.answer, tokens.wrong], 1)
    return patched_lasso(model, tokens.clean, tokens.counterfactual, position_mask=tokens.last_mask,
                         answers=answers, **kw)  # fmt: skip


def _mean_logit_diff(model, tokens, circuit) -> float:
    logits = edge_patched_logits(model, tokens.clean, tokens.counterfactual, circuit)
    return float(logit_difference(logits, tokens).double().mean())


def test_edges_into_the_output_score_the_exact_effect_of_patching_them(
    no_norm_model, random_task_tokens
):
    model, tokens = no_norm_model, random_task_tokens()
    found = _found(model, tokens, n_rows=64)
    flags = ("use_attn_result", "use_split_qkv_input", "use_hook_mlp_in")
    assert all(getattr(model.cfg, flag) for flag in flags)  # the caller's flags restored
    edges = mib_edges(model)
    full = _mean_logit_diff(model, tokens, edges)
    into_output = [edge for edge in edges if edge[1] == "output"]
    for edge in into_output:
        effect = full - _mean_logit_diff(model, tokens, [e for e in edges if e != edge])
        assert found.slot_scores[edge] == pytest.approx(effect, rel=1e-4, abs=1e-6)
    assert max(abs(found.slot_scores[e]) for e in into_output) > 1e-2  # the case is not empty


def test_a_receivers_senders_share_its_effect_exactly_and_every_mib_edge_is_scored(
    no_norm_model, random_task_tokens
):
    model, tokens = no_norm_model, random_task_tokens()
    found = _found(model, tokens, n_rows=320)
    assert set(found.slot_scores) == set(mib_edges(model))
    slots = {slot for _, slot in found.slot_scores if slot != "output"}
    nonzero = [slot for slot in slots if abs(found.unit_effects[slot]) > 1e-3]
    assert len(nonzero) >= 3  # the case is not empty
    for slot in slots:
        total = sum(score for (_, s), score in found.slot_scores.items() if s == slot)
        assert total == pytest.approx(found.slot_effects[slot], rel=1e-4, abs=1e-8)
        if found.unit_effects[slot] != 0:  # measured effects are split as they are
            assert found.slot_effects[slot] == found.unit_effects[slot]
    q, k, v = (found.slot_scores[("input", f"a1.h0.{x}")] for x in "qkv")
    assert found.scores[("input", "a1.h0")] == pytest.approx(abs(q) + abs(k) + abs(v))


def _single_unit_drops(model, tokens) -> dict[str, float]:
    """The metric's exact mean drop when each unit alone is patched from the counterfactual."""
    units = patch_units(model)
    _, cf_cache = model.run_with_cache(tokens.counterfactual)
    base = float(logit_difference(model(tokens.clean), tokens).double().mean())
    drops = {}
    for i, unit in enumerate(units):
        mask = torch.zeros(len(tokens), len(units), dtype=torch.bool)
        mask[:, i] = True
        logits = model.run_with_hooks(tokens.clean, fwd_hooks=_patch_hooks(units, mask, cf_cache))
        drops[unit.name] = base - float(logit_difference(logits, tokens).double().mean())
    return drops


def test_unit_effects_follow_exact_single_unit_patching(no_norm_model, random_task_tokens):
    model, tokens = no_norm_model, random_task_tokens(m=32)
    found = _found(model, tokens, n_rows=2048, patch_share=0.1)
    with torch.no_grad():
        exact = _single_unit_drops(model, tokens)
    names = list(exact)
    a = np.array([exact[n] for n in names])
    b = np.array([found.unit_effects[n] for n in names])
    assert np.corrcoef(a, b)[0, 1] > 0.9  # 0.93: interactions move a Banzhaf value
    assert names[int(np.argmax(np.abs(b)))] == names[int(np.argmax(np.abs(a)))]


def test_position_relevance_rolls_out_from_the_read_positions_by_hand():
    # one prompt of three positions, the metric read at the last; two layers of two heads
    read = torch.tensor([[False, False, True]])
    upper = torch.tensor([[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.2, 0.6]],
                          [[1, 0, 0], [0.1, 0.9, 0], [0.0, 0.4, 0.6]]])  # fmt: skip
    lower = torch.tensor([[[1, 0, 0], [1, 0, 0], [0.5, 0.25, 0.25]],
                          [[1, 0, 0], [0, 1, 0], [0.5, 0.25, 0.25]]])  # fmt: skip
    found = position_relevance(read, [lower[None], upper[None]])
    after = [0.0, 0.0, 1.0]
    # the heads' mean row of the last query is (0.1, 0.3, 0.6): added to [0, 0, 1], halved
    middle = [0.05, 0.15, 0.8]
    # the mean pattern is [[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]
    below = [0.05 + 0.05 + 0.15 * 0.5 + 0.8 * 0.5, 0.15 + 0.15 * 0.5 + 0.8 * 0.25, 0.8 + 0.2]
    below = [x / 2 for x in below]
    for got, expected in zip(found, [below, middle, after], strict=True):
        torch.testing.assert_close(got, torch.tensor([expected], dtype=torch.float64))


def test_filled_effects_follow_the_hand_computed_totals_from_the_output_down():
    # input -> a0.h0 (q, k, v) -> m0 -> a1.h0 (q, k, v) -> m1 -> output; the Lasso kept m1 only
    units = ["input", "a0.h0.q", "a0.h0.k", "a0.h0.v", "m0", "a1.h0.q", "a1.h0.k", "a1.h0.v", "m1"]
    measured = dict.fromkeys(units, 0.0) | {"m1": 2.0, "input": 0.3}
    shares = {("a1.h0", "m1"): 0.25, ("m0", "m1"): 0.5, ("a0.h0", "m1"): 0.125}
    shares |= {("m0", f"a1.h0.{x}"): 0.6 for x in "qkv"}
    shares |= {("a0.h0", f"a1.h0.{x}"): 0.3 for x in "qkv"} | {("a0.h0", "m0"): 0.9}
    direct = {"a0.h0": 0.1, "m0": -0.2, "a1.h0": 0.5, "m1": 1.0}
    w = 0.1
    a1 = 0.5 + 0.25 * 2.0  # its direct effect, and its share of m1's measured effect: 1.0
    m0 = -0.2 + 0.5 * 2.0 + 3 * 0.6 * (a1 / 3)  # a1's slots read at their unweighted filling
    a0 = 0.1 + 0.125 * 2.0 + 3 * 0.3 * (a1 / 3) + 0.9 * m0
    expected = {"input": 0.3, "m1": 2.0, "m0": w * m0}
    expected |= {f"a1.h0.{x}": w * a1 / 3 for x in "qkv"}
    expected |= {f"a0.h0.{x}": w * a0 / 3 for x in "qkv"}
    assert filled_effects(measured, shares, direct, w) == pytest.approx(expected)
    assert filled_effects(measured, shares, direct, 0.0) == pytest.approx(measured)
    # a node with one measured slot keeps its other slots at zero
    one = measured | {"a1.h0.k": 0.7}
    assert filled_effects(one, shares, direct, w)["a1.h0.q"] == 0.0


def test_filling_gives_every_sender_of_a_scored_edge_a_scored_input(
    no_norm_model, random_task_tokens
):
    # MIB's pruning drops an edge whose sender receives no circuit edge: unfilled, the Lasso's
    # measured edges leave some of their senders without a scored input; filled, none
    model, tokens = no_norm_model, random_task_tokens()

    def senders_without_input(found) -> set[str]:
        sends = {u for (u, _), score in found.slot_scores.items() if score != 0 and u != "input"}
        fed = {_node_of(slot) for (_, slot), score in found.slot_scores.items() if score != 0}
        return sends - fed

    assert senders_without_input(_found(model, tokens, n_rows=64, fill_weight=0.0))
    filled = _found(model, tokens, n_rows=64)
    assert not senders_without_input(filled)
    measured = {slot for slot, effect in filled.unit_effects.items() if effect != 0}
    weakest_measured = min(abs(filled.slot_effects[s]) for s in measured - {"input"})
    strongest_filled = max(abs(e) for s, e in filled.slot_effects.items() if s not in measured)
    assert 0 < strongest_filled < weakest_measured  # measured slots rank first here
    assert FILL_WEIGHT > 0


def test_the_cross_validated_lasso_is_scikit_learns_lasso_cv():
    g = np.random.default_rng(0)
    X = (g.random((300, 40)) < 0.2).astype(float)
    beta = np.zeros(40)
    beta[:5] = [2.0, -1.5, 1.0, 0.5, -0.8]
    y = X @ beta + 0.3 * g.standard_normal(300)
    ours = cross_validated_lasso(torch.tensor(X), torch.tensor(y), folds=5, seed=3).numpy()
    top = np.abs((X - X.mean(0)).T @ (y - y.mean())).max() / len(y)
    alphas = top * LAM_EPS ** np.linspace(0, 1, N_LAMS)
    folds = KFold(5, shuffle=True, random_state=3)
    reference = LassoCV(alphas=alphas, cv=folds, tol=1e-10, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(ours, reference.coef_, atol=1e-3)
    assert np.count_nonzero(ours[5:]) < 35 and np.all(ours[:3] != 0)


def test_bad_inputs_are_clear_errors(no_norm_model, random_task_tokens):
    model, tokens = no_norm_model, random_task_tokens()
    with pytest.raises(ValueError, match="same shape"):
        patched_lasso(model, tokens.clean, tokens.counterfactual[:, :4])
    with pytest.raises(ValueError, match="patch_share"):
        patched_lasso(model, tokens.clean, tokens.counterfactual, patch_share=1.0)
    with pytest.raises(ValueError, match="n_rows"):
        patched_lasso(model, tokens.clean, tokens.counterfactual, n_rows=3)
    with pytest.raises(ValueError, match="fill_weight"):
        patched_lasso(model, tokens.clean, tokens.counterfactual, fill_weight=-1.0)
    with pytest.raises(ValueError, match="answers"):
        patched_lasso(model, tokens.clean, tokens.counterfactual, answers=tokens.answer[:, None])


@pytest.mark.parametrize("norm", ["LN", "RMS", None])
def test_logits_read_only_where_the_metric_reads_are_the_models_own(norm, random_task_tokens):
    sizes = {"n_layers": 2, "d_model": 8, "n_ctx": 6, "d_head": 4, "n_heads": 2, "d_mlp": 16}
    cfg = HookedTransformerConfig(**sizes, d_vocab=11, act_fn="relu", normalization_type=norm)
    model, tokens = HookedTransformer(cfg), random_task_tokens(m=4)
    read = tokens.last_mask.clone()
    read[0, 2] = True
    with torch.no_grad():
        full = model(tokens.clean)
        ours = read_logits(model, tokens.clean, [], read)
    torch.testing.assert_close(ours[read], full[read])
    assert not ours[~read].any()


@pytest.mark.parametrize("norm", ["LN", "RMS", "LNPre", "RMSPre", None])
def test_residual_gradient_is_autograd_through_the_final_norm_with_its_scale_fixed(norm):
    """The gradient the output edges read back equals autograd of the metric through ``ln_final``
    (weight, centring) and ``W_U`` with the scale detached, for every kind of final norm."""
    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=6, d_head=4, n_heads=2,
                                  d_mlp=16, d_vocab=11, act_fn="relu", normalization_type=norm,
                                  seed=0)  # fmt: skip
    model = HookedTransformer(cfg)
    torch.manual_seed(1)
    for name, parameter in model.named_parameters():  # no weight at its initial ones or zeros
        if name.startswith("ln_final"):
            parameter.data = 1 + 0.5 * torch.randn_like(parameter)
    tokens = torch.randint(0, 11, (3, 6))
    residual = model.run_with_cache(tokens)[1]["blocks.0.hook_resid_post"].clone()
    leaf = residual.requires_grad_(True)
    hooks = [("blocks.0.hook_resid_post", lambda x, hook: leaf)]
    if norm is not None:
        hooks.append(("ln_final.hook_scale", lambda x, hook: x.detach()))
    logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
    target = torch.randn(3, 6, 11)
    (expected,) = torch.autograd.grad((logits * target).sum(), leaf)
    with torch.no_grad():
        scale = None if norm is None else model.run_with_cache(tokens)[1]["ln_final.hook_scale"]
    found = residual_gradient(model, logits, lambda x: (x * target).sum(), scale)
    torch.testing.assert_close(found, expected.double(), rtol=1e-4, atol=1e-5)
