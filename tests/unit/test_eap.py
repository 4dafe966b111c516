"""EAP / EAP-IG against independent references written out below: exact edge activation
patching (one receiver input patched by hooks) and, where the path is nonlinear, the path integral
of the metric's gradient summed by hand with hooks and autograd, one interpolation step at a time.
"""

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.data.graph import graph_nodes
from circuitlasso.data.interpbench import compile_case, make_prompts, to_hooked_transformer
from circuitlasso.evaluation.eap import edge_attribution_patching, logit_projection_metric

torch.set_num_threads(1)

EMBED = "blocks.0.hook_resid_pre"  # the input node's activation, token plus position embedding


def _outputs(model, tokens):
    """Every hook's activation and the logits on ``tokens``."""
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
    return logits, cache


def _sender_output(cache, node):
    act = cache[node.hook]
    return act[:, :, node.head] if node.head is not None else act


def _receiver_hook(model, child_name, slot):
    """Hook holding the input of a receiver slot, and the head index to patch (or None)."""
    node = next(n for n in graph_nodes(model) if n.name == child_name)
    if node.kind == "head":
        return f"blocks.{node.layer}.hook_{slot}_input", node.head
    if node.kind == "mlp":
        return f"blocks.{node.layer}.hook_mlp_in", None
    return f"blocks.{model.cfg.n_layers - 1}.hook_resid_post", None


def exact_edge_effect(model, clean, corrupted, weights, sender, child, slot=None):
    """Mean over prompts of metric(clean) - metric(clean with only this edge corrupted)."""
    clean_logits, clean_cache = _outputs(model, clean)
    corrupted_logits, corrupted_cache = _outputs(model, corrupted)
    node = next(n for n in graph_nodes(model) if n.name == sender)
    delta = _sender_output(corrupted_cache, node) - _sender_output(clean_cache, node)
    hook, head = _receiver_hook(model, child, slot)

    def patch(act, hook):
        act = act.clone()
        if head is None:
            act += delta
        else:
            act[:, :, head] += delta
        return act

    with torch.no_grad():
        patched = model.run_with_hooks(clean, fwd_hooks=[(hook, patch)])
    metric = lambda logits: logit_projection_metric(logits, clean_logits, corrupted_logits, weights)
    return float((metric(clean_logits) - metric(patched)).mean())


def path_integral(model, clean, corrupted, weights, senders, child, alphas):
    """``{sender: score}``: mean over prompts of sum over positions of ``(a_u(clean) -
    a_u(corrupted)) . g``, ``g`` the metric's gradient at ``child``'s input averaged over the runs
    whose input embedding is ``corrupted + alpha * (clean - corrupted)`` for ``alpha`` in
    ``alphas``."""
    clean_logits, clean_cache = _outputs(model, clean)
    corrupted_logits, corrupted_cache = _outputs(model, corrupted)
    nodes = {n.name: n for n in graph_nodes(model)}
    hook, head = _receiver_hook(model, child, None)
    assert head is None  # an MLP or the output: its input is the hook's whole activation
    start, end = corrupted_cache[EMBED], clean_cache[EMBED]
    gradient = torch.zeros(end.shape, dtype=torch.float64)
    for alpha in alphas:
        held = {}

        def mix(act, hook, alpha=alpha):
            return (start + alpha * (end - start)).requires_grad_(True)

        def hold(act, hook, held=held):
            held["input"] = act

        with torch.enable_grad():
            logits = model.run_with_hooks(clean, fwd_hooks=[(EMBED, mix), (hook, hold)])
            total = logit_projection_metric(logits, clean_logits, corrupted_logits, weights).sum()
            (grad,) = torch.autograd.grad(total, held["input"])
        gradient += grad.double()
    gradient /= len(alphas)
    scores = {}
    for sender in senders:
        delta = _sender_output(clean_cache, nodes[sender]) - _sender_output(
            corrupted_cache, nodes[sender]
        )
        scores[sender] = float((delta.double() * gradient).sum() / len(clean))
    return scores


@pytest.fixture(scope="module")
def case3():
    compiled = compile_case("3")
    prompts = make_prompts(compiled, 48, seed=3)
    weights = prompts.position_mask.float().expand(prompts.clean.shape)
    return to_hooked_transformer(compiled), prompts, weights


def test_eap_is_exact_on_edges_into_the_output(case3):
    model, prompts, weights = case3
    result = edge_attribution_patching(
        model, prompts.clean, prompts.corrupted, position_mask=prompts.position_mask
    )
    for sender in ("a1.h0", "m0", "input", "a0.h0"):
        exact = exact_edge_effect(
            model, prompts.clean, prompts.corrupted, weights, sender, "output"
        )
        assert result.slot_scores[(sender, "output")] == pytest.approx(exact, rel=1e-4, abs=1e-6)
    assert abs(result.slot_scores[("a1.h0", "output")]) > 0.05  # the true edge carries signal


def test_eap_is_exact_on_a_value_input_when_the_pattern_is_unchanged(case3):
    # the frac head's queries and keys read positions only, which corruption leaves intact, so
    # its output is linear in its value input and first-order attribution is exact there.
    model, prompts, weights = case3
    for steps in (0, 10):
        result = edge_attribution_patching(
            model,
            prompts.clean,
            prompts.corrupted,
            ig_steps=steps,
            position_mask=prompts.position_mask,
        )
        exact = exact_edge_effect(
            model, prompts.clean, prompts.corrupted, weights, "m0", "a1.h0", "v"
        )
        assert abs(exact) > 0.05
        assert result.slot_scores[("m0", "a1.h0.v")] == pytest.approx(exact, rel=1e-4)
        assert result.scores[("m0", "a1.h0")] >= abs(exact) * (1 - 1e-4)


