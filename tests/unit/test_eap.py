"""EAP / EAP-IG against exact edge activation patching (an independent reference below)."""

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.baselines.eap import edge_attribution_patching, logit_projection_metric
from circuitlasso.collect import graph_nodes
from circuitlasso.datasets.interpbench import compile_case, make_prompts, to_hooked_transformer


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
    with pytest.raises(ValueError, match="use_attn_result"):
        edge_attribution_patching(model, tokens, tokens)
    flagged = _tiny_model(use_attn_result=True, use_split_qkv_input=True, use_hook_mlp_in=True)
    with pytest.raises(ValueError, match="same shape"):
        edge_attribution_patching(flagged, tokens, tokens[:1])