def test_distractor_edges_have_no_effect_and_no_score():
    compiled = compile_case("3")
    model = to_hooked_transformer(compiled, "distractors")
    prompts = make_prompts(compiled, 32, seed=4)
    weights = prompts.position_mask.float().expand(prompts.clean.shape)
    result = edge_attribution_patching(
        model, prompts.clean, prompts.corrupted, ig_steps=10, position_mask=prompts.position_mask
    )
    exact = exact_edge_effect(
        model, prompts.clean, prompts.corrupted, weights, "a0.h2", "a1.h0", "v"
    )
    assert exact == pytest.approx(0.0, abs=1e-6)
    assert result.scores[("a0.h2", "a1.h0")] == pytest.approx(0.0, abs=1e-6)
    assert result.scores[("input", "a0.h2")] == pytest.approx(0.0, abs=1e-6)


def _tiny_model(**flags):
    cfg = HookedTransformerConfig(
        n_layers=1,
        d_model=8,
        n_ctx=5,
        d_head=4,
        n_heads=2,
        d_mlp=16,
        d_vocab=7,
        act_fn="relu",
        normalization_type=None,
        seed=0,
        **flags,
    )
    return HookedTransformer(cfg)


def test_on_a_random_transformer_output_and_value_edges_match_patching():
    model = _tiny_model(use_attn_result=True, use_split_qkv_input=True, use_hook_mlp_in=True)
    generator = torch.Generator().manual_seed(0)
    clean = torch.randint(0, 7, (16, 5), generator=generator)
    corrupted = torch.randint(0, 7, (16, 5), generator=generator)
    weights = torch.ones(16, 5)
    result = edge_attribution_patching(model, clean, corrupted)
    for sender in ("input", "a0.h0", "a0.h1", "m0"):
        exact = exact_edge_effect(model, clean, corrupted, weights, sender, "output")
        assert result.slot_scores[(sender, "output")] == pytest.approx(exact, rel=1e-3, abs=1e-5)


def test_missing_hook_flags_and_bad_shapes_are_clear_errors():
    model = _tiny_model()
    tokens = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="use_split_qkv_input"):
        edge_attribution_patching(model, tokens, tokens)
    flagged = _tiny_model(use_attn_result=True, use_split_qkv_input=True, use_hook_mlp_in=True)
    with pytest.raises(ValueError, match="same shape"):
        edge_attribution_patching(flagged, tokens, tokens[:1])


def _random_prompts():
    generator = torch.Generator().manual_seed(0)
    clean = torch.randint(0, 7, (16, 5), generator=generator)
    corrupted = torch.randint(0, 7, (16, 5), generator=generator)
    return clean, corrupted, torch.ones(16, 5)


def test_eap_ig_on_an_mlp_input_is_the_path_integral_of_its_gradient():
    # into the ReLU MLP of a random transformer, through attention patterns that move with the
    # input, the gradient changes along the path: EAP-IG averages it over the path, EAP does not
    model = _tiny_model(use_attn_result=True, use_split_qkv_input=True, use_hook_mlp_in=True)
    clean, corrupted, weights = _random_prompts()
    senders = ("input", "a0.h0", "a0.h1")
    eap = edge_attribution_patching(model, clean, corrupted)
    ig = edge_attribution_patching(model, clean, corrupted, ig_steps=100)
    got = {s: ig.slot_scores[(s, "m0")] for s in senders}
    # the same 100 right endpoints k / 100 by hand (measured difference 6e-16)
    right = path_integral(model, clean, corrupted, weights, senders, "m0",
                          [k / 100 for k in range(1, 101)])  # fmt: skip
    assert got == pytest.approx(right, rel=1e-6, abs=1e-8)
    # a fine midpoint sum, 500 steps: measured 1.2534, 0.7235, -0.0029 against EAP-IG's 1.2527,
    # 0.7237, -0.0030 (largest difference 7.3e-4, mostly the 100-step rule's error)
    fine = path_integral(model, clean, corrupted, weights, senders, "m0",
                         [(k + 0.5) / 500 for k in range(500)])  # fmt: skip
    assert got == pytest.approx(fine, abs=2e-3)
    # not vacuous: EAP's score on input -> m0 is 1.154, 0.10 below (measured)
    assert abs(eap.slot_scores[("input", "m0")] - got["input"]) > 0.05


def test_eap_ig_approaches_patching_where_eap_misses_the_mlp_nonlinearity():
    # with the attention output silenced the MLP reads the input node alone and the IG path is
    # the straight line from the corrupted to the clean MLP input, so by completeness EAP-IG
    # tends to the exact effect of patching that edge; EAP takes the clean gradient only
    model = _tiny_model(use_attn_result=True, use_split_qkv_input=True, use_hook_mlp_in=True)
    with torch.no_grad():
        model.blocks[0].attn.W_O.zero_()
        model.blocks[0].attn.b_O.zero_()
    clean, corrupted, weights = _random_prompts()
    exact = exact_edge_effect(model, clean, corrupted, weights, "input", "m0")
    eap = edge_attribution_patching(model, clean, corrupted).slot_scores[("input", "m0")]
    ig = edge_attribution_patching(model, clean, corrupted, ig_steps=100)
    # measured: exact 1.2939, EAP-IG 1.2942 (3.4e-4 apart, the 100-step rule's error), EAP 1.0432
    assert ig.slot_scores[("input", "m0")] == pytest.approx(exact, abs=2e-3)
    assert abs(eap - exact) > 0.1
    assert ig.scores[("a0.h0", "m0")] == 0.0  # a silenced head has no effect and no score
